"""Benchmark of the clickstream window job beside its peers, on real local Kafka (issues 3 and 17).

One run fills one topic (page views 10 ms apart in event time, 1 in 100 a dead letter; see records.py)
and measures, on it:
  1. the ceiling: Spark local[2] reading the topic into a no-op sink;
  2. our window job's query (decode with every dead-letter check, 10 s tumbling counts per url, Kafka sink);
  3. the textbook PySpark job (`from_json`, filter, watermark, window, count, the same sink and session);
  4. a plain confluent-kafka + orjson consumer computing the same counts in one Python process;
  5. Quix Streams (group_by url, 10 s tumbling window, count, final), on a copy of the topic to which
     closing markers are appended once it has counted every view (see records.py and peers.quix);
  6. PyFlink 2.2.1 (only with --engines ...,flink: see flink.py), a Python map applying `classify`, Flink
     SQL's 10 s tumbling count, in a venv of its own;
  7. end-to-end latency p50/p99 of our job (event produced -> its window's count written) while events
     arrive at half the job's sustained rate, with a 1 s trigger.
Every engine runs in rounds, --warm-ups unmeasured and then --passes measured; each engine's best
measured round counts. Every round's counts per (window start, url) are compared with the counts computed
from how the topic was made (and the Python peers' dead letters per reason too); an engine whose counts
differ in any round gets no rate. The Python peers apply the job's dead-letter checks through one
function (records.classify), itself checked at the start of each run against the job's decoder on
records of every dead-letter class.

Rates: Spark's is the sustained rate of the backlog drained in batches of --max-offsets-per-trigger, the
rows of every batch but the first (query start-up) and the last (it waits for a fetch at the end of the
log) over the time between the second batch's start and the last batch's start, from Spark's progress
reports; a Python peer's runs from its first record received to its last record counted. Busy cores: the
CPU time (user + system) of the engine's own processes over that same interval divided by its length;
for Spark the driver JVM's process tree, sampled from /proc every 50 ms and interpolated at the
interval's ends, for the Python peers this process (every thread). The Kafka broker's CPU counts for no
engine (Quix makes it do more: a repartition topic and a changelog topic).

    make bench-jobs            # or: .venv/bin/python -m scripts.bench_windows --events 1000000
Writes JSON and a markdown table to --out (default .streamstack/bench/) and the raw results (machine,
versions, settings, every round) to benchmarks/windows-<date>[-<events>][-<label>].json.
"""

from typing import Any

__all__ = ["throughput"]


def __getattr__(name: str) -> Any:
    """`throughput` on first use, so that records.py imports without pyspark (the PyFlink peer's venv)."""
    if name == "throughput":
        from scripts.bench_windows.spark_side import throughput  # noqa: PLC0415

        return throughput
    raise AttributeError(name)
