"""`python -m scripts.bench_batch_cost`."""

import sys

from scripts.bench_batch_cost.main import main

sys.exit(main())
