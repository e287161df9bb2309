"""The exporter benchmark's pure parts: the layout of topics and groups, the brokers the OS limits call for,
the sizes asked for, the records' timestamps, and the goals at 50,000 partitions x 500 groups."""

from __future__ import annotations

import argparse
import gzip
import http.server
import itertools
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, ClassVar

import pytest
from kafka.errors import (
    CoordinatorLoadInProgressError,
    GroupAuthorizationFailedError,
    KafkaError,
    UnknownTopicOrPartitionError,
)

from scripts.bench_exporter.cluster import brokers_for, partitions_per_broker
from scripts.bench_exporter.load import (
    PARTITIONS_PER_TOPIC,
    Size,
    commit_groups,
    committed_offset,
    record_timestamps,
    records_in,
    topic_name,
)
from scripts.bench_exporter.main import DEFAULT_SIZES, command_line, parse_sizes, raw_path, sizes_of
from scripts.bench_exporter.measure import (
    GOAL_GROUPS,
    GOAL_PARTITIONS,
    cpu_table,
    goals,
    peer_binary,
    peer_latency,
)
from scripts.bench_exporter.scrape import (
    Scrape,
    ThreadCpu,
    busy_fraction,
    cpu_seconds,
    cpu_ticks,
    scrape,
    scrape_breakdown,
    ticks_between,
)
from scripts.jvm_threads import thread_kind
from streamstack.local.ports import LOOPBACK, free_port
from streamstack.runtimes.locate import find_java


def test_at_50000_partitions_and_500_groups_every_topic_has_three_readers() -> None:
    size = Size(50_000, 500)
    assignment = size.assignment()
    assert len(assignment) == 500
    assert all(len(topics) == 30 for topics in assignment.values())
    readers = Counter(topic for topics in assignment.values() for topic in topics)
    assert set(readers) == set(range(5_000)) and set(readers.values()) == {3}
    assert size.series() == 150_000
    pattern = re.compile(size.group_filter)
    assert all(pattern.fullmatch(group) for group in assignment)
    assert not any(re.fullmatch(Size(50_000, 50).group_filter, group) for group in assignment)
    names = [topic_name(t) for t in range(5_000)]
    assert len(set(names)) == 5_000 and [int(name.rsplit("t", 1)[1]) for name in names] == list(range(5_000))


def test_the_10000_x_100_layout_is_unchanged() -> None:
    assert Size(10_000, 100).series() == 30_000
    assert Size(10_000, 1).series() == 10_000
    assert Size(100, 100).series() == 1_000  # each of 100 groups reads one of 10 topics


def test_lag_is_varied_and_never_negative() -> None:
    ends = {(t, p): records_in(t, p) for t in range(50) for p in range(PARTITIONS_PER_TOPIC)}
    lags = [end - committed_offset(g, t, p, end) for g in range(7) for (t, p), end in ends.items()]
    assert min(lags) == 0 and 0.2 < lags.count(0) / len(lags) < 0.45 and max(lags) >= 30
    assert set(records_in(t, p) for (t, p) in ends) == set(range(5, 41))


def test_record_timestamps_are_increasing_and_in_the_past() -> None:
    now_ms = 1_800_000_000_000
    for topic, partition in [(0, 0), (17, 3), (4_999, 9)]:
        stamps = record_timestamps(topic, partition, now_ms)
        assert len(stamps) == records_in(topic, partition)
        gaps = {later - earlier for earlier, later in itertools.pairwise(stamps)}
        assert len(gaps) == 1 and 1_000 <= gaps.pop() <= 10_000
        assert now_ms - stamps[-1] >= 1_000


