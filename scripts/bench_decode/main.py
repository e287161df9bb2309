"""Decode micro-benchmark (issue 17, goal 1): µs per record to scan, to decode with the SQL decoder
(jobs.common.events.decode_events_sql) and with the JVM decoder (jobs.jvm.decoder.decode_events_jvm, which
jobs.common.events.decode_events calls).

`make bench-decode` (`python -m scripts.bench_decode [--records N] [--rounds N] [--label L]`): the window
job's page views (scripts.bench_windows.records: one in 100 a dead letter of a rotating class) held in
memory as Kafka rows, then per round each pass in turn, written to Spark's no-op sink with every output
column: `scan` (the records), `sql` and `jvm` (records plus event, reason and detail). First the two decoders
must agree on every record's reason, detail and event, then warm-up rounds, then the measured ones. Per pass:
wall time and the CPU time of the Spark JVM (all its threads: tasks, JIT, GC, from /proc), each per record.
Writes the raw results to benchmarks/decode-<date>[-<label>].json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from statistics import median
from typing import Any

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.common.config import EventLimits
from jobs.common.events import decode_events_sql
from jobs.common.schemas import PAGE_VIEW
from jobs.jvm.build import build_jar
from jobs.jvm.decoder import decode_events_jvm
from scripts.bench_local.sampling import machine
from scripts.bench_windows.records import topic_records

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORD_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
PASSES = ("scan", "sql", "jvm")


def session(partitions: int) -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(f"local[{partitions}]")
        .appName("bench-decode")
        # STREAMSTACK_BENCH_JVM_JAR: another build of jobs/jvm to measure (A/B runs of the decoder).
        .config("spark.jars", os.environ.get("STREAMSTACK_BENCH_JVM_JAR") or str(build_jar()))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def in_memory_records(spark: SparkSession, count: int, partitions: int) -> DataFrame:
    now = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    stamp = (now - timedelta(minutes=1)).replace(tzinfo=None)
    rows = [
        (f"user-{i % 1000}".encode(), value, "bench-views", part, i, stamp)
        for i, (part, value, _, _) in enumerate(topic_records(count, now))
    ]
    records = spark.createDataFrame(rows, RECORD_SCHEMA).repartition(partitions).cache()
    records.count()
    return records


def jvm_cpu_seconds() -> float:
    """CPU time (user + system) of the Spark JVM so far: every thread, tasks, JIT and GC."""
    gateway = SparkContext._gateway
    pid = gateway.proc.pid  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(run: Callable[[], None], records: int) -> dict[str, float]:
    cpu, wall = jvm_cpu_seconds(), time.perf_counter()
    run()
    wall, cpu = time.perf_counter() - wall, jvm_cpu_seconds() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "wall_us": wall / records * 1e6, "cpu_us": cpu / records * 1e6}


def agreement(sql: DataFrame, jvm: DataFrame) -> dict[str, Any]:
    """Records whose reason, detail or event differ between the decoders, and the reasons counted."""

    def keyed(decoded: DataFrame, side: str) -> DataFrame:
        return decoded.select(
            "offset",
            F.col("event").cast("string").alias(f"{side}_event"),
            F.col("dead_letter_reason").alias(f"{side}_reason"),
            F.col("dead_letter_detail").alias(f"{side}_detail"),
        )

    joined = keyed(sql, "sql").join(keyed(jvm, "jvm"), "offset", "full_outer")
    differ = joined.where(
        ~F.col("sql_event").eqNullSafe(F.col("jvm_event"))
        | ~F.col("sql_reason").eqNullSafe(F.col("jvm_reason"))
        | ~F.col("sql_detail").eqNullSafe(F.col("jvm_detail"))
    ).count()
    reasons = {str(row[0]): row[1] for row in sql.groupBy("dead_letter_reason").count().collect()}
    return {"records_differing": differ, "sql_reasons": reasons}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the decode micro-benchmark: scan, SQL decoder, JVM decoder")
    parser.add_argument("--records", type=int, default=400_000, help="records held in memory")
    parser.add_argument("--partitions", type=int, default=2, help="local[N] threads and partitions")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured rounds first")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (each pass once per round)")
    parser.add_argument("--label", default="", help="appended to the raw results' file name")
    parser.add_argument("--results-dir", type=Path, default=REPO_ROOT / "benchmarks", help="raw results JSON")
    args = parser.parse_args(argv)

    limits = EventLimits()
    started = datetime.now(UTC)
    load_start = machine()
    spark = session(args.partitions)
    try:
        records = in_memory_records(spark, args.records, args.partitions)
        decoded = {
            "scan": records,
            "sql": decode_events_sql(records, PAGE_VIEW, limits),
            "jvm": decode_events_jvm(records, PAGE_VIEW, limits),
        }
        check = agreement(decoded["sql"], decoded["jvm"])
        print(f"agreement: {check}", flush=True)
        if check["records_differing"]:
            print("error: the decoders disagree; no timing", file=sys.stderr)
            return 1
        rounds: list[dict[str, Any]] = []
        for number in range(args.warmup + args.rounds):
            for name in PASSES:
                sink = decoded[name].write.format("noop").mode("overwrite")
                result: dict[str, Any] = dict(timed(sink.save, args.records))
                result |= {"round": number, "pass": name, "warmup": number < args.warmup}
                rounds.append(result)
                print(
                    f"round {number}{' (warm-up)' if number < args.warmup else ''} {name:4}: "
                    f"{result['wall_us']:.2f} us/record wall, {result['cpu_us']:.2f} us/record JVM CPU",
                    flush=True,
                )
    finally:
        gateway = SparkContext._gateway
        spark.stop()
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)

    summary: dict[str, Any] = {}
    for name in PASSES:
        measured = [r for r in rounds if r["pass"] == name and not r["warmup"]]
        summary[name] = {
            "median_wall_us": median(r["wall_us"] for r in measured),
            "median_cpu_us": median(r["cpu_us"] for r in measured),
            "best_cpu_us": min(r["cpu_us"] for r in measured),
        }
    for name in ("sql", "jvm"):
        summary[name]["median_cpu_us_minus_scan"] = (
            summary[name]["median_cpu_us"] - summary["scan"]["median_cpu_us"]
        )
    summary["jvm_vs_sql_cpu"] = summary["jvm"]["median_cpu_us"] / summary["sql"]["median_cpu_us"]
    summary["goal_us"] = 2.0
    print(json.dumps(summary, indent=2))

    report = {
        "benchmark": "decode",
        "started": started.isoformat(),
        "machine_at_start": load_start,
        "machine_at_end": machine(),
        "versions": {"pyspark": version("pyspark"), "java": os.environ.get("JAVA_HOME", "PATH java")},
        "settings": vars(args) | {"results_dir": str(args.results_dir), "schema": PAGE_VIEW.name},
        "limits": {
            "max_event_bytes": limits.max_event_bytes,
            "max_event_future_seconds": limits.max_event_future_seconds,
            "max_event_age_seconds": limits.max_event_age_seconds,
        },
        "agreement": check,
        "summary": summary,
        "rounds": rounds,
    }
    date = started.strftime("%Y-%m-%d")
    path = args.results_dir / f"decode-{date}{f'-{args.label}' if args.label else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"raw results: {path}")
    return 0
