"""spark-submit entry point for a full index build.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/index.py --conf conf/cluster.yaml

The master and resources come from spark-submit; everything else from the config file.
"""

import sys

from corpusgraph.cli import main

if __name__ == "__main__":
    sys.exit(main(["index", "--submitted", *sys.argv[1:]]))
