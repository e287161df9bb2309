"""The window benchmark: its rate arithmetic on progress reports shaped like Spark's, and its Python peers
(the plain consumer and Quix Streams) on a real topic with dead letters of every class, against the job's
own decoder and the counts known from how the topic was made."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from jobs.common.config import StreamingJobConfig
from jobs.common.schemas import PAGE_VIEW
from scripts.bench_windows import flink, peers, throughput
from scripts.bench_windows.flink_sql import epoch_ms_of, interval
from scripts.bench_windows.main import check_classification
from scripts.bench_windows.records import (
    FIELDS,
    PARTITIONS,
    QUIX_GRACE_MS,
    LivePageViews,
    at_millisecond,
    classification_samples,
    closing_markers,
    data_windows,
    expected,
    page_view,
    topic_records,
)
from scripts.bench_windows.spark_side import (
    JitSampler,
    compiler_threads_cpu_seconds,
    jit_settled,
    jvm_pid,
    latency,
    load_producer,
    produce,
    tree_cpu_seconds,
    warm_up_again,
)
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes


def progress(start: str, rows: int, trigger_ms: int) -> dict[str, Any]:
    return {
        "timestamp": f"2026-11-22T12:00:{start}Z",
        "numInputRows": rows,
        "durationMs": {"triggerExecution": trigger_ms},
    }


def test_sustained_rate_leaves_out_the_first_and_last_batch() -> None:
    reports = [
        progress("00.000", 100, 3000),  # start-up: plan compilation, consumers created
        progress("03.000", 100, 1000),
        progress("04.000", 100, 1000),
        progress("05.000", 100, 2500),  # waits for a fetch at the end of the log
        progress("07.500", 0, 10),  # a no-data batch (watermark moved) carries no rows
    ]

    rates = throughput(list(reversed(reports)))

    assert rates["sustained_rows_per_second"] == pytest.approx(200 / 2.0)
    assert rates["drain_rows_per_second"] == pytest.approx(400 / 7.5)
    assert rates["rows"] == 400
    assert rates["batches"] == 4


def test_sustained_rate_needs_three_batches() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        throughput([progress("00.000", 100, 1000), progress("01.000", 100, 1000)])


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_python_peers_classify_and_count_like_the_job(
    kafka: LocalKafka, spark: SparkSession, topic_name: str
) -> None:
    events = 2_000
    now = datetime.now(UTC)
    # The peers' dead-letter rules against the job's decoder, record by record.
    check = check_classification(spark)
    assert check["differ"] == {}
    samples = classification_samples(now)
    sample_reasons = Counter(reason for reason in check["job_reasons"] if reason is not None)
    assert len(sample_reasons) == 9  # every decode reason occurs
    # A real topic: the benchmark's records and every bad sample, what each peer must find known up front.
    want, want_dead_letters = expected(events, now)
    markers, marker_ms = closing_markers(events, now)
    want_dead_letters += sample_reasons
    quix_topic = f"{topic_name}-quix"  # Quix gets a copy: the markers are appended to it
    kafka.create_topics([TopicSpec(t, partitions=PARTITIONS) for t in (topic_name, quix_topic)])
    producer = load_producer(kafka.bootstrap_servers)
    bad = [value for (value, _), reason in zip(samples, check["job_reasons"], strict=True) if reason]
    for topic in (topic_name, quix_topic):
        for index, value in enumerate(bad):
            produce(producer, topic, value, index % PARTITIONS)
        for partition, value, _, _ in topic_records(events, now):
            produce(producer, topic, value, partition)
    assert producer.flush(30) == 0
    records = events + len(bad)
    assert peers.topic_size(kafka.bootstrap_servers, topic_name) == records

    plain = peers.plain_consumer(kafka.bootstrap_servers, topic_name, records)
    valid = records - want_dead_letters.total()
    quix = peers.quix(
        kafka.bootstrap_servers, quix_topic, records, valid=valid, markers=markers, idle_seconds=1
    )

    for name, run in (("plain", plain), ("quix", quix)):
        assert run.records == records, name
        assert run.dead_letters == want_dead_letters, name
        assert run.seconds > 0 and run.cpu_seconds >= 0, name
    assert plain.counts == want
    assert data_windows(quix.counts, marker_ms) == want


@pytest.mark.integration
@pytest.mark.slow
def test_pyflink_peer_counts_like_the_others(runtimes: Runtimes, kafka: LocalKafka, topic_name: str) -> None:
    """The PyFlink job in its own venv (built on first use: about 80 s with pip's cache empty) on a real
    topic with dead letters of every kind the benchmark makes: its counts and dead letters equal the ones
    known from how the topic was made."""
    events = 2_000
    now = datetime.now(UTC)
    want, want_dead_letters = expected(events, now)
    kafka.create_topics([TopicSpec(topic_name, partitions=PARTITIONS)])
    producer = load_producer(kafka.bootstrap_servers)
    for partition, value, _, _ in topic_records(events, now):
        produce(producer, topic_name, value, partition)
    assert producer.flush(30) == 0

    (run,) = flink.rounds(
        kafka.bootstrap_servers,
        topic_name,
        count=1,
        grace_ms=QUIX_GRACE_MS,
        java_home=runtimes.java.parent.parent,
        log=print,
    )

    assert run.records == events
    assert len(want_dead_letters) == 5 and run.dead_letters == want_dead_letters
    assert run.counts == want
    assert run.seconds > 0 and run.cpu_seconds > 0


# --- the PyFlink peer: its pure parts (its program runs in a venv of its own; see README) -------------------


def test_flink_sql_intervals_carry_days_hours_minutes_and_millis() -> None:
    assert interval(10_000) == "INTERVAL '0 00:00:10.000' DAY TO SECOND(3)"
    assert interval(QUIX_GRACE_MS) == "INTERVAL '0 00:30:00.000' DAY TO SECOND(3)"
    assert interval(90_061_001) == "INTERVAL '1 01:01:01.001' DAY TO SECOND(3)"
    with pytest.raises(ValueError, match="negative"):
        interval(-1)


def test_flink_window_starts_are_read_as_utc() -> None:
    assert epoch_ms_of("2026-11-26 09:00:10") == int(
        datetime(2026, 11, 26, 9, 0, 10, tzinfo=UTC).timestamp() * 1000
    )
    assert epoch_ms_of("1970-01-01 00:00:10.5") == 10_500


def test_a_flink_round_becomes_a_peer_run_with_the_cpu_of_its_interval() -> None:
    result = {
        "first_record": 100.0,
        "last_counted": 104.0,
        "records": 1_000,
        "counts": [[10_000, "/products/1", 600], [20_000, "/products/1", 390]],
        "dead_letters": {"malformed_json": 10},
    }

    run = flink.peer_run(result, cpu_at=lambda moment: 3 * moment)

    assert run.summary()["events_per_second"] == 250.0
    assert run.summary()["busy_cores"] == 3.0
    assert run.counts == Counter({(10_000, "/products/1"): 600, (20_000, "/products/1"): 390})
    assert run.dead_letters == Counter({"malformed_json": 10})


def test_flink_cpu_keeps_the_children_that_already_ended() -> None:
    """PyFlink's Python workers end with each job, before its last count is collected: their CPU must stay
    in the tree's, which tree_cpu_seconds (live processes only) drops."""
    burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    script = (
        f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); "
        "print('done', flush=True); time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        with flink.TreeSampler(parent.pid) as sampler:
            assert parent.stdout is not None and parent.stdout.readline() == "done\n"
            time.sleep(0.2)
        assert sampler.samples[-1][1] >= 0.45
        assert all(b[1] >= a[1] for a, b in zip(sampler.samples, sampler.samples[1:], strict=False))
        assert tree_cpu_seconds(parent.pid) < 0.4
    finally:
        parent.kill()
        parent.wait()


def test_the_jit_compiler_threads_cpu_is_read_from_the_spark_jvm(spark: SparkSession) -> None:
    """The benchmark reports how much of a Spark round's busy cores the JIT took: its compiler threads are
    found by name in the driver JVM, and their CPU is part of the JVM's, not all of it."""
    pid = jvm_pid()
    with JitSampler(pid) as jit:
        for size in (200_000, 300_000, 400_000):  # work the JIT has not compiled yet: new generated code
            spark.range(size).selectExpr(f"id % {size // 1000} AS k", "id * 3 AS v").groupBy("k").sum(
                "v"
            ).collect()
    threads = compiler_threads_cpu_seconds(pid)

    assert threads, "no C1/C2 compiler thread found in the driver JVM"
    assert jit.samples[-1][1] > jit.samples[0][1] > 0.0
    assert all(b[1] >= a[1] for a, b in zip(jit.samples, jit.samples[1:], strict=False))
    assert sum(threads.values()) < tree_cpu_seconds(pid)


def test_the_jit_has_settled_when_its_share_of_a_rounds_busy_cores_is_small() -> None:
    def entry(busy: float, compiling: float) -> dict[str, Any]:
        return {"busy_cores": busy, "jit_compiler_cores": compiling}

    assert not jit_settled([], 0.1)  # no round yet
    assert not jit_settled([entry(1.0, 0.05), entry(1.4, 0.40)], 0.1)  # 0.45 of 2.4
    assert jit_settled([entry(1.0, 0.05), entry(1.3, 0.15)], 0.1)  # 0.20 of 2.3: all queries together
    assert not jit_settled([entry(0.0, 0.0)], 0.1)


def test_spark_warms_up_until_the_jit_settles_within_the_cap() -> None:
    busy = [{"busy_cores": 1.2, "jit_compiler_cores": 0.5}]
    settled = [{"busy_cores": 1.2, "jit_compiler_cores": 0.05}]

    assert warm_up_again(1, busy, warm_ups=2, jit_settled_share=0.1, max_warm_ups=30)
    assert warm_up_again(1, settled, warm_ups=2, jit_settled_share=0.1, max_warm_ups=30)  # the minimum
    assert warm_up_again(2, busy, warm_ups=2, jit_settled_share=0.1, max_warm_ups=30)
    assert not warm_up_again(2, settled, warm_ups=2, jit_settled_share=0.1, max_warm_ups=30)
    assert not warm_up_again(30, busy, warm_ups=2, jit_settled_share=0.1, max_warm_ups=30)  # the cap
    assert not warm_up_again(2, busy, warm_ups=2, jit_settled_share=None, max_warm_ups=30)  # turned off


def test_the_classifier_imports_without_pyspark() -> None:
    """The PyFlink venv has no pyspark: records.classify (and the package) must import without it."""
    blocked = (
        "import sys; sys.modules['pyspark'] = None; "
        "from scripts.bench_windows.records import classify; from scripts.bench_windows import flink_sql; "
        "assert classify(b'{}', 0)[0] == 'missing_field'"
    )
    subprocess.run([sys.executable, "-c", blocked], cwd=REPO_ROOT, check=True)


def test_the_classifier_knows_the_page_view_schema() -> None:
    assert tuple((field.name, field.kind) for field in PAGE_VIEW.fields) == FIELDS
    assert PAGE_VIEW.event_time_field == FIELDS[-1][0]


def test_the_pyflink_requirements_are_pinned_with_hashes_and_share_orjson() -> None:
    text = flink.REQUIREMENTS.read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n    --hash=sha256:[0-9a-f]{64}", text, re.MULTILINE)
    requirement_lines = [line for line in text.splitlines() if line and not line.startswith(("#", " "))]
    assert len(pins) == len(requirement_lines) > 40
    pinned = dict(pins)
    assert pinned["apache-flink"] == flink.PYFLINK_VERSION
    constraints = (REPO_ROOT / "constraints.txt").read_text()
    assert f"orjson=={pinned['orjson']}" in constraints.splitlines()


@pytest.mark.integration
@pytest.mark.spark
def test_the_latency_run_does_not_cap_batches_at_the_throughput_runs_size(
    kafka: LocalKafka, spark: SparkSession, tmp_path: Path
) -> None:
    """The throughput runs' --max-offsets-per-trigger with a 1 s trigger would bound the live job below the
    latency run's rate (at 100,000 a batch and 131,000 events/s it fell 13 s behind in 40 s)."""
    capped = StreamingJobConfig(
        query_name="bench",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        metrics_port=0,
        dead_letter_topic="bench-dead-letters",
        max_offsets_per_trigger=200,
    )
    live = latency(spark, capped, kafka.bootstrap_servers, kafka, rate=1_000, seconds=3)
    assert live["max_offsets_per_trigger"] is None
    assert live["max_batch_rows"] > 200
    assert live["measured_events"] == live["events"] >= 2_500
    assert 0 < live["p50_seconds"] <= live["p99_seconds"] <= live["max_seconds"]
    assert live["job_busy_cores"] > 0 and live["producer_busy_cores"] > 0


def test_live_page_views_are_the_benchmarks_page_views_stamped_now() -> None:
    view = LivePageViews()
    before = time.time_ns() // 1_000_000
    values = [view(i) for i in (0, 7, 999, 1_000, 123_456)]
    after = time.time_ns() // 1_000_000
    stamped = {int(datetime.fromisoformat(orjson.loads(v)["event_time"]).timestamp() * 1000) for v in values}
    assert all(before <= ms <= after for ms in stamped)
    assert values == [
        page_view(i, at_millisecond(ms))
        for i, value in zip((0, 7, 999, 1_000, 123_456), values, strict=True)
        for ms in [int(datetime.fromisoformat(orjson.loads(value)["event_time"]).timestamp() * 1000)]
    ]
