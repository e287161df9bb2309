"""User enrichment against real Kafka, checked against a plain-Python stream-table join.

The reference is written from the job's contract, not its code: a view processed in batch N carries, for its
user, the last valid users-changelog record (by offset) below batch N's end offset on the users topic, or
nulls when that record is a tombstone or there is none. Batch boundaries are read from the query's offset
log, the one thing the reference takes from the run; validity, latest-version choice and encoding are its
own.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.common.checkpoints import CheckpointError
from jobs.common.config import EventLimits
from jobs.common.kafka_io import read_kafka_stream
from jobs.common.schemas import decode_profiles
from jobs.jvm.profile_table import enrich_with_profile_state
from jobs.user_enrichment.config import EnrichmentJobConfig
from jobs.user_enrichment.main import start_queries
from jobs.user_enrichment.transforms import profile_changes
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    create_job_topics,
    forget_last_commit,
    input_rows,
    iso,
    process_all,
    run_with_table_state,
    running,
    streaming_config,
    user_profile,
)
from tests.kafka_helpers import (
    FAST_COMPACTION,
    Record,
    TopicRecord,
    compact_snapshots,
    latest_per_key,
    produce,
    read_dead_letters,
    read_records,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# Event times near now: the job dead-letters views more than 7 days from their Kafka timestamp.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
WEEK = timedelta(days=7)
PROFILE_FIELDS = ("name", "country", "tier")


Upsert = tuple[bytes, bytes]


def profile(user: str, name: str, country: str, tier: str, minute: int) -> Upsert:
    return user_profile(user, name, country, tier, BASE + timedelta(minutes=minute))


def deleted(user: str) -> Record:
    return user.encode(), None


def view(user: str, url: str, seconds: int) -> Upsert:
    body = {"user_id": user, "url": url, "event_time": iso(BASE + timedelta(seconds=seconds))}
    return user.encode(), json.dumps(body).encode()


# --- the reference -------------------------------------------------------------------------------------


def parse_time(text: object) -> datetime | None:
    """ISO-8601 with a zone, or None."""
    if not isinstance(text, str) or "T" not in text or not (text.endswith("Z") or text[-6] in "+-"):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def json_object(value: bytes) -> dict[str, object] | None:
    try:
        body = json.loads(value)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def profile_change(record: TopicRecord) -> tuple[str, dict[str, object] | None] | None:
    """(user, profile or None for a delete) for a valid users-changelog record, None for a bad one."""
    if record.key is None:
        return None
    user = record.key.decode()
    if record.value is None:
        return user, None
    body = json_object(record.value)
    if body is None or body.get("user_id") != user:
        return None
    if not all(isinstance(body.get(name), str) for name in PROFILE_FIELDS):
        return None
    updated_at = parse_time(body.get("updated_at"))
    if updated_at is None:
        return None
    return user, {**{name: body[name] for name in PROFILE_FIELDS}, "profile_updated_at": iso(updated_at)}


def valid_view(record: TopicRecord, now: datetime) -> dict[str, object] | None:
    body = json_object(record.value) if record.value is not None else None
    if body is None or not isinstance(body.get("user_id"), str) or not isinstance(body.get("url"), str):
        return None
    event_time = parse_time(body.get("event_time"))
    if event_time is None or not now - WEEK < event_time < now + timedelta(hours=1):
        return None
    return {"user_id": body["user_id"], "url": body["url"], "event_time": iso(event_time)}


def batch_ends(checkpoint: Path) -> list[dict[str, dict[int, int]]]:
    """Each batch's end offsets per topic and partition, from the offset log, in batch order."""
    ends = []
    for name in sorted((n for n in os.listdir(checkpoint / "offsets") if n.isdigit()), key=int):
        lines = (checkpoint / "offsets" / name).read_text().splitlines()
        end: dict[str, dict[int, int]] = {}
        for line in lines[2:]:
            if line.startswith("{"):
                for topic, partitions in json.loads(line).items():
                    end[topic] = {int(p): o for p, o in partitions.items()}
        ends.append(end)
    return ends


def batch_of(record: TopicRecord, ends: list[dict[str, dict[int, int]]]) -> int:
    return next(n for n, end in enumerate(ends) if record.offset < end[record.topic][record.partition])


def expected_enriched(
    views: Sequence[TopicRecord],
    users: Sequence[TopicRecord],
    ends: list[dict[str, dict[int, int]]],
    now: datetime,
) -> dict[str, dict[str, object]]:
    expected: dict[str, dict[str, object]] = {}
    for record in views:
        enriched = valid_view(record, now)
        if enriched is None:
            continue
        users_end = ends[batch_of(record, ends)][users[0].topic]
        versions = [
            (change[1], u.offset)
            for u in users
            if u.offset < users_end[u.partition]
            and (change := profile_change(u)) is not None
            and change[0] == enriched["user_id"]
        ]
        current = max(versions, key=lambda version: version[1])[0] if versions else None
        nulls: dict[str, object] = {name: None for name in (*PROFILE_FIELDS, "profile_updated_at")}
        expected[record.position] = {**enriched, **(current or nulls)}
    return expected


