"""`python -m launcher ARGS` is `steer ARGS` (the test kits and benches start services so)."""

import sys

from launcher.commands import main

sys.exit(main())
