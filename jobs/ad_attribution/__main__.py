import sys

from jobs.ad_attribution.main import main

sys.exit(main())
