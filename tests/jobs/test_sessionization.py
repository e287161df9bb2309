"""Sessionization against real Kafka, checked against a plain-Python session simulation.

The reference below is written from the job's contract, not from its code: clicks of one user at most GAP
apart share a session; a click is late (dropped) when click + GAP is at or before the watermark; after each
phase the watermark is the largest event time seen less DELAY, and every open session whose last click +
GAP is at or before it is emitted once and closed for good.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.sessionization.config import SessionJobConfig
from jobs.sessionization.main import parse_args, start_queries
from jobs.sessionization.transforms import sessionize, sessions_as_records
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    catalogue_command_line,
    check_appended_once,
    create_job_topics,
    dropped_by_watermark,
    iso,
    process_all,
    running,
    streaming_config,
)
from tests.kafka_helpers import count_and_latest, produce, read_dead_letters, read_records

pytestmark = [pytest.mark.integration, pytest.mark.spark]

GAP_SECONDS = 30
DELAY_SECONDS = 15
# Event times near now: the job dead-letters events more than 7 days from their Kafka timestamp.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)


@dataclass(frozen=True)
class Click:
    user_id: str
    url: str
    seconds: float  # after BASE

    @property
    def event_time(self) -> datetime:
        return BASE + timedelta(seconds=self.seconds)

    def encoded(self) -> tuple[bytes, bytes]:
        body = {"user_id": self.user_id, "url": self.url, "event_time": iso(self.event_time)}
        return self.user_id.encode(), json.dumps(body).encode()


# --- the reference -------------------------------------------------------------------------------------


@dataclass
class OpenSession:
    clicks: list[Click] = field(default_factory=list)

    @property
    def first(self) -> float:
        return min(c.seconds for c in self.clicks)

    @property
    def last(self) -> float:
        return max(c.seconds for c in self.clicks)


@dataclass
class Reference:
    emitted_after_phase: list[dict[str, dict[str, object]]]
    dropped: list[Click]


def simulate(phases: Sequence[Sequence[Click]]) -> Reference:
    open_sessions: dict[str, list[OpenSession]] = {}
    watermark = float("-inf")
    largest_seen = float("-inf")
    emitted: list[dict[str, dict[str, object]]] = []
    dropped: list[Click] = []
    for phase in phases:
        for click in phase:
            if click.seconds + GAP_SECONDS <= watermark:
                dropped.append(click)
                continue
            sessions = open_sessions.setdefault(click.user_id, [])
            touching = [
                s
                for s in sessions
                if click.seconds <= s.last + GAP_SECONDS and s.first <= click.seconds + GAP_SECONDS
            ]
            merged = OpenSession([click])
            for session in touching:
                sessions.remove(session)
                merged.clicks.extend(session.clicks)
            sessions.append(merged)
        largest_seen = max([largest_seen, *(c.seconds for c in phase)])
        watermark = max(watermark, largest_seen - DELAY_SECONDS)
        closed: dict[str, dict[str, object]] = {}
        for user_id, sessions in open_sessions.items():
            for session in [s for s in sessions if s.last + GAP_SECONDS <= watermark]:
                sessions.remove(session)
                start = BASE + timedelta(seconds=session.first)
                closed[f"{user_id}|{iso(start)}"] = {
                    "user_id": user_id,
                    "session_start": iso(start),
                    "session_end": iso(BASE + timedelta(seconds=session.last)),
                    "duration_seconds": session.last - session.first,
                    "page_count": len(session.clicks),
                    "distinct_urls": len({c.url for c in session.clicks}),
                }
        emitted.append(closed)
    return Reference(emitted, dropped)


# --- the scenario ----------------------------------------------------------------------------------------


def first_phase() -> list[Click]:
    """Processed in one batch, out of event-time order; afterwards the watermark is 100 - 15 = 85."""
    clicks = [
        # alice: two sessions, 35 s apart, both still open at watermark 85 (60 + 30 > 85)
        Click("alice", "/a", 40),
        Click("alice", "/b", 50),
        Click("alice", "/a", 60),
        Click("alice", "/c", 95),
        Click("alice", "/c", 100),
        # bob: [10, 20] closes at 50 <= 85, emitted after this phase; [70, 80] stays open
        Click("bob", "/a", 10),
        Click("bob", "/b", 20),
        Click("bob", "/a", 70),
        Click("bob", "/a", 70),  # a duplicate: counted twice
        Click("bob", "/b", 80),
        # carol: [0, 3] closes at 33
        Click("carol", "/x", 0),
        Click("carol", "/x", 3),
        # dave: [20, 50] closes at exactly 80 <= 85
        Click("dave", "/d", 20),
        Click("dave", "/e", 35),
        Click("dave", "/d", 50),
    ]
    random.Random(11).shuffle(clicks)
    return clicks


def second_phase() -> list[Click]:
    """All at or before 100, so the watermark stays 85 however the phase splits into batches."""
    return [
        Click("alice", "/d", 78),  # 18 s after 60 and 17 s before 95: bridges alice's two sessions
        Click("bob", "/b", 80),  # the same click again: counted again
        Click("bob", "/c", 82),
        Click("carol", "/x", 5),  # 5 + 30 <= 85: late, dropped
        Click("dave", "/d", 60),  # on time (90 > 85) but dave's session closed at 80: a new session
        Click("erin", "/e", 30),  # late: dropped
        Click("erin", "/e", 90),
    ]


def third_phase() -> list[Click]:
    """One click far ahead moves the watermark to 385 and closes every other session."""
    return [Click("zed", "/z", 400)]


BAD_RECORDS = {
    b"not json": "malformed_json",
    json.dumps({"user_id": "x", "url": "/a"}).encode(): "missing_field",
    json.dumps({"user_id": 5, "url": "/a", "event_time": iso(BASE)}).encode(): "wrong_type",
    json.dumps({"user_id": "x", "url": "/a", "event_time": "yesterday"}).encode(): "bad_timestamp",
}


# --- helpers -----------------------------------------------------------------------------------------------


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> SessionJobConfig:
    config = SessionJobConfig(
        streaming=streaming_config("sessionization", kafka.bootstrap_servers, tmp_path, topic_name),
        input_topic=f"{topic_name}-clicks",
        output_topic=f"{topic_name}-sessions",
        session_gap=f"{GAP_SECONDS} seconds",
        watermark_delay=f"{DELAY_SECONDS} seconds",
    )
    create_job_topics(
        kafka,
        config.streaming,
        TopicSpec(config.input_topic, partitions=2),
        TopicSpec(config.output_topic, partitions=2, compact=True),
    )
    return config


# --- tests -------------------------------------------------------------------------------------------------


def test_sessions_read_back_from_kafka_match_the_simulation(
    spark: SparkSession, kafka: LocalKafka, job_config: SessionJobConfig
) -> None:
    bootstrap, topic = kafka.bootstrap_servers, job_config.input_topic
    phases = [first_phase(), second_phase(), third_phase()]
    reference = simulate(phases)

    produce(bootstrap, topic, (click.encoded() for click in phases[0]))
    outputs = []  # (records, latest value per key) after each phase
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
        outputs.append(count_and_latest(bootstrap, job_config.output_topic))

        produce(
            bootstrap,
            topic,
            [*(click.encoded() for click in phases[1]), *((None, bad) for bad in BAD_RECORDS)],
        )
        process_all(queries)
        outputs.append(count_and_latest(bootstrap, job_config.output_topic))

        produce(bootstrap, topic, (click.encoded() for click in phases[2]))
        process_all(queries)
        sessions_query = next(q for q in queries if q.name == "sessionization")
        dropped = dropped_by_watermark(sessions_query)
    outputs.append(count_and_latest(bootstrap, job_config.output_topic))
    final = outputs[-1][1]

    # A session appears once the watermark passes its last click + gap, and only then. Append mode: each
    # session is written exactly once.
    check_appended_once(outputs, reference.emitted_after_phase)
    # The scenario exercises what it claims to: a bridged session, a duplicate, a post-close straggler.
    assert final[f"alice|{iso(BASE + timedelta(seconds=40))}"]["page_count"] == 6
    assert f"dave|{iso(BASE + timedelta(seconds=60))}" in final
    # Late clicks are dropped and counted (one row each: different users).
    assert len(reference.dropped) == 2
    assert dropped == len(reference.dropped)

    dead_letters = read_dead_letters(bootstrap, job_config.streaming.dead_letter_topic)
    positions = {record.value: record.position for record in read_records(bootstrap, topic)}
    assert {letter.value: letter.reason for letter in dead_letters} == BAD_RECORDS
    assert {letter.origin for letter in dead_letters} == {positions[bad] for bad in BAD_RECORDS}


def test_clicks_exactly_a_gap_apart_share_a_session(spark: SparkSession) -> None:
    """Static check of the gap boundary and the record encoding: at most GAP apart means the same session."""
    gap = 30
    clicks_by_user = {
        "u1": [(0, "/a"), (30, "/b"), (60, "/a"), (91, "/c")],
        "u2": [(5, "/a"), (5, "/b"), (40, "/a")],
    }
    rows = [
        (user, url, (BASE + timedelta(seconds=s)).replace(tzinfo=None))
        for user, user_clicks in clicks_by_user.items()
        for s, url in user_clicks
    ]
    clicks = spark.createDataFrame(rows, "user_id string, url string, event_time timestamp")

    records = sessions_as_records(sessionize(clicks, f"{gap} seconds", "1 minute"))

    expected: list[tuple[str, str]] = []
    for user, user_clicks in clicks_by_user.items():
        sessions: list[list[tuple[int, str]]] = []
        for click in sorted(user_clicks):
            if sessions and click[0] - sessions[-1][-1][0] <= gap:
                sessions[-1].append(click)
            else:
                sessions.append([click])
        for session in sessions:
            first, last = session[0][0], session[-1][0]
            start = iso(BASE + timedelta(seconds=first))
            value = {
                "user_id": user,
                "session_start": start,
                "session_end": iso(BASE + timedelta(seconds=last)),
                "duration_seconds": float(last - first),
                "page_count": len(session),
                "distinct_urls": len({url for _, url in session}),
            }
            expected.append((f"{user}|{start}", json.dumps(value, separators=(",", ":"))))
    assertDataFrameEqual(records, spark.createDataFrame(expected, "key string, value string"))


def test_command_line_rejects_a_bad_gap(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*catalogue_command_line("sessionization"), "--session-gap", "half an hour"])
    assert "--session-gap 'half an hour'" in capsys.readouterr().err
