"""`python -m scripts.bench_stateful`."""

import sys

from scripts.bench_stateful.main import main

sys.exit(main())
