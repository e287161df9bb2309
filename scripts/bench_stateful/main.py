"""The benchmark's command line: one broker, one Spark session, per job its topics, preload and queries."""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.pipeline import Job, load_pipeline
from jobs.order_state import main as order_state
from jobs.producers.order_events import OrderEventGenerator, encoded
from jobs.view_bursts import main as view_bursts
from scripts import bench_stateful
from scripts.bench_local.sampling import machine, versions
from scripts.bench_tables.main import spark_session, stop_spark
from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.paths import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "benchmarks"
MASTER = "local[2]"
SHUFFLE_PARTITIONS = 2
TRIGGER = "1 second"
Records = Iterator[tuple[bytes, bytes]]


def log(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def page_views(events: int, users: int, seed: int) -> Records:
    """Views of `users` users, 100 a second in event time ending two minutes ago, up to 1 s out of order."""
    rng = random.Random(seed)
    base = datetime.now(UTC) - timedelta(seconds=events / 100, minutes=2)
    for index in range(events):
        moment = base + timedelta(seconds=index / 100 - rng.random())
        user = f"user-{rng.randrange(users)}"
        view = {"user_id": user, "url": f"/p/{index % 50}", "event_time": moment.isoformat()[:23] + "Z"}
        yield user.encode(), json.dumps(view).encode()


def order_events(events: int, orders: int, seed: int) -> Records:
    """The order-event producer's valid events, `orders` orders open at a time."""
    generator = OrderEventGenerator(open_orders=orders, max_disorder_seconds=5.0, seed=seed)
    now = time.time()
    for _ in range(events):
        yield encoded(generator.next_event(now))


@dataclass(frozen=True)
class Bench:
    """A job of the benchmark: how its config is parsed, its queries started and its input made."""

    parse_args: Callable[[list[str]], Any]
    start_queries: Callable[[SparkSession, Any], list[StreamingQuery]]
    records: Callable[[argparse.Namespace], Records]
    keys: str


# By the job's module; the catalogue names the job and its topics.
BENCHES = {
    "view_bursts": Bench(
        view_bursts.parse_args,
        view_bursts.start_queries,
        lambda args: page_views(args.events, args.users, args.seed),
        "user",
    ),
    "order_state": Bench(
        order_state.parse_args,
        order_state.start_queries,
        lambda args: order_events(args.events, args.orders, args.seed),
        "order",
    ),
}


def benched_jobs() -> dict[str, Job]:
    """The catalogue's jobs this benchmark runs, by name."""
    return {job.name: job for job in load_pipeline().jobs if job.module in BENCHES}


def job_topics(job: Job, run: str) -> dict[str, str]:
    """The job's topic flags, each on a topic of this run."""
    return {flag: f"{run}-{topic}" for flag, topic in job.topics}


def create_topics(kafka: LocalKafka, job: Job, topics: dict[str, str], dead_letters: str) -> None:
    catalogue = {topic.name: topic for topic in load_pipeline().topics}
    specs = [TopicSpec(dead_letters, partitions=1)]
    for flag, topic in job.topics:
        spec = catalogue[topic]
        specs.append(
            TopicSpec(topics[flag], partitions=spec.partitions, compact="compact" in spec.cleanup_policy)
        )
    kafka.create_topics(specs)


def preload(bootstrap: str, topic: str, records: Records) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "1"})
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.5)
        count += 1
    if producer.flush(60) != 0:
        raise RuntimeError(f"preloading {topic}: records left unsent")
    return count