# --- the scenario ------------------------------------------------------------------------------------------

SNAPSHOT = [
    # compacted away before the job starts: only the last record of each user survives
    profile("alice", "Alice", "FR", "free", 0),
    profile("alice", "Alice", "FR", "basic", 1),
    profile("bob", "Bob", "DE", "free", 0),
    profile("gone", "Gone", "US", "free", 0),
    profile("bob", "Bob", "DE", "basic", 1),
    deleted("gone"),
    profile("carol", "Carol", "IT", "free", 1),
    profile("dave", "Dave", "ES", "gold", 1),
    profile("dave", "Dave", "ES", "basic", 2),
]

BAD_USERS: list[tuple[Record, str]] = [
    ((b"bob", b"{not json"), "malformed_json"),
    ((b"dave", profile("mallory", "Mal", "XX", "gold", 5)[1]), "key_mismatch"),
    # (a record without a key is a dead letter too, but a compacted topic refuses it)
    ((b"bob", profile("bob", "Bob", "DE", "gold", 5)[1].replace(b'"Bob"', b"42")), "wrong_type"),
    ((b"bob", json.dumps({"user_id": "bob", "name": "B", "country": "DE"}).encode()), "missing_field"),
    (
        (
            b"carol",
            json.dumps(
                {
                    "user_id": "carol",
                    "name": "C",
                    "country": "IT",
                    "tier": "x",
                    "updated_at": "2026-01-01 12:00",
                }
            ).encode(),
        ),
        "bad_timestamp",
    ),
]
BAD_VIEWS: list[tuple[Record, str]] = [
    ((b"alice", b"[1, 2]"), "not_an_object"),
    ((b"alice", json.dumps({"user_id": "alice", "url": "/a"}).encode()), "missing_field"),
    ((b"bob", json.dumps({"user_id": "bob", "url": "/b", "event_time": "noon"}).encode()), "bad_timestamp"),
    ((b"bob", view("bob", "/old", -8 * 24 * 3600)[1]), "event_time_out_of_range"),
]


def users_phase_one() -> list[Record]:
    return [
        profile("alice", "Alice", "FR", "gold", 3),  # after alice's first view in the log, same batch
        deleted("carol"),  # after carol's first view, same batch: the view sees no profile
        profile("bob", "Bob", "DE", "basic", 1),  # a duplicate of bob's current version
        *(record for record, _ in BAD_USERS),  # each leaves the user as it was
    ]


def views_phase_one() -> list[Record]:
    return [
        view("alice", "/home", 0),
        view("bob", "/cart", 5),
        view("carol", "/home", 7),
        view("dave", "/help", 9),
        view("erin", "/home", 11),  # erin's profile only comes in phase two: never re-enriched
        view("zoe", "/home", 12),  # never known
        *(record for record, _ in BAD_VIEWS),
    ]


def users_phase_two() -> list[Record]:
    return [
        profile("erin", "Erin", "PT", "free", 6),
        profile("carol", "Carol R.", "IT", "basic", 6),  # re-created after the delete
        profile("bob", "Bob", "AT", "basic", 6),
        profile("alice", "Alice", "FR", "gold", 3),  # a duplicate of alice's current version
    ]


def views_phase_two() -> list[Record]:
    return [
        view("alice", "/home", 20),
        view("bob", "/cart", 21),
        view("carol", "/home", 22),
        view("erin", "/home", 23),
        view("zoe", "/x", 24),
        view("alice", "/home", 0),  # the same view again: enriched again, under its own key
    ]


def users_phase_three() -> list[Record]:
    return [deleted("bob"), profile("dave", "Dave", "ES", "gold", 9), deleted("nobody")]


def views_phase_three() -> list[Record]:
    return [view("bob", "/cart", 40), view("dave", "/help", 41), view("alice", "/about", 42)]


# --- helpers -----------------------------------------------------------------------------------------------


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> EnrichmentJobConfig:
    config = EnrichmentJobConfig(
        streaming=streaming_config("user-enrichment", kafka.bootstrap_servers, tmp_path, topic_name),
        views_topic=f"{topic_name}-views",
        users_topic=f"{topic_name}-users",
        output_topic=f"{topic_name}-enriched",
    )
    create_job_topics(
        kafka,
        config.streaming,
        TopicSpec(config.views_topic, partitions=2),
        TopicSpec(config.users_topic, partitions=2, compact=True, extra_config=FAST_COMPACTION),
        TopicSpec(config.output_topic, partitions=2),
    )
    return config


