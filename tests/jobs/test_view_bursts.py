"""The view-bursts job (a sliding window per user) against real Kafka, checked against a plain-Python oracle.

The oracle is written from the job's contract, not from its code: per user, the largest number of accepted
views whose event times all lie within less than WINDOW of each other (a sort and a scan per view, no
buffer, no eviction). A view is late, and dropped, when its event time is at or before the watermark at the
start of its phase (the largest event time of the earlier phases less DELAY). A user whose newest accepted
view is RETENTION or more behind that watermark is forgotten: the count starts again from 0. Every phase
keeps the watermark where the previous phase left it (its views are at or before the largest seen so far),
except the phase that brings a view far ahead.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jobs.jvm.gateway import jvm_class
from jobs.jvm.view_bursts import VIEW_BURSTS_CLASS
from jobs.view_bursts.config import BurstJobConfig
from jobs.view_bursts.main import parse_args, start_queries
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    catalogue_command_line,
    create_job_topics,
    dropped_by_watermark,
    iso,
    process_all,
    running,
    streaming_config,
)
from tests.kafka_helpers import TopicRecord, produce, read_dead_letters, read_records

WINDOW = 60.0
DELAY = 10.0
RETENTION = 120.0
THRESHOLD = 4
# Event times an hour back: the job dead-letters events more than 7 days from their Kafka timestamp.
BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


@dataclass(frozen=True)
class View:
    user_id: str
    seconds: float  # after BASE, to the millisecond

    @property
    def event_time(self) -> datetime:
        return BASE + timedelta(seconds=self.seconds)

    def encoded(self) -> tuple[bytes, bytes]:
        body = {"user_id": self.user_id, "url": "/p", "event_time": iso(self.event_time)}
        return self.user_id.encode(), json.dumps(body).encode()


def views(user: str, *seconds: float) -> list[View]:
    return [View(user, s) for s in seconds]


# --- the oracle ---------------------------------------------------------------------------------------------


def max_within(times: Sequence[float], window: float) -> int:
    """The most times that lie within less than `window` of one another: for each time, those from it on."""
    return max((sum(1 for u in times if t <= u < t + window) for t in times), default=0)


@dataclass
class Oracle:
    """Per phase: each user's largest burst at its end (forgotten users start again); the late views."""

    bursts_after_phase: list[dict[str, int]] = field(default_factory=list)
    late: list[View] = field(default_factory=list)
    accepted: dict[str, list[float]] = field(default_factory=dict)


def oracle(phases: Sequence[Sequence[View]]) -> Oracle:
    result = Oracle()
    seen: list[float] = []
    epoch: dict[str, list[float]] = defaultdict(list)
    current: dict[str, int] = {}
    for phase in phases:
        watermark = max(seen) - DELAY if seen else float("-inf")
        for view in phase:
            if view.seconds <= watermark:
                result.late.append(view)
                continue
            times = epoch[view.user_id]
            if times and max(times) + RETENTION <= watermark:
                times.clear()
            times.append(view.seconds)
        seen.extend(view.seconds for view in phase)
        for user, times in epoch.items():
            if times:
                current[user] = max_within(times, WINDOW)
        result.bursts_after_phase.append(dict(current))
    result.accepted = {user: sorted(times) for user, times in epoch.items()}
    return result


# --- the scenario -------------------------------------------------------------------------------------------


def first_phase() -> list[View]:
    """One batch (produced before the job starts), out of order; afterwards the watermark is 202 - 10."""
    phase = [
        *views("bot", *(100 + 5 * i for i in range(10)), 200, 201, 202),  # 10 within 45 s
        *views("alice", 100, 130, 159.999, 200),  # 3: 100..159.999 is under 60 s
        *views("edge", 100, 160),  # exactly 60 s apart: not in one window
        *views("dup", 150, 150),  # the same view twice counts twice
        *views("carol", 170),
    ]
    random.Random(19).shuffle(phase)
    return phase