def test_brokers_follow_the_descriptor_and_map_limits() -> None:
    # this sandbox: 20,000 descriptors (hard), vm.max_map_count 65,530: one broker failed near 19,500
    assert partitions_per_broker(20_000, 65_530) == 18_000
    assert brokers_for(10_000, 20_000, 65_530) == 1
    assert brokers_for(50_000, 20_000, 65_530) == 3
    assert brokers_for(50_000, 1_048_576, 262_144) == 1  # a tuned host holds it on one broker
    assert partitions_per_broker(1_048_576, 65_530) == 30_765  # then the maps are the limit
    assert brokers_for(50_000, 1_048_576, 65_530) == 2


def test_sizes_from_the_command_line() -> None:
    def namespace(
        sizes: str | None = None, partitions: list[int] | None = None, groups: list[int] | None = None
    ) -> argparse.Namespace:
        return argparse.Namespace(
            sizes=parse_sizes(sizes) if sizes else None, partitions=partitions, groups=groups
        )

    assert sizes_of(namespace("50000x500,10_000X100,10000x100")) == [Size(10_000, 100), Size(50_000, 500)]
    assert sizes_of(namespace(partitions=[100, 1_000], groups=[1, 10])) == [
        Size(100, 1),
        Size(100, 10),
        Size(1_000, 1),
        Size(1_000, 10),
    ]
    assert sizes_of(namespace()) == DEFAULT_SIZES and DEFAULT_SIZES[-1] == Size(50_000, 500)
    with pytest.raises(ValueError):
        parse_sizes("50000")
    assert raw_path(DEFAULT_SIZES, "2026-11-26").name == "exporter-2026-11-26.json"
    assert raw_path(parse_sizes("10000x100,50000x500"), "2026-11-26").name == (
        "exporter-2026-11-26-10000x100-50000x500.json"
    )
    assert raw_path(DEFAULT_SIZES, "2026-11-26").parent.name == "benchmarks"


def test_a_label_names_the_raw_results_so_that_runs_of_a_day_do_not_overwrite_each_other() -> None:
    goal = parse_sizes("50000x500")
    assert raw_path(goal, "2026-11-26", "commit-log").name == "exporter-2026-11-26-50000x500-commit-log.json"
    assert raw_path(DEFAULT_SIZES, "2026-11-26", "quiet").name == "exporter-2026-11-26-quiet.json"
    assert raw_path(goal, "2026-11-26", "") == raw_path(goal, "2026-11-26")
    assert command_line().parse_args(["--sizes", "50000x500", "--label", "commit-log"]).label == "commit-log"
    assert command_line().parse_args([]).label == ""


def point(
    partitions: int, groups: int, peak: float, history_peak: float, different: int = 0
) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "groups": groups,
        "ours": {
            "first_collection_s": 4.2,
            "warm_collections_s": [3.1, 4.9],
            "p99_ms": 20.0,
            "peak_rss_mb": peak,
            "full_history": {"peak_rss_mb": history_peak},
        },
        "agreement": {"different": different, "compared": 150_000 - different},
    }


def test_a_kafka_exporter_that_is_no_executable_file_stops_the_run_with_how_to_get_it(tmp_path: Any) -> None:
    # `make bench-exporter` without KAFKA_EXPORTER passes `--kafka-exporter ""`, which is the current folder
    unset = command_line().parse_args(["--kafka-exporter", ""]).kafka_exporter
    for path in (unset, tmp_path, tmp_path / "missing", None):
        with pytest.raises(SystemExit, match="go build -o kafka_exporter"):
            peer_binary(path)
    binary = tmp_path / "kafka_exporter"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert peer_binary(binary) == binary


class _CommitAnswers:
    """An admin client's `alter_group_offsets` answering each partition with the next of `answers` (an
    error class, or None for a commit that took), as a broker does per partition."""

    def __init__(self, *answers: type[KafkaError] | None) -> None:
        self.answers = list(answers)
        self.asked: list[int] = []

    def alter_group_offsets(self, group: str, offsets: dict[Any, Any]) -> dict[Any, Any]:
        self.asked.append(len(offsets))
        answer = self.answers.pop(0) if self.answers else None
        return {tp: answer for tp in offsets}


