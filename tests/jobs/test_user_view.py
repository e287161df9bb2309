"""The per-user materialized view against real Kafka, checked against a plain-Python replay of the changelogs.

The reference is written from the job's contract, not its code: replay each changelog keeping the last
valid record per key (a tombstone deletes), then one row per existing user with the count and the decimal
sum of the user's existing orders and the latest updated_at of the profile and those orders. After the job
has processed everything, the view topic read as last value per key must equal that view, with a tombstone
for each user that was in the view and is gone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.common.checkpoints import CheckpointError
from jobs.common.kafka_io import read_kafka_stream
from jobs.producers.changelog import Change, ChangelogGenerator
from jobs.user_view.config import UserViewJobConfig
from jobs.user_view.main import start_queries
from jobs.user_view.transforms import not_yet_stored, stored_view
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.conftest import repo_root
from tests.jobs.streaming_helpers import (
    changelog_record,
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
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
PROFILE_FIELDS = ("name", "country", "tier")
CENT = Decimal("0.01")


Upsert = tuple[bytes, bytes]


def profile(user: str, name: str, country: str, tier: str, minute: int) -> Upsert:
    return user_profile(user, name, country, tier, BASE + timedelta(minutes=minute))


def order(order_id: str, user: str, amount: float, status: str, minute: int) -> Upsert:
    updated_at = BASE + timedelta(minutes=minute)
    return changelog_record(
        order_id, updated_at, order_id=order_id, user_id=user, amount=amount, status=status
    )


def deleted(key: str) -> Record:
    return key.encode(), None


# --- the reference -------------------------------------------------------------------------------------


def parse_time(text: object) -> datetime | None:
    """ISO-8601 with a zone, or None."""
    if not isinstance(text, str) or "T" not in text or not (text.endswith("Z") or text[-6] in "+-"):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def change(record: TopicRecord, key_field: str) -> tuple[str, dict[str, object] | None] | None:
    """(key, row or None for a delete) for a valid changelog record, None for a bad one."""
    if record.key is None:
        return None
    key = record.key.decode()
    if record.value is None:
        return key, None
    try:
        body = json.loads(record.value)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get(key_field) != key:
        return None
    updated_at = parse_time(body.get("updated_at"))
    if updated_at is None:
        return None
    row: dict[str, object] = {**body, "updated_at": updated_at}
    if key_field == "user_id":
        return (key, row) if all(isinstance(body.get(f), str) for f in PROFILE_FIELDS) else None
    amount = body.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        return None
    cents = Decimal(str(amount)).quantize(CENT, rounding=ROUND_HALF_UP)
    valid = (
        abs(cents) < 10**16 and isinstance(body.get("user_id"), str) and isinstance(body.get("status"), str)
    )
    return (key, {**row, "amount": cents}) if valid else None


def table(records: Sequence[TopicRecord], key_field: str) -> dict[str, dict[str, object]]:
    rows: dict[str, dict[str, object] | None] = {}
    for record in sorted(records, key=lambda r: r.offset):  # a key's records share a partition
        valid = change(record, key_field)
        if valid is not None:
            rows[valid[0]] = valid[1]
    return {key: row for key, row in rows.items() if row is not None}


def expected_view(
    users: Sequence[TopicRecord], orders: Sequence[TopicRecord]
) -> dict[str, dict[str, object]]:
    view: dict[str, dict[str, object]] = {}
    order_rows = table(orders, "order_id").values()
    for user, row in table(users, "user_id").items():
        own = [o for o in order_rows if o["user_id"] == user]
        times = [row["updated_at"], *(o["updated_at"] for o in own)]
        view[user] = {
            "user_id": user,
            **{field: row[field] for field in PROFILE_FIELDS},
            "order_count": len(own),
            "order_total": float(sum((Decimal(str(o["amount"])) for o in own), Decimal(0))),
            "updated_at": iso(max(t for t in times if isinstance(t, datetime))),
        }
    return view


# --- the scenario ------------------------------------------------------------------------------------------

USERS_SNAPSHOT = [
    profile("alice", "Alice", "FR", "free", 0),
    profile("alice", "Alice", "FR", "basic", 1),
    profile("bob", "Bob", "DE", "free", 0),
    profile("gone", "Gone", "US", "free", 0),
    deleted("gone"),
    profile("carol", "Carol", "IT", "free", 1),
]
ORDERS_SNAPSHOT = [
    order("o1", "alice", 10.0, "placed", 1),
    order("o1", "alice", 10.0, "paid", 2),
    order("o2", "alice", 5.25, "placed", 2),
    order("o3", "bob", 7.1, "placed", 2),
    order("o9", "gone", 3.0, "placed", 1),
    deleted("o9"),
]

BAD_USERS: list[tuple[Record, str]] = [
    ((b"alice", b"{not json"), "malformed_json"),
    ((b"bob", profile("mallory", "Mal", "XX", "gold", 5)[1]), "key_mismatch"),
]
BAD_ORDERS: list[tuple[Record, str]] = [
    ((b"o1", b"[]"), "not_an_object"),
    ((b"o2", order("o22", "alice", 1.0, "paid", 5)[1]), "key_mismatch"),
    (
        (b"o3", json.dumps(json.loads(order("o3", "bob", 1.0, "paid", 5)[1]) | {"amount": "1.00"}).encode()),
        "wrong_type",
    ),
    ((b"o5", order("o5", "carol", 1e20, "paid", 5)[1]), "out_of_range"),
    ((b"o6", json.dumps({"order_id": "o6", "user_id": "carol", "amount": 1.0}).encode()), "missing_field"),
]


def phase_one() -> tuple[list[Record], list[Record]]:
    users: list[Record] = [
        profile("erin", "Erin", "PT", "free", 3),  # no orders: count 0, total 0
        *(record for record, _ in BAD_USERS),  # each leaves the user as it was
    ]
    orders: list[Record] = [
        order("o4", "dave", 3.0, "placed", 3),  # dave has no profile yet: waits
        order("o5", "carol", 0.1, "placed", 3),
        order("o6", "carol", 0.2, "placed", 3),  # 0.1 + 0.2 is 0.30 exactly
        order("o7", "bob", 2.0, "placed", 3),
        order("o7", "bob", 2.675, "paid", 4),  # updated: only the latest version counts
        order("o8", "carol", 1.0, "placed", 3),
        deleted("o8"),  # created and deleted in the same batch
        order("o2", "alice", 5.25, "placed", 2),  # a duplicate of o2's current version
        order("o10", "frank", 8.0, "placed", 3),  # frank never exists
        *(record for record, _ in BAD_ORDERS),
    ]
    return users, orders


def phase_two() -> tuple[list[Record], list[Record]]:
    users: list[Record] = [
        profile("dave", "Dave", "ES", "gold", 6),  # arrives after his order: o4 now counts
        deleted("carol"),  # her row becomes a tombstone; her orders stay
    ]
    orders: list[Record] = [
        deleted("o2"),  # alice's total drops
        order("o3", "alice", 7.1, "shipped", 6),  # moved from bob to alice
        order("o11", "carol", 9.99, "placed", 6),  # for a deleted user: waits
    ]
    return users, orders


def phase_three() -> tuple[list[Record], list[Record]]:
    users: list[Record] = [
        profile("carol", "Carol R.", "IT", "basic", 8),  # re-created: o5, o6 and o11 count again
        profile("alice", "Alice", "FR", "gold", 8),
        deleted("bob"),
    ]
    orders: list[Record] = [
        order("o1", "alice", 10.0, "refunded", 9),  # updated_at of alice's row moves to minute 9
        order("o12", "bob", 4.0, "placed", 8),  # for a deleted user
    ]
    return users, orders


# --- helpers -----------------------------------------------------------------------------------------------


def rows(latest: Mapping[str, dict[str, object] | None]) -> dict[str, dict[str, object]]:
    return {key: value for key, value in latest.items() if value is not None}


def tombstoned(latest: Mapping[str, dict[str, object] | None]) -> set[str]:
    return {key for key, value in latest.items() if value is None}


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> UserViewJobConfig:
    config = UserViewJobConfig(
        streaming=streaming_config("user-view", kafka.bootstrap_servers, tmp_path, topic_name),
        users_topic=f"{topic_name}-users",
        orders_topic=f"{topic_name}-orders",
        output_topic=f"{topic_name}-user-view",
    )
    create_job_topics(
        kafka,
        config.streaming,
        TopicSpec(config.users_topic, partitions=2, compact=True, extra_config=FAST_COMPACTION),
        TopicSpec(config.orders_topic, partitions=2, compact=True, extra_config=FAST_COMPACTION),
        TopicSpec(config.output_topic, partitions=2, compact=True),
    )
    return config


# --- tests -------------------------------------------------------------------------------------------------


def test_view_topic_equals_the_view_of_the_changelogs(
    spark: SparkSession, kafka: LocalKafka, job_config: UserViewJobConfig
) -> None:
    bootstrap = kafka.bootstrap_servers
    users_topic, orders_topic, view_topic = (
        job_config.users_topic,
        job_config.orders_topic,
        job_config.output_topic,
    )
    checkpoint = Path(job_config.streaming.checkpoint_for(job_config.streaming.query_name))

    snapshot = compact_snapshots(kafka, {users_topic: USERS_SNAPSHOT, orders_topic: ORDERS_SNAPSHOT})
    users = [record for record in snapshot if record.topic == users_topic]
    orders = [record for record in snapshot if record.topic == orders_topic]
    assert len(read_records(bootstrap, orders_topic)) < len(orders)  # the job starts on compacted logs
    first_users, first_orders = phase_one()
    sent_users = produce(bootstrap, users_topic, first_users)
    sent_orders = produce(bootstrap, orders_topic, first_orders)
    users, orders = users + sent_users, orders + sent_orders
    views: list[dict[str, dict[str, object] | None]] = []
    expected: list[dict[str, dict[str, object]]] = []
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
        views.append(latest_per_key(read_records(bootstrap, view_topic), tombstones=True))
        expected.append(expected_view(users, orders))
        first_count = len(read_records(bootstrap, view_topic))
        for phase in (phase_two, phase_three):
            phase_users, phase_orders = phase()
            users += produce(bootstrap, users_topic, phase_users)
            orders += produce(bootstrap, orders_topic, phase_orders)
            process_all(queries)
            views.append(latest_per_key(read_records(bootstrap, view_topic), tombstones=True))
            expected.append(expected_view(users, orders))
        rows_read = input_rows(queries)

    for view, reference in zip(views, expected, strict=True):
        assert rows(view) == reference
    # Both queries count each record they read once (the compacted-away ones are never read).
    in_topics = len(read_records(bootstrap, users_topic)) + len(read_records(bootstrap, orders_topic))
    assert rows_read == {"user-view": in_topics, "user-view.dead-letters": in_topics}
    # The first batch writes one record per user in the view and no tombstone (nothing was there yet).
    assert first_count == len(expected[0]) and not tombstoned(views[0])
    # A user who leaves the view leaves a tombstone; only such users do.
    for earlier, later, view in zip(expected, expected[1:], views[1:], strict=False):
        assert set(earlier) - set(later) <= tombstoned(view) <= set().union(*expected) - set(later)

    # The scenario exercises what it claims to (checked on the reference's result).
    first, second, third = expected
    assert first["carol"]["order_total"] == 0.3 and first["bob"]["order_total"] == 9.78  # 2.675 -> 2.68
    assert first["erin"]["order_count"] == 0 and "dave" not in first and "frank" not in first
    assert second["dave"]["order_count"] == 1 and "carol" not in second
    assert (second["alice"]["order_count"], second["bob"]["order_count"]) == (2, 1)
    assert third["carol"]["order_count"] == 3 and "bob" not in third
    assert third["alice"]["updated_at"] == iso(BASE + timedelta(minutes=9))
    assert (set(first) - set(second), set(second) - set(third)) == ({"carol"}, {"bob"})

    # Every bad record is a dead letter, keyed by its position, with its reason.
    bad = [
        *zip(sent_users[-len(BAD_USERS) :], (reason for _, reason in BAD_USERS), strict=True),
        *zip(sent_orders[-len(BAD_ORDERS) :], (reason for _, reason in BAD_ORDERS), strict=True),
    ]
    assert all(
        change(sent, "user_id" if sent.topic == users_topic else "order_id") is None for sent, _ in bad
    )
    dead_letters = read_dead_letters(bootstrap, job_config.streaming.dead_letter_topic)
    assert {letter.origin: letter.reason for letter in dead_letters} == {
        sent.position: reason for sent, reason in bad
    }

    # A batch re-run after a failure rewrites nothing (the topic already holds its view); the next batch
    # writes exactly the one row that a new change alters.
    before = read_records(bootstrap, view_topic)
    forget_last_commit(checkpoint)
    orders += produce(bootstrap, orders_topic, [order("o13", "erin", 12.5, "placed", 12)])
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
    after = read_records(bootstrap, view_topic)
    final = expected_view(users, orders)
    written = Counter((r.key, r.value) for r in after) - Counter((r.key, r.value) for r in before)
    assert [
        (None if key is None else key.decode(), None if value is None else json.loads(value))
        for key, value in written.elements()
    ] == [("erin", final["erin"])]
    assert rows(latest_per_key(after, tombstones=True)) == final


def test_the_tables_are_state_of_the_main_query_alone_and_a_restart_keeps_them(
    spark: SparkSession, kafka: LocalKafka, job_config: UserViewJobConfig
) -> None:
    bootstrap, streaming = kafka.bootstrap_servers, job_config.streaming
    produce(
        bootstrap,
        job_config.users_topic,
        [profile("alice", "A", "FR", "gold", 1), profile("bob", "B", "DE", "free", 1)],
    )
    produce(
        bootstrap,
        job_config.orders_topic,
        [order("o1", "alice", 10, "placed", 2), order("o2", "bob", 5, "placed", 3)],
    )
    # The state store settings reach the main query, and only it.
    run_with_table_state(spark, lambda: start_queries(spark, job_config), streaming)

    # o1's tombstone names no user and o2 moves: only the orders table kept as state knows whose totals
    # change. After the restart the main query reads the two new records alone.
    changes = produce(bootstrap, job_config.orders_topic, [deleted("o1"), order("o2", "alice", 5, "paid", 4)])
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
        rows_read = input_rows(queries)
    assert rows_read[streaming.query_name] == len(changes)
    view = rows(latest_per_key(read_records(bootstrap, job_config.output_topic), tombstones=True))
    assert (view["alice"]["order_count"], view["alice"]["order_total"]) == (1, 5.0)
    assert (view["bob"]["order_count"], view["bob"]["order_total"]) == (0, 0.0)


def test_a_checkpoint_of_the_stateless_version_is_refused_at_start(
    spark: SparkSession, kafka: LocalKafka, job_config: UserViewJobConfig
) -> None:
    """The job's earlier version kept no state (one query over both topics that read them as tables in every
    batch); resumed, its checkpoint would give empty tables. Such a checkpoint has committed batches and no
    state."""
    streaming = job_config.streaming
    produce(kafka.bootstrap_servers, job_config.users_topic, [profile("alice", "A", "FR", "gold", 1)])
    stateless = (
        read_kafka_stream(spark, streaming, [job_config.users_topic, job_config.orders_topic])
        .writeStream.format("noop")
        .option("checkpointLocation", streaming.checkpoint_for(streaming.query_name))
        .start()
    )
    with running([stateless]):
        stateless.processAllAvailable()
    with pytest.raises(
        CheckpointError, match=r"committed batches but no state \(the users and orders tables\)"
    ):
        start_queries(spark, job_config)
    assert not spark.streams.active


def test_a_rerun_writes_only_what_the_view_topic_does_not_hold(spark: SparkSession) -> None:
    """Static check of the re-run filter: stored is the last record per key; a row or tombstone the topic
    already holds is not written again."""
    stored_records = [
        ("a", '{"v":1}', 0, 0),
        ("a", '{"v":2}', 0, 3),  # a's last record
        ("b", '{"v":1}', 1, 0),
        ("c", '{"v":1}', 1, 1),
        ("c", None, 1, 2),  # c was deleted
        ("d", '{"v":1}', 0, 1),
    ]
    batch = [("a", '{"v":2}'), ("b", '{"v":5}'), ("c", '{"v":1}'), ("d", None), ("e", '{"v":1}'), ("f", None)]
    stored_frame = spark.createDataFrame(
        [
            (key.encode(), None if value is None else value.encode(), p, o)
            for key, value, p, o in stored_records
        ],
        "key binary, value binary, partition int, offset long",
    )

    missing = not_yet_stored(
        spark.createDataFrame(batch, "key string, value string"), stored_view(stored_frame)
    )

    last_stored: dict[str, str | None] = {}
    for key, value, _, _ in sorted(stored_records, key=lambda r: r[3]):
        last_stored[key] = value
    expected = [(key, value) for key, value in batch if last_stored.get(key) != value]
    assert sorted(key for key, _ in expected) == ["b", "c", "d", "e"]
    assertDataFrameEqual(missing, spark.createDataFrame(expected, "key string, value string"))


def generate(users: int, seed: int, count: int) -> list[Change]:
    generator = ChangelogGenerator(users, seed)
    return [generator.next_change(1_800_000_000.0 + i) for i in range(count)]


def test_changelog_generator_makes_a_consistent_cdc_mix() -> None:
    """Replaying the generated changes as tables: every update and delete hits a row that exists, keys are
    the rows' ids, deleted users come back, some orders name users that do not exist."""
    changes = generate(users=30, seed=3, count=3000)
    assert changes == generate(users=30, seed=3, count=3000)

    users: dict[str, dict[str, object]] = {}
    ever_deleted: set[str] = set()
    orders: dict[str, dict[str, object]] = {}
    kinds: Counter[str] = Counter()
    for item in changes:
        rows, id_field = (users, "user_id") if item.table == "users" else (orders, "order_id")
        if item.row is None:
            assert item.key in rows, f"delete of a missing row {item.key}"
            del rows[item.key]
            ever_deleted.add(item.key)
            kinds[f"{item.table} delete"] += 1
            continue
        assert item.row[id_field] == item.key and parse_time(item.row["updated_at"]) is not None
        if item.key in rows:
            kinds[f"{item.table} update"] += 1
            assert item.row != rows[item.key]
        else:
            kinds[f"{item.table} re-create" if item.key in ever_deleted else f"{item.table} create"] += 1
        if item.table == "orders":
            kinds["order for a missing user"] += item.row["user_id"] not in users
        rows[item.key] = item.row
    assert set(kinds) == {
        f"{table} {kind}" for table in ("users", "orders") for kind in ("create", "update", "delete")
    } | {"users re-create", "order for a missing user"}
    assert kinds["orders create"] > kinds["orders delete"] and kinds["users re-create"] >= 3


