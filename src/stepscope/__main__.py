import sys

from stepscope.cli import main

sys.exit(main())
