"""The benchmark's command line: each size in turn, then the JSON and the markdown table (see the package)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient

from scripts.bench_exporter.cluster import brokers_for, os_limits, start_cluster, stop_cluster
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
    cpu_table,
    goals,
    markdown,
    measure_full_history,
    measure_kafka_exporter,
    measure_ours,
    measure_restart,
    peer_binary,
    peer_latency,
)
from scripts.bench_exporter.scrape import log
from streamstack import runtimes as runtime_cache
from streamstack.paths import REPO_ROOT, default_workdir


def run(args: argparse.Namespace) -> dict[str, Any]:
    binary = peer_binary(args.kafka_exporter)
    runtimes = runtime_cache.ensure(log=log)
    limits = os_limits()
    brokers = brokers_for(max(size.partitions for size in args.sizes), **limits)
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as scratch:
        workdir = Path(scratch)
        log(f"starting {brokers} broker(s) ({limits})")
        nodes = start_cluster(runtimes, workdir, brokers, args.kafka_heap)
        try:
            bootstrap = nodes[0].bootstrap_servers  # clients find the other brokers through it
            broker_pids = [node.pid for node in nodes]
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
            try:
                topics = 0
                for partitions in sorted({size.partitions for size in args.sizes}):
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
                    for size in [size for size in args.sizes if size.partitions == partitions]:
                        groups = size.groups
                        commit_groups(admin, size, ends)
                        log(f"{partitions:,} partitions x {groups} groups: {size.series():,} series")
                        ours, our_body = measure_ours(size, bootstrap, broker_pids, workdir, args)
                        log(
                            f"  ours: cold {ours['first_collection_s']:.2f} s, warm "
                            f"{ours['warm_collection_median_s']:.2f} s, scrape p99 {ours['p99_ms']:.1f} ms, "
                            f"peak RSS {ours['peak_rss_mb']:.0f} MB; scrapes by latency: "
                            f"{ours['scrape_breakdown']}"
                        )
                        theirs, their_body = measure_kafka_exporter(size, bootstrap, binary, workdir, args)
                        log(
                            f"  kafka_exporter: {peer_latency(theirs)}, "
                            f"peak RSS {theirs['peak_rss_mb']:.0f} MB"
                        )
                        agree = agreement(our_body, their_body)
                        log(f"  lag equal on {agree['equal']:,} of {agree['compared']:,} series")
                        ours["restart"] = measure_restart(size, bootstrap, broker_pids, workdir, args)
                        log(f"  restarted: first collection {ours['restart']['first_collection_s']:.2f} s")
                        this_point = {"partitions": partitions, "groups": groups, "ours": ours}
                        log("  " + "\n  ".join(cpu_table([this_point])))
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
            stop_cluster(nodes)
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(runtimes),
        "brokers": {"count": brokers, "heap_each": args.kafka_heap, **limits},
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


def parse_sizes(text: str) -> list[Size]:
    """`10000x100,50000x500` -> those sizes."""
    sizes = []
    for item in text.split(","):
        partitions, _, groups = item.strip().lower().partition("x")
        sizes.append(Size(int(partitions.replace("_", "")), int(groups.replace("_", ""))))
    return sizes


DEFAULT_SIZES = [
    *(Size(p, g) for p in (100, 1_000, 10_000) for g in (1, 10, 100)),
    Size(GOAL_PARTITIONS, GOAL_GROUPS),
]


def sizes_of(args: argparse.Namespace) -> list[Size]:
    """--sizes, else the cross product of --partitions and --groups, else DEFAULT_SIZES; sorted by
    partitions (topics are only ever added), each size once."""
    if args.sizes:
        chosen = args.sizes
    elif args.partitions or args.groups:
        chosen = [
            Size(p, g) for p in args.partitions or [100, 1_000, 10_000] for g in args.groups or [1, 10, 100]
        ]
    else:
        chosen = DEFAULT_SIZES
    return sorted(dict.fromkeys(chosen), key=lambda size: (size.partitions, size.groups))


def raw_path(sizes: list[Size], date: str, label: str = "") -> Path:
    """benchmarks/exporter-<date>[-<sizes>][-<label>].json: the sizes named when they are not the default
    ones, the label (what changed, say) when given, so that runs of one day do not overwrite each other."""
    named = (
        "" if sizes == DEFAULT_SIZES else "-" + "-".join(f"{size.partitions}x{size.groups}" for size in sizes)
    )
    return REPO_ROOT / "benchmarks" / f"exporter-{date}{named}{f'-{label}' if label else ''}.json"


def machine() -> dict[str, Any]:
    memory = (
        next(
            (
                int(line.split()[1]) // 1024
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")
            ),
            None,
        )
        if Path("/proc/meminfo").exists()
        else None
    )
    return {
        "cpus": os.cpu_count(),
        **_cpu_model(),
        "memory_mb": memory,
        "load_average": os.getloadavg(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def _cpu_model() -> dict[str, Any]:
    """The first CPU's model name and clock from /proc/cpuinfo, so that runs on different machines of the
    same size can be told apart."""
    info: dict[str, Any] = {}
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "model name" and "cpu_model" not in info:
            info["cpu_model"] = value
        elif key == "cpu MHz" and "cpu_mhz" not in info:
            info["cpu_mhz"] = float(value)
    return info


def versions(runtimes: Any) -> dict[str, str]:
    found = {"java": str(runtimes.java)}
    for jar in runtimes.kafka_classpath:
        if jar.stem.startswith("kafka-server-") and jar.stem.removeprefix("kafka-server-")[:1].isdigit():
            found["kafka"] = jar.stem.removeprefix("kafka-server-")
    for package in ("kafka-python", "confluent-kafka", "prometheus-client"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[package] = metadata.version(package)
    found["kafka_exporter"] = "v1.9.0"
    return found


def command_line() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench-exporter", description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=_numbers, help="with --groups: every combination")
    parser.add_argument("--groups", type=_numbers)
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        help="partitions x groups, e.g. 10000x100,50000x500 (default: 100, 1,000, 10,000 x 1, 10, 100, "
        f"and {GOAL_PARTITIONS}x{GOAL_GROUPS})",
    )
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
    parser.add_argument(
        "--peer-timeout",
        type=float,
        default=300.0,
        help="seconds a kafka_exporter scrape may take before it counts as no answer",
    )
    parser.add_argument("--kafka-heap", default="2g", help="heap of each broker")
    parser.add_argument(
        "--kafka-exporter",
        type=Path,
        default=os.environ.get("KAFKA_EXPORTER") or None,
        help="the danielqsj/kafka_exporter v1.9.0 binary (default: $KAFKA_EXPORTER)",
    )
    parser.add_argument(
        "--out", type=Path, default=default_workdir() / "bench", help="exporter.json and exporter.md go here"
    )
    parser.add_argument(
        "--raw",
        type=Path,
        default=None,
        help="the raw results, compact, for committing "
        "(default benchmarks/exporter-<date>[-sizes][-label].json)",
    )
    parser.add_argument("--label", default="", help="appended to the raw results' default file name")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    args.sizes = sizes_of(args)
    if any(size.partitions % PARTITIONS_PER_TOPIC or size.groups < 1 for size in args.sizes):
        parser.error(f"partitions: multiples of {PARTITIONS_PER_TOPIC}; groups: at least 1")
    started = time.monotonic()
    result = run(args)
    result["wall_time_s"] = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "exporter.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "exporter.md").write_text(markdown(result))
    raw = args.raw or raw_path(args.sizes, datetime.now(UTC).strftime("%Y-%m-%d"), args.label)
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    log(f"raw results: {raw}")
    print(markdown(result))
    return 0
