"""`python -m faultproxy`: the command line."""

import sys

from faultproxy.cli.main import main

sys.exit(main())
