import sys

from jobs.user_enrichment.main import main

sys.exit(main())
