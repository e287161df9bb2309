import sys

from jobs.order_state.main import main

sys.exit(main())