def test_commits_a_coordinator_refuses_for_a_while_are_made_again_and_others_fail_naming_the_error() -> None:
    """The set-up failed once on a clean run: a coordinator answered every partition of the first group with
    a retriable error, and the benchmark gave up at once without saying which."""
    size = Size(PARTITIONS_PER_TOPIC, 1)
    ends = {(0, p): 100 for p in range(PARTITIONS_PER_TOPIC)}
    admin = _CommitAnswers(CoordinatorLoadInProgressError, UnknownTopicOrPartitionError, None)
    commit_groups(admin, size, ends)
    assert admin.asked == [PARTITIONS_PER_TOPIC] * 3 and not admin.answers
    refused = _CommitAnswers(GroupAuthorizationFailedError)
    with pytest.raises(RuntimeError, match="GroupAuthorizationFailedError"):
        commit_groups(refused, size, ends)
    assert refused.asked == [PARTITIONS_PER_TOPIC]
    loading = _CommitAnswers(*[CoordinatorLoadInProgressError] * 100)
    with pytest.raises(RuntimeError, match=f"failed for {PARTITIONS_PER_TOPIC} partitions"):
        commit_groups(loading, size, ends, timeout=1.0)


def test_goals_are_judged_at_50000_x_500() -> None:
    assert (GOAL_PARTITIONS, GOAL_GROUPS) == (50_000, 500)
    assert goals([point(10_000, 100, 100.0, 120.0)])["evaluated"] is False
    verdict = goals([point(10_000, 100, 900.0, 900.0), point(50_000, 500, 240.0, 260.0)])
    assert verdict["collection_cycle_s"] == 4.9 and verdict["collection_cycle_met"]
    assert verdict["scrape_p99_met"] and verdict["lag_agrees"]
    assert verdict["peak_rss_mb"] == 260.0 and not verdict["rss_met"]  # the full window of history counts
    assert goals([point(50_000, 500, 200.0, 249.0, different=1)])["lag_agrees"] is False
    unanswered = point(50_000, 500, 200.0, 249.0)
    unanswered["agreement"] = {"different": 0, "compared": 0}
    assert goals([unanswered])["lag_agrees"] is None  # kafka_exporter gave nothing to compare


def test_cpu_seconds_count_what_processes_used_not_how_long_they_lived() -> None:
    busy = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    busy += "time.sleep(30)"
    spinning = subprocess.Popen([sys.executable, "-c", busy])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = time.monotonic()
        time.sleep(2.0)
        both, idle = cpu_seconds([spinning.pid, sleeping.pid]), cpu_seconds([sleeping.pid])
        assert 0.6 <= both - idle <= 1.0 + 0.2 * (time.monotonic() - started)  # the spin, its start-up
        assert idle < 0.5  # a Python start-up, then asleep
    finally:
        for process in (spinning, sleeping):
            process.kill()
            process.wait()
    measured: dict[str, Any] = {
        "start_to_first_snapshot_s": 8.5,
        "start_to_first_snapshot_cpu_s": {"exporter_s": 6.25, "brokers_s": 8.0, "brokers_above_idle_s": 5.5},
        "warm_cpu_per_collection_s": {"exporter_s": 3.0, "brokers_s": 4.5, "brokers_above_idle_s": 1.5},
    }
    rows = cpu_table([{"partitions": 50_000, "groups": 500, "ours": measured}])
    assert rows[-1] == "| 50,000 x 500 | 8.50 / 6.25 / 5.50 s | - | 3.00 / 1.50 s |"
    measured["start_to_first_snapshot_cpu_s"]["brokers_jit_s"] = 4.125
    rows = cpu_table([{"partitions": 50_000, "groups": 500, "ours": measured}])
    assert rows[-1] == "| 50,000 x 500 | 8.50 / 6.25 / 5.50 s (4.12 s JIT) | - | 3.00 / 1.50 s |"


