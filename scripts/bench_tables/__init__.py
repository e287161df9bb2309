"""Benchmark of the table jobs' batch cost against the tables' size (issue 16, goal 3): user-enrichment
(default) or, with --job user-view, user-view.

For each table size (--sizes, default 10k, 100k and 1M users) it creates fresh topics on a real Kafka
(`LocalKafka`, its own work directory, free ports on 127.0.0.1), preloads the users topic with one profile
per user (written by a Spark batch job, so 1M users take seconds), then runs the job's real `start_queries`
(the main query and its dead-letter query, local[2], 4 shuffle partitions, a 2 s trigger) while a producer
thread sends a fixed change rate: --views-per-second page views (100) and --changes-per-second profile
changes (10) for random known users, i.e. 200 views and 20 changes per 2 s trigger. The rate is per second,
so a design whose batches take longer gets more rows per batch, as it would in production. The first batch
reads the preloaded table before the rate starts (the stateful design loads it into its state there; the
table's "table read s"); --warm-batches (3) more are skipped, then the next --measure-batches (10)
main-query batches count: their `durationMs.triggerExecution` median and p90 (and `addBatch`, input rows)
are what the table reports, per size and design.

For user-view the orders topic is preloaded too, with one order per user, and the first rate sends order
changes instead of views (an update of a preloaded order, one in ten moved to another user; one change in
ten a delete), at the same 100 per second, with the same 10 profile changes per second.

The design measured is the job's current `jobs/<job>/main.py`, or with --job-module the
`start_queries` of another copy of it (e.g. the stateless design before issue 16:
`git show 17a4ecfa9b26:jobs/user_enrichment/main.py > /tmp/old.py`),
named by --label. Results are merged by (label, size) into benchmarks/tables-<date>.json (machine, versions,
settings, every measured batch), and the markdown table of every label in that file is printed.

    make bench-tables                                                          # the current design
    make bench-tables BENCH_ARGS="--job user-view --label user-view-state"
    .venv/bin/python -m scripts.bench_tables --label old --job-module /tmp/old.py --sizes 10000,100000
"""