def test_changelog_producer_writes_keyed_changes_and_stops_on_sigterm(
    kafka: LocalKafka, topic_name: str
) -> None:
    users_topic, orders_topic = f"{topic_name}-users", f"{topic_name}-orders"
    kafka.create_topics([TopicSpec(users_topic, compact=True), TopicSpec(orders_topic, compact=True)])
    command = [
        sys.executable,
        "-m",
        "jobs.producers.changelog",
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--topic",
        users_topic,
        "--orders-topic",
        orders_topic,
        "--rate",
        "200",
        "--users",
        "20",
        "--malformed-share",
        "0",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=repo_root())
    try:
        wait_for(lambda: len(read_records(kafka.bootstrap_servers, orders_topic)) >= 20, 30, "order changes")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0

    written = {topic: read_records(kafka.bootstrap_servers, topic) for topic in (users_topic, orders_topic)}
    expected = generate(users=20, seed=7, count=sum(map(len, written.values())))
    for table, topic in (("users", users_topic), ("orders", orders_topic)):
        assert [
            (None if r.key is None else r.key.decode(), r.value is None)
            for r in sorted(written[topic], key=lambda r: r.offset)
        ] == [(c.key, c.row is None) for c in expected if c.table == table]
    deletes = sum(c.row is None for c in expected)
    assert output.strip() == (
        f"sent {len(written[users_topic])} user changes to {users_topic} and {len(written[orders_topic])} "
        f"order changes to {orders_topic} ({deletes} deletes)"
    )
