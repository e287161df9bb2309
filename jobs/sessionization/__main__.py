import sys

from jobs.sessionization.main import main

sys.exit(main())
