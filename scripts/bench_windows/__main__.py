import sys

from scripts.bench_windows.main import main

sys.exit(main())