def second_phase() -> list[View]:
    """All at or before 202: the watermark stays at 192. On-time views out of order, late ones, and
    duplicates."""
    return [
        *views("alice", 195, 196, 199),  # 159.999, 195, 196, 199, 200: 5 > THRESHOLD, an alert
        View("alice", 185),  # late: at or before 192
        View("edge", 192),  # exactly at the watermark: late
        View("edge", 193),  # 160 and 193 share a window: 2
        View("dup", 150),  # late
        *views("dup", 195, 195),  # 150, 150, 195, 195: 4
        View("carol", 171),  # late
        *views("erin", 100, 194),  # 100 late, 194 on time
        View("bot", 190),  # late: 190 <= 192
    ]


def third_phase() -> list[View]:
    """A view far ahead: the watermark moves to 590 and every other user is forgotten (202 + 120 <= 590)."""
    return [View("zed", 600)]


def fourth_phase() -> list[View]:
    """bot comes back after being forgotten: its count starts again, and its record is replaced."""
    return [*views("bot", 595, 596), View("alice", 100)]  # alice's 100: late


BAD_RECORDS = {
    b"{not json": "malformed_json",
    json.dumps({"user_id": "x", "url": "/a"}).encode(): "missing_field",
    json.dumps({"user_id": 5, "url": "/a", "event_time": iso(BASE)}).encode(): "wrong_type",
    json.dumps({"user_id": "x", "url": "/a", "event_time": "noon"}).encode(): "bad_timestamp",
}


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> BurstJobConfig:
    config = BurstJobConfig(
        streaming=streaming_config("view-bursts", kafka.bootstrap_servers, tmp_path, topic_name),
        input_topic=f"{topic_name}-views",
        output_topic=f"{topic_name}-bursts",
        alerts_topic=f"{topic_name}-alerts",
        late_topic=f"{topic_name}-late",
        window_length=f"{WINDOW:.0f} seconds",
        watermark_delay=f"{DELAY:.0f} seconds",
        state_retention=f"{RETENTION:.0f} seconds",
        burst_threshold=str(THRESHOLD),
    )
    create_job_topics(
        kafka,
        config.streaming,
        TopicSpec(config.input_topic, partitions=2),
        TopicSpec(config.output_topic, partitions=2, compact=True),
        TopicSpec(config.alerts_topic or "", partitions=1),
        TopicSpec(config.late_topic or "", partitions=1),
    )
    return config


def burst_values(records: Sequence[TopicRecord]) -> list[tuple[str, dict[str, object]]]:
    return [((record.key or b"").decode(), json.loads(record.value or b"")) for record in records]


def check_burst(value: dict[str, object], accepted: Sequence[float]) -> None:
    """The record's first and last view are a real burst of the accepted views: less than WINDOW apart,
    `views` of them between the two (inclusive)."""
    first = datetime.fromisoformat(str(value["first_view"]))
    last = datetime.fromisoformat(str(value["last_view"]))
    first_s, last_s = (first - BASE).total_seconds(), (last - BASE).total_seconds()
    assert 0 <= last_s - first_s < WINDOW
    assert sum(1 for t in accepted if first_s - 1e-6 <= t <= last_s + 1e-6) == value["views"]


