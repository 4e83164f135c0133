"""`python -m sensviz ...`: the same as the `sensviz` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
