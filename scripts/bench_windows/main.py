"""Wiring: the topic, the engines in rounds, the count check, the report and the raw results."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.common.config import EventLimits
from jobs.common.kafka_io import read_kafka_stream
from jobs.common.schemas import PAGE_VIEW, decode_page_views
from scripts.bench_local.sampling import machine
from scripts.bench_local.sampling import versions as runtime_versions
from scripts.bench_windows import flink, peers
from scripts.bench_windows.records import (
    FIELDS,
    PARTITIONS,
    QUIX_GRACE_MS,
    Counts,
    classification_samples,
    classify,
    closing_markers,
    data_windows,
    expected,
    topic_records,
)
from scripts.bench_windows.spark_side import (
    best_passes,
    end_offsets,
    latency,
    load_producer,
    produce,
    read_counts,
    session,
    textbook_query,
    window_query,
)
from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import LOOPBACK
from streamstack.paths import default_workdir

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "bench-views"
ENGINES = {
    "ceiling": "Spark ceiling (Kafka -> no-op sink)",
    "job": "our window job (every dead-letter check, Kafka sink)",
    "textbook": "textbook PySpark (from_json, filter, window, count)",
    "plain": "plain confluent-kafka + orjson consumer",
    "quix": "Quix Streams (group_by url, tumbling window, count, final)",
    "flink": "PyFlink 2.2.1 (Python map with the checks, Flink SQL tumbling window, count)",
}

# PyFlink (3,000-6,000 events/s on the shared machine) would add 15-30 minutes to the default run.
DEFAULT_ENGINES = [label for label in ENGINES if label != "flink"]


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fill_topic(bootstrap: str, topic: str, events: int, now: datetime) -> float:
    """The benchmark topic (records.topic_records); returns the records/s sent."""
    producer = load_producer(bootstrap)
    started = datetime.now(UTC)
    sent = 0
    for partition, value, _, _ in topic_records(events, now):
        produce(producer, topic, value, partition)
        sent += 1
    if producer.flush(300) > 0:
        raise RuntimeError(f"filling {topic}: records still unsent after 300 s")
    return sent / (datetime.now(UTC) - started).total_seconds()


def check_classification(spark: SparkSession) -> dict[str, Any]:
    """`classify` against the job's own decoder on records of every dead-letter class."""
    fields = tuple((field.name, field.kind) for field in PAGE_VIEW.fields)
    if fields != FIELDS or PAGE_VIEW.event_time_field != "event_time":
        raise RuntimeError(f"records.FIELDS {FIELDS} is not the page-view schema's {fields}: update classify")
    samples = classification_samples(datetime.now(UTC))
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
        ]
    )
    rows = [
        (None, value, "sample", 0, offset, datetime.fromtimestamp(record_ms / 1000, UTC), 0)
        for offset, (value, record_ms) in enumerate(samples)
    ]
    decoded = decode_page_views(spark.createDataFrame(rows, schema), EventLimits())
    job = {
        row["offset"]: row["dead_letter_reason"]
        for row in decoded.select("offset", "dead_letter_reason").collect()
    }
    ours = {offset: classify(value, record_ms)[0] for offset, (value, record_ms) in enumerate(samples)}
    differ = {offset: (job[offset], ours[offset]) for offset in ours if job[offset] != ours[offset]}
    return {
        "samples": len(samples),
        "job_reasons": [job[offset] for offset in range(len(samples))],
        "differ": {str(k): v for k, v in differ.items()},
    }


def summarise(rounds: list[dict[str, Any]], want: Counts) -> dict[str, dict[str, Any]]:
    """Per engine its best measured round, and whether every round's counts equal the expected ones; an
    engine whose counts differ gets no rate."""
    engines: dict[str, dict[str, Any]] = {}
    for label in dict.fromkeys(r["engine"] for r in rounds):
        mine = [r for r in rounds if r["engine"] == label]
        measured = [r for r in mine if r["measured"]]
        best = max(measured, key=lambda r: r["events_per_second"])
        equal = None if label == "ceiling" else all(r["counts_equal"] for r in mine)
        rate = best["events_per_second"] if equal is not False else None
        engines[label] = {
            "name": ENGINES[label],
            "events_per_second": rate,
            "busy_cores": best["busy_cores"],
            **({"jit_compiler_cores": best["jit_compiler_cores"]} if "jit_compiler_cores" in best else {}),
            "events_per_second_per_core": rate / best["busy_cores"] if rate else None,
            "counts_equal": equal,
            "best_round": best["round"],
        }
    return engines


