import sys

from jobs.clickstream_windows.main import main

sys.exit(main())
