"""`python -m scripts.bench_tables`."""

import sys

from scripts.bench_tables.main import main

sys.exit(main())
