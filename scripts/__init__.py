"""Developer scripts: benchmarks and lock-file generators, run with `python -m scripts.<name>`."""
