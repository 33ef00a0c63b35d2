"""`python -m fpexplorer` is the same front door as the `fpexplorer` command."""

import sys

from fpexplorer.cli import main

sys.exit(main())
