"""spark-submit entry point for `corpusgraph update`.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/update.py --conf conf/cluster.yaml

The master and resources come from spark-submit; everything else from the config file.
"""

import sys

from corpusgraph.cli import main

if __name__ == "__main__":
    sys.exit(main(["update", "--submitted", *sys.argv[1:]]))
