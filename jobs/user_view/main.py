"""User view: a per-user materialized view (profile + order count and total) kept from two CDC changelogs.

Input:  `--users-topic` (compacted): CDC of a users table, key = user id, value
        `{"user_id", "name", "country", "tier", "updated_at"}`, a null value (tombstone) deletes the user.
        `--orders-topic` (compacted): CDC of an orders table, key = order id, value
        `{"order_id", "user_id", "amount", "status", "updated_at"}`, a tombstone deletes the order.
Output: `--output-topic` (compacted), upserts keyed by user id, value
        `{"user_id", "name", "country", "tier", "order_count", "order_total", "updated_at"}`, and a tombstone
        for a user who is deleted. A row exists for every user whose profile exists; order_count and
        order_total cover the user's orders that exist now, each in its latest version, whatever its
        status (an update replaces the order, a delete removes it, an order moved to another user moves
        its amount). Orders of a user without a profile wait: they count once the profile (re)appears.
        Amounts are summed as decimals rounded half up to cents; updated_at is the latest updated_at of
        the profile and the user's orders (a delete carries no time, so it cannot advance it).
How:    one query, `<name>`, reads both topics as streams, always from their start (the tables are the
        whole topics), and keeps the tables as Spark state in two keyed steps (jobs.jvm.user_view_tables:
        flatMapGroupsWithState in the JVM, the RocksDB state store with changelog checkpointing): keyed by
        order, the orders table, so that an order's change becomes a change of the user who held it and
        of the user who holds it now (an order's tombstone names no user, and the versions that did may
        be compacted away: only this state still knows); keyed by user, the profile and the user's
        orders. A user's view row is computed before and after the batch's changes and written when it
        differs: the new row, or a tombstone when the profile is gone. Reading both changelogs as tables
        and diffing the whole view against the view topic in every batch (the job's first design) costs
        what the tables' size costs, in every batch.
Semantics: after batch N the view topic, read as last value per key, is exactly the view of the users and
        orders tables as of batch N's end offsets: every change that reached Kafka before the batch was
        planned, none after; the order of arrival across the two topics within that does not matter.
Re-runs: a batch re-run after a failure (the last batch planned and not committed, found in the
        checkpoint at start) computes the same rows from the same offsets and the state before it, and
        writes only what the view topic does not hold yet (it reads the view topic once for that): equal
        rows are never rewritten.
Cost:   per batch, the batch's changes and the state of the orders and users they touch; the first batch
        of a new checkpoint reads both changelogs into the state, and a re-run also reads the view topic.
Dead letters: malformed records of either topic (bad JSON, missing or mistyped fields, records without a
        key (`missing_key`) or whose id field differs from the key (`key_mismatch`), amounts beyond
        ±1e16 (`out_of_range`)) go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}` (except these
        three changelog reasons, which jobs.common.events does not list yet). A bad record leaves the row
        as it was. A replay into a new checkpoint reads the compacted topics, which keep the last record
        per key, bad or not: there a bad record hides the versions the log cleaner removed before it.
Freshness: records that carry the source commit time (the Kafka header `__source_ts_ms` Debezium adds,
        contracts.cdc) are counted per batch in the observed metric `source_commits` (oldest, newest
        commit time, how many), which the driver serves as `streamstack_query_freshness_seconds{query}`:
        how far the view trails the database (jobs.common.progress). The synthetic changelog producer
        writes no such header: no freshness series then.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits and (main query) the orders table,
        one row per existing order, and per user the profile and the user's orders. The executors write
        it: the job is stateful. A checkpoint of the earlier stateless version (commits, no state) is
        refused at start.
Replay: start with a new --checkpoint-dir and a new --output-topic: the first batch writes the whole view.
        --starting-offsets does not apply: the tables are always read from the start of their topics.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.checkpoints import require_state_if_committed, uncommitted_batch
from jobs.common.events import read_decoded_stream, start_topics_dead_letter_query
from jobs.common.kafka_io import read_topic_until, start_foreach_batch_query, write_kafka_batch
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_orders, decode_profiles
from jobs.common.session import TABLE_STATE_SETTINGS, sql_settings
from jobs.jvm.user_view_tables import changed_view_rows
from jobs.user_view.config import UserViewJobConfig
from jobs.user_view.transforms import (
    not_yet_stored,
    observe_source_commits,
    stored_view,
    table_changes,
    user_view_as_records,
)


def write_changed_rows(
    config: UserViewJobConfig, rerun_batch: int | None, rows: DataFrame, batch_id: int
) -> None:
    """`<name>`'s sink: the batch's changed view rows to the view topic; in a batch re-run after a failure,
    only what the topic does not hold yet (it may have written part of them before it failed)."""
    records = user_view_as_records(rows)
    if batch_id == rerun_batch:
        stored = stored_view(read_topic_until(rows.sparkSession, config.streaming, config.output_topic, None))
        records = not_yet_stored(records, stored)
    write_kafka_batch(records, config.streaming, config.output_topic)


def start_queries(spark: SparkSession, config: UserViewJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    checkpoint = streaming.checkpoint_for(streaming.query_name)
    require_state_if_committed(spark, checkpoint, "the users and orders tables")
    whole_tables = replace(streaming, starting_offsets="earliest", starting_timestamp_ms=None)
    changes = table_changes(
        read_decoded_stream(spark, whole_tables, config.users_topic, decode_profiles, include_headers=True),
        read_decoded_stream(spark, whole_tables, config.orders_topic, decode_orders, include_headers=True),
    )
    valid_changes = observe_source_commits(changes).where("dead_letter_reason IS NULL")
    with sql_settings(spark, TABLE_STATE_SETTINGS):
        main = start_foreach_batch_query(
            changed_view_rows(valid_changes),
            streaming,
            query_name=streaming.query_name,
            process=partial(write_changed_rows, config, uncommitted_batch(spark, checkpoint)),
        )
    decoders = {config.users_topic: decode_profiles, config.orders_topic: decode_orders}
    return [main, start_topics_dead_letter_query(spark, streaming, decoders)]


JOB = StreamingJob("user-view", UserViewJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
