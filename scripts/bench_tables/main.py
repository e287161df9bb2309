"""The benchmark's command line: Kafka, one Spark session, per size topics + preload + the job + the change
rate, then the JSON and the table."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from kafka import KafkaProducer
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.config import StreamingJobConfig
from jobs.common.session import jvm_jars
from jobs.user_enrichment.config import EnrichmentJobConfig
from jobs.user_enrichment.main import JOB as ENRICHMENT
from jobs.user_view.config import UserViewJobConfig
from jobs.user_view.main import JOB as USER_VIEW
from scripts import bench_tables
from scripts.bench_local.sampling import machine, versions
from scripts.stats import percentile
from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes

RESULTS_DIR = REPO_ROOT / "benchmarks"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
TRIGGER = "2 seconds"
SHUFFLE_PARTITIONS = 4
JobConfig = EnrichmentJobConfig | UserViewJobConfig
StartQueries = Callable[[SparkSession, Any], list[StreamingQuery]]
JOBS = {job.name: job for job in (ENRICHMENT, USER_VIEW)}


def log(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def user_id(index: int) -> str:
    return f"user-{index:07d}"


def iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def order_id(index: int) -> str:
    return f"order-{index:07d}"


def load_start_queries(job: str, job_module: Path | None) -> StartQueries:
    """`start_queries` of the job's current main module, or of a copy of it (another design)."""
    if job_module is None:
        return JOBS[job].start_queries
    spec = importlib.util.spec_from_file_location("bench_tables_job", job_module)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--job-module {job_module}: not a Python file")
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    loaded: StartQueries = module.start_queries
    return loaded


