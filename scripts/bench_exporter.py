"""Benchmark of the lag exporter beside danielqsj/kafka_exporter v1.9.0 on real local Kafka (issue 4).

For each size (partitions x consumer groups, by default {100, 1,000, 10,000} x {1, 10, 100}), on one local
KRaft broker:
  1. our exporter (`python -m monitoring.lag_exporter`, a child process on a free port): the duration of its
     first collection (cold: every record timestamp is read) and of the next ones (warm), from its own
     `streamstack_lag_exporter_collection_duration_seconds`; scrape latency over N scrapes; RSS and peak RSS;
  2. then, with ours stopped, kafka_exporter (a child process on a free port of 127.0.0.1): scrape latency
     (it reads Kafka inside each scrape; scrapes are capped by a time budget per size), RSS and peak RSS;
  3. lag agreement: `kafka_consumergroup_lag{consumergroup,topic,partition}` against our
     `streamstack_lag_records{group,topic,partition}`, at rest (nothing produces or commits meanwhile).
A scrape is what Prometheus 2.42 sends (its Accept header, `Accept-Encoding: gzip`) on a new connection,
timed from the request to the last byte of the body.

Layout: topics of 10 partitions (P/10 topics). Every topic is read by 3 consumer groups (1 when there is a
single group); a group reads a contiguous share of the topics, at least one: group g of G reads topics
[g*T/G, g*T/G + max(1, ceil(3T/G))) mod T. A size's groups are its own (`bench-p<P>-g<G>-<i>`), each exporter
is told to read only them (`--group-allow` / `--group.filter`), so the sizes do not disturb each other.
Records: 5 to 40 per partition (~100 bytes, create-time timestamps seconds to minutes old); committed offsets:
a quarter of the partitions caught up, the rest 0 to 7/8 of the way, so lag is non-zero and varied.

kafka_exporter is not built here: the Go module proxy refuses `github.com/danielqsj/kafka_exporter` (HTTP 403
"This module version is not available") although it serves its dependencies. Build it from a checkout of its
repository at tag v1.9.0 (`go build -o /somewhere/kafka_exporter .`) and pass the binary:

    make bench-exporter KAFKA_EXPORTER=/somewhere/kafka_exporter
    .venv/bin/python -m scripts.bench_exporter --kafka-exporter /somewhere/kafka_exporter \
        --partitions 100,1000 --groups 1,10    # a quick run
Writes JSON and a markdown table to --out (default .streamstack/bench/).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError
from kafka.protocol.consumer import OffsetSpec
from kafka.structs import OffsetAndMetadata

from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka
from streamstack.local.ports import LOOPBACK, free_port
from streamstack.paths import REPO_ROOT, default_workdir

PARTITIONS_PER_TOPIC = 10
READERS_PER_TOPIC = 3
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
GOAL_PARTITIONS, GOAL_GROUPS = 10_000, 100
GOAL_CYCLE_S, GOAL_SCRAPE_P99_MS, GOAL_RSS_MB = 5.0, 50.0, 150.0
KAFKA_EXPORTER_VERSION = "3.9.0"  # the protocol level sarama speaks; Kafka 4 dropped the default 2.0.0's
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)", re.MULTILINE)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def log(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# -- layout ------------------------------------------------------------------------------------------------


def topic_name(index: int) -> str:
    return f"bench-t{index:04d}"


def group_topics(partitions: int, groups: int, group: int) -> list[int]:
    """Indexes of the topics group `group` of `groups` reads (see the module docstring)."""
    topics = partitions // PARTITIONS_PER_TOPIC
    share = min(topics, max(1, math.ceil(READERS_PER_TOPIC * topics / groups)))
    first = group * topics // groups
    return [(first + i) % topics for i in range(share)]


def group_id(partitions: int, groups: int, group: int) -> str:
    return f"bench-p{partitions}-g{groups}-{group:03d}"


def records_in(topic: int, partition: int) -> int:
    return 5 + (topic * 31 + partition * 17) % 36


def committed_offset(group: int, topic: int, partition: int, end: int) -> int:
    """A quarter of the partitions caught up; the others 0/8 to 7/8 of the way to the end."""
    step = (group * 7 + topic * 13 + partition * 3) % 12
    return end if step < 3 else end * (step - 3) // 8


@dataclass(frozen=True)
class Size:
    partitions: int
    groups: int

    @property
    def group_filter(self) -> str:
        return f"bench-p{self.partitions}-g{self.groups}-.*"

    def assignment(self) -> dict[str, list[int]]:
        return {
            group_id(self.partitions, self.groups, g): group_topics(self.partitions, self.groups, g)
            for g in range(self.groups)
        }

    def series(self) -> int:
        return sum(len(topics) for topics in self.assignment().values()) * PARTITIONS_PER_TOPIC


# -- cluster set-up ----------------------------------------------------------------------------------------


def create_topics(admin: KafkaAdminClient, first: int, count: int) -> None:
    """Topics bench-t<first>..bench-t<first+count-1>, 100 per request; waits until all have leaders."""
    names = [topic_name(index) for index in range(first, first + count)]
    for start in range(0, len(names), 100):
        batch = [NewTopic(name, PARTITIONS_PER_TOPIC, 1) for name in names[start : start + 100]]
        admin.create_topics(batch, timeout_ms=120_000)
    deadline = time.monotonic() + 300
    while True:
        described = admin.describe_topics(names)
        led = sum(
            1
            for topic in described
            if topic.get("error_code", 0) == 0
            and len(topic["partitions"]) == PARTITIONS_PER_TOPIC
            and all(partition["leader_id"] >= 0 for partition in topic["partitions"])
        )
        if led == len(names):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {led} of {len(names)} topics have leaders after 300 s")
        time.sleep(1)


def fill_topics(bootstrap: str, first: int, count: int) -> int:
    """records_in(t, p) records of ~100 bytes into every partition, create-time stamps up to minutes old."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=16 * 1024)
    # The first send to a topic waits ~100 ms for its metadata: ask for all topics at once, concurrently.
    with ThreadPoolExecutor(64) as pool:
        list(pool.map(producer.partitions_for, [topic_name(t) for t in range(first, first + count)]))
    now_ms = int(time.time() * 1000)
    value = b"x" * 100
    sent = 0
    for topic in range(first, first + count):
        name = topic_name(topic)
        for partition in range(PARTITIONS_PER_TOPIC):
            total = records_in(topic, partition)
            spacing_ms = 1000 * (1 + (topic + partition) % 10)
            for i in range(total):
                producer.send(
                    name, value=value, partition=partition, timestamp_ms=now_ms - (total - i) * spacing_ms
                )
            sent += total
    producer.flush(timeout=600)
    producer.close()
    return sent


