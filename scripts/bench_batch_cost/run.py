"""One variant's runs against real Kafka: a SparkSession built as the jobs build theirs (a fresh driver JVM
per variant), the queries, a few records per trigger, the driver JVM's CPU; what starts here stops here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from contracts.pipeline import load_pipeline
from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.main import parse_args, start_queries
from jobs.clickstream_windows.transforms import count_views_per_url, page_views, window_counts_as_records
from jobs.common.config import StreamingJobConfig
from jobs.common.encoding import iso_millis, json_value
from jobs.common.events import read_decoded_stream
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.progress import kafka_end_offsets, serve_progress_metrics
from jobs.common.schemas import decode_page_views
from jobs.common.session import build_session
from scripts.bench_batch_cost.variants import SIX, STATEFUL, STATELESS, Variant
from streamstack.local.identity import stat_fields
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import LOOPBACK

JOB = "clickstream-windows"
STATELESS_QUERY = "decoded-views"
SPARE_ROUNDS = 2  # records are produced warmup + batches + this many times, in case two batches merge

# What `streamstack local up` gives every job besides its own flags (streamstack.local.jobs), and enough
# recent progress kept for every batch of a run.
LOCAL_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.sql.streaming.numRecentProgressUpdates": "1000",
}

Log = Callable[[str], None]


@dataclass(frozen=True)
class Pace:
    """How records arrive: `records` per trigger, produced mid-interval so that each trigger finds them; the
    first `warmup` data batches are left out, the next `batches` measured."""

    trigger_seconds: float = 2.0
    records: int = 5
    warmup: int = 3
    batches: int = 20


def next_round_at(now: float, interval: float) -> float:
    """The next mid-point of a trigger interval after `now` (processing-time triggers fire at multiples of
    the interval since the epoch, so records produced then are all in the next batch)."""
    return (math.floor(now / interval - 0.5) + 1 + 0.5) * interval


# -- CPU and load --------------------------------------------------------------------------------------------

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
_PPID, _UTIME, _STIME = 4, 14, 15  # fields of /proc/<pid>/stat, numbered from 1 as in proc(5)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    children = []
    for process_dir in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(process_dir.name))
        if fields is not None and int(fields[_PPID - 3]) == pid:
            children.append(int(process_dir.name))
    return children


def driver_jvm_pid() -> int | None:
    """The pid of this session's driver JVM: the gateway process PySpark launched, or its java descendant
    (spark-submit execs java, but a wrapper may not)."""
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if process is None:
        return None
    pending = [int(process.pid)]
    while pending:
        pid = pending.pop(0)
        if _comm(pid) == "java":
            return pid
        pending.extend(_children(pid))
    return None


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process (all its threads)."""
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[_UTIME - 3]) + int(fields[_STIME - 3])) / _TICKS_PER_SECOND


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent running anything since boot: user, nice, system, irq and softirq from
    /proc/stat's first line (not idle, iowait or steal)."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / _TICKS_PER_SECOND


@dataclass(frozen=True)
class CpuReading:
    """CPU seconds so far of the driver JVM, this process (the benchmark and the PySpark driver), the
    broker, and the whole machine."""

    at: float
    jvm: float
    python: float
    kafka: float
    machine: float

    @classmethod
    def now(cls, jvm_pid: int | None, kafka_pid: int | None) -> CpuReading:
        return cls(
            at=time.monotonic(),
            jvm=cpu_seconds(jvm_pid) if jvm_pid else 0.0,
            python=time.process_time(),
            kafka=cpu_seconds(kafka_pid) if kafka_pid else 0.0,
            machine=machine_busy_seconds(),
        )

    def cores_since(self, start: CpuReading) -> dict[str, float]:
        """Cores used since `start` by each, and by everything else on the machine (other work on it)."""
        elapsed = max(self.at - start.at, 1e-6)
        cores = {
            "jvm": (self.jvm - start.jvm) / elapsed,
            "python": (self.python - start.python) / elapsed,
            "kafka": (self.kafka - start.kafka) / elapsed,
            "machine": (self.machine - start.machine) / elapsed,
        }
        cores["others"] = max(0.0, cores["machine"] - cores["jvm"] - cores["python"] - cores["kafka"])
        return cores


