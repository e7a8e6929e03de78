"""``python -m experiments``: the ``fabriclab`` command under another name (experiments.cli)."""
import sys

from experiments.cli import main

if __name__ == "__main__":
    sys.exit(main())
