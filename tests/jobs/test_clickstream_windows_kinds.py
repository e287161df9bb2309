"""The window job's tumbling, hopping and session counts per url and per user, and its late-view routing,
against real Kafka, checked against a plain-Python simulation.

The reference is written from the job's contract, not its code, in integer epoch milliseconds: windows are
aligned to the epoch; a view is dropped from a tumbling or hopping window whose end is at or before the
watermark, and from sessions when view + GAP is; after each phase the watermark is the largest event time
seen less DELAY; a session (views at most GAP apart) is emitted once its last view + GAP is at or before the
watermark. Every phase but the first keeps its event times at or below the first phase's largest, so the
watermark cannot move within a phase however it splits into batches.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.main import parse_args, start_queries
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    catalogue_command_line,
    create_job_topics,
    dropped_by_watermark,
    process_all,
    running,
    streaming_config,
    views_per_key,
)
from tests.kafka_helpers import latest_per_key, produce, read_dead_letters, read_records

pytestmark = [pytest.mark.integration, pytest.mark.spark]

WINDOW_MS = 10_000
HOP_MS, SLIDE_MS = 30_000, 10_000
GAP_MS = 20_000
DELAY_MS = 5_000
# Event times near now (the job dead-letters events more than 7 days from their Kafka timestamp), on a
# minute boundary.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
BASE_MS = int(BASE.timestamp() * 1000)


def iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class View:
    user_id: str
    url: str
    seconds: float  # after BASE

    @property
    def epoch_ms(self) -> int:
        return BASE_MS + round(self.seconds * 1000)

    def encoded(self) -> tuple[bytes, bytes]:
        body = {"user_id": self.user_id, "url": self.url, "event_time": iso(self.epoch_ms)}
        return self.user_id.encode(), json.dumps(body).encode()


# --- the reference -------------------------------------------------------------------------------------


def tumbling_windows(t: int) -> list[tuple[int, int]]:
    start = t - t % WINDOW_MS
    return [(start, start + WINDOW_MS)]


def hopping_windows(t: int) -> list[tuple[int, int]]:
    """Every [start, start + HOP) with start a multiple of SLIDE that contains t."""
    latest_start = t - t % SLIDE_MS
    return [(s, s + HOP_MS) for s in range(latest_start, t - HOP_MS, -SLIDE_MS)]


@dataclass
class Reference:
    windows: dict[str, dict[str, object]] = field(default_factory=dict)  # latest value per key
    per_url: dict[str, int] = field(default_factory=dict)  # the original per-url query
    late: list[tuple[View, int]] = field(default_factory=list)  # (view, watermark it was late for)
    dropped: Counter[str] = field(default_factory=Counter)  # rows dropped per query kind


def simulate(phases: Sequence[Sequence[View]]) -> Reference:
    reference = Reference()
    counts: Counter[tuple[str, str, str, int, int]] = Counter()
    per_url: Counter[tuple[int, str]] = Counter()
    open_sessions: dict[str, list[list[int]]] = {}  # user -> sessions, each the sorted event times
    watermark = -(2**62)
    largest_seen = -(2**62)
    for phase in phases:
        dropped_groups: dict[str, set[tuple[str, str, int]]] = {"tumbling": set(), "hopping": set()}
        for view in phase:
            t = view.epoch_ms
            for kind, windows in (("tumbling", tumbling_windows(t)), ("hopping", hopping_windows(t))):
                for dimension, value in (("url", view.url), ("user", view.user_id)):
                    for start, end in windows:
                        if end <= watermark:
                            dropped_groups[kind].add((dimension, value, start))
                        else:
                            counts[(kind, dimension, value, start, end)] += 1
            [(start, end)] = tumbling_windows(t)
            if end <= watermark:
                reference.late.append((view, watermark))
                reference.dropped["per-url"] += 1  # every late view in this scenario has its own url
            else:
                per_url[(start, view.url)] += 1
            if t + GAP_MS <= watermark:
                reference.dropped["sessions"] += 1  # and its own user
                continue
            sessions = open_sessions.setdefault(view.user_id, [])
            touching = [s for s in sessions if t <= s[-1] + GAP_MS and s[0] <= t + GAP_MS]
            merged = sorted([t, *(time for s in touching for time in s)])
            sessions[:] = [s for s in sessions if s not in touching] + [merged]
        for kind, groups in dropped_groups.items():
            reference.dropped[kind] += len(groups)
        largest_seen = max([largest_seen, *(v.epoch_ms for v in phase)])
        watermark = max(watermark, largest_seen - DELAY_MS)
        for user_id, sessions in open_sessions.items():
            for session in [s for s in sessions if s[-1] + GAP_MS <= watermark]:
                sessions.remove(session)
                counts[("session", "user", user_id, session[0], session[-1] + GAP_MS)] += len(session)
    for (kind, dimension, value, start, end), views in counts.items():
        reference.windows[f"{kind}|{dimension}|{value}|{iso(start)}"] = {
            "kind": kind,
            "dimension": dimension,
            "value": value,
            "window_start": iso(start),
            "window_end": iso(end),
            "views": views,
        }
    reference.per_url = {f"{iso(start)}|{url}": views for (start, url), views in per_url.items()}
    return reference


# --- the scenario ----------------------------------------------------------------------------------------


def first_phase() -> list[View]:
    """A minute of views from three users over three urls, out of order, in one batch; afterwards the
    watermark is 60 - 5 = 55 s."""
    views = [View(f"user-{i % 3}", ("/a", "/b", "/c")[(i // 2) % 3], i * 1.5) for i in range(41)]
    random.Random(7).shuffle(views)
    return views


def second_phase() -> list[View]:
    return [
        View("user-0", "/a", 57),  # on time, out of order
        View("user-1", "/b", 52),
        View("user-2", "/c", 50),  # window [50, 60) ends after 55: on time
        View("user-1", "/a", 56),
        View("user-1", "/a", 56),  # the same view again: counted twice, not deduplicated
        View("late-user-1", "/late-1", 12),  # every window closed (tumbling ends 20, session 32): dropped
        # tumbling [40, 50) and hopping [20, 50) closed, hopping [30, 60), [40, 70) and its session open
        View("late-user-2", "/late-2", 41),
    ]


def third_phase() -> list[View]:
    """One view far ahead: the watermark moves to 595 s and every other session closes."""
    return [View("closer", "/closer", 600)]


BAD_RECORDS = {
    b"{not json": "malformed_json",
    json.dumps({"user_id": "x", "event_time": iso(BASE_MS)}).encode(): "missing_field",
    json.dumps({"user_id": "x", "url": ["/a"], "event_time": iso(BASE_MS)}).encode(): "wrong_type",
    json.dumps({"user_id": "x", "url": "/a", "event_time": "12:00"}).encode(): "bad_timestamp",
}


# --- helpers -----------------------------------------------------------------------------------------------


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> WindowJobConfig:
    config = WindowJobConfig(
        streaming=streaming_config("clickstream-windows", kafka.bootstrap_servers, tmp_path, topic_name),
        input_topic=f"{topic_name}-views",
        output_topic=f"{topic_name}-per-url",
        windows_topic=f"{topic_name}-windows",
        late_topic=f"{topic_name}-late",
        window_duration=f"{WINDOW_MS // 1000} seconds",
        hop_window_duration=f"{HOP_MS // 1000} seconds",
        hop_slide=f"{SLIDE_MS // 1000} seconds",
        session_gap=f"{GAP_MS // 1000} seconds",
        watermark_delay=f"{DELAY_MS // 1000} seconds",
    )
    assert config.windows_topic is not None and config.late_topic is not None
    create_job_topics(
        kafka,
        config.streaming,
        TopicSpec(config.input_topic, partitions=2),
        TopicSpec(config.output_topic, partitions=2, compact=True),
        TopicSpec(config.windows_topic, partitions=2, compact=True),
        TopicSpec(config.late_topic, partitions=1),
    )
    return config


# --- tests -------------------------------------------------------------------------------------------------


def test_window_kinds_late_views_and_dead_letters_match_the_simulation(
    spark: SparkSession, kafka: LocalKafka, job_config: WindowJobConfig
) -> None:
    bootstrap, topic = kafka.bootstrap_servers, job_config.input_topic
    assert job_config.windows_topic is not None and job_config.late_topic is not None
    phases = [first_phase(), second_phase(), third_phase()]
    reference = simulate(phases)

    produce(bootstrap, topic, (view.encoded() for view in phases[0]))
    with running(start_queries(spark, job_config)) as queries:
        for records in (
            [],
            [*(view.encoded() for view in phases[1]), *((None, bad) for bad in BAD_RECORDS)],
            [view.encoded() for view in phases[2]],
        ):
            produce(bootstrap, topic, records)
            process_all(queries)
        dropped = {query.name: dropped_by_watermark(query) for query in queries}

    assert sorted(q.name for q in queries) == [
        "clickstream-windows",
        "clickstream-windows.dead-letters",
        "clickstream-windows.hopping",
        "clickstream-windows.late",
        "clickstream-windows.sessions",
        "clickstream-windows.tumbling",
    ]
    windows = latest_per_key(read_records(bootstrap, job_config.windows_topic))
    assert windows == reference.windows
    assert views_per_key(bootstrap, job_config.output_topic) == reference.per_url
    # The scenario exercises what it claims to: a duplicate counted twice, each kind's own late rule.
    # user-1 in [50, 60): the first phase's views, then 52 and 56 twice.
    assert windows[f"tumbling|user|user-1|{iso(BASE_MS + 50_000)}"]["views"] == 3 + sum(
        1 for v in phases[0] if v.user_id == "user-1" and 50 <= v.seconds < 60
    )
    assert f"hopping|url|/late-2|{iso(BASE_MS + 30_000)}" in windows
    assert f"tumbling|url|/late-2|{iso(BASE_MS + 40_000)}" not in windows
    assert f"session|user|late-user-2|{iso(BASE_MS + 41_000)}" in windows

    # Late views: counted by every query that drops them, and routed (only they) to the late topic.
    assert dropped == {
        "clickstream-windows": reference.dropped["per-url"],
        "clickstream-windows.tumbling": reference.dropped["tumbling"],
        "clickstream-windows.hopping": reference.dropped["hopping"],
        "clickstream-windows.sessions": reference.dropped["sessions"],
        "clickstream-windows.late": 0,
        "clickstream-windows.dead-letters": 0,
    }
    assert reference.dropped["per-url"] == 2
    positions = {record.value: record.position for record in read_records(bootstrap, topic)}
    late_records = read_records(bootstrap, job_config.late_topic)
    routed = {
        None if record.key is None else record.key.decode(): (
            record.value,
            dict(record.headers)["late.watermark"].decode(),
            dict(record.headers)["late.window_end"].decode(),
        )
        for record in late_records
    }
    expected_late = {}
    for view, watermark in reference.late:
        [(_, window_end)] = tumbling_windows(view.epoch_ms)
        value = view.encoded()[1]
        expected_late[positions[value]] = (value, iso(watermark), iso(window_end))
    assert routed == expected_late
    assert len(late_records) == len(expected_late)

    dead_letters = read_dead_letters(bootstrap, job_config.streaming.dead_letter_topic)
    assert {letter.value: letter.reason for letter in dead_letters} == BAD_RECORDS
    assert {letter.origin for letter in dead_letters} == {positions[bad] for bad in BAD_RECORDS}


def test_command_line_has_both_outputs_off_unless_given_and_rejects_a_slide_longer_than_the_window(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command_line = catalogue_command_line("clickstream-windows")
    without_outputs = [
        part
        for flag, value in zip(command_line[::2], command_line[1::2], strict=True)
        if flag not in ("--windows-topic", "--late-topic")
        for part in (flag, value)
    ]

    config = parse_args(command_line)
    disabled = parse_args(without_outputs)

    assert config.windows_topic is not None and config.late_topic is not None
    assert (disabled.windows_topic, disabled.late_topic) == (None, None)
    with pytest.raises(SystemExit):
        parse_args([*command_line, "--hop-window-duration", "10 seconds", "--hop-slide", "1 minute"])
    assert "--hop-slide '1 minute': must not exceed --hop-window-duration" in capsys.readouterr().err