_HOT_LOOP = """
public class Hot {
    public static void main(String[] args) throws Exception {
        java.lang.management.ThreadMXBean threads = java.lang.management.ManagementFactory.getThreadMXBean();
        long sum = 0;
        while (threads.getCurrentThreadCpuTime() < 1_500_000_000L) {
            for (int i = 0; i < 100_000; i++) {
                sum += Long.rotateLeft(sum ^ i, 7) * 31 + Integer.toString(i).hashCode();
            }
        }
        System.out.println(sum);
        System.out.flush();
        Thread.sleep(60_000);
    }
}
"""


def test_thread_cpu_tells_the_jit_from_the_work_of_a_real_jvm(tmp_path: Any) -> None:
    """A JVM that compiles its source (the single-file launcher runs javac in-process) and then spins on its
    main thread for 1.5 s of CPU: its JIT compiler threads and its main thread both use CPU, told apart by
    their names; the kinds add up to the process's own total."""
    assert [thread_kind(name) for name in ("C2 CompilerThre", "C1 CompilerThre", "GC Thread#0")] == [
        "jit",
        "jit",
        "gc",
    ]
    assert [thread_kind(name) for name in ("G1 Conc#0", "VM Thread", "data-plane-kafk", "main")] == [
        "gc",
        "gc",
        "other",
        "other",
    ]
    source = tmp_path / "Hot.java"
    source.write_text(_HOT_LOOP)
    jvm = subprocess.Popen([str(find_java()), str(source)], stdout=subprocess.PIPE)
    assert jvm.stdout is not None
    try:
        threads = ThreadCpu([jvm.pid])
        total_before = cpu_seconds([jvm.pid])
        deadline = time.monotonic() + 120
        spun = False
        while not spun and time.monotonic() < deadline:  # until the loop has printed its sum
            threads.sample()
            spun = bool(select.select([jvm.stdout], [], [], 0.1)[0])
        assert spun, "the JVM did not finish its loop in 120 s"
        by_kind = threads.by_kind()
        total = cpu_seconds([jvm.pid]) - total_before
    finally:
        jvm.kill()
        jvm.wait()
    assert by_kind["jit"] > 0.1, by_kind
    assert by_kind["other"] >= 1.45, by_kind  # the main thread's 1.5 s of CPU, javac's before it
    assert sum(by_kind.values()) == pytest.approx(total, abs=0.02)


