"""`python -m lmsat COMMAND ...` (see lmsat.cli)."""

import sys

from lmsat.cli import main

sys.exit(main())
