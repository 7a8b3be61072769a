"""spark-submit entry point for `corpusgraph estimate`.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/estimate.py --conf conf/cluster.yaml

The master and resources come from spark-submit; everything else from the config file.
"""

import sys

from corpusgraph.cli import main

if __name__ == "__main__":
    sys.exit(main(["estimate", "--submitted", *sys.argv[1:]]))
