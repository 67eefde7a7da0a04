"""`python -m kits.apistub`: serve a synthetic cluster until interrupted (for the demo)."""

import sys

from kits.apistub.cli import main

if __name__ == "__main__":
    sys.exit(main())
