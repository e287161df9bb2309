"""Benchmark of the fixed cost of a micro-batch (issue 16, goal 2): a few records, trigger to commit.

Goal: at most 0.1 s per batch for a stateless query and 0.2 s for a stateful one. On one local KRaft broker
(free ports, 127.0.0.1) and a local[2] driver built by the jobs' own `build_session` from the window job's
own command line (pipeline.yaml's settings, `streamstack local up`'s local-mode flags, the variant's flags,
the jobs' progress listener), each variant runs in a driver JVM of its own. Its queries are the jobs' code,
not copies of it:
  - stateless: page views read and decoded by the jobs' `read_decoded_stream` with `decode_page_views` (the
    jobs' decoder and dead-letter checks), each valid view written back to Kafka as JSON by the jobs'
    `write_kafka_stream` (append);
  - stateful: the window job's main query, views per url in 10 s tumbling windows with its 5 s watermark,
    written to Kafka in update mode (`count_views_per_url`, `window_counts_as_records`,
    `write_kafka_stream`);
  - six: the window job's own `start_queries` (per url, tumbling, hopping, sessions, late views, dead
    letters; each reads page-views) on the benchmark's topics.
Each run produces --records (5) page views stamped now in the middle of every trigger interval (2 s, the
jobs' default; under load a batch can take more than 1 s), so every trigger finds a few records and the
query idles between batches, --warmup (3) + --batches (20) + 2 times, then reads every batch's `durationMs`
from the queries' recent progress. The first --warmup data batches are left out; the table has the median
and p90 of triggerExecution per query and its two largest phases of latestOffset, getBatch, queryPlanning,
walCommit, addBatch and commitOffsets (medians; every phase is in the JSON). The driver JVM's CPU (from
/proc) over the measured rounds is reported per trigger interval, and the cores the rest of the machine
used meanwhile (all busy CPU less the JVM, this process and the broker): other work on a shared machine.

Variants (scripts/bench_batch_cost/variants.py): the baseline (the jobs' current settings: 4 shuffle
partitions, HDFS-backed state store, the Kafka source's fetch wait at 1 ms, checkpoint files without checksum
files), each lever alone (Kafka's default fetch wait, 500 ms, as the jobs had it before
`--kafka-fetch-max-wait-ms`; shuffle partitions 1 and 2; RocksDB with changelog checkpointing;
asyncProgressTrackingEnabled on the stateless query, the only one Spark allows it for; noDataMicroBatches off;
AQE off; state-store maintenance every 5 s; fewer retained batches only with --only retention; the second
round's levers, `SECOND_ROUND`, only with --only: the jobs' previous fetch wait (10 ms), checkpoint files with
or without checksum files, the UI and its listeners, the progress listener, locality wait, Kryo, codegen, the
polling delay, the state levers combined), the best combination of those that helped, the six queries under
the baseline and under the best combination, and the baseline again last, to show drift. Levers are the jobs'
own flags (`--spark-conf`, `--shuffle-partitions`, `--kafka-fetch-max-wait-ms`) but for the writer option,
which the jobs have no flag for: the stateless query then gets it through the DataFrame handed to
`write_kafka_stream`. A lever that cannot change a query (no shuffle or state in the stateless one) runs the
stateful query only. A setting Spark refuses is recorded with Spark's message. The load average is recorded
before and after every variant: the machine may be shared, so compare a variant with the baselines around it.
A FAIR pool per query was measured once (benchmarks/batch-cost-2026-11-25*.json) and starved some queries: it
is no longer a variant.

Raw results (machine, versions, settings, every batch's progress, CPU, load) go to
benchmarks/batch-cost-<date>.json (--out to name another); the tables (markdown) are printed.

--jfr DIR records each variant's driver JVM with JDK Flight Recorder (DIR/<n>-<variant>.jfr);
`python -m scripts.bench_batch_cost.jfr` sums its samples and waits per thread group and batch.

    make bench-batch-cost                                           # ~20 minutes
    .venv/bin/python -m scripts.bench_batch_cost --only kafka-default-fetch-wait --warmup 2 --batches 5
"""
