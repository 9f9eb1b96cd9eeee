"""`python -m loaderbench.data.emulated serve|cleanup ...`: the emulated tier's server process (loaderbench.data.emulated.server)."""

import sys

from .server import main

sys.exit(main())
