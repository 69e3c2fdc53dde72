import sys

from multikueue.cli import main

sys.exit(main())