class _GzipHandler(http.server.BaseHTTPRequestHandler):
    payloads: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = gzip.compress(self.payloads[self.path])
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def test_a_scrape_keeps_the_bytes_sent_and_decompresses_only_when_its_text_is_asked_for() -> None:
    """The benchmark's client times 50 scrapes of 8.8 MB that decompress to 238 MB: decompressing each one
    (about 0.7 s of CPU) took a core from the exporter and the brokers between scrapes. A body that is
    not UTF-8 shows when that happens: only when its text is asked for."""
    _GzipHandler.payloads = {"/text": b"up 1\n", "/binary": b"\xff\xfe not text"}
    server = http.server.ThreadingHTTPServer((LOOPBACK, free_port()), _GzipHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        text = scrape(port, "/text")
        assert text.gzipped and text.wire_bytes == len(text.raw)
        assert gzip.decompress(text.raw) == b"up 1\n" and text.body == "up 1\n"
        binary = scrape(port, "/binary")  # no decoding yet
        assert binary.wire_bytes == len(gzip.compress(b"\xff\xfe not text"))
        with pytest.raises(UnicodeDecodeError):
            _ = binary.body
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _BulkHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


_SPIN_ON_CPU_0 = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def test_a_scrape_tells_the_clients_wait_for_a_cpu_from_the_rest_of_its_time() -> None:
    """The client's thread and two spinning processes share one CPU: reading a 40 MB answer, the client is
    runnable for much of the scrape without a CPU, and the scrape says how long. The machine's CPUs are
    busy at least that one CPU's worth meanwhile (in ticks of 10 ms: the answer is large enough for ~15)."""
    _BulkHandler.body = os.urandom(100_000_000)
    server = http.server.ThreadingHTTPServer((LOOPBACK, free_port()), _BulkHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    spinners: list[subprocess.Popen[bytes]] = []
    answers: list[Scrape] = []
    ticks: list[tuple[int, int]] = []

    def pinned() -> None:  # affinity is a thread's own: only this thread and the spinners share CPU 0
        os.sched_setaffinity(0, {0})
        for _ in range(3):
            before = cpu_ticks()
            answers.append(scrape(server.server_address[1], "/bulk", like_prometheus=False))
            ticks.append(ticks_between(before, cpu_ticks()))

    try:
        spinners = [subprocess.Popen([sys.executable, "-c", _SPIN_ON_CPU_0]) for _ in range(2)]
        time.sleep(0.5)
        client = threading.Thread(target=pinned)
        client.start()
        client.join()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        server.shutdown()
        server.server_close()
        thread.join()
    assert [answer.wire_bytes for answer in answers] == [100_000_000] * 3
    for answer in answers:
        assert 0 < answer.first_byte_seconds < answer.seconds
        assert 0.2 * answer.seconds < answer.run_queue_seconds < answer.seconds
    busy = busy_fraction(ticks)
    assert busy is not None and busy >= 0.8 / (os.cpu_count() or 1)


def test_the_scrapes_over_the_goal_are_told_apart_from_the_rest() -> None:
    ticks = [(1, 2), (0, 0), (4, 4), (3, 4)]  # a 10 ms scrape may see one jiffy of each CPU, or none
    breakdown = scrape_breakdown([0.010, 0.012, 0.080, 0.060], [0.5, 1.5, 40.0, 20.0], ticks, 50)
    assert breakdown == {
        "over": {"scrapes": 2, "median_ms": 70.0, "median_client_run_queue_ms": 30.0, "cpus_busy": 0.875},
        "rest": {"scrapes": 2, "median_ms": 11.0, "median_client_run_queue_ms": 1.0, "cpus_busy": 0.5},
    }
    assert scrape_breakdown([0.010], [0.0], [(0, 0)], 50) == {
        "rest": {"scrapes": 1, "median_ms": 10.0, "median_client_run_queue_ms": 0.0, "cpus_busy": None}
    }


def test_a_peer_that_stops_answering_is_reported_as_such() -> None:
    assert peer_latency({"p50_ms": 8_633.2, "p99_ms": 8_758.0, "scrapes": 4, "answered": True}) == (
        "8,633 / 8,758 ms (4)"
    )
    assert peer_latency({"answered": False, "scrape_timeout_s": 300.0, "scrapes": 0}) == "no answer in 300 s"
    late = {"answered": True, "unanswered_after_s": 300.0, "scrape_timeout_s": 300.0, "scrapes": 1}
    assert (
        peer_latency({**late, "p50_ms": 95_000.0, "p99_ms": 95_000.0}) == "95,000 / 95,000 ms (1, then none)"
    )


def test_offline_measure_builds_the_layout_and_times_each_collection(tmp_path: Any) -> None:
    """scripts/bench_exporter/offline.py at a small size: every series of the layout is in the snapshot
    and its rendering, each collection is timed, the raw results are written."""
    from scripts.bench_exporter.offline import main as offline  # noqa: PLC0415

    output = tmp_path / "offline.json"
    assert offline(["--sizes", "100x10", "--collections", "2", "--output", str(output)]) == 0
    (result,) = json.loads(output.read_text())["results"]
    assert (result["partitions"], result["groups"], result["series"]) == (100, 10, 300)
    assert len(result["rounds"]) == 2
    for collection in result["rounds"]:
        assert collection["snapshot_s"] >= 0 and collection["render_and_compress_s"] > 0
        assert collection["peak_rss_mb"] >= collection["rss_mb"] > 0
    # 300 series x 9 partition families (status: 5 lines each) + 10 groups + 100 offsets, as text
    assert result["text_chars"] > 300 * 13 * 60