# --- tests -------------------------------------------------------------------------------------------------


def test_views_carry_the_profile_as_of_their_batch(
    spark: SparkSession, kafka: LocalKafka, job_config: EnrichmentJobConfig
) -> None:
    bootstrap = kafka.bootstrap_servers
    users_topic, views_topic = job_config.users_topic, job_config.views_topic
    checkpoint = Path(job_config.streaming.checkpoint_for(job_config.streaming.query_name))

    users = compact_snapshots(kafka, {users_topic: SNAPSHOT})
    assert len(read_records(bootstrap, users_topic)) < len(users)  # the job starts on a compacted log
    first_users = produce(bootstrap, users_topic, users_phase_one())
    first_views = produce(bootstrap, views_topic, views_phase_one())
    users, views = users + first_users, list(first_views)
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
        # Changes are produced (and acknowledged) before the views that should see them.
        users += produce(bootstrap, users_topic, users_phase_two())
        views += produce(bootstrap, views_topic, views_phase_two())
        process_all(queries)
        users += produce(bootstrap, users_topic, users_phase_three())
        process_all(queries)
        views += produce(bootstrap, views_topic, views_phase_three())
        process_all(queries)
        rows_read = input_rows(queries)

    now = datetime.now(UTC)
    ends = batch_ends(checkpoint)
    expected = expected_enriched(views, users, ends, now)
    output = read_records(bootstrap, job_config.output_topic)
    assert latest_per_key(output) == expected
    assert len(output) == len(expected)  # one record per valid view
    # Both queries count each record they read once (the compacted-away ones are never read).
    in_topics = len(read_records(bootstrap, users_topic)) + len(views)
    assert rows_read == {"user-enrichment": in_topics, "user-enrichment.dead-letters": in_topics}

    # Everything produced before the start is the first batch, so the same-batch cases are deterministic.
    assert {batch_of(record, ends) for record in [*first_users, *first_views]} == {0}
    # The scenario exercises what it claims to (checked on the reference's result).
    alice_first, carol_first, erin_first = (expected[first_views[i].position] for i in (0, 2, 4))
    assert alice_first["tier"] == "gold"  # updated after the view, in the same batch
    assert carol_first["name"] is None  # deleted after the view, in the same batch
    assert erin_first["name"] is None  # erin's profile came in a later batch

    def seen(user: str, field: str) -> set[object]:
        return {value[field] for value in expected.values() if value["user_id"] == user}

    assert seen("carol", "name") == {None, "Carol R."}  # deleted, then re-created
    assert seen("erin", "name") == {None, "Erin"}
    assert seen("bob", "country") == {"DE", "AT", None}  # updated, then deleted
    assert seen("zoe", "name") == {None}
    assert sum(record.value == first_views[0].value for record in views) == 2  # a duplicate view

    # Every bad view and profile is a dead letter, keyed by its position, with its reason.
    bad_users, bad_views = first_users[-len(BAD_USERS) :], first_views[-len(BAD_VIEWS) :]
    assert all(profile_change(record) is None for record in bad_users)
    assert all(valid_view(record, now) is None for record in bad_views)
    dead_letters = read_dead_letters(bootstrap, job_config.streaming.dead_letter_topic)
    assert {letter.origin: letter.reason for letter in dead_letters} == {
        sent.position: reason
        for sent, reason in [
            *zip(bad_users, (reason for _, reason in BAD_USERS), strict=True),
            *zip(bad_views, (reason for _, reason in BAD_VIEWS), strict=True),
        ]
    }

    # A batch re-run after a failure writes the same records again, even though the users table has moved
    # on since: it replays the batch's own offsets on the state the batch before it left.
    last = forget_last_commit(checkpoint)
    users += produce(bootstrap, users_topic, [profile("alice", "Alice", "FR", "platinum", 50)])
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
    rerun = [
        (record.key, record.value)
        for record in output  # every one keyed, as latest_per_key(output) checked
        if record.key is not None
        and batch_of(next(v for v in views if v.position == record.key.decode()), ends) == last
    ]
    assert rerun
    after = read_records(bootstrap, job_config.output_topic)
    assert Counter((r.key, r.value) for r in after) - Counter((r.key, r.value) for r in output) == Counter(
        rerun
    )
    assert latest_per_key(after) == expected_enriched(views, users, batch_ends(checkpoint), now) == expected


