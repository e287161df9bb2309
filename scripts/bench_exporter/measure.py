"""One size measured: our exporter (cold and warm collections, scrapes, memory), kafka_exporter beside it, and
whether their lag agrees.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.bench_exporter.load import Size
from scripts.bench_exporter.scrape import (
    Scrape,
    ThreadCpu,
    child,
    cpu_seconds,
    cpu_ticks,
    health,
    latency_summary,
    memory_mb,
    samples,
    scrape,
    scrape_breakdown,
    ticks_between,
    wait_until,
)
from streamstack.local.ports import LOOPBACK, free_port

GOAL_PARTITIONS, GOAL_GROUPS = 50_000, 500
GOAL_CYCLE_S, GOAL_SCRAPE_P99_MS, GOAL_RSS_MB = 5.0, 50.0, 250.0
KAFKA_EXPORTER_VERSION = "3.9.0"  # the protocol level sarama speaks; Kafka 4 dropped the default 2.0.0's


def our_command(size: Size, bootstrap: str, port: int, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "monitoring.lag_exporter",
        "--bootstrap-servers",
        bootstrap,
        "--listen",
        f"{LOOPBACK}:{port}",
        "--group-allow",
        size.group_filter,
        "--log-level",
        "WARNING",
        *flags,
    ]


@dataclass(frozen=True)
class FirstCollection:
    health: dict[str, float]
    wall_s: float  # from the exporter's start to its first snapshot
    cpu: dict[str, float]  # CPU seconds over that span: the exporter's (its start-up included), the brokers'


def idle_cpu_rate(brokers: Sequence[int], seconds: float = 5.0) -> float:
    """CPU seconds per second the brokers use with no client of ours (at 50,000 partitions, 0.21-0.23)."""
    before = cpu_seconds(brokers)
    time.sleep(seconds)
    return (cpu_seconds(brokers) - before) / seconds


def _cpu_over(exporter: float, brokers: float, idle_rate: float, seconds: float) -> dict[str, float]:
    return {
        "exporter_s": exporter,
        "brokers_s": brokers,
        "brokers_above_idle_s": brokers - idle_rate * seconds,
    }


def first_collection(
    process: subprocess.Popen[bytes], brokers: Sequence[int], idle_rate: float, port: int
) -> FirstCollection:
    """Our exporter's health once its first collection has succeeded (`process` just started), the seconds
    until then, and the CPU it and the brokers used meanwhile: on this machine they share the cores. The
    brokers' CPU is also split by kind of thread: right after the load most of their extra CPU went to the
    JIT compiling the code that serves these requests for the first time."""
    started, brokers_cpu = time.monotonic(), ThreadCpu(brokers)

    def first_snapshot() -> bool:
        brokers_cpu.sample()
        return health(port).get("last_success_timestamp_seconds", 0) > 0

    wait_until(first_snapshot, 600, "first collection")
    wall = time.monotonic() - started
    by_kind = brokers_cpu.by_kind()
    cpu = _cpu_over(cpu_seconds([process.pid]), sum(by_kind.values()), idle_rate, wall)
    cpu.update({f"brokers_{kind}_s": seconds for kind, seconds in by_kind.items()})
    return FirstCollection(health(port), wall, cpu)


def measure_ours(
    size: Size, bootstrap: str, brokers: Sequence[int], workdir: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], str]:
    port = free_port()
    command = our_command(size, bootstrap, port, "--refresh-interval", str(args.refresh_interval))
    log_path = workdir / f"ours-p{size.partitions}-g{size.groups}.log"
    idle_rate = idle_cpu_rate(brokers)
    with child(command, log_path) as process:
        started = first_collection(process, brokers, idle_rate, port)
        first = started.health
        cycles: list[float] = []
        last = first["last_success_timestamp_seconds"]
        cpu_before = cpu_seconds([process.pid]), cpu_seconds(brokers), time.monotonic()
        for _ in range(args.cycles):

            def next_cycle() -> bool:
                nonlocal last
                now = health(port)
                if now["last_success_timestamp_seconds"] > last:
                    last = now["last_success_timestamp_seconds"]
                    cycles.append(now["collection_duration_seconds"])
                    return True
                return False

            wait_until(next_cycle, 10 * args.refresh_interval + 600, "the next collection")
        intervals = max(1, len(cycles))
        cpu_per_cycle = {
            name: value / intervals
            for name, value in _cpu_over(
                cpu_seconds([process.pid]) - cpu_before[0],
                cpu_seconds(brokers) - cpu_before[1],
                idle_rate,
                time.monotonic() - cpu_before[2],
            ).items()
        }
        scrapes: list[Scrape] = []
        ticks: list[tuple[int, int]] = []
        for _ in range(args.scrapes):
            before = cpu_ticks()
            scrapes.append(scrape(port))
            ticks.append(ticks_between(before, cpu_ticks()))
            time.sleep(args.scrape_gap)
        timings = [answer.seconds for answer in scrapes]
        first_bytes = [round(1000 * answer.first_byte_seconds, 2) for answer in scrapes]
        run_queue = [round(1000 * answer.run_queue_seconds, 2) for answer in scrapes]
        wire = scrapes[-1].wire_bytes
        del scrapes
        body = scrape(port, like_prometheus=False).body
        memory = memory_mb(process.pid)
        if process.poll() is not None:
            raise RuntimeError(f"our exporter exited; see {log_path}")
    measured = {
        "first_collection_s": first["collection_duration_seconds"],
        "start_to_first_snapshot_s": started.wall_s,
        "start_to_first_snapshot_cpu_s": started.cpu,
        "brokers_idle_cpu_per_s": idle_rate,
        "warm_collections_s": cycles,
        # per refresh interval, the waits between collections included
        "warm_cpu_per_collection_s": cpu_per_cycle,
        "warm_collection_median_s": statistics.median(cycles) if cycles else None,
        **latency_summary(timings),
        "scrape_ms": [round(1000 * seconds, 2) for seconds in timings],
        "scrape_first_byte_ms": first_bytes,
        "scrape_client_run_queue_ms": run_queue,
        "scrape_cpu_ticks": ticks,  # (busy, all) jiffies of the machine's CPUs over each scrape
        "scrape_breakdown": scrape_breakdown(timings, run_queue, ticks, GOAL_SCRAPE_P99_MS),
        "gzip_bytes": wire,
        "text_bytes": len(body.encode()),
        **memory,
    }
    return measured, body


def measure_restart(
    size: Size, bootstrap: str, brokers: Sequence[int], workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Our exporter's first collection once more, from a new process, after both exporters have read the
    cluster: an exporter restarted beside brokers that already serve fetches (the first measurement's brokers
    had just been loaded and had never served a fetch or a ListOffsets for these partitions)."""
    port = free_port()
    command = our_command(size, bootstrap, port, "--refresh-interval", str(args.refresh_interval))
    idle_rate = idle_cpu_rate(brokers)
    with child(command, workdir / f"ours-restart-p{size.partitions}-g{size.groups}.log") as process:
        started = first_collection(process, brokers, idle_rate, port)
        memory = memory_mb(process.pid)
    return {
        "first_collection_s": started.health["collection_duration_seconds"],
        "start_to_first_snapshot_s": started.wall_s,
        "start_to_first_snapshot_cpu_s": started.cpu,
        "peak_rss_mb": memory["peak_rss_mb"],
    }


