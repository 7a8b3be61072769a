"""spark-submit entry point for `corpusgraph estimate`.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/estimate.py --conf conf/cluster.yaml

The master and resources come from spark-submit; everything else from the config file.
--ray-workers N (the same as ray.address: spark) runs Ray on Spark in this application
(ray_on_spark.py); the Databricks bundle (conf/databricks/databricks.yml) runs this file that way.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ray_on_spark, beside this file

from ray_on_spark import run  # noqa: E402

COMMAND = "estimate"

if __name__ == "__main__":
    sys.exit(run(COMMAND, sys.argv[1:]))
