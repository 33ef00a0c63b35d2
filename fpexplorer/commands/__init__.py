"""Sub-commands of the `fpexplorer` command line; see `fpexplorer.cli` for the contract."""
