import sys

from jobs.view_bursts.main import main

sys.exit(main())