def measure_full_history(size: Size, bootstrap: str, workdir: Path, collections: int) -> dict[str, Any]:
    """Memory once every partition keeps `collections` samples of history (the default --window 300 with
    --refresh-interval 10 keeps 31): collections back to back (--refresh-interval 1), a window long enough
    to keep them all, RSS after the last one."""
    port = free_port()
    command = our_command(size, bootstrap, port, "--refresh-interval", "1", "--window", "600")
    log_path = workdir / f"ours-history-p{size.partitions}-g{size.groups}.log"
    started = time.monotonic()
    with child(command, log_path) as process:
        seen: list[float] = []

        def collected() -> bool:
            last = health(port).get("last_success_timestamp_seconds", 0)
            if last > 0 and (not seen or last > seen[-1]):
                seen.append(last)
            return len(seen) >= collections

        wait_until(collected, 60 * collections + 600, f"{collections} collections")
        memory = memory_mb(process.pid)
    return {"collections": collections, "seconds": time.monotonic() - started, **memory}


def measure_kafka_exporter(
    size: Size, bootstrap: str, binary: Path, workdir: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], str]:
    port = free_port()
    command = [
        str(binary),
        f"--kafka.server={bootstrap}",
        f"--web.listen-address={LOOPBACK}:{port}",
        f"--kafka.version={KAFKA_EXPORTER_VERSION}",
        f"--group.filter=^{size.group_filter}$",
    ]
    log_path = workdir / f"kafka_exporter-p{size.partitions}-g{size.groups}.log"
    with child(command, log_path) as process:
        wait_until(
            lambda: scrape(port, "/", timeout=5, like_prometheus=False) is not None, 60, "kafka_exporter"
        )
        timings: list[float] = []
        last: Scrape | None = None
        budget_end = time.monotonic() + args.peer_budget
        started = time.monotonic()
        while len(timings) < args.scrapes and (len(timings) < 2 or time.monotonic() < budget_end):
            try:
                result = scrape(port, timeout=args.peer_timeout)
            except TimeoutError:  # it reads Kafka inside the scrape: at some size it does not answer
                memory = memory_mb(process.pid)
                return {
                    "answered": bool(timings),
                    "unanswered_after_s": time.monotonic() - started,
                    "scrape_timeout_s": args.peer_timeout,
                    "scrapes": len(timings),
                    **(latency_summary(timings) if timings else {}),
                    **memory,
                }, ("" if last is None else last.body)
            timings.append(result.seconds)
            last = result
            started = time.monotonic()
            time.sleep(args.scrape_gap)
        memory = memory_mb(process.pid)
        if process.poll() is not None:
            raise RuntimeError(f"kafka_exporter exited; see {log_path}")
    body = "" if last is None else last.body
    wire = 0 if last is None else last.wire_bytes
    return {
        "answered": True,
        **latency_summary(timings),
        "scrape_ms": [round(1000 * seconds, 1) for seconds in timings],
        "gzip_bytes": wire,
        "text_bytes": len(body.encode()),
        **memory,
    }, body


