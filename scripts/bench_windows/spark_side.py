"""The Spark side: the session, the queries (ceiling, our window job, the textbook job), their sustained
rates with the JVM's CPU over the same interval, their counts read back from the output topic, and the
latency run."""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition  # type: ignore[import-untyped]
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.clickstream_windows.transforms import count_views_per_url, page_views, window_counts_as_records
from jobs.common.config import EventLimits, StreamingJobConfig
from jobs.common.kafka_io import read_kafka_stream
from jobs.common.progress import parse_spark_timestamp
from jobs.common.schemas import decode_page_views
from jobs.common.session import build_session
from scripts.bench_windows.records import PARTITIONS, Counts, LivePageViews
from scripts.jvm_threads import thread_kind, threads_cpu_seconds
from scripts.stats import percentile
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import LOOPBACK

_TICK = 100.0  # clock ticks per second of /proc/<pid>/stat (getconf CLK_TCK on Linux)


def load_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "client.id": "bench"})


def produce(producer: Producer, topic: str, value: bytes | None, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:  # the local queue is full: let librdkafka send, then retry
            producer.poll(0.01)


def session(
    bootstrap: str, workdir: Path, jars: list[str], max_offsets_per_trigger: int
) -> tuple[SparkSession, StreamingJobConfig]:
    config = StreamingJobConfig(
        query_name="bench",
        bootstrap_servers=bootstrap,
        checkpoint_dir=str(workdir / "checkpoints"),
        metrics_port=0,
        dead_letter_topic="bench-dead-letters",
        master="local[2]",
        trigger_interval="1 second",
        max_offsets_per_trigger=max_offsets_per_trigger,
        shuffle_partitions=2,
        # STREAMSTACK_BENCH_JVM_JAR: a build of jobs/jvm to measure instead of the local one (first on the
        # classpath wins), for A/B runs of the decoder.
        extra_jars=(*filter(None, [os.environ.get("STREAMSTACK_BENCH_JVM_JAR")]), *jars),
        spark_conf={
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            **_flight_recording(),
        },
    )
    return build_session(config), config


def _flight_recording() -> dict[str, str]:
    """With STREAMSTACK_BENCH_JFR=<file.jfr>, the driver (local mode: every task) runs under Java Flight
    Recorder's profiling settings; `jfr print --events jdk.ExecutionSample <file>` shows where CPU goes."""
    path = os.environ.get("STREAMSTACK_BENCH_JFR")
    if not path:
        return {}
    return {"spark.driver.extraJavaOptions": f"-XX:StartFlightRecording=filename={path},settings=profile"}


# --- CPU of the Spark JVM ----------------------------------------------------------------------------------


def stat_cpu_seconds(stat: str) -> float:
    """utime + stime of a process or thread from its /proc stat line (fields after the name, which may hold
    spaces and parentheses)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu_seconds(root: int) -> float:
    """utime + stime of a process and its descendants, from /proc."""
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        try:
            total += stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
            for task in Path(f"/proc/{pid}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def jvm_pid() -> int:
    """The driver JVM (spark-submit execs into java), in local mode every executor thread too."""
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if process is None:
        raise RuntimeError("no Spark gateway process: the session was not launched by this process")
    return int(process.pid)


def compiler_threads_cpu_seconds(pid: int) -> dict[int, float]:
    """{thread id: utime + stime} of a HotSpot JVM's JIT compiler threads ("C1 CompilerThread0", "C2
    CompilerThread1", ...; /proc truncates names to 15 characters)."""
    return {
        thread: seconds
        for thread, (name, seconds) in threads_cpu_seconds(pid).items()
        if thread_kind(name) == "jit"
    }


class CpuSampler:
    """(wall time, CPU seconds) of a process tree every 50 ms, so the CPU of any interval in between can be
    read afterwards (Spark's sustained interval is known only from the progress reports)."""

    interval = 0.05

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples = [(time.time(), self.read())]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def read(self) -> float:
        """The tree's CPU seconds now."""
        return tree_cpu_seconds(self.pid)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.read()))  # the interval's end is covered

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append((time.time(), self.read()))

    def cpu_at(self, moment: float) -> float:
        """CPU seconds at `moment`, interpolated between the samples around it."""
        for (t0, c0), (t1, c1) in zip(self.samples, self.samples[1:], strict=False):
            if t0 <= moment <= t1:
                return c0 + (c1 - c0) * (moment - t0) / (t1 - t0) if t1 > t0 else c1
        raise ValueError(f"{moment} is outside the sampled interval")


