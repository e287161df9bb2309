"""`python -m monitoring.lag_exporter --bootstrap-servers HOST:PORT [--checkpoint-dir NAME=PATH ...]`."""

import sys

from monitoring.lag_exporter.main import main

sys.exit(main())
