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
How:    one query, `<name>`, reads both topics and runs `foreachBatch`; Spark keeps no state. Each batch
        reads both changelogs as batch tables, from their start up to the end offsets the batch was
        planned with (from `<checkpoint>/offsets/<batch id>`, written before the batch runs), keeps each
        key's last valid record and drops tombstones, computes the whole view, reads back what the view
        topic holds (last record per key) and writes only the difference: changed or new rows, and
        tombstones for rows whose user is gone.
        Why not recompute only the users a batch touches: an order's tombstone names no user, and the
        order's earlier versions that do may have been compacted away, so the touched users cannot
        always be found; diffing against the view itself is exact whatever the batch held, and repairs
        any row that is wrong for any reason. Why not keep state (applyInPandasWithState /
        transformWithStateInPandas): it needs two stateful steps (by order, to know an order's previous
        user, then by user), Python on the hot path, and state that a replay must rebuild; here the
        compacted topics are the state.
Semantics: after batch N the view topic, read as last value per key, is exactly the view of the users and
        orders tables as of batch N's end offsets: every change that reached Kafka before the batch was
        planned, none after; the order of arrival across the two topics within that does not matter.
Re-runs: a batch re-run after a failure computes the same view from the same offsets and writes only what
        the topic still lacks (at-least-once, idempotent: equal rows are never rewritten). Exact while the
        log cleaner has not compacted a changelog past the batch's end in between; set
        min.compaction.lag.ms above the longest expected outage.
Cost:   every batch scans both changelogs and the view topic (compacted: about one record per key).
Dead letters: malformed records of either topic (bad JSON, missing or mistyped fields, records without a
        key (`missing_key`) or whose id field differs from the key (`key_mismatch`), amounts beyond
        ±1e16 (`out_of_range`)) go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}` (except these
        three changelog reasons, which jobs.common.events does not list yet). A bad record leaves the row
        as it was, until the log cleaner removes the earlier versions it supersedes (compaction keeps
        the last record per key, bad or not).
Freshness: records that carry the source commit time (the Kafka header `__source_ts_ms` Debezium adds,
        contracts.cdc) are counted per batch in the observed metric `source_commits` (oldest, newest
        commit time, how many), which the driver serves as `streamstack_query_freshness_seconds{query}`:
        how far the view trails the database (jobs.common.progress). The synthetic changelog producer
        writes no such header: no freshness series then.
State:  `<checkpoint dir>/<query name>` per query: offsets and commits only.
Replay: start with a new --checkpoint-dir and a new --output-topic: the first batch writes the whole view.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.changelog import changelog_table, current_profiles, start_changelog_queries
from jobs.common.kafka_io import read_topic_until, write_kafka_batch
from jobs.common.offset_log import BatchOffsets, require_within_end_offsets
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_orders, decode_profiles
from jobs.user_view.config import UserViewJobConfig
from jobs.user_view.transforms import (
    current_orders,
    observe_source_commits,
    stored_view,
    user_view,
    user_view_as_records,
    view_changes,
)


def update_view(config: UserViewJobConfig, batch: DataFrame, offsets: BatchOffsets) -> None:
    """`<name>`: each batch brings the view topic to the view as of the batch's end offsets."""
    spark, streaming = batch.sparkSession, config.streaming
    require_within_end_offsets(batch, offsets)
    view = user_view(
        changelog_table(
            spark, streaming, config.users_topic, offsets, decode=decode_profiles, current=current_profiles
        ),
        changelog_table(
            spark, streaming, config.orders_topic, offsets, decode=decode_orders, current=current_orders
        ),
    )
    stored = stored_view(read_topic_until(spark, streaming, config.output_topic, None))
    write_kafka_batch(view_changes(user_view_as_records(view), stored), streaming, config.output_topic)


def start_queries(spark: SparkSession, config: UserViewJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    decoders = {config.users_topic: decode_profiles, config.orders_topic: decode_orders}
    return start_changelog_queries(
        spark,
        config.streaming,
        decoders,
        partial(update_view, config),
        include_headers=True,
        observe=observe_source_commits,
    )


JOB = StreamingJob("user-view", UserViewJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