def measure(
    spark: SparkSession, kafka: LocalKafka, name: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    job = benched_jobs()[name]
    bench = BENCHES[job.module]
    run = f"bench-{name}-{int(time.time())}"
    topics = job_topics(job, run)
    dead_letters = f"{run}-dead-letters"
    create_topics(kafka, job, topics, dead_letters)
    (input_flag, *_) = job.reads
    preloaded = preload(kafka.bootstrap_servers, topics[input_flag], bench.records(args))
    log(f"{name}: {preloaded} records in {topics[input_flag]}")
    argv = [
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--checkpoint-dir", str(workdir / run),
        "--metrics-port", "0",
        "--dead-letter-topic", dead_letters,
        "--trigger-interval", TRIGGER,
        "--shuffle-partitions", str(SHUFFLE_PARTITIONS),
        *(part for flag, topic in topics.items() for part in (flag, topic)),
        *job.setting_arguments,
    ]  # fmt: skip
    config = bench.parse_args(argv)
    started = time.monotonic()
    queries = bench.start_queries(spark, config)
    try:
        main_query = next(query for query in queries if query.name == name)
        main_query.processAllAvailable()
        wall = time.monotonic() - started
        progress = [p for p in main_query.recentProgress if p.numInputRows]
        rows = sum(p.numInputRows for p in progress)
        busy = sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000
        last = main_query.lastProgress
        if last is None:
            raise RuntimeError(f"{name}: the main query reported no progress")
        state = last.stateOperators[0]
    finally:
        for query in queries:
            query.stop()
    if rows != preloaded:
        raise RuntimeError(f"{name}: the main query read {rows} of {preloaded} records")
    keys = max(state.numRowsTotal, 1)
    return {
        "job": name,
        "events": rows,
        "keys_in_state": state.numRowsTotal,
        "key": bench.keys,
        "batches": len(progress),
        "batch_seconds": round(busy, 2),
        "wall_seconds": round(wall, 2),
        "events_per_second_in_batches": round(rows / busy),
        "events_per_second_wall": round(rows / wall),
        "state_memory_bytes": state.memoryUsedBytes,
        "state_bytes_per_key": round(state.memoryUsedBytes / keys),
        "batch_durations_ms": [p.durationMs.get("triggerExecution", 0) for p in progress],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench-stateful", description=(bench_stateful.__doc__ or "").splitlines()[0]
    )
    known = ",".join(benched_jobs())
    parser.add_argument("--jobs", default=known, help="a subset of " + known)
    parser.add_argument("--events", type=int, default=200_000, help="records per job")
    parser.add_argument("--users", type=int, default=2_000, help="view-bursts: users")
    parser.add_argument("--orders", type=int, default=2_000, help="order-state: orders open at a time")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="", help="appended to the raw results' file name")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.jobs.split(",") if name.strip()]
    unknown = sorted(set(names) - set(benched_jobs()))
    if unknown:
        parser.error(f"--jobs: unknown job {unknown[0]} (known: {known})")
    suffix = f"-{args.label}" if args.label else ""
    out = RESULTS_DIR / f"stateful-{datetime.now(UTC).strftime('%Y-%m-%d')}{suffix}.json"
    runtimes = runtime_cache.ensure(log=log)
    result: dict[str, Any] = {
        "benchmark": "stateful",
        "started": datetime.now(UTC).isoformat(),
        "machine_at_start": machine(),
        "versions": versions(runtimes),
        "settings": {
            "master": MASTER,
            "shuffle_partitions": SHUFFLE_PARTITIONS,
            "trigger": TRIGGER,
            **{key: value for key, value in vars(args).items() if key != "label"},
        },
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-stateful-") as temporary:
        workdir = Path(temporary)
        kafka = LocalKafka(runtimes, workdir / "kafka", port=0, heap="1g", java_options=())
        spark: SparkSession | None = None
        try:
            kafka.start()
            spark = spark_session(runtimes, app_name="bench-stateful", shuffle_partitions=SHUFFLE_PARTITIONS)
            for name in names:
                run = measure(spark, kafka, name, args, workdir)
                log(
                    f"{name}: {run['events_per_second_in_batches']} events/s in batches, "
                    f"{run['events_per_second_wall']} wall; {run['state_bytes_per_key']} B per key"
                )
                result["runs"].append(run)
        finally:
            if spark is not None:
                stop_spark(spark)
            kafka.stop()
    result["machine_at_end"] = machine()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| job | events | events/s (batches) | events/s (wall) | keys in state | state bytes per key |")
    print("|---|---|---|---|---|---|")
    for run in result["runs"]:
        print(
            f"| {run['job']} | {run['events']:,} | {run['events_per_second_in_batches']:,} | "
            f"{run['events_per_second_wall']:,} | {run['keys_in_state']:,} {run['key']}s | "
            f"{run['state_bytes_per_key']:,} |"
        )
    print(f"raw results: {out}")
    return 0
