"""The command lines: `steer` and `kubectl steer`, one tree of commands over two fronts.

The top floor: it imports the services (`scorer`, `webhook`, `certs`) and the core and
adapters (`steer`); none of them imports it (the import-linter contracts in pyproject.toml).
`launcher.commands` declares the tree, `launcher.front` and `launcher.kubectl` the two fronts.
"""