class JitSampler(CpuSampler):
    """The CPU of a JVM's JIT compiler threads, sampled like CpuSampler's (every 250 ms: a JVM has a few
    hundred threads to look through). HotSpot starts and ends compiler threads as its queue grows and
    shrinks, so every thread seen keeps the CPU it had when last seen."""

    interval = 0.25

    def __init__(self, pid: int) -> None:
        self.seen: dict[int, float] = {}
        super().__init__(pid)

    def read(self) -> float:
        self.seen.update(compiler_threads_cpu_seconds(self.pid))
        return sum(self.seen.values())


# --- Rates --------------------------------------------------------------------------------------------------


def throughput(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Sustained and whole-drain rates (rows/s) of a query that drained a backlog (see the package doc)."""
    batches = sorted(
        (p for p in progress if p.get("numInputRows")), key=lambda p: parse_spark_timestamp(p["timestamp"])
    )
    if len(batches) < 3:
        raise ValueError(f"{len(batches)} batches: a sustained rate needs at least 3 (more events)")
    starts = [parse_spark_timestamp(p["timestamp"]) for p in batches]
    rows = [int(p["numInputRows"]) for p in batches]
    drained_at = starts[-1] + batches[-1]["durationMs"]["triggerExecution"] / 1000
    return {
        "sustained_rows_per_second": sum(rows[1:-1]) / (starts[-1] - starts[1]),
        "drain_rows_per_second": sum(rows) / (drained_at - starts[0]),
        "rows": float(sum(rows)),
        "batches": float(len(batches)),
        "sustained_from": starts[1],
        "sustained_to": starts[-1],
    }


def run_available(query: Any) -> list[dict[str, Any]]:
    query.awaitTermination()
    return [json.loads(p.json) for p in query.recentProgress]


# --- Queries ------------------------------------------------------------------------------------------------


def window_query(spark: SparkSession, config: StreamingJobConfig, topic: str, output: str, name: str) -> Any:
    """Our window job's query: decode with every dead-letter check, 10 s counts per url, Kafka sink."""
    decoded = decode_page_views(read_kafka_stream(spark, config, [topic]), EventLimits())
    records = window_counts_as_records(count_views_per_url(page_views(decoded), "10 seconds", "5 seconds"))
    return kafka_sink(records, config, output, name)


def textbook_query(
    spark: SparkSession, config: StreamingJobConfig, topic: str, output: str, name: str
) -> Any:
    """The textbook job: `from_json`, filter (fields present, event time within the job's limits of the
    record's timestamp), watermark, window, count, the same Kafka sink."""
    limits = EventLimits()
    schema = "user_id STRING, url STRING, event_time TIMESTAMP"
    views = (
        read_kafka_stream(spark, config, [topic])
        .select(F.from_json(F.col("value").cast("string"), schema).alias("view"), "timestamp")
        .select("view.*", "timestamp")
        .where(
            F.col("user_id").isNotNull()
            & F.col("url").isNotNull()
            & F.col("event_time").isNotNull()
            & (
                F.col("event_time")
                <= F.col("timestamp") + F.expr(f"INTERVAL {limits.max_event_future_seconds} SECONDS")
            )
            & (
                F.col("event_time")
                >= F.col("timestamp") - F.expr(f"INTERVAL {limits.max_event_age_seconds} SECONDS")
            )
        )
    )
    counts = (
        views.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "10 seconds"), "url")
        .count()
    )
    records = counts.select(
        F.concat_ws("|", F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"), "url").alias("key"),
        F.to_json(
            F.struct(
                F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("window_start"),
                "url",
                F.col("count").alias("views"),
            )
        ).alias("value"),
    )
    return kafka_sink(records, config, output, name)


def kafka_sink(records: Any, config: StreamingJobConfig, output: str, name: str) -> Any:
    return (
        records.writeStream.format("kafka")
        .queryName(name)
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", config.checkpoint_for(name))
        .outputMode("update")
    )


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def read_counts(bootstrap: str, topic: str, start: dict[int, int]) -> Counts:
    """The last count per (window start, url) that a query wrote to `topic` from `start` on (update mode
    writes a window again whenever its count changes)."""
    end = end_offsets(bootstrap, topic)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-counts", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in range(PARTITIONS)])
    latest: dict[bytes, bytes] = {}
    remaining = sum(end[p] - start.get(p, 0) for p in range(PARTITIONS))
    try:
        while remaining > 0:
            for message in consumer.consume(10_000, timeout=5.0):
                if message.offset() < end[message.partition()]:
                    latest[message.key()] = message.value()
                    remaining -= 1
    finally:
        consumer.close()
    counts: Counts = Counter()
    for value in latest.values():
        row = json.loads(value)
        moment = datetime.fromisoformat(row["window_start"].replace("Z", "+00:00"))
        counts[(int(moment.timestamp() * 1000), row["url"])] = int(row["views"])
    return counts


def best_passes(
    queries: dict[str, Callable[[str], Any]],
    warm_ups: int,
    passes: int,
    after_round: Callable[[str, str], dict[str, Any]],
    *,
    jit_settled_share: float | None = None,
    max_warm_ups: int = 0,
) -> list[dict[str, Any]]:
    """Run every query in rounds, warm-ups first (class loading, code generation, the JIT: the rates climb
    while the JIT compiles), then `passes` measured ones; every round with its rates, the JVM's CPU over the
    sustained interval, how much of it the JIT's compiler threads took, and what `after_round(label,
    attempt)` adds (the count check).

    Warm-ups: at least `warm_ups` rounds; with `jit_settled_share`, more (up to `max_warm_ups`) until the
    JIT has settled: its compiler threads took at most that share of the busy cores of the last round's
    queries together. On 2 cores HotSpot keeps compiling Spark's driver and task code for minutes (a job
    round of 10 batches: 0.76 cores of 1.48 in the first round, 0.04-0.10 of 1.2-1.3 after 40), and a
    sustained rate measured before that is the JVM's warm-up, not the long-running job's."""
    rounds: list[dict[str, Any]] = []
    pid = jvm_pid()

    def one_round(attempt: str, measured: bool) -> list[dict[str, Any]]:
        entries = []
        for label, start in queries.items():
            with CpuSampler(pid) as cpu, JitSampler(pid) as jit:
                progress = run_available(start(f"{label}-{attempt}"))
            rates = throughput(progress)
            since, until = rates["sustained_from"], rates["sustained_to"]
            busy = (cpu.cpu_at(until) - cpu.cpu_at(since)) / (until - since)
            compiling = (jit.cpu_at(until) - jit.cpu_at(since)) / (until - since)
            entries.append(
                {
                    "engine": label,
                    "round": attempt,
                    "measured": measured,
                    **rates,
                    "busy_cores": busy,
                    "jit_compiler_cores": compiling,
                    "median_phase_ms": median_phases(p for p in progress if p.get("numInputRows")),
                    **after_round(label, attempt),
                }
            )
            print(
                f"{label} {attempt}: sustained {rates['sustained_rows_per_second']:,.0f}/s on "
                f"{busy:.2f} cores ({compiling:.2f} JIT compiling), "
                f"drain {rates['drain_rows_per_second']:,.0f}/s over {rates['batches']:.0f} batches",
                file=sys.stderr,
            )
        return entries

    done = 0
    last: list[dict[str, Any]] = []
    while warm_up_again(done, last, warm_ups, jit_settled_share, max_warm_ups):
        done += 1
        last = one_round(f"warm-up-{done}", measured=False)
        rounds.extend(last)
    for number in range(passes):
        rounds.extend(one_round(f"pass-{number + 1}", measured=True))
    return rounds


def warm_up_again(
    done: int,
    last_round: list[dict[str, Any]],
    warm_ups: int,
    jit_settled_share: float | None,
    max_warm_ups: int,
) -> bool:
    """Another warm-up round: fewer than `warm_ups` so far, or the JIT not settled yet within the cap."""
    if done < warm_ups:
        return True
    if jit_settled_share is None or done >= max_warm_ups:
        return False
    return not jit_settled(last_round, jit_settled_share)


def jit_settled(last_round: list[dict[str, Any]], share: float) -> bool:
    """Whether the JIT's compiler threads took at most `share` of the queries' busy cores over a round (all
    queries together: one query's round of 1-3 s alone swings with a single large compilation)."""
    busy = sum(float(entry["busy_cores"]) for entry in last_round)
    compiling = sum(float(entry["jit_compiler_cores"]) for entry in last_round)
    return busy > 0 and compiling <= share * busy


# --- Latency ------------------------------------------------------------------------------------------------


def latency(
    spark: SparkSession,
    config: StreamingJobConfig,
    bootstrap: str,
    kafka: LocalKafka,
    *,
    rate: float,
    seconds: float,
    name: str = "bench-live",
) -> dict[str, Any]:
    """Produce at `rate` for `seconds` into a fresh topic while the job runs with a 1 s trigger, as deployed:
    without the throughput runs' cap per batch (see `as_deployed`)."""
    topic, output = name, f"{name}-out"
    kafka.create_topics([TopicSpec(topic, partitions=PARTITIONS), TopicSpec(output, partitions=PARTITIONS)])
    query = (
        window_query(spark, as_deployed(config), topic, output, name)
        .trigger(processingTime="1 second")
        .start()
    )
    time.sleep(5)  # first (empty) batches and plan compilation out of the way
    stop = threading.Event()
    sent = [0]
    producer_cpu = [0.0]

    def produce_at_rate() -> None:
        producer = load_producer(bootstrap)
        view = LivePageViews()
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while sent[0] < due:
                produce(producer, topic, view(sent[0]), sent[0] % PARTITIONS)
                sent[0] += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(60)
        producer_cpu[0] = time.thread_time()

    producer_thread = threading.Thread(target=produce_at_rate)
    with CpuSampler(jvm_pid()) as jvm_cpu:
        producing_from = time.time()
        producer_thread.start()
        time.sleep(seconds)
        stop.set()
        producer_thread.join()
        producing_to = time.time()
    query.processAllAvailable()
    progress = [json.loads(p.json) for p in query.recentProgress]
    query.stop()

    batch_end: list[tuple[dict[int, int], dict[int, int], float]] = []
    for p in progress:
        if not p.get("numInputRows"):
            continue
        source = p["sources"][0]
        start = as_offsets(source.get("startOffset")) or {topic: {}}
        end = as_offsets(source["endOffset"])
        finished = parse_spark_timestamp(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000
        batch_end.append(
            (
                {int(k): v for k, v in start.get(topic, {}).items()},
                {int(k): v for k, v in end[topic].items()},
                finished,
            )
        )
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=5000)
    partitions = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    ends = consumer.end_offsets(partitions)
    # per partition, the batches' offset ranges in order (disjoint): a record's batch found by bisection
    ranges = {
        partition: sorted(
            (end.get(partition, 0), first.get(partition, 0), at)
            for first, end, at in batch_end
            if end.get(partition, 0) > first.get(partition, 0)
        )
        for partition in range(PARTITIONS)
    }
    range_ends = {partition: [end for end, _, _ in found] for partition, found in ranges.items()}
    latencies: list[float] = []
    while any(consumer.position(tp) < ends[tp] for tp in partitions):
        for tp, batch in consumer.poll(timeout_ms=1000).items():
            found, found_ends = ranges[tp.partition], range_ends[tp.partition]
            for record in batch:
                index = bisect.bisect_right(found_ends, record.offset)
                if index < len(found) and found[index][1] <= record.offset:
                    latencies.append(found[index][2] - record.timestamp / 1000)
    consumer.close()
    latencies.sort()
    batch_rows = [int(p["numInputRows"]) for p in progress if p.get("numInputRows")]
    batch_seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in progress if p.get("numInputRows")]
    producing = producing_to - producing_from
    return {
        "target_rate": rate,
        "events": float(sent[0]),
        "achieved_rate": sent[0] / seconds,
        "max_offsets_per_trigger": as_deployed(config).max_offsets_per_trigger,
        "batches": float(len(batch_rows)),
        "max_batch_rows": float(max(batch_rows, default=0)),
        "median_batch_seconds": statistics.median(batch_seconds) if batch_seconds else 0.0,
        "median_phase_ms": median_phases(p for p in progress if p.get("numInputRows")),
        "job_busy_cores": (jvm_cpu.cpu_at(producing_to) - jvm_cpu.cpu_at(producing_from)) / producing,
        "producer_busy_cores": producer_cpu[0] / producing,
        "measured_events": float(len(latencies)),
        "p50_seconds": percentile(latencies, 50),
        "p99_seconds": percentile(latencies, 99),
        "max_seconds": latencies[-1],
    }


def median_phases(progress: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Median milliseconds of each phase Spark reports in a batch's `durationMs`, where the time goes."""
    phases: dict[str, list[float]] = {}
    for report in progress:
        for phase, ms in report["durationMs"].items():
            phases.setdefault(phase, []).append(float(ms))
    return {phase: statistics.median(values) for phase, values in sorted(phases.items())}


def as_deployed(config: StreamingJobConfig) -> StreamingJobConfig:
    """The job's settings as `make up` and the chart run it: no cap on records per batch (the job's default).
    The throughput runs cap batches at --max-offsets-per-trigger to measure a sustained rate; with a 1 s
    trigger that cap would also bound the live job at that many records a second, below the latency run's
    rate whenever half the sustained rate is above it, and the job would fall further behind every second."""
    return dataclasses.replace(config, max_offsets_per_trigger=StreamingJobConfig.max_offsets_per_trigger)


def as_offsets(value: Any) -> dict[str, dict[str, int]]:
    """Progress offsets arrive as a JSON string or already parsed, depending on the Spark version."""
    if isinstance(value, str):
        return dict(json.loads(value)) if value.strip().startswith("{") else {}
    return dict(value) if isinstance(value, dict) else {}
