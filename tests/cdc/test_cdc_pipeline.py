"""Change data capture on the real components: PostgreSQL 15 -> Debezium 3.6.1 on Kafka Connect 4.3.1 ->
Kafka -> the user-view job. The database is the oracle: after the workload, the changelog topics read as
tables equal the tables, and the view topic read as latest value per key equals the SQL join."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from jobs.producers.cdc_workload import Workload
from jobs.producers.changelog import ChangelogGenerator
from jobs.user_view.config import UserViewJobConfig
from jobs.user_view.main import start_queries
from streamstack.local.connect import LocalConnect
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.postgres import LocalPostgres
from tests.cdc.conftest import Capture, run_workload
from tests.conftest import repo_root
from tests.jobs.streaming_helpers import create_job_topics, process_all, running, streaming_config
from tests.kafka_helpers import TopicRecord, latest_per_key, read_dead_letters, read_records, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

# The view as SQL: one row per existing user, the count and sum of the user's existing orders, the latest
# updated_at of the profile and those orders, in the job's output format.
VIEW_SQL = """
SELECT u.user_id, u.name, u.country, u.tier,
       count(o.order_id) AS order_count,
       coalesce(sum(o.amount), 0) AS order_total,
       to_char(greatest(u.updated_at, max(o.updated_at)) AT TIME ZONE 'UTC',
               'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_at
FROM public.users u LEFT JOIN public.orders o ON o.user_id = u.user_id
GROUP BY u.user_id, u.name, u.country, u.tier, u.updated_at
"""


def view_in_database(capture: Capture) -> dict[str, dict[str, object]]:
    with capture.connection() as connection, connection.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute(VIEW_SQL)
        return {
            row["user_id"]: {**row, "order_total": float(row["order_total"])} for row in cursor.fetchall()
        }


def test_the_view_topic_equals_the_join_of_the_tables_after_a_random_workload(
    spark: SparkSession, kafka: LocalKafka, capture: Capture, topic_name: str, tmp_path: Path
) -> None:
    config = UserViewJobConfig(
        streaming=streaming_config("user-view", kafka.bootstrap_servers, tmp_path, topic_name),
        users_topic=capture.topics["users"],
        orders_topic=capture.topics["orders"],
        output_topic=f"{topic_name}-user-view",
    )
    create_job_topics(kafka, config.streaming, TopicSpec(config.output_topic, partitions=2, compact=True))
    capture.start_connector()

    # 3,000 statements: creates, updates, deletes, re-creates, orders for users that do not exist (yet),
    # over 150 users; the job then reads the changelogs as Debezium wrote them (a few large batches).
    output = run_workload(capture, "--rate", "3000", "--users", "150", "--seed", "11", "--max-events", "3000")
    capture.wait_until_topics_hold_the_tables()
    with running(start_queries(spark, config)) as queries:
        process_all(queries)
        first = view_in_database(capture)
        first_view = latest_per_key(
            read_records(kafka.bootstrap_servers, config.output_topic), tombstones=True
        )
        # Then users in the view are deleted, an order changes, and a column is added to users while
        # everything runs: Debezium carries it, the job ignores fields it does not know (documented).
        gone, emailed = sorted(first)[:5], sorted(first)[-1]
        with capture.connection() as connection:
            connection.execute("DELETE FROM public.users WHERE user_id = ANY(%s)", (gone,))
            connection.execute("ALTER TABLE public.users ADD COLUMN email text")
            connection.execute(
                "UPDATE public.users SET email = user_id || '@example.com', updated_at = now()"
                " WHERE user_id = %s",
                (emailed,),
            )
            connection.execute(
                "UPDATE public.orders SET amount = amount + 1, updated_at = now()"
                " WHERE order_id = (SELECT min(order_id) FROM public.orders)"
            )
        capture.wait_until_topics_hold_the_tables()
        process_all(queries)

    summary = re.fullmatch(r"applied (\d+) user changes and (\d+) order changes \((\d+) deletes\)\n", output)
    assert summary is not None, output
    users_changed, orders_changed, deletes = map(int, summary.groups())
    assert users_changed + orders_changed == 3000 and deletes > 100

    assert {user: row for user, row in first_view.items() if row is not None} == first
    expected = view_in_database(capture)
    view = latest_per_key(read_records(kafka.bootstrap_servers, config.output_topic), tombstones=True)
    assert {user: row for user, row in view.items() if row is not None} == expected
    assert set(gone) <= {user for user, row in view.items() if row is None} and not set(gone) & set(expected)
    users_topic = latest_per_key(
        read_records(kafka.bootstrap_servers, capture.topics["users"]), tombstones=True
    )
    assert users_topic[emailed]["email"] == f"{emailed}@example.com" and "email" not in view[emailed]
    assert view[emailed]["updated_at"] != first_view[emailed]["updated_at"]
    # The scenario is what it claims: users came and went, some orders name users that do not exist.
    users = capture.table("users")
    orders = capture.table("orders")
    assert 0 < len(users) < 150 and any(order["user_id"] not in users for order in orders.values())
    # Every record of the changelogs decoded: Debezium writes what the job reads.
    assert read_dead_letters(kafka.bootstrap_servers, config.streaming.dead_letter_topic) == []


def test_rows_that_exist_before_the_connector_starts_are_captured_by_its_snapshot(capture: Capture) -> None:
    with capture.connection() as connection:
        workload = Workload(connection, users=80, seed=5)
        workload.run(rate=5000, limit=600)
    assert workload.applied["deletes"] > 10
    tables = {name: capture.table(name) for name in capture.topics}
    assert all(tables.values())

    capture.start_connector()
    capture.wait_until_topics_hold_the_tables()

    # The snapshot reads each existing row once: one record per row, no tombstone (the deletes happened
    # before the connector started, so nothing of them reaches the topics).
    for name, topic in capture.topics.items():
        records = read_records(capture.kafka.bootstrap_servers, topic)
        assert sorted(record.key.decode() for record in records if record.key) == sorted(tables[name])
        assert all(record.value is not None for record in records)
    # A change after the snapshot streams in after it.
    with capture.connection() as connection:
        connection.execute("UPDATE public.users SET tier = 'gold', updated_at = %s", (datetime.now(UTC),))
    capture.wait_until_topics_hold_the_tables()


def _sequences(records: list[TopicRecord]) -> dict[str, list[bytes | None]]:
    """Each key's values in topic order (a key's records share a partition)."""
    by_key: dict[str, list[bytes | None]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None
        by_key[record.key.decode()].append(record.value)
    return by_key


def _content(value: bytes | None) -> dict[str, object] | None:
    """A changelog value without its updated_at (the time the workload ran, which a replay of the
    generator cannot know)."""
    if value is None:
        return None
    row = json.loads(value)
    row.pop("updated_at")
    return dict(row)


def _expected_changes(users: int, seed: int, count: int) -> dict[str, dict[str, list[object]]]:
    """table -> key -> the contents of its changes, as `python -m jobs.producers.cdc_workload` with this
    seed applies them (the generator is deterministic; only updated_at depends on the clock)."""
    generator = ChangelogGenerator(users, seed)
    expected: dict[str, dict[str, list[object]]] = {"users": defaultdict(list), "orders": defaultdict(list)}
    for n in range(count):
        change = generator.next_change(1_800_000_000.0 + n)
        row = None if change.row is None else {k: v for k, v in change.row.items() if k != "updated_at"}
        expected[change.table][change.key].append(row)
    return expected


def _check_in_order_at_least_once(topic_values: list[bytes | None], expected: list[object], key: str) -> None:
    """The key's records are its changes in order, each at least once: after a worker crash Connect sends
    again what it sent since its last offset commit, a repeat of records already in the topic, in their
    order. A repeat is recognized by its bytes (a row's value carries its updated_at, so two changes never
    share them; a tombstone is taken as a repeat only when it is not the next change). A change missing,
    or out of order, fails."""
    matched: list[bytes | None] = []  # matched[i]: the record of change expected[i]
    for value in topic_values:
        position = len(matched)
        if value is not None and value in matched:  # a repeat: what follows continues from there
            del matched[len(matched) - matched[::-1].index(value) :]
        elif position < len(expected) and _content(value) == expected[position]:
            matched.append(value)
        elif value is None and None in matched:
            del matched[len(matched) - matched[::-1].index(None) :]
        else:
            raise AssertionError(
                f"{key}: {value!r} is not its next change {expected[position : position + 1]}"
                f" (records {topic_values}, changes {expected})"
            )
    assert len(matched) == len(expected), f"{key}: {len(expected) - len(matched)} changes missing"


def test_a_killed_worker_and_a_restarted_database_lose_no_change_and_keep_each_keys_order(
    capture: Capture, postgres: LocalPostgres, connect: LocalConnect
) -> None:
    capture.start_connector()
    count = 2000
    workload = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobs.producers.cdc_workload",
            "--rate",
            "400",
            "--users",
            "60",
            "--seed",
            "21",
            "--max-events",
            str(count),
        ],
        env=capture.workload_environment(),
        cwd=repo_root(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Mid-stream, the worker is killed outright (no offset commit on the way out), then started again.
        # Mid-stream means after the connector's first offset commit: killed before it, the connector starts
        # over with a new snapshot, which cannot carry the deletes made meanwhile (README, Operations).
        wait_for(
            lambda: len(read_records(capture.kafka.bootstrap_servers, capture.topics["orders"])) > 300,
            30,
            "changes before the kill",
        )
        wait_for(
            lambda: any(
                capture.source.connector_name.encode() in (record.key or b"")
                for record in read_records(
                    capture.kafka.bootstrap_servers, connect.cluster.offset_storage_topic
                )
            ),
            30,
            "the connector's first offset commit",
        )
        os.killpg(connect.pid, signal.SIGKILL)
        wait_for(lambda: connect.exit_code() is not None, 30, "the killed worker to exit")
        connect.restart()
        connect.wait_until_running(capture.source.connector_name)
        output, _ = workload.communicate(timeout=120)
    finally:
        workload.kill()
    assert workload.returncode == 0 and output.startswith("applied"), output
    capture.wait_until_topics_hold_the_tables()
    expected = _expected_changes(60, 21, count)
    for name, topic in capture.topics.items():
        sequences = _sequences(read_records(capture.kafka.bootstrap_servers, topic))
        assert set(sequences) == set(expected[name])
        for key, values in sequences.items():
            _check_in_order_at_least_once(values, expected[name][key], key)

    # PostgreSQL restarted under the connector: it resumes from its replication slot, without a new
    # snapshot (which would send every row again).
    before = sum(len(read_records(capture.kafka.bootstrap_servers, t)) for t in capture.topics.values())
    postgres.stop()
    postgres.restart()
    with capture.connection() as connection:
        slot = connection.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s", (capture.source.slot_name,)
        ).fetchone()
        assert slot is not None
        Workload(connection, users=60, seed=22).run(rate=2000, limit=300)
    capture.wait_until_topics_hold_the_tables(timeout=180)
    connect.wait_until_running(capture.source.connector_name)
    after = sum(len(read_records(capture.kafka.bootstrap_servers, t)) for t in capture.topics.values())
    rows = sum(len(capture.table(name)) for name in capture.topics)
    assert 300 <= after - before < 300 + rows
