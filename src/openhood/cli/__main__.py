"""``python -m openhood.cli``: the same entry point as the ``openhood`` script."""

import sys

from openhood.cli import main

if __name__ == "__main__":  # importing it (doctest collection) must not run a command
    sys.exit(main())