def spark_session(
    runtimes: Runtimes, *, app_name: str = "bench-tables", shuffle_partitions: int = SHUFFLE_PARTITIONS
) -> SparkSession:
    """A local[2] session with the connector and the jobs' JVM jars, bound to 127.0.0.1."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["JAVA_HOME"] = str(runtimes.java.parent.parent)
    return (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.jars", ",".join([*(str(jar) for jar in runtimes.spark_kafka_jars), *jvm_jars()]))
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def stop_spark(spark: SparkSession) -> None:
    gateway = SparkContext._gateway
    spark.stop()
    jvm_process = getattr(gateway, "proc", None)
    if jvm_process is not None:
        jvm_process.terminate()
        jvm_process.wait(timeout=60)


def preload_users(spark: SparkSession, bootstrap: str, topic: str, size: int) -> float:
    """One profile per user, written by a Spark batch job; the seconds it took."""
    started = time.monotonic()
    users = spark.range(size).select(F.format_string("user-%07d", F.col("id")).alias("user_id"))
    records = users.select(
        F.col("user_id").alias("key"),
        F.to_json(
            F.struct(
                "user_id",
                F.concat(F.lit("Name "), F.col("user_id")).alias("name"),
                F.lit("FR").alias("country"),
                F.lit("free").alias("tier"),
                F.lit("2026-01-01T00:00:00.000Z").alias("updated_at"),
            )
        ).alias("value"),
    )
    write_records(records, bootstrap, topic)
    return time.monotonic() - started


def preload_orders(spark: SparkSession, bootstrap: str, topic: str, size: int) -> float:
    """One order per user (`order-N` of `user-N`), written by a Spark batch job; the seconds it took."""
    started = time.monotonic()
    orders = spark.range(size).select(
        F.format_string("order-%07d", F.col("id")).alias("order_id"),
        F.format_string("user-%07d", F.col("id")).alias("user_id"),
        (F.col("id") % 1000 / 10).alias("amount"),
    )
    records = orders.select(
        F.col("order_id").alias("key"),
        F.to_json(
            F.struct(
                "order_id",
                "user_id",
                "amount",
                F.lit("placed").alias("status"),
                F.lit("2026-01-01T00:00:00.000Z").alias("updated_at"),
            )
        ).alias("value"),
    )
    write_records(records, bootstrap, topic)
    return time.monotonic() - started


def write_records(records: Any, bootstrap: str, topic: str) -> None:
    (
        records.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.linger.ms", "50")
        .option("kafka.batch.size", "262144")
        .option("topic", topic)
        .save()
    )


class ChangeRate(threading.Thread):
    """Two kinds of record for random known users at fixed rates, sent every 0.5 s: the first topic gets
    page views (user-enrichment) or order changes (user-view: an update, a move to another user, or one in
    ten a delete, of a preloaded order), the second profile changes."""

    def __init__(
        self,
        bootstrap: str,
        topics: tuple[str, str],
        size: int,
        *,
        views: float,
        changes: float,
        orders: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        self.topics = topics
        self.size = size
        self.rates = (views, changes)
        self.stopping = threading.Event()
        self.sent = [0, 0]
        self.random = random.Random(size)
        self.orders = orders

    def run(self) -> None:
        views_topic, users_topic = self.topics
        started = time.monotonic()
        while not self.stopping.is_set():
            elapsed = time.monotonic() - started
            for index, (topic, rate) in enumerate(zip((views_topic, users_topic), self.rates, strict=True)):
                while self.sent[index] < elapsed * rate:
                    user = user_id(self.random.randrange(self.size))
                    if index == 0 and self.orders:
                        self.send_order_change(topic)
                        continue
                    if index == 0:
                        body = {"user_id": user, "url": f"/p/{self.sent[0] % 97}", "event_time": iso_now()}
                    else:
                        body = {
                            "user_id": user,
                            "name": f"Name {user}",
                            "country": self.random.choice(("FR", "DE", "IT")),
                            "tier": self.random.choice(("free", "gold")),
                            "updated_at": iso_now(),
                        }
                    self.producer.send(topic, key=user.encode(), value=json.dumps(body).encode())
                    self.sent[index] += 1
            self.producer.flush()
            self.stopping.wait(0.5)

    def send_order_change(self, topic: str) -> None:
        index = self.random.randrange(self.size)
        order = order_id(index)
        if self.random.random() < 0.1:
            self.producer.send(topic, key=order.encode(), value=None)
        else:
            owner = index if self.random.random() < 0.9 else self.random.randrange(self.size)
            body = {
                "order_id": order,
                "user_id": user_id(owner),
                "amount": self.random.randrange(1, 100_000) / 100,
                "status": self.random.choice(("placed", "paid", "shipped")),
                "updated_at": iso_now(),
            }
            self.producer.send(topic, key=order.encode(), value=json.dumps(body).encode())
        self.sent[0] += 1

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)
        self.producer.close(timeout=10)


def measure_size(
    spark: SparkSession,
    kafka: LocalKafka,
    start: StartQueries,
    size: int,
    *,
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:
    prefix = f"bench-{size}-{int(time.time())}"
    streaming = StreamingJobConfig(
        query_name=args.job,
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint_dir=str(workdir / prefix / "checkpoints"),
        metrics_port=0,
        trigger_interval=TRIGGER,
        shuffle_partitions=SHUFFLE_PARTITIONS,
        dead_letter_topic=f"{prefix}-dead-letters",
        shadow_group_prefix=None,
    )
    config: JobConfig
    if args.job == ENRICHMENT.name:
        config = EnrichmentJobConfig(
            streaming=streaming,
            views_topic=f"{prefix}-views",
            users_topic=f"{prefix}-users",
            output_topic=f"{prefix}-enriched",
        )
        rated_topic, topics = config.views_topic, [TopicSpec(config.views_topic, partitions=4)]
        output = TopicSpec(config.output_topic, partitions=4)
    else:
        config = UserViewJobConfig(
            streaming=streaming,
            users_topic=f"{prefix}-users",
            orders_topic=f"{prefix}-orders",
            output_topic=f"{prefix}-user-view",
        )
        rated_topic = config.orders_topic
        topics = [TopicSpec(config.orders_topic, partitions=2, compact=True)]
        output = TopicSpec(config.output_topic, partitions=2, compact=True)
    kafka.create_topics(
        [
            *topics,
            TopicSpec(config.users_topic, partitions=2, compact=True),
            output,
            TopicSpec(streaming.dead_letter_topic),
        ]
    )
    log(f"{size} users: preloading {config.users_topic}")
    preload_seconds = preload_users(spark, kafka.bootstrap_servers, config.users_topic, size)
    if isinstance(config, UserViewJobConfig):
        preload_seconds += preload_orders(spark, kafka.bootstrap_servers, config.orders_topic, size)
    log(f"{size} users: preloaded in {preload_seconds:.1f} s; starting the job")
    started = time.monotonic()
    queries = start(spark, config)
    main_query = next(query for query in queries if query.name == args.job)
    rate = ChangeRate(
        kafka.bootstrap_servers,
        (rated_topic, config.users_topic),
        size,
        views=args.views_per_second,
        changes=args.changes_per_second,
        orders=isinstance(config, UserViewJobConfig),
    )
    progress: list[dict[str, Any]] = []
    try:
        # The table is loaded (the first batch) before changes start: then every later batch sees the rate.
        main_query.processAllAvailable()
        loaded_seconds = time.monotonic() - started
        log(f"{size} users: table read after {loaded_seconds:.1f} s; change rate on")
        first_batch = main_query.lastProgress["batchId"] if main_query.lastProgress else -1
        rate.start()
        wanted = first_batch + args.warm_batches + args.measure_batches
        deadline = time.monotonic() + args.timeout_seconds
        seen: dict[int, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            for item in main_query.recentProgress:
                seen[item["batchId"]] = json.loads(item.json)
            if main_query.exception() is not None:
                raise RuntimeError(f"the query failed: {main_query.exception()}")
            if max(seen, default=-1) >= wanted:
                break
            time.sleep(1)
        progress = [seen[batch] for batch in sorted(seen)]
    finally:
        rate.stop()
        for query in queries:
            query.stop()
    initial = [p for p in progress if p["batchId"] <= first_batch]
    measured = [
        p
        for p in progress
        if first_batch + args.warm_batches
        < p["batchId"]
        <= first_batch + args.warm_batches + args.measure_batches
    ]
    durations = [p["durationMs"]["triggerExecution"] for p in measured]
    log(
        f"{size} users: {len(measured)} batches, triggerExecution median "
        f"{statistics.median(durations) if durations else float('nan'):.0f} ms"
    )
    return {
        "job": args.job,
        "label": args.label,
        "table_size": size,
        "preload_seconds": preload_seconds,
        "table_read_seconds": loaded_seconds,
        "first_batches": [summary(p) for p in initial],
        "measured_batches": [summary(p) for p in measured],
        "sent": {"views": rate.sent[0], "changes": rate.sent[1]},
        "trigger_median_ms": statistics.median(durations) if durations else None,
        "trigger_p90_ms": percentile(durations, 90) if durations else None,
        "add_batch_median_ms": statistics.median(p["durationMs"].get("addBatch", 0) for p in measured)
        if measured
        else None,
        "input_rows_median": statistics.median(p["numInputRows"] for p in measured) if measured else None,
    }


def summary(progress: dict[str, Any]) -> dict[str, Any]:
    return {
        "batch_id": progress["batchId"],
        "input_rows": progress["numInputRows"],
        "duration_ms": progress["durationMs"],
        "state_rows": [operator.get("numRowsTotal") for operator in progress.get("stateOperators", [])],
        "state_memory_bytes": [
            operator.get("memoryUsedBytes") for operator in progress.get("stateOperators", [])
        ],
    }


def markdown(runs: list[dict[str, Any]]) -> str:
    """Per design and table size: median and p90 batch duration, and the ratio to the design's smallest
    table."""
    lines = [
        "| design | users | preload s | table read s | batches | rows/batch | median ms | p90 ms "
        "| vs smallest |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label in sorted({run["label"] for run in runs}):
        mine = sorted((run for run in runs if run["label"] == label), key=lambda run: run["table_size"])
        base = mine[0]["trigger_median_ms"] if mine else None
        for run in mine:
            median = run["trigger_median_ms"]
            ratio = f"{median / base:.2f}x" if median and base else "-"
            lines.append(
                f"| {label} | {run['table_size']:,} | {run['preload_seconds']:.0f} | "
                f"{run['table_read_seconds']:.0f} | "
                f"{len(run['measured_batches'])} | {run['input_rows_median'] or 0:.0f} | "
                f"{median or 0:.0f} | {run['trigger_p90_ms'] or 0:.0f} | {ratio} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench-tables", description=(bench_tables.__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--sizes", default=",".join(str(size) for size in DEFAULT_SIZES), help="users, comma-separated"
    )
    parser.add_argument("--job", choices=list(JOBS), default=ENRICHMENT.name, help="the job measured")
    parser.add_argument("--label", default="new", help="the design's name in the results")
    parser.add_argument("--job-module", type=Path, default=None, help="a main.py with another start_queries")
    parser.add_argument(
        "--views-per-second", type=float, default=100.0, help="page views, or for user-view order changes"
    )
    parser.add_argument("--changes-per-second", type=float, default=10.0)
    parser.add_argument("--warm-batches", type=int, default=3, help="skipped after the table is read")
    parser.add_argument("--measure-batches", type=int, default=10)
    parser.add_argument(
        "--timeout-seconds", type=float, default=600.0, help="per size, after the table is read"
    )
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/tables-<date>.json")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    out = args.out or RESULTS_DIR / f"tables-{datetime.now(UTC).strftime('%Y-%m-%d')}.json"
    start = load_start_queries(args.job, args.job_module)
    runtimes = runtime_cache.ensure(log=log)
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"runs": []}
    result["machine"] = machine()
    result["versions"] = versions(runtimes)
    # A stateful design (--job-module) needs pandas and pyarrow on top of the jobs' own packages.
    installed = {dist.metadata["Name"].lower(): dist.version for dist in metadata.distributions()}
    result["versions"]["python_packages"].update(
        {package: installed[package] for package in ("pandas", "pyarrow") if package in installed}
    )
    result["settings"] = {
        "trigger": TRIGGER,
        "master": "local[2]",
        "shuffle_partitions": SHUFFLE_PARTITIONS,
        "views_per_second": args.views_per_second,
        "changes_per_second": args.changes_per_second,
        "warm_batches": args.warm_batches,
        "measure_batches": args.measure_batches,
    }
    with tempfile.TemporaryDirectory(prefix="bench-tables-") as temporary:
        workdir = Path(temporary)
        kafka = LocalKafka(runtimes, workdir / "kafka", port=0, heap="1g", java_options=())
        spark: SparkSession | None = None
        try:
            kafka.start()
            spark = spark_session(runtimes)
            for size in sizes:
                run = measure_size(spark, kafka, start, size, args=args, workdir=workdir)
                run["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
                default_module = f"jobs/{args.job.replace('-', '_')}/main.py"
                run["job_module"] = str(args.job_module or default_module)
                result["runs"] = [
                    old for old in result["runs"] if (old["label"], old["table_size"]) != (args.label, size)
                ] + [run]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            if spark is not None:
                stop_spark(spark)
            kafka.stop()
    table = markdown(result["runs"])
    result["table"] = table
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table)
    print(f"raw results: {out}")
    return 0
