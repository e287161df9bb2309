"""`python -m scripts.bench_exporter`."""

import sys

from scripts.bench_exporter.main import main

sys.exit(main())