# --- tests --------------------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.spark
def test_bursts_read_back_from_kafka_match_the_oracle(
    spark: SparkSession, kafka: LocalKafka, job_config: BurstJobConfig
) -> None:
    bootstrap, topic = kafka.bootstrap_servers, job_config.input_topic
    phases = [first_phase(), second_phase(), third_phase(), fourth_phase()]
    expected = oracle(phases)
    written_after_phase: list[set[str]] = []  # positions of the output's records after each phase

    produce(bootstrap, topic, (view.encoded() for view in phases[0]))
    with running(start_queries(spark, job_config)) as queries:
        for index, phase in enumerate(phases):
            if index:
                extra = [(None, bad) for bad in BAD_RECORDS] if index == 1 else []
                produce(bootstrap, topic, [*(view.encoded() for view in phase), *extra])
            process_all(queries)
            snapshot = read_records(bootstrap, job_config.output_topic)
            written_after_phase.append({record.position for record in snapshot})
        process_all(queries)  # the alerts query reads what the last batch wrote
        by_name = {query.name: query for query in queries}
        dropped = dropped_by_watermark(by_name["view-bursts"])
        dead_letter_counts: dict[str, int] = defaultdict(int)
        for progress in by_name["view-bursts.dead-letters"].recentProgress:
            observed = progress.observedMetrics.get("dead_letters")
            for reason, count in (observed.asDict() if observed is not None else {}).items():
                dead_letter_counts[reason] += int(count or 0)
        last = by_name["view-bursts"].lastProgress
        assert last is not None
        state = last.stateOperators[0]
        plan = by_name["view-bursts"]._jsq.streamingQuery().lastExecution().executedPlan().toString()
    # The state step runs in the JVM: no Python worker per task for a batch of a few views.
    assert "FlatMapGroupsWithState" in plan and "Pandas" not in plan
    print(f"\nstate after the run: {state.numRowsTotal} users, {state.memoryUsedBytes} bytes")

    output = read_records(bootstrap, job_config.output_topic)
    # After each phase the latest record per user is the oracle's burst at that phase's end; within a phase
    # a user's records only grow (a record is written when the largest burst grows, and only then). A user's
    # records share a partition, read in offset order.
    before: set[str] = set()
    latest: dict[str, dict[str, object]] = {}
    for written, bursts in zip(written_after_phase, expected.bursts_after_phase, strict=True):
        by_user: dict[str, list[int]] = defaultdict(list)
        for user, value in burst_values([r for r in output if r.position in written - before]):
            by_user[user].append(int(str(value["views"])))
            latest[user] = value
        for user, counts in by_user.items():
            assert counts == sorted(set(counts)), f"{user}: {counts} do not only grow"
        assert {user: value["views"] for user, value in latest.items()} == bursts
        before = written
    assert before == {record.position for record in output}
    records = burst_values(output)
    # The scenario does what it claims: bot forgotten and back at 2; alice grown out of order past the
    # threshold; views exactly WINDOW apart in different windows; a duplicate counted twice.
    assert (latest["bot"]["views"], latest["alice"]["views"], latest["edge"]["views"]) == (2, 5, 2)
    assert latest["dup"]["views"] == 4
    for user, value in latest.items():
        check_burst(value, expected.accepted[user])
        assert value["user_id"] == user
        assert value["over_threshold"] == (int(str(value["views"])) > THRESHOLD)

    # Alerts: every burst record over the threshold, copied as it was, in each user's order.
    alerts = burst_values(read_records(bootstrap, job_config.alerts_topic or ""))
    over = [(user, value) for user, value in records if value["over_threshold"]]
    for user in {user for user, _ in over}:
        assert [a for a in alerts if a[0] == user] == [o for o in over if o[0] == user]
    assert len(alerts) == len(over)
    assert {user for user, _ in alerts} == {"bot", "alice"}

    # Late views: dropped by the state (counted) and routed, raw, to the late topic.
    assert len(expected.late) == 7
    assert dropped == len(expected.late)
    late = read_records(bootstrap, job_config.late_topic or "")
    assert sorted(record.value or b"" for record in late) == sorted(v.encoded()[1] for v in expected.late)
    assert {dict(record.headers)["late.query"] for record in late} == {b"view-bursts.late"}

    # Malformed records: dead letters with their reason, counted by reason.
    letters = read_dead_letters(bootstrap, job_config.streaming.dead_letter_topic)
    assert {letter.value: letter.reason for letter in letters} == BAD_RECORDS
    assert {reason: n for reason, n in dead_letter_counts.items() if n} == {
        reason: 1 for reason in BAD_RECORDS.values()
    }