def test_the_table_is_state_of_the_main_query_alone_and_a_restart_keeps_it(
    spark: SparkSession, kafka: LocalKafka, job_config: EnrichmentJobConfig
) -> None:
    bootstrap = kafka.bootstrap_servers
    streaming = job_config.streaming
    produce(
        bootstrap,
        job_config.users_topic,
        [profile("alice", "Alice", "FR", "gold", 1), profile("bob", "Bob", "DE", "free", 2), deleted("bob")],
    )
    # The state store settings reach the main query, and only it.
    run_with_table_state(spark, lambda: start_queries(spark, job_config), streaming)

    views = produce(bootstrap, job_config.views_topic, [view("alice", "/a", 5), view("bob", "/b", 6)])
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
        rows_read = input_rows(queries)
    # After the restart the users topic is not read again: the table comes from the state.
    assert rows_read[streaming.query_name] == len(views)
    enriched = latest_per_key(read_records(bootstrap, job_config.output_topic))
    assert enriched[views[0].position]["tier"] == "gold"
    assert enriched[views[1].position]["name"] is None  # bob was deleted


def test_a_checkpoint_of_the_stateless_version_is_refused_at_start(
    spark: SparkSession, kafka: LocalKafka, job_config: EnrichmentJobConfig
) -> None:
    """The job's earlier version kept no state (a query over both topics that read the users table in every
    batch); resumed, its checkpoint would give an empty users table. Such a checkpoint has committed batches
    and no state."""
    streaming = job_config.streaming
    produce(kafka.bootstrap_servers, job_config.views_topic, [view("alice", "/a", 5)])
    stateless = (
        read_kafka_stream(spark, streaming, [job_config.views_topic, job_config.users_topic])
        .writeStream.format("noop")
        .option("checkpointLocation", streaming.checkpoint_for(streaming.query_name))
        .start()
    )
    with running([stateless]):
        stateless.processAllAvailable()
    with pytest.raises(CheckpointError, match=r"committed batches but no state \(the users table\)"):
        start_queries(spark, job_config)
    assert not spark.streams.active


def test_profile_table_is_the_last_valid_record_per_user(spark: SparkSession) -> None:
    """Static check of the table side, through the job's steps on a batch (state starts empty): latest by
    offset, tombstones delete, dead letters change nothing."""
    records = [
        TopicRecord("users", 0, 0, *profile("a", "A", "FR", "free", 0)),
        TopicRecord("users", 1, 0, *profile("b", "B", "DE", "free", 0)),
        TopicRecord("users", 0, 1, *profile("c", "C", "IT", "free", 0)),
        TopicRecord("users", 0, 2, *profile("a", "A", "FR", "gold", 1)),  # update
        TopicRecord("users", 1, 1, *deleted("b")),  # delete
        TopicRecord("users", 0, 3, b"c", b"{oops"),  # bad: c stays as it was
        TopicRecord("users", 0, 4, *profile("d", "D", "ES", "free", 0)),
        TopicRecord("users", 0, 5, b"d", profile("x", "X", "XX", "gold", 1)[1]),  # key mismatch: ignored
        TopicRecord("users", 1, 2, None, None),  # tombstone without a key: ignored
        TopicRecord("users", 1, 5, None, profile("b", "B", "DE", "gold", 3)[1]),  # no key: ignored
        TopicRecord("users", 1, 3, *deleted("e")),  # delete of a user never seen
        TopicRecord("users", 1, 4, *profile("e", "E", "PT", "free", 2)),  # re-created
        TopicRecord("users", 0, 6, *profile("a", "A", "FR", "gold", 1)),  # duplicate
    ]
    frame = spark.createDataFrame(
        [(r.key, r.value, r.topic, r.partition, r.offset, BASE.replace(tzinfo=None)) for r in records],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp",
    )

    views = spark.createDataFrame(
        [(f"view-of-{user}", user, "/", BASE) for user in ("a", "b", "c", "d", "e", "x")],
        "source string, user_id string, url string, event_time timestamp",
    )
    enriched = enrich_with_profile_state(profile_changes(decode_profiles(frame, EventLimits())), views)
    table = enriched.where(F.col("name").isNotNull()).select(
        "user_id", *PROFILE_FIELDS, F.col("profile_updated_at").alias("updated_at")
    )

    current: dict[str, dict[str, object] | None] = {}
    for record in sorted(records, key=lambda r: r.offset):  # each user's records share a partition
        change = profile_change(record)
        if change is not None:
            current[change[0]] = change[1]
    expected = [
        (
            user,
            value["name"],
            value["country"],
            value["tier"],
            datetime.fromisoformat(str(value["profile_updated_at"]).replace("Z", "+00:00")),
        )
        for user, value in current.items()
        if value is not None
    ]
    assert sorted(user for user, *_ in expected) == ["a", "c", "d", "e"]
    assertDataFrameEqual(
        table,
        spark.createDataFrame(
            expected,
            "user_id string, name string, country string, tier string, updated_at timestamp",
        ),
    )
