import sys

from loaderbench.cli import main

sys.exit(main())
