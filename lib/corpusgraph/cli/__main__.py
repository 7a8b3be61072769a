"""`python -m corpusgraph.cli`: the command line."""

import sys

from corpusgraph.cli.main import main

sys.exit(main())
