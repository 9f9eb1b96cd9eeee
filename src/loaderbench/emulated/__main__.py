"""`python -m loaderbench.emulated serve|cleanup ...`: the emulated tier's server process (loaderbench.emulated.server)."""

import sys

from .server import main

sys.exit(main())