class JavaBursts:
    """The JVM `ViewBursts` steps through py4j, their results as plain tuples."""

    def __init__(self, spark: SparkSession) -> None:
        gateway, jvm = spark.sparkContext._gateway, spark.sparkContext._jvm
        assert gateway is not None and jvm is not None
        self.gateway, self.jvm = gateway, jvm
        self.bursts = jvm_class(spark, VIEW_BURSTS_CLASS)

    def longs(self, values: Sequence[int]) -> Any:
        array = self.gateway.new_array(self.jvm.long, len(values))
        for index, value in enumerate(values):
            array[index] = value
        return array

    @staticmethod
    def burst(burst: Any) -> tuple[int, int, int] | None:
        return None if burst is None else (burst.views(), burst.firstMs(), burst.lastMs())

    def largest_window(self, times: Sequence[int], window_ms: int) -> tuple[int, int, int] | None:
        return self.burst(self.bursts.largestWindow(self.longs(times), window_ms))

    def advance(self, state: Any, new_times: Sequence[int], watermark_ms: int, window_ms: int) -> Any:
        return self.bursts.advance(state, self.longs(new_times), watermark_ms, window_ms)

    def described(self, step: Any) -> tuple[Any, tuple[int, int, int] | None]:
        state = step.state()
        if state is None:
            return None, self.burst(step.emitted())
        return (list(state.buffer()), self.burst(state.best()), state.newestMs()), self.burst(step.emitted())


@pytest.mark.spark
def test_the_state_step_keeps_only_what_an_on_time_view_can_share_a_window_with(spark: SparkSession) -> None:
    """The JVM step alone: eviction at watermark - window, growth only, ties keep the first burst."""
    java, window = JavaBursts(spark), 60_000
    step = java.advance(None, [0, 59_999, 60_000], watermark_ms=0, window_ms=window)
    assert java.described(step) == (([0, 59_999, 60_000], (2, 0, 59_999), 60_000), (2, 0, 59_999))
    step = java.advance(step.state(), [], watermark_ms=60_000, window_ms=window)
    assert java.described(step) == (([59_999, 60_000], (2, 0, 59_999), 60_000), None)
    step = java.advance(step.state(), [125_000], watermark_ms=65_000, window_ms=window)
    assert java.described(step) == (([59_999, 60_000, 125_000], (2, 0, 59_999), 125_000), None)  # a tie
    step = java.advance(step.state(), [100_000, 100_000], watermark_ms=65_000, window_ms=window)
    assert java.described(step)[1] == (4, 59_999, 100_000)  # an out-of-order duplicate grows it
    assert java.described(java.advance(None, [], watermark_ms=0, window_ms=window)) == (None, None)
    assert java.largest_window([1, 2, 3, 100, 101, 102, 103], 10) == (4, 100, 103)


@pytest.mark.spark
def test_the_largest_window_agrees_with_the_oracle_on_random_views(spark: SparkSession) -> None:
    java, rng = JavaBursts(spark), random.Random(7)
    for _ in range(200):
        window = rng.choice([1, 10, 1_000, 60_000])
        times = sorted(rng.randrange(0, 5 * window) for _ in range(rng.randrange(1, 40)))
        views, first, last = java.largest_window(times, window) or (0, 0, 0)
        assert views == max_within(times, window)
        assert 0 <= last - first < window and sum(1 for t in times if first <= t <= last) >= views
        # Of equal runs, the one that ends first.
        assert all(max_within([t for t in times if t <= end], window) < views for end in times if end < last)


def test_command_line_rejects_a_bad_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*catalogue_command_line("view-bursts"), "--burst-threshold", "many"])
    assert "--burst-threshold 'many'" in capsys.readouterr().err
    config = parse_args(catalogue_command_line("view-bursts"))
    assert (config.window_ms, config.threshold) == (60_000, 30)
