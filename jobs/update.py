"""spark-submit entry point for `corpusgraph update`.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/update.py --conf conf/cluster.yaml

The master and resources come from spark-submit; everything else from the config file.
--ray-workers N (the same as ray.address: spark) runs Ray on Spark in this application
(ray_on_spark.py); the Databricks bundle (conf/databricks/databricks.yml) runs this file that way.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ray_on_spark, beside this file

from ray_on_spark import run  # noqa: E402

COMMAND = "update"

if __name__ == "__main__":
    sys.exit(run(COMMAND, sys.argv[1:]))
