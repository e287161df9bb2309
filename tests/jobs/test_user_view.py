"""The per-user materialized view against real Kafka, checked against a plain-Python replay of the changelogs.

The reference is written from the job's contract, not its code: replay each changelog keeping the last
valid record per key (a tombstone deletes), then one row per existing user with the count and the decimal
sum of the user's existing orders and the latest updated_at of the profile and those orders. After the job
has processed everything, the view topic read as last value per key must equal that view, with a tombstone
for each user that was in the view and is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.consumer.fetcher import ConsumerRecord
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.testing import assertDataFrameEqual

from jobs.common.config import StreamingJobConfig
from jobs.producers.changelog import Change, ChangelogGenerator
from jobs.user_view.main import UserViewJobConfig, start_queries
from jobs.user_view.transforms import stored_view, view_changes
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.conftest import repo_root
from tests.kafka_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
PROFILE_FIELDS = ("name", "country", "tier")
CENT = Decimal("0.01")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


Record = tuple[bytes | None, bytes | None]
Upsert = tuple[bytes, bytes]


def profile(user: str, name: str, country: str, tier: str, minute: int) -> Upsert:
    body = {
        "user_id": user,
        "name": name,
        "country": country,
        "tier": tier,
        "updated_at": iso(BASE + timedelta(minutes=minute)),
    }
    return user.encode(), json.dumps(body).encode()


def order(order_id: str, user: str, amount: float, status: str, minute: int) -> Upsert:
    body = {
        "order_id": order_id,
        "user_id": user,
        "amount": amount,
        "status": status,
        "updated_at": iso(BASE + timedelta(minutes=minute)),
    }
    return order_id.encode(), json.dumps(body).encode()


def deleted(key: str) -> Record:
    return key.encode(), None


@dataclass(frozen=True)
class Sent:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def position(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


def send(bootstrap_servers: str, topic: str, records: Sequence[Record]) -> list[Sent]:
    """Produce in order (keyed records land in their key's partition) and return where each landed."""
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    try:
        futures = [(key, value, producer.send(topic, key=key, value=value)) for key, value in records]
        producer.flush(timeout=30)
        sent = []
        for key, value, future in futures:
            metadata = future.get(timeout=30)
            sent.append(Sent(topic, metadata.partition, metadata.offset, key, value))
        return sent
    finally:
        producer.close(timeout=10)


def read_records(bootstrap_servers: str, topic: str) -> list[ConsumerRecord]:
    """Every record of the topic with its partition, offset and headers."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end_offsets = consumer.end_offsets(partitions)
        records: list[ConsumerRecord] = []
        while any(consumer.position(tp) < end_offsets[tp] for tp in partitions):
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


# --- the reference -------------------------------------------------------------------------------------


def parse_time(text: object) -> datetime | None:
    """ISO-8601 with a zone, or None."""
    if not isinstance(text, str) or "T" not in text or not (text.endswith("Z") or text[-6] in "+-"):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def change(record: Sent, key_field: str) -> tuple[str, dict[str, object] | None] | None:
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


def table(records: Sequence[Sent], key_field: str) -> dict[str, dict[str, object]]:
    rows: dict[str, dict[str, object] | None] = {}
    for record in sorted(records, key=lambda r: r.offset):  # a key's records share a partition
        valid = change(record, key_field)
        if valid is not None:
            rows[valid[0]] = valid[1]
    return {key: row for key, row in rows.items() if row is not None}


def expected_view(users: Sequence[Sent], orders: Sequence[Sent]) -> dict[str, dict[str, object]]:
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


def process_all(queries: Sequence[StreamingQuery]) -> None:
    for query in queries:
        query.processAllAvailable()


def stop_all(queries: Sequence[StreamingQuery]) -> None:
    for query in queries:
        query.stop()


def latest_per_key(records: Sequence[ConsumerRecord]) -> dict[str, dict[str, object] | None]:
    """Last value per key; None where the last record is a tombstone."""
    latest: dict[str, dict[str, object] | None] = {}
    for record in records:
        latest[record.key.decode()] = None if record.value is None else json.loads(record.value)
    return latest


def rows(latest: Mapping[str, dict[str, object] | None]) -> dict[str, dict[str, object]]:
    return {key: value for key, value in latest.items() if value is not None}


def tombstoned(latest: Mapping[str, dict[str, object] | None]) -> set[str]:
    return {key for key, value in latest.items() if value is None}


def compact_snapshots(kafka: LocalKafka, snapshots: Mapping[str, Sequence[Record]]) -> list[Sent]:
    """Produce each snapshot into its (fast-rolling) topic, roll every partition's segment by re-sending its
    last record, wait until the log cleaner has kept only the last record per key in the rolled segments,
    then stop rolling so the cleaner leaves the rest of the test alone."""
    bootstrap = kafka.bootstrap_servers
    sent = {topic: send(bootstrap, topic, records) for topic, records in snapshots.items()}
    time.sleep(0.3)  # past segment.ms, so the next append to each partition rolls its segment
    surviving: dict[str, int] = {}
    for topic, records in sent.items():
        last_per_partition = {record.partition: record for record in records}
        surviving[topic] = len({(r.partition, r.key) for r in records}) + len(last_per_partition)
        records.extend(send(bootstrap, topic, [(r.key, r.value) for r in last_per_partition.values()]))
    wait_for(
        lambda: all(len(read_records(bootstrap, topic)) == count for topic, count in surviving.items()),
        timeout=40,
        what=f"the log cleaner to compact {', '.join(surviving)}",
    )
    admin = kafka.admin()
    try:
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    topic,
                    configs={"cleanup.policy": "compact", "segment.ms": str(7 * 24 * 3600 * 1000)},
                )
                for topic in snapshots
            ]
        )
    finally:
        admin.close()
    return [record for records in sent.values() for record in records]


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> Iterator[UserViewJobConfig]:
    config = UserViewJobConfig(
        streaming=StreamingJobConfig(
            query_name="user-view",
            bootstrap_servers=kafka.bootstrap_servers,
            checkpoint_dir=str(tmp_path / "checkpoints"),
            metrics_port=0,
            trigger_interval="500 milliseconds",
            dead_letter_topic=f"{topic_name}-dead-letters",
        ),
        users_topic=f"{topic_name}-users",
        orders_topic=f"{topic_name}-orders",
        output_topic=f"{topic_name}-user-view",
    )
    fast_compaction = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.001"}
    kafka.create_topics(
        [
            TopicSpec(config.users_topic, partitions=2, compact=True, extra_config=fast_compaction),
            TopicSpec(config.orders_topic, partitions=2, compact=True, extra_config=fast_compaction),
            TopicSpec(config.output_topic, partitions=2, compact=True),
            TopicSpec(config.streaming.dead_letter_topic),
        ]
    )
    yield config


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
    sent_users = send(bootstrap, users_topic, first_users)
    sent_orders = send(bootstrap, orders_topic, first_orders)
    users, orders = users + sent_users, orders + sent_orders
    views: list[dict[str, dict[str, object] | None]] = []
    expected: list[dict[str, dict[str, object]]] = []
    queries = start_queries(spark, job_config)
    try:
        process_all(queries)
        views.append(latest_per_key(read_records(bootstrap, view_topic)))
        expected.append(expected_view(users, orders))
        first_count = len(read_records(bootstrap, view_topic))
        for phase in (phase_two, phase_three):
            phase_users, phase_orders = phase()
            users += send(bootstrap, users_topic, phase_users)
            orders += send(bootstrap, orders_topic, phase_orders)
            process_all(queries)
            views.append(latest_per_key(read_records(bootstrap, view_topic)))
            expected.append(expected_view(users, orders))
        input_rows = {q.name: sum(p["numInputRows"] for p in q.recentProgress) for q in queries}
    finally:
        stop_all(queries)

    for view, reference in zip(views, expected, strict=True):
        assert rows(view) == reference
    # Both queries count each record they read once (the compacted-away ones are never read).
    in_topics = len(read_records(bootstrap, users_topic)) + len(read_records(bootstrap, orders_topic))
    assert input_rows == {"user-view": in_topics, "user-view.dead-letters": in_topics}
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
    dead_letters = read_records(bootstrap, job_config.streaming.dead_letter_topic)
    assert {
        record.key.decode(): dict(record.headers)["dead_letter.reason"].decode() for record in dead_letters
    } == {sent.position: reason for sent, reason in bad}

    # A batch re-run after a failure rewrites nothing (the topic already holds its view); the next batch
    # writes exactly the one row that a new change alters.
    before = read_records(bootstrap, view_topic)
    last = max(int(name) for name in os.listdir(checkpoint / "commits") if name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    orders += send(bootstrap, orders_topic, [order("o13", "erin", 12.5, "placed", 12)])
    queries = start_queries(spark, job_config)
    try:
        process_all(queries)
    finally:
        stop_all(queries)
    after = read_records(bootstrap, view_topic)
    final = expected_view(users, orders)
    written = Counter((r.key, r.value) for r in after) - Counter((r.key, r.value) for r in before)
    assert [(key.decode(), json.loads(value)) for key, value in written.elements()] == [
        ("erin", final["erin"])
    ]
    assert rows(latest_per_key(after)) == final


def test_changes_are_the_rows_that_differ_and_tombstones_for_the_gone(spark: SparkSession) -> None:
    """Static check of the diff: stored is the last record per key; equal rows are not rewritten."""
    stored_records = [
        ("a", '{"v":1}', 0, 0),
        ("a", '{"v":2}', 0, 3),  # a's last record
        ("b", '{"v":1}', 1, 0),
        ("c", '{"v":1}', 1, 1),
        ("c", None, 1, 2),  # c was deleted
        ("d", '{"v":1}', 0, 1),
    ]
    view = [("a", '{"v":2}'), ("b", '{"v":5}'), ("c", '{"v":1}'), ("e", '{"v":1}')]
    stored_frame = spark.createDataFrame(
        [
            (key.encode(), None if value is None else value.encode(), p, o)
            for key, value, p, o in stored_records
        ],
        "key binary, value binary, partition int, offset long",
    )

    changes = view_changes(spark.createDataFrame(view, "key string, value string"), stored_view(stored_frame))

    last_stored: dict[str, str | None] = {}
    for key, value, _, _ in sorted(stored_records, key=lambda r: r[3]):
        last_stored[key] = value
    wanted = dict(view)
    expected = [(key, value) for key, value in wanted.items() if last_stored.get(key) != value] + [
        (key, None) for key, value in last_stored.items() if value is not None and key not in wanted
    ]
    assert sorted(key for key, _ in expected) == ["b", "c", "d", "e"]
    assertDataFrameEqual(changes, spark.createDataFrame(expected, "key string, value string"))


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
            (r.key.decode(), r.value is None) for r in sorted(written[topic], key=lambda r: r.offset)
        ] == [(c.key, c.row is None) for c in expected if c.table == table]
    deletes = sum(c.row is None for c in expected)
    assert output.strip() == (
        f"sent {len(written[users_topic])} user changes to {users_topic} and {len(written[orders_topic])} "
        f"order changes to {orders_topic} ({deletes} deletes)"
    )
