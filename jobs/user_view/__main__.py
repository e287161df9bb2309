import sys

from jobs.user_view.main import main

sys.exit(main())
