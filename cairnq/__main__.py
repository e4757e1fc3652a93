"""``python -m cairnq``: the command line."""

import sys

from cairnq.cli import main

sys.exit(main())