# -- the session ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topics:
    views: str
    decoded: str
    per_url: str
    windows: str
    late: str
    dead_letters: str

    @classmethod
    def named(cls, prefix: str) -> Topics:
        return cls(
            *(f"{prefix}-{suffix}" for suffix in ("views", "decoded", "per-url", "windows", "late", "dl"))
        )

    def create(self, kafka: LocalKafka) -> None:
        """As the catalogue has them: 4 partitions (1 for late views and dead letters), outputs compacted.
        A broker starved of CPU may drop out of its own controller's view for a while (the create request
        then fails with InvalidReplicationFactor): try again for up to a minute."""
        specs = [
            TopicSpec(self.views, partitions=4),
            TopicSpec(self.decoded, partitions=4),
            TopicSpec(self.per_url, partitions=4, compact=True),
            TopicSpec(self.windows, partitions=4, compact=True),
            TopicSpec(self.late, partitions=1),
            TopicSpec(self.dead_letters, partitions=1),
        ]
        deadline = time.monotonic() + 60
        while True:
            try:
                admin = kafka.admin()
                try:
                    existing = set(admin.list_topics())
                finally:
                    admin.close()
                kafka.create_topics([spec for spec in specs if spec.name not in existing])
                return
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)


def job_config(
    variant: Variant,
    *,
    bootstrap_servers: str,
    checkpoint_dir: Path,
    topics: Topics,
    pace: Pace,
    jars: Sequence[str],
) -> WindowJobConfig:
    """The window job's config from its own command line: the catalogue's settings (pipeline.yaml), local
    mode as `streamstack local up` runs it, the benchmark's topics, and the variant's Spark settings,
    shuffle partitions and fetch wait."""
    spark_conf = {**LOCAL_SPARK_CONF, **variant.spark_conf}
    argv = [
        *("--bootstrap-servers", bootstrap_servers, "--checkpoint-dir", str(checkpoint_dir)),
        *("--master", "local[2]", "--metrics-host", LOOPBACK, "--metrics-port", "0"),
        *("--trigger-interval", f"{round(pace.trigger_seconds * 1000)} milliseconds"),
        *("--shuffle-partitions", str(variant.shuffle_partitions), "--extra-jars", ",".join(jars)),
        *("--kafka-fetch-max-wait-ms", str(variant.fetch_max_wait_ms)),
        *("--dead-letter-topic", topics.dead_letters, "--input-topic", topics.views),
        *("--output-topic", topics.per_url, "--windows-topic", topics.windows, "--late-topic", topics.late),
        *load_pipeline().job(JOB).setting_arguments,
    ]
    for key, value in spark_conf.items():
        argv += ["--spark-conf", f"{key}={value}"]
    return parse_args(argv)


@contextmanager
def driver(config: StreamingJobConfig, progress_listener: bool = True) -> Iterator[SparkSession]:
    """A session built by the jobs' own `build_session`, with the jobs' progress listener (metrics on a free
    port, shadow-group commits); on the way out its queries, the session and the driver JVM are stopped and
    reaped, so the next variant starts a JVM of its own (some Spark settings are fixed per JVM)."""
    spark = build_session(config)
    gateway = SparkContext._gateway
    try:
        if progress_listener:
            serve_progress_metrics(spark, config)
        yield spark
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.stop()
        process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
        if gateway is not None:
            with suppress(Exception):  # already gone: the JVM is reaped below all the same
                gateway.shutdown()
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        SparkContext._gateway = None
        SparkContext._jvm = None


# -- the queries ---------------------------------------------------------------------------------------------


def decoded_views_as_records(views: DataFrame) -> DataFrame:
    """The stateless query's output: each valid page view keyed by user, its fields as JSON."""
    return views.select(
        F.col("user_id").alias("key"),
        json_value("user_id", "url", iso_millis("event_time").alias("event_time")),
    )


def start_run_queries(
    spark: SparkSession, kind: str, config: WindowJobConfig, variant: Variant, topics: Topics
) -> list[StreamingQuery]:
    """six: the window job's own `start_queries` (its six queries, each reading page-views). Otherwise one
    query on page views decoded by the jobs' `read_decoded_stream`: stateless, each valid view written back
    to Kafka with the variant's writer options; stateful, the window job's main query (per-url tumbling
    counts, update mode)."""
    if kind == SIX:
        return start_queries(spark, config)
    streaming = config.streaming
    views = page_views(read_decoded_stream(spark, streaming, config.input_topic, decode_page_views))
    per_url = count_views_per_url(views, config.window_duration, config.watermark_delay)
    # query name, records, topic, output mode, writer options
    single = {
        STATELESS: (
            STATELESS_QUERY,
            decoded_views_as_records(views),
            topics.decoded,
            "append",
            variant.stateless_options,
        ),
        STATEFUL: (
            streaming.query_name,
            window_counts_as_records(per_url),
            config.output_topic,
            "update",
            {},
        ),
    }
    name, records, topic, output_mode, options = single[kind]
    return [
        write_kafka_stream(
            records, streaming, query_name=name, topic=topic, output_mode=output_mode, options=options
        )
    ]


# -- feeding and measuring -----------------------------------------------------------------------------------


def iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def page_view_records(round_index: int, count: int) -> list[tuple[bytes, bytes]]:
    """`count` page views stamped now, over 7 users and 3 urls."""
    records = []
    for index in range(count):
        user = f"user-{(round_index * count + index) % 7}"
        body = {"user_id": user, "url": f"/page-{(round_index + index) % 3}", "event_time": iso_now()}
        records.append((user.encode(), json.dumps(body).encode()))
    return records


def failure_text(error: BaseException) -> str:
    """Spark's message without the JVM stack trace: the lines before the first `at ...` frame, at most 1000
    characters."""
    lines = []
    for line in str(error).splitlines():
        if line.strip().startswith(("at ", "JVM stacktrace", "=== Streaming Query ===")):
            break
        lines.append(line.rstrip())
    return "\n".join(lines).strip()[:1000]


def progresses(query: StreamingQuery) -> list[dict[str, Any]]:
    return [json.loads(progress.json) for progress in query.recentProgress]


def wait_until_idle(queries: Sequence[StreamingQuery], timeout: float) -> None:
    """Until each query has started and waits for data (its first trigger found the topic empty)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(not query.isActive for query in queries):
            return
        if all(query.status["message"].startswith("Waiting") for query in queries):
            return
        time.sleep(0.2)


def caught_up(query: StreamingQuery, topic: str, produced: int) -> bool:
    progress = query.lastProgress
    if progress is None:
        return produced == 0
    ends = kafka_end_offsets(json.loads(progress.json)).get(topic, {})
    return sum(ends.values()) >= produced


def run_queries(
    spark: SparkSession,
    kind: str,
    *,
    config: WindowJobConfig,
    variant: Variant,
    topics: Topics,
    pace: Pace,
    kafka_pid: int | None,
    log: Log,
) -> dict[str, Any]:
    """Start the run's queries, produce `pace.records` page views mid-interval in every round, wait until
    every query has read them all, and stop the queries. Returns every query's progress, the driver JVM's
    CPU seconds from the first measured round to the end, and the error if a query was refused or failed."""
    jvm = driver_jvm_pid()
    run: dict[str, Any] = {"kind": kind, "jvm_pid": jvm, "load_before": list(os.getloadavg())}
    rounds = pace.warmup + pace.batches + SPARE_ROUNDS
    started = time.monotonic()
    try:
        queries = start_run_queries(spark, kind, config, variant, topics)
    except Exception as error:  # Spark refuses settings with many exception types
        run |= {"error": failure_text(error), "refused": True, "error_at": "start", "queries": {}}
        run["load_after"] = list(os.getloadavg())
        return run
    run["start_seconds"] = time.monotonic() - started
    wait_until_idle(queries, timeout=60)
    producer = KafkaProducer(bootstrap_servers=config.streaming.bootstrap_servers, acks="all", linger_ms=0)
    produced = 0
    cpu_start: CpuReading | None = None
    try:
        for round_index in range(rounds):
            time.sleep(max(0.0, next_round_at(time.time(), pace.trigger_seconds) - time.time()))
            if any(not query.isActive for query in queries):
                break
            if round_index == pace.warmup:
                cpu_start = CpuReading.now(jvm, kafka_pid)
            for key, value in page_view_records(round_index, pace.records):
                producer.send(topics.views, key=key, value=value)
            producer.flush(timeout=30)
            produced += pace.records
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(
            query.isActive and not caught_up(query, topics.views, produced) for query in queries
        ):
            time.sleep(0.1)
        if cpu_start is not None:
            end = CpuReading.now(jvm, kafka_pid)
            run["measured_seconds"] = end.at - cpu_start.at
            run["cores"] = end.cores_since(cpu_start)
            if jvm is not None:
                run["jvm_cpu_per_trigger"] = run["cores"]["jvm"] * pace.trigger_seconds
    finally:
        producer.close(timeout=10)
        run["produced"] = produced
        run["queries"] = {}
        for query in queries:
            name = query.name or query.id
            failure = query.exception() if not query.isActive else None
            run["queries"][name] = {"progress": progresses(query)}
            if failure is not None:
                data_batches = sum(1 for p in run["queries"][name]["progress"] if p.get("numInputRows"))
                run["queries"][name]["error"] = failure_text(failure)
                run.setdefault("error", f"{name}: {failure_text(failure)}")
                # Refused: the settings never let the query complete a batch.
                run["refused"] = run.get("refused", True) and data_batches == 0
                run["error_at"] = "first batch" if data_batches == 0 else "later batch"
            query.stop()
        run["load_after"] = list(os.getloadavg())
    log(
        f"  {kind}: {produced} records in {rounds} rounds"
        + (
            f", JVM {run['cores']['jvm']:.2f} cores, the rest of the machine {run['cores']['others']:.2f}"
            if "cores" in run
            else ""
        )
        + (f"; error: {run['error'].splitlines()[0][:160]}" if "error" in run else "")
    )
    return run
