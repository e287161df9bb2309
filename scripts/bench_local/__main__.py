"""`python -m scripts.bench_local`."""

import sys

from scripts.bench_local.main import main

sys.exit(main())
