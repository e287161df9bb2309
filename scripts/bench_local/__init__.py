"""Benchmark of the whole local stack at its defaults (issue 16): backpressure, lag and alerts.

It runs what `make up` runs, `streamstack local up` with its default options (Kafka, the 5 jobs, the 3
producers at 50 events/s each, the lag exporter and Prometheus with monitoring/rules/), in-process through
`LocalStack` and supervised the same way (restarts included), but in its own work directory (a new temporary
one unless --workdir) and on free ports, so it never meets a stack of the user's. Once every job's main query
reports itself active, it waits --warmup-seconds (300), then samples the stack's Prometheus every
--sample-seconds (30) for --measure-seconds (300): a sample at minute 5:30 covers 5:00-5:30, ..., the last
one at 10:00. Each sample reads, per Spark query (a job's main query and its dead-letter query):
  - batch utilization (`streamstack_query_batch_utilization`, last trigger execution / trigger interval): at
    the sample, and the max and mean over the interval (`max_over_time`, `avg_over_time`), so every batch of
    the interval counts, not only the one the sample lands on;
  - lag in seconds from the lag exporter (`streamstack_lag_group_max_seconds`, max over the interval), for
    the query's checkpoint (`group="<job>/<query>"`) and its shadow group (`group="streamstack-<query>"`);
  - input rows per second, and the mean of the last batch's phase durations (Spark's `durationMs`), to show
    where a batch's time goes;
  - every alert pending or firing at any evaluation of the interval (`ALERTS`);
and from /proc the cores each of the stack's processes used over the interval (a job with its JVM), this
process's (the benchmark and the stack's supervisor) and the whole machine's, and the load average.

Goals: every query's utilization at most 0.7, every lag at most 15 s, no alert pending or firing. The table
(markdown) has one row per query with max and mean utilization and max lag of both sources, then each goal
with pass or fail, the alerts seen, the load average and the CPU by process. The raw results (machine:
cores, memory, load; versions from constraints.txt and streamstack/runtimes.lock.json; settings; every
sample; the supervisor's restarts) go to benchmarks/local-<date>.json, named after the durations when
they are not the defaults. Whatever ends the run (the end, an error, Ctrl-C, SIGTERM), the stack is
stopped, and any process still naming its work directory is reported.

    make bench-local                                                    # ~11 minutes
    .venv/bin/python -m scripts.bench_local --warmup-seconds 60 --measure-seconds 60   # a smoke run
"""
