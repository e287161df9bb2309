"""Benchmark of the clickstream window job on real local Kafka with Spark local[2] (issue 3).

One run measures, on the same topic of N page views:
  1. the ceiling: Spark reading the topic into a no-op sink;
  2. the window job's query (decode with dead-letter checks, 10 s tumbling counts per url, Kafka sink);
  3. a peer: a plain kafka-python consumer computing the same window counts in Python;
  4. end-to-end latency p50/p99 (event produced -> its window's count written to the output topic) while
     events arrive at half of the job's measured throughput, with a 1 s trigger.
Throughput is rows / wall time from the first batch's start to the last batch's end, read from Spark's
progress reports, so session start-up is not counted. Latency per event is the end of the batch that
processed it (trigger time + trigger execution, when the Kafka sink has flushed) minus the record's
producer timestamp.

    make bench-jobs            # or: .venv/bin/python -m scripts.bench_windows --events 500000
Writes JSON and a markdown table to --out (default .streamstack/bench/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pyspark.sql import SparkSession

from jobs.clickstream_windows.transforms import (
    count_views_per_url,
    page_views,
    window_counts_as_records,
)
from jobs.common.config import EventLimits, StreamingJobConfig
from jobs.common.kafka_io import read_kafka_stream
from jobs.common.progress import parse_spark_timestamp
from jobs.common.schemas import decode_page_views
from jobs.common.session import build_session
from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import LOOPBACK
from streamstack.paths import default_workdir

PARTITIONS = 4
URLS = 50


def page_view(i: int, event_time: datetime) -> bytes:
    stamp = event_time.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return json.dumps(
        {"user_id": f"user-{i % 1000}", "url": f"/products/{i % URLS}", "event_time": stamp}
    ).encode()


def fill_topic(bootstrap: str, topic: str, events: int) -> float:
    """N page views spread over event time (100 per second, from an hour ago); returns events/s sent."""
    base = datetime.now(UTC) - timedelta(hours=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024)
    started = time.monotonic()
    for i in range(events):
        producer.send(
            topic, value=page_view(i, base + timedelta(milliseconds=10 * i)), partition=i % PARTITIONS
        )
    producer.flush(timeout=300)
    producer.close()
    return events / (time.monotonic() - started)


def session(bootstrap: str, workdir: Path, jars: list[str]) -> tuple[SparkSession, StreamingJobConfig]:
    config = StreamingJobConfig(
        query_name="bench",
        bootstrap_servers=bootstrap,
        checkpoint_dir=str(workdir / "checkpoints"),
        metrics_port=0,
        master="local[2]",
        trigger_interval="1 second",
        max_offsets_per_trigger=100_000,
        shuffle_partitions=2,
        extra_jars=tuple(jars),
        spark_conf={
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
        },
    )
    return build_session(config), config


def throughput(progress: list[dict[str, Any]]) -> tuple[float, int]:
    batches = [p for p in progress if p.get("numInputRows")]
    rows = sum(int(p["numInputRows"]) for p in batches)
    start = parse_spark_timestamp(batches[0]["timestamp"])
    end = max(
        parse_spark_timestamp(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000 for p in batches
    )
    return rows / (end - start), rows


def run_available(query: Any) -> list[dict[str, Any]]:
    query.awaitTermination()
    return [json.loads(p.json) for p in query.recentProgress]


def window_query(spark: SparkSession, config: StreamingJobConfig, topic: str, output: str, name: str) -> Any:
    decoded = decode_page_views(read_kafka_stream(spark, config, [topic]), EventLimits())
    records = window_counts_as_records(count_views_per_url(page_views(decoded), "10 seconds", "5 seconds"))
    return (
        records.writeStream.format("kafka")
        .queryName(name)
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", config.checkpoint_for(name))
        .outputMode("update")
    )


def plain_consumer_rate(bootstrap: str, topic: str, events: int) -> float:
    """The peer: kafka-python reads, parses and counts per (10 s window, url) in Python."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=5000)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    counts: Counter[tuple[int, str]] = Counter()
    seen = 0
    started = time.monotonic()
    while seen < events:
        for batch in consumer.poll(timeout_ms=1000).values():
            for record in batch:
                view = json.loads(record.value)
                event_time = datetime.fromisoformat(view["event_time"].replace("Z", "+00:00")).timestamp()
                counts[(int(event_time // 10) * 10, view["url"])] += 1
            seen += len(batch)
    elapsed = time.monotonic() - started
    consumer.close()
    return seen / elapsed


def latency(
    spark: SparkSession,
    config: StreamingJobConfig,
    bootstrap: str,
    kafka: LocalKafka,
    *,
    rate: float,
    seconds: float,
) -> dict[str, float]:
    """Produce at `rate` for `seconds` into a fresh topic while the job runs with a 1 s trigger."""
    topic, output = "bench-live", "bench-live-out"
    kafka.create_topics([TopicSpec(topic, partitions=PARTITIONS), TopicSpec(output, partitions=PARTITIONS)])
    query = (
        window_query(spark, config, topic, output, "bench-live").trigger(processingTime="1 second").start()
    )
    time.sleep(5)  # first (empty) batches and plan compilation out of the way
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while sent[0] < due:
                producer.send(
                    topic, value=page_view(sent[0], datetime.now(UTC)), partition=sent[0] % PARTITIONS
                )
                sent[0] += 1
            time.sleep(0.002)
        producer.flush()
        producer.close()

    producer_thread = threading.Thread(target=produce)
    producer_thread.start()
    time.sleep(seconds)
    stop.set()
    producer_thread.join()
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
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    ends = consumer.end_offsets(partitions)
    latencies: list[float] = []
    while any(consumer.position(tp) < ends[tp] for tp in partitions):
        for tp, batch in consumer.poll(timeout_ms=1000).items():
            for record in batch:
                for first_offsets, end_offsets, batch_finished in batch_end:
                    if first_offsets.get(tp.partition, 0) <= record.offset < end_offsets.get(tp.partition, 0):
                        latencies.append(batch_finished - record.timestamp / 1000)
                        break
    consumer.close()
    latencies.sort()
    return {
        "target_rate": rate,
        "events": float(sent[0]),
        "achieved_rate": sent[0] / seconds,
        "measured_events": float(len(latencies)),
        "p50_seconds": statistics.median(latencies),
        "p99_seconds": latencies[int(0.99 * (len(latencies) - 1))],
        "max_seconds": latencies[-1],
    }


def as_offsets(value: Any) -> dict[str, dict[str, int]]:
    """Progress offsets arrive as a JSON string or already parsed, depending on the Spark version."""
    if isinstance(value, str):
        return dict(json.loads(value)) if value.strip().startswith("{") else {}
    return dict(value) if isinstance(value, dict) else {}


def markdown(result: dict[str, Any]) -> str:
    lat = result["latency"]
    rows = [
        ("events in the topic", f"{result['events']:,}"),
        ("Spark ceiling (Kafka -> no-op sink)", f"{result['ceiling_events_per_second']:,.0f} events/s"),
        (
            "window job (decode, 10 s counts per url, Kafka sink)",
            f"{result['job_events_per_second']:,.0f} events/s",
        ),
        ("window job / ceiling", f"{result['job_vs_ceiling']:.0%} (goal >= 60%)"),
        (
            "plain kafka-python consumer, same counts",
            f"{result['plain_consumer_events_per_second']:,.0f} events/s",
        ),
        ("window job / plain consumer", f"{result['job_vs_plain_consumer']:.1f}x (goal >= 10x)"),
        ("latency test rate (half the job's throughput)", f"{lat['achieved_rate']:,.0f} events/s achieved"),
        ("end-to-end latency p50 / p99", f"{lat['p50_seconds']:.2f} s / {lat['p99_seconds']:.2f} s"),
        ("latency goal p99 <= trigger + 1.5 s", f"<= {result['latency_goal_seconds']:.1f} s"),
    ]
    lines = ["| measure | result |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-windows", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--latency-seconds", type=float, default=40.0)
    parser.add_argument("--out", type=Path, default=default_workdir() / "bench")
    args = parser.parse_args(argv)

    runtimes = runtime_cache.ensure(log=lambda line: print(line, file=sys.stderr))
    os.environ.update(
        SPARK_LOCAL_IP=LOOPBACK, PYSPARK_PYTHON=sys.executable, JAVA_HOME=str(runtimes.java.parent.parent)
    )
    with tempfile.TemporaryDirectory(prefix="bench-windows-") as scratch:
        workdir = Path(scratch)
        kafka = LocalKafka(runtimes, workdir / "kafka", heap="1g").start()
        try:
            bootstrap = kafka.bootstrap_servers
            kafka.create_topics(
                [
                    TopicSpec("bench-views", partitions=PARTITIONS),
                    TopicSpec("bench-out", partitions=PARTITIONS),
                ]
            )
            produce_rate = fill_topic(bootstrap, "bench-views", args.events)
            print(f"filled {args.events:,} events at {produce_rate:,.0f}/s", file=sys.stderr)
            spark, config = session(bootstrap, workdir, [str(jar) for jar in runtimes.spark_kafka_jars])
            try:
                # The first pass warms the JVM (class loading, code generation); the second is measured.
                for attempt in ("warm-up", "measured"):
                    ceiling_query = (
                        read_kafka_stream(spark, config, ["bench-views"])
                        .writeStream.format("noop")
                        .queryName(f"ceiling-{attempt}")
                        .option("checkpointLocation", config.checkpoint_for(f"ceiling-{attempt}"))
                        .trigger(availableNow=True)
                        .start()
                    )
                    ceiling, ceiling_rows = throughput(run_available(ceiling_query))
                    print(f"{attempt}: ceiling {ceiling:,.0f}/s over {ceiling_rows:,}", file=sys.stderr)
                    job_query = window_query(spark, config, "bench-views", "bench-out", f"job-{attempt}")
                    job, job_rows = throughput(run_available(job_query.trigger(availableNow=True).start()))
                    print(f"{attempt}: job {job:,.0f}/s over {job_rows:,}", file=sys.stderr)
                peer = plain_consumer_rate(bootstrap, "bench-views", args.events)
                print(f"plain consumer {peer:,.0f}/s", file=sys.stderr)
                live = latency(spark, config, bootstrap, kafka, rate=job / 2, seconds=args.latency_seconds)
            finally:
                spark.stop()
        finally:
            kafka.stop()
    result: dict[str, Any] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "spark_master": "local[2]"},
        "events": args.events,
        "ceiling_events_per_second": ceiling,
        "job_events_per_second": job,
        "job_vs_ceiling": job / ceiling,
        "plain_consumer_events_per_second": peer,
        "job_vs_plain_consumer": job / peer,
        "latency": live,
        "latency_goal_seconds": 1.0 + 1.5,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "windows.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "windows.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