def spark_warm_ups(rounds: list[dict[str, Any]]) -> int:
    """Warm-up rounds the Spark engines ran (more than --warm-ups while the JIT had not settled)."""
    return len({r["round"] for r in rounds if "jit_compiler_cores" in r and not r["measured"]})


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| engine | events/s | busy cores | events/s per core | counts equal |",
        "|---|---|---|---|---|",
    ]
    for engine in result["engines"].values():
        rate = engine["events_per_second"]
        per_core = engine["events_per_second_per_core"]
        equal = {None: "n/a (no counts)", True: "yes", False: "**no**: rate withheld"}[engine["counts_equal"]]
        lines.append(
            f"| {engine['name']} | {f'{rate:,.0f}' if rate else '-'} | {engine['busy_cores']:.2f} | "
            f"{f'{per_core:,.0f}' if per_core else '-'} | {equal} |"
        )
    compiling = [
        f"{engine['name'].split(' (')[0]} {engine['jit_compiler_cores']:.2f}"
        for engine in result["engines"].values()
        if "jit_compiler_cores" in engine
    ]
    if compiling:
        lines.append("")
        lines.append(
            f"Spark engines after {result['settings'].get('spark_warm_ups', '?')} warm-up rounds; of their "
            "busy cores, the JIT's compiler threads (best round): " + ", ".join(compiling) + "."
        )
    lat = result.get("latency")
    if lat:
        lines.append("")
        lines.append(
            f"Latency at {lat['achieved_rate']:,.0f} events/s (half the job's rate), 1 s trigger: "
            f"p50 {lat['p50_seconds']:.2f} s, p99 {lat['p99_seconds']:.2f} s "
            "(goal, issue 16: p99 <= trigger + 1.0 s = 2.0 s); "
            f"{lat['batches']:.0f} batches of up to {lat['max_batch_rows']:,.0f} records, "
            f"median {lat['median_batch_seconds']:.2f} s; the job on {lat['job_busy_cores']:.2f} cores, "
            f"the producer on {lat['producer_busy_cores']:.2f}."
        )
    return "\n".join(lines) + "\n"


