"""``python -m openhood.cli``: the same entry point as the ``openhood`` script."""

import sys

from openhood.cli import main

sys.exit(main())
