"""`python -m faultproxy`: the command line."""

import sys

from faultproxy.cli.entry import main

sys.exit(main())