def agreement(ours: str, theirs: str) -> dict[str, Any]:
    """Lag per (group, topic, partition) where both report it (kafka_exporter's -1: no commit)."""
    our_lag = {
        (labels["group"], labels["topic"], labels["partition"]): value
        for labels, value in samples(ours, "streamstack_lag_records")
        if labels.get("source") == "group"
    }
    their_lag = {
        (labels["consumergroup"], labels["topic"], labels["partition"]): value
        for labels, value in samples(theirs, "kafka_consumergroup_lag")
        if value >= 0
    }
    both = our_lag.keys() & their_lag.keys()
    differ = sorted(key for key in both if our_lag[key] != their_lag[key])
    return {
        "ours": len(our_lag),
        "kafka_exporter": len(their_lag),
        "compared": len(both),
        "equal": len(both) - len(differ),
        "different": len(differ),
        "examples_different": [
            {"series": "/".join(key), "ours": our_lag[key], "kafka_exporter": their_lag[key]}
            for key in differ[:5]
        ],
        "only_ours": len(our_lag.keys() - their_lag.keys()),
        "only_kafka_exporter": len(their_lag.keys() - our_lag.keys()),
    }


def goals(points: list[dict[str, Any]]) -> dict[str, Any]:
    top = next((p for p in points if (p["partitions"], p["groups"]) == (GOAL_PARTITIONS, GOAL_GROUPS)), None)
    if top is None:
        return {"evaluated": False, "reason": f"no {GOAL_PARTITIONS:,} x {GOAL_GROUPS} point in this run"}
    ours = top["ours"]
    cycle = max(ours["first_collection_s"], max(ours["warm_collections_s"], default=0.0))
    peak = max(ours["peak_rss_mb"], ours.get("full_history", {}).get("peak_rss_mb", 0.0))
    return {
        "evaluated": True,
        "collection_cycle_s": cycle,
        "collection_cycle_met": cycle <= GOAL_CYCLE_S,
        # informative: the first collection of an exporter restarted beside brokers already serving fetches
        "restarted_first_collection_s": ours.get("restart", {}).get("first_collection_s"),
        "scrape_p99_ms": ours["p99_ms"],
        "scrape_p99_met": ours["p99_ms"] <= GOAL_SCRAPE_P99_MS,
        "peak_rss_mb": peak,
        "rss_met": peak <= GOAL_RSS_MB,
        # None: kafka_exporter gave no lag to compare with
        "lag_agrees": top["agreement"]["different"] == 0 if top["agreement"]["compared"] else None,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| partitions x groups | group-partition series | our collection cold / restarted / warm "
        "| our scrape p50 / p99 "
        "| kafka_exporter scrape p50 / p99 (n) | our RSS / peak | kafka_exporter RSS / peak "
        "| lag equal / compared |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for point in result["points"]:
        ours, theirs, agree = point["ours"], point["kafka_exporter"], point["agreement"]
        warm = ours["warm_collection_median_s"]
        restarted = ours.get("restart", {}).get("first_collection_s")
        restart = "-" if restarted is None else f"{restarted:.2f} s"
        lines.append(
            f"| {point['partitions']:,} x {point['groups']} | {point['series']:,} "
            f"| {ours['first_collection_s']:.2f} s / {restart} / {warm:.2f} s "
            f"| {ours['p50_ms']:.1f} / {ours['p99_ms']:.1f} ms "
            f"| {peer_latency(theirs)} "
            f"| {ours['rss_mb']:.0f} / {ours['peak_rss_mb']:.0f} MB "
            f"| {theirs['rss_mb']:.0f} / {theirs['peak_rss_mb']:.0f} MB "
            f"| {agree['equal']:,} / {agree['compared']:,} |"
        )
    lines += ["", *cpu_table(result["points"])]
    verdict = result["goals"]
    if verdict["evaluated"]:

        def mark(met: bool) -> str:
            return "met" if met else "MISSED"

        lines += [
            "",
            f"Goals at {GOAL_PARTITIONS:,} partitions x {GOAL_GROUPS} groups: collection cycle "
            f"{verdict['collection_cycle_s']:.2f} s (<= {GOAL_CYCLE_S:.0f} s, "
            f"{mark(verdict['collection_cycle_met'])}), scrape p99 {verdict['scrape_p99_ms']:.1f} ms "
            f"(<= {GOAL_SCRAPE_P99_MS:.0f} ms, {mark(verdict['scrape_p99_met'])}), peak RSS "
            f"{verdict['peak_rss_mb']:.0f} MB (<= {GOAL_RSS_MB:.0f} MB, {mark(verdict['rss_met'])}), "
            "lag values "
            + {True: "equal", False: "NOT all equal", None: "not compared"}[verdict["lag_agrees"]]
            + " where both report them.",
        ]
    return "\n".join(lines) + "\n"


def cpu_table(points: list[dict[str, Any]]) -> list[str]:
    """Where the time of our collections went on this machine, whose cores the brokers share: wall time,
    the exporter's CPU (its start-up included) and the brokers' CPU above what they use idle (and how much of
    the brokers' CPU their JIT compiler threads took), from the start to the first snapshot and per warm
    refresh interval."""
    lines = [
        "| partitions x groups | start to first snapshot: wall / exporter CPU / brokers' CPU above idle "
        "(brokers' JIT) | the same, restarted | per warm refresh interval: exporter CPU / brokers' CPU above "
        "idle |",
        "|---|---|---|---|",
    ]

    def span(measured: dict[str, Any]) -> str:
        cpu = measured.get("start_to_first_snapshot_cpu_s")
        if cpu is None:
            return "-"
        wall = measured["start_to_first_snapshot_s"]
        jit = f" ({cpu['brokers_jit_s']:.2f} s JIT)" if "brokers_jit_s" in cpu else ""
        return f"{wall:.2f} / {cpu['exporter_s']:.2f} / {cpu['brokers_above_idle_s']:.2f} s{jit}"

    for point in points:
        ours = point["ours"]
        warm = ours.get("warm_cpu_per_collection_s")
        per_interval = (
            "-" if warm is None else f"{warm['exporter_s']:.2f} / {warm['brokers_above_idle_s']:.2f} s"
        )
        lines.append(
            f"| {point['partitions']:,} x {point['groups']} | {span(ours)} | {span(ours.get('restart', {}))} "
            f"| {per_interval} |"
        )
    return lines


def peer_latency(theirs: dict[str, Any]) -> str:
    if theirs.get("p50_ms") is None:
        return f"no answer in {theirs['scrape_timeout_s']:,.0f} s"
    late = "" if theirs.get("answered", True) and "unanswered_after_s" not in theirs else ", then none"
    return f"{theirs['p50_ms']:,.0f} / {theirs['p99_ms']:,.0f} ms ({theirs['scrapes']}{late})"


def peer_binary(path: Path | None) -> Path:
    """The kafka_exporter binary to compare with; fails with how to get one (an empty KAFKA_EXPORTER is the
    current folder, which is executable too)."""
    if path is None or not path.is_file() or not os.access(path, os.X_OK):
        raise SystemExit(
            f"error: --kafka-exporter {path}: not an executable. Build danielqsj/kafka_exporter v1.9.0 "
            "from a checkout of its repository (`go build -o kafka_exporter .`; the Go module proxy "
            "refuses the module) and pass the binary: "
            "`make bench-exporter KAFKA_EXPORTER=/path/to/kafka_exporter`."
        )
    return path
