import sys

from scripts.bench_decode.main import main

sys.exit(main())
