import sys

from kits.demo.cli import main

sys.exit(main())
