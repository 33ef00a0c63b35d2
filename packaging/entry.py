"""The PyInstaller entry point: the bundled executable is the `fpexplorer` command line.

With no arguments it opens the app; `fpexplorer train ...` is how the training panel
re-invokes the bundle for a job (see fpexplorer.entry.self_command).
"""

import sys

from fpexplorer.cli import main

if __name__ == "__main__":
    sys.exit(main())
