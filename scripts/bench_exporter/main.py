"""The benchmark's command line: each size in turn, then the JSON and the markdown table (see the package)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient

from scripts.bench_exporter.load import (
    PARTITIONS_PER_TOPIC,
    READERS_PER_TOPIC,
    Size,
    commit_groups,
    create_topics,
    end_offsets,
    fill_topics,
)
from scripts.bench_exporter.measure import (
    GOAL_GROUPS,
    GOAL_PARTITIONS,
    KAFKA_EXPORTER_VERSION,
    agreement,
    goals,
    markdown,
    measure_full_history,
    measure_kafka_exporter,
    measure_ours,
    peer_binary,
)
from scripts.bench_exporter.scrape import log
from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka
from streamstack.paths import default_workdir


def run(args: argparse.Namespace) -> dict[str, Any]:
    binary = peer_binary(args.kafka_exporter)
    runtimes = runtime_cache.ensure(log=log)
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as scratch:
        workdir = Path(scratch)
        kafka = LocalKafka(runtimes, workdir / "kafka", heap=args.kafka_heap).start()
        try:
            bootstrap = kafka.bootstrap_servers
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
            try:
                topics = 0
                for partitions in args.partitions:
                    wanted = partitions // PARTITIONS_PER_TOPIC
                    if wanted > topics:
                        started = time.monotonic()
                        create_topics(admin, topics, wanted - topics)
                        created = time.monotonic() - started
                        sent = fill_topics(bootstrap, topics, wanted - topics)
                        log(
                            f"{wanted - topics} topics created in {created:.0f} s, {sent:,} records in "
                            f"{time.monotonic() - started - created:.0f} s"
                        )
                        topics = wanted
                    ends = end_offsets(admin, topics)
                    for groups in args.groups:
                        size = Size(partitions, groups)
                        commit_groups(admin, size, ends)
                        log(f"{partitions:,} partitions x {groups} groups: {size.series():,} series")
                        ours, our_body = measure_ours(size, bootstrap, workdir, args)
                        log(
                            f"  ours: cold {ours['first_collection_s']:.2f} s, warm "
                            f"{ours['warm_collection_median_s']:.2f} s, scrape p99 {ours['p99_ms']:.1f} ms, "
                            f"peak RSS {ours['peak_rss_mb']:.0f} MB"
                        )
                        theirs, their_body = measure_kafka_exporter(size, bootstrap, binary, workdir, args)
                        log(
                            f"  kafka_exporter: scrape p50 {theirs['p50_ms']:.0f} ms over "
                            f"{theirs['scrapes']}, peak RSS {theirs['peak_rss_mb']:.0f} MB"
                        )
                        agree = agreement(our_body, their_body)
                        log(f"  lag equal on {agree['equal']:,} of {agree['compared']:,} series")
                        if size == Size(GOAL_PARTITIONS, GOAL_GROUPS) and args.history_collections:
                            ours["full_history"] = measure_full_history(
                                size, bootstrap, workdir, args.history_collections
                            )
                            log(f"  ours with full history: {ours['full_history']}")
                        points.append(
                            {
                                "partitions": partitions,
                                "groups": groups,
                                "topics": topics,
                                "series": size.series(),
                                "ours": ours,
                                "kafka_exporter": theirs,
                                "agreement": agree,
                            }
                        )
            finally:
                admin.close()
        finally:
            kafka.stop()
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count()},
        "layout": {
            "partitions_per_topic": PARTITIONS_PER_TOPIC,
            "readers_per_topic": READERS_PER_TOPIC,
            "refresh_interval_s": args.refresh_interval,
            "scrapes": args.scrapes,
            "scrape_gap_s": args.scrape_gap,
            "kafka_exporter_scrape_budget_s": args.peer_budget,
            "kafka_exporter": "danielqsj/kafka_exporter v1.9.0, --kafka.version=" + KAFKA_EXPORTER_VERSION,
        },
        "points": points,
        "goals": goals(points),
    }


def _numbers(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-exporter", description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=_numbers, default=[100, 1_000, 10_000])
    parser.add_argument("--groups", type=_numbers, default=[1, 10, 100])
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument(
        "--scrape-gap", type=float, default=0.25, help="seconds between two scrapes (50 span a collection)"
    )
    parser.add_argument("--cycles", type=int, default=2, help="warm collections to wait for")
    parser.add_argument("--refresh-interval", type=float, default=10.0, help="our exporter's (its default)")
    parser.add_argument(
        "--peer-budget", type=float, default=30.0, help="seconds of kafka_exporter scrapes per size (>= 2)"
    )
    parser.add_argument(
        "--history-collections",
        type=int,
        default=32,
        help=f"at {GOAL_PARTITIONS:,} x {GOAL_GROUPS}: RSS after this many collections (0: skip)",
    )
    parser.add_argument("--kafka-heap", default="2g")
    parser.add_argument(
        "--kafka-exporter",
        type=Path,
        default=os.environ.get("KAFKA_EXPORTER") or None,
        help="the danielqsj/kafka_exporter v1.9.0 binary (default: $KAFKA_EXPORTER)",
    )
    parser.add_argument("--out", type=Path, default=default_workdir() / "bench")
    args = parser.parse_args(argv)
    if any(p % PARTITIONS_PER_TOPIC for p in args.partitions) or args.partitions != sorted(args.partitions):
        parser.error(f"--partitions: ascending multiples of {PARTITIONS_PER_TOPIC}")
    started = time.monotonic()
    result = run(args)
    result["wall_time_s"] = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "exporter.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "exporter.md").write_text(markdown(result))
    print(markdown(result))
    return 0