def end_offsets(admin: KafkaAdminClient, topics: int) -> dict[tuple[int, int], int]:
    specs = {
        TopicPartition(topic_name(t), p): OffsetSpec.LATEST
        for t in range(topics)
        for p in range(PARTITIONS_PER_TOPIC)
    }
    answer = admin.list_partition_offsets(specs, timeout_ms=120_000)
    return {
        (int(tp.topic.rsplit("t", 1)[1]), tp.partition): int(value.offset) for tp, value in answer.items()
    }


def _retry(call: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    """`call()`, retried while the group coordinator is not there yet (`__consumer_offsets` is created on
    the first group request)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (CoordinatorNotAvailableError, NotCoordinatorError, CoordinatorLoadInProgressError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: no group coordinator after {timeout:.0f} s") from None
            time.sleep(0.5)


def commit_groups(admin: KafkaAdminClient, size: Size, ends: dict[tuple[int, int], int]) -> None:
    for g, (group, topics) in enumerate(size.assignment().items()):
        offsets = {
            TopicPartition(topic_name(t), p): OffsetAndMetadata(
                committed_offset(g, t, p, ends[(t, p)]), "", -1
            )
            for t in topics
            for p in range(PARTITIONS_PER_TOPIC)
        }
        errors = _retry(partial(admin.alter_group_offsets, group, offsets), f"committing offsets of {group}")
        failed = [tp for tp, error in errors.items() if error is not None and error.errno != 0]
        if failed:
            raise RuntimeError(f"committing offsets of {group} failed for {len(failed)} partitions")


# -- processes and scrapes ---------------------------------------------------------------------------------


@contextmanager
def child(command: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("wb") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values["rss_mb" if key == "VmRSS" else "peak_rss_mb"] = int(rest.split()[0]) / 1024
    return values


@dataclass(frozen=True)
class Scrape:
    seconds: float
    wire_bytes: int
    body: str


def scrape(port: int, path: str = "/metrics", timeout: float = 600, like_prometheus: bool = True) -> Scrape:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"} if like_prometheus else {}
    started = time.perf_counter()
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"GET {path} on port {port}: HTTP {response.status}")
        gzipped = response.getheader("Content-Encoding") == "gzip"
    finally:
        connection.close()
    body = (gzip.decompress(raw) if gzipped else raw).decode()
    return Scrape(elapsed, len(raw), body)


def samples(body: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    for match in _SAMPLE.finditer(body):
        if match.group(1) == name:
            yield dict(_LABEL.findall(match.group(2))), float(match.group(3))


def health(port: int) -> dict[str, float]:
    names = ("last_success_timestamp_seconds", "collection_duration_seconds", "up")
    query = "&".join(f"name[]=streamstack_lag_exporter_{name}" for name in names)
    body = scrape(port, f"/metrics?{query}", timeout=60, like_prometheus=False).body
    values = {}
    for line in body.splitlines():
        if line.startswith("streamstack_lag_exporter_"):
            name, value = line.split(" ")[:2]
            values[name.removeprefix("streamstack_lag_exporter_")] = float(value)
    return values


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "scrapes": len(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
        "max_ms": 1000 * ordered[-1],
    }


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


def measure_ours(
    size: Size, bootstrap: str, workdir: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], str]:
    port = free_port()
    command = our_command(size, bootstrap, port, "--refresh-interval", str(args.refresh_interval))
    log_path = workdir / f"ours-p{size.partitions}-g{size.groups}.log"
    with child(command, log_path) as process:
        started = time.monotonic()
        wait_until(lambda: health(port).get("last_success_timestamp_seconds", 0) > 0, 600, "first collection")
        first = health(port)
        to_first = time.monotonic() - started
        cycles: list[float] = []
        last = first["last_success_timestamp_seconds"]
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
        timings: list[float] = []
        wire = 0
        for _ in range(args.scrapes):
            answer = scrape(port)
            timings.append(answer.seconds)
            wire = answer.wire_bytes
            time.sleep(args.scrape_gap)
        body = scrape(port, like_prometheus=False).body
        memory = memory_mb(process.pid)
        if process.poll() is not None:
            raise RuntimeError(f"our exporter exited; see {log_path}")
    measured = {
        "first_collection_s": first["collection_duration_seconds"],
        "start_to_first_snapshot_s": to_first,
        "warm_collections_s": cycles,
        "warm_collection_median_s": statistics.median(cycles) if cycles else None,
        **latency_summary(timings),
        "gzip_bytes": wire,
        "text_bytes": len(body.encode()),
        **memory,
    }
    return measured, body


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

        wait_until(collected, 30 * collections, f"{collections} collections")
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
        body = ""
        wire = 0
        budget_end = time.monotonic() + args.peer_budget
        while len(timings) < args.scrapes and (len(timings) < 2 or time.monotonic() < budget_end):
            result = scrape(port)
            timings.append(result.seconds)
            body, wire = result.body, result.wire_bytes
            time.sleep(args.scrape_gap)
        memory = memory_mb(process.pid)
        if process.poll() is not None:
            raise RuntimeError(f"kafka_exporter exited; see {log_path}")
    return {**latency_summary(timings), "gzip_bytes": wire, "text_bytes": len(body.encode()), **memory}, body


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


# -- report ------------------------------------------------------------------------------------------------


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
        "scrape_p99_ms": ours["p99_ms"],
        "scrape_p99_met": ours["p99_ms"] <= GOAL_SCRAPE_P99_MS,
        "peak_rss_mb": peak,
        "rss_met": peak <= GOAL_RSS_MB,
        "lag_agrees": top["agreement"]["different"] == 0 and top["agreement"]["compared"] > 0,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| partitions x groups | group-partition series | our collection cold / warm | our scrape p50 / p99 "
        "| kafka_exporter scrape p50 / p99 (n) | our RSS / peak | kafka_exporter RSS / peak "
        "| lag equal / compared |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for point in result["points"]:
        ours, theirs, agree = point["ours"], point["kafka_exporter"], point["agreement"]
        warm = ours["warm_collection_median_s"]
        lines.append(
            f"| {point['partitions']:,} x {point['groups']} | {point['series']:,} "
            f"| {ours['first_collection_s']:.2f} s / {warm:.2f} s "
            f"| {ours['p50_ms']:.1f} / {ours['p99_ms']:.1f} ms "
            f"| {theirs['p50_ms']:,.0f} / {theirs['p99_ms']:,.0f} ms ({theirs['scrapes']}) "
            f"| {ours['rss_mb']:.0f} / {ours['peak_rss_mb']:.0f} MB "
            f"| {theirs['rss_mb']:.0f} / {theirs['peak_rss_mb']:.0f} MB "
            f"| {agree['equal']:,} / {agree['compared']:,} |"
        )
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
            f"lag values {'equal' if verdict['lag_agrees'] else 'NOT all equal'} where both report them.",
        ]
    return "\n".join(lines) + "\n"


def peer_binary(path: Path | None) -> Path:
    """The kafka_exporter binary to compare with; fails with how to get one."""
    if path is None or not os.access(path, os.X_OK):
        raise SystemExit(
            f"error: --kafka-exporter {path}: not an executable. Build danielqsj/kafka_exporter v1.9.0 "
            "from a checkout of its repository (`go build -o kafka_exporter .`; the Go module proxy "
            "refuses the module) and pass the binary."
        )
    return path


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


if __name__ == "__main__":
    sys.exit(main())