def results_path(directory: Path, events: int, label: str) -> Path:
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    size = "" if events == 1_000_000 else f"-{events}"
    return directory / f"windows-{date}{size}{f'-{label}' if label else ''}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench-windows", description="The window job beside its peers on one Kafka topic."
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    parser.add_argument("--warm-ups", type=int, default=2, help="rounds of every engine before measuring")
    parser.add_argument(
        "--jit-settled-share",
        type=float,
        default=0.10,
        help="Spark engines: more warm-up rounds until the JIT's compiler threads take at most this share "
        "of their busy cores in a round (0 turns it off)",
    )
    parser.add_argument(
        "--max-warm-ups", type=int, default=30, help="Spark engines: at most this many warm-up rounds"
    )
    parser.add_argument("--passes", type=int, default=3, help="measured rounds; each engine's best counts")
    parser.add_argument("--latency-seconds", type=float, default=40.0, help="0 leaves the latency run out")
    parser.add_argument(
        "--engines",
        default=",".join(DEFAULT_ENGINES),
        help=f"a subset of {','.join(ENGINES)} (default: all but flink, see README)",
    )
    parser.add_argument("--out", type=Path, default=default_workdir() / "bench")
    parser.add_argument("--results-dir", type=Path, default=REPO_ROOT / "benchmarks", help="raw results JSON")
    parser.add_argument("--label", default="", help="appended to the raw results' file name")
    args = parser.parse_args(argv)
    if args.events < 3 * args.max_offsets_per_trigger:
        parser.error(
            "--events must be at least 3 x --max-offsets-per-trigger (a sustained rate needs 3 batches)"
        )
    if args.passes < 1 or args.warm_ups < 0:
        parser.error("--passes must be at least 1 and --warm-ups at least 0")
    engines = args.engines.split(",")
    if unknown := set(engines) - set(ENGINES):
        parser.error(f"--engines: unknown {sorted(unknown)}")

    runtimes = runtime_cache.ensure(log=log)
    os.environ.update(
        SPARK_LOCAL_IP=LOOPBACK, PYSPARK_PYTHON=sys.executable, JAVA_HOME=str(runtimes.java.parent.parent)
    )
    at_start = machine()
    now = datetime.now(UTC)
    want, want_dead_letters = expected(args.events, now)
    markers, marker_ms = closing_markers(args.events, now)
    valid = args.events - want_dead_letters.total()
    rounds: list[dict[str, Any]] = []
    live: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="bench-windows-") as scratch:
        workdir = Path(scratch)
        kafka = LocalKafka(runtimes, workdir / "kafka", heap="1g", java_options=()).start()
        try:
            bootstrap = kafka.bootstrap_servers
            outputs = {label: f"bench-out-{label}" for label in ("job", "textbook")}
            kafka.create_topics([TopicSpec(t, partitions=PARTITIONS) for t in (TOPIC, *outputs.values())])
            produce_rate = fill_topic(bootstrap, TOPIC, args.events, now)
            records = peers.topic_size(bootstrap, TOPIC)
            log(f"filled {records:,} records at {produce_rate:,.0f}/s")
            jars = [str(jar) for jar in runtimes.spark_kafka_jars]
            spark, config = session(bootstrap, workdir, jars, args.max_offsets_per_trigger)
            try:
                classification = check_classification(spark)
                log(f"classification vs the job's decoder: {classification}")
                before: dict[str, dict[int, int]] = {}

                def starter(label: str, make: Callable[..., Any] | None) -> Callable[[str], Any]:
                    def start(name: str) -> Any:
                        if make is None:  # the ceiling
                            return (
                                read_kafka_stream(spark, config, [TOPIC])
                                .writeStream.format("noop")
                                .queryName(name)
                                .option("checkpointLocation", config.checkpoint_for(name))
                                .trigger(availableNow=True)
                                .start()
                            )
                        before[label] = end_offsets(bootstrap, outputs[label])
                        return (
                            make(spark, config, TOPIC, outputs[label], name)
                            .trigger(availableNow=True)
                            .start()
                        )

                    return start

                def check(label: str, _attempt: str) -> dict[str, Any]:
                    if label == "ceiling":
                        return {}
                    counts = read_counts(bootstrap, outputs[label], before[label])
                    return {"counts_equal": counts == want, "windows": len(counts)}

                makers = {"ceiling": None, "job": window_query, "textbook": textbook_query}
                queries = {label: starter(label, make) for label, make in makers.items() if label in engines}
                if queries:
                    spark_rounds = best_passes(
                        queries,
                        args.warm_ups,
                        args.passes,
                        check,
                        jit_settled_share=args.jit_settled_share or None,
                        max_warm_ups=args.max_warm_ups,
                    )
                    for entry in spark_rounds:
                        entry["events_per_second"] = entry.pop("sustained_rows_per_second")
                        rounds.append(entry)
                for number in range(args.warm_ups + args.passes):
                    measured = number >= args.warm_ups
                    attempt = f"pass-{number - args.warm_ups + 1}" if measured else f"warm-up-{number + 1}"
                    for label in ("plain", "quix"):
                        if label not in engines:
                            continue
                        if label == "plain":
                            run = peers.plain_consumer(bootstrap, TOPIC, records)
                        else:  # a copy of the topic, the markers are appended to it
                            copy = f"{TOPIC}-quix-{number + 1}"
                            kafka.create_topics([TopicSpec(copy, partitions=PARTITIONS)])
                            fill_topic(bootstrap, copy, args.events, now)
                            run = peers.quix(bootstrap, copy, records, valid=valid, markers=markers)
                        counts = data_windows(run.counts, marker_ms)
                        entry = {
                            "engine": label,
                            "round": attempt,
                            "measured": measured,
                            **run.summary(),
                            "counts_equal": counts == want and run.dead_letters == want_dead_letters,
                            "windows": len(counts),
                        }
                        rounds.append(entry)
                        log(
                            f"{label} {attempt}: {entry['events_per_second']:,.0f}/s on "
                            f"{entry['busy_cores']:.2f} cores, counts equal: {entry['counts_equal']}"
                        )
                if "flink" in engines:
                    flink_runs = flink.rounds(
                        bootstrap,
                        TOPIC,
                        count=args.warm_ups + args.passes,
                        grace_ms=QUIX_GRACE_MS,
                        java_home=runtimes.java.parent.parent,
                        log=log,
                    )
                    for number, run in enumerate(flink_runs):
                        measured = number >= args.warm_ups
                        entry = {
                            "engine": "flink",
                            "round": f"pass-{number - args.warm_ups + 1}"
                            if measured
                            else f"warm-up-{number + 1}",
                            "measured": measured,
                            **run.summary(),
                            "counts_equal": run.counts == want and run.dead_letters == want_dead_letters,
                            "windows": len(run.counts),
                        }
                        rounds.append(entry)
                        log(
                            f"flink {entry['round']}: {entry['events_per_second']:,.0f}/s on "
                            f"{entry['busy_cores']:.2f} cores, counts equal: {entry['counts_equal']}"
                        )
                job_rate = max(
                    (r["events_per_second"] for r in rounds if r["engine"] == "job" and r["measured"]),
                    default=0,
                )
                if args.latency_seconds > 0 and job_rate:
                    live = latency(
                        spark, config, bootstrap, kafka, rate=job_rate / 2, seconds=args.latency_seconds
                    )
            finally:
                spark.stop()
        finally:
            kafka.stop()
    result: dict[str, Any] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            **machine(),
            "spark_master": "local[2]",
            "load_average_at_start": at_start["load_average"],
        },
        "versions": {
            **runtime_versions(runtimes),
            "python_packages": {
                name: version(name) for name in ("pyspark", "confluent-kafka", "orjson", "quixstreams")
            },
            "pyflink": {
                "apache-flink": flink.PYFLINK_VERSION,
                "kafka_connector": flink.KAFKA_CONNECTOR.coordinates,
                "requirements": "scripts/bench_windows/pyflink-requirements.txt",
            },
        },
        "settings": {
            "events": args.events,
            "records": records,
            "max_offsets_per_trigger": args.max_offsets_per_trigger,
            "warm_ups": args.warm_ups,
            "spark_warm_ups": spark_warm_ups(rounds),
            "jit_settled_share": args.jit_settled_share,
            "max_warm_ups": args.max_warm_ups,
            "passes": args.passes,
            "partitions": PARTITIONS,
            "window": (
                "10 s tumbling; Spark 5 s watermark, Quix 30 min grace and PyFlink a 30 min watermark delay "
                "(records.QUIX_GRACE_MS)"
            ),
            "pyflink_parallelism": flink.PARALLELISM,
        },
        "cpu_counted": (
            "Spark: the driver JVM's process tree (local[2]: executors are its threads); Python peers: the "
            "benchmark process (all threads, librdkafka's included); PyFlink: its process tree (the driver, "
            "the mini-cluster JVM, the Python workers, finished ones included); the Kafka broker is not "
            "counted for any"
        ),
        "expected": {
            "windows": len(want),
            "valid_views_in_data_windows": sum(want.values()),
            "dead_letters": dict(sorted(want_dead_letters.items())),
        },
        "classification_check": classification,
        "engines": summarise(rounds, want),
        "rounds": rounds,
        "latency": live,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "windows.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "windows.md").write_text(markdown(result))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    raw = results_path(args.results_dir, args.events, args.label)
    raw.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    log(f"raw results: {raw}")
    print(markdown(result))
    return 0
