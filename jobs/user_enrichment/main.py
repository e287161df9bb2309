"""User enrichment: each page view joined with its user's current profile (a stream-table join).

Input:  `--views-topic`, JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
        `--users-topic` (compacted), the CDC changelog of a users table: key = user id, value
        `{"user_id", "name", "country", "tier", "updated_at"}`, a null value (tombstone) deletes the user.
Output: `--output-topic`, one record per valid view, keyed by the view's position
        `<topic>/<partition>/<offset>`, value `{"user_id", "url", "event_time", "name", "country", "tier",
        "profile_updated_at"}`; the four profile fields are null when the user is unknown or deleted.
        Views are not deduplicated: the same view sent twice is enriched twice, under two keys.
How:    one query, `<name>`, reads both topics as streams (the users topic always from its start) and
        keeps the users table as Spark state keyed by user (jobs.jvm.profile_table: flatMapGroupsWithState
        in the JVM, the RocksDB state store with changelog checkpointing). Per user and batch it applies the
        batch's valid profile changes in offset order, then emits the batch's views with the resulting
        profile. A stream-stream join was rejected: it would join a view with every profile version inside
        a time range rather than the latest, and it needs watermarks on event times that a changelog does
        not have. Reading the users topic as a table in every batch (the job's first design) costs what the
        table's size costs, in every batch.
Which profile a view sees: a view processed in batch N is joined with, for its user_id, the last valid
        record of that key in the users topic below batch N's end offset (dead letters never count). So
        a view sees every profile change that reached Kafka before its batch was planned, including
        changes that arrived after the view within the same trigger interval, and none that arrived
        later; it is never re-enriched when the profile changes afterwards. Event times play no part:
        this is processing-time ("latest as of the batch") semantics, not an event-time temporal join.
Re-runs: a batch re-run after a failure reads the same offsets from the state of the batch before it, so it
        writes the same values under the same keys (at-least-once, idempotent).
Cost:   per batch, the batch's rows and the state of the users they touch; the first batch of a new
        checkpoint reads the whole users topic into the state.
Dead letters: malformed views and profiles (bad JSON, missing or mistyped fields, view event times out
        of range, profile records without a key (`missing_key`) or whose user_id differs from the key
        (`key_mismatch`)) go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}` (except the two
        changelog reasons, which jobs.common.events does not list yet). A bad profile record leaves the
        user's previous version in place. A replay into a new checkpoint reads the compacted users topic,
        which keeps the last record per key, bad or not: there a bad record hides the versions the log
        cleaner removed before it.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits and (main query) the users table, one
        row per existing user; tombstones remove it. The executors write it: the job is stateful. A
        checkpoint of the earlier stateless version (commits, no state) is refused at start.
Replay: start with a new --checkpoint-dir and a new --output-topic; --starting-offsets applies to the views,
        the users table is always read from the start of the users topic.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.checkpoints import require_state_if_committed
from jobs.common.events import read_decoded_stream, start_topics_dead_letter_query
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_page_views, decode_profiles
from jobs.common.session import TABLE_STATE_SETTINGS, sql_settings
from jobs.jvm.profile_table import enrich_with_profile_state
from jobs.user_enrichment.config import EnrichmentJobConfig
from jobs.user_enrichment.transforms import (
    enriched_views_as_records,
    page_views_with_source,
    profile_changes,
)


def start_queries(spark: SparkSession, config: EnrichmentJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    require_state_if_committed(spark, streaming.checkpoint_for(streaming.query_name), "the users table")
    views = page_views_with_source(
        read_decoded_stream(spark, streaming, config.views_topic, decode_page_views)
    )
    whole_table = replace(streaming, starting_offsets="earliest", starting_timestamp_ms=None)
    changes = profile_changes(read_decoded_stream(spark, whole_table, config.users_topic, decode_profiles))
    with sql_settings(spark, TABLE_STATE_SETTINGS):
        main = write_kafka_stream(
            enriched_views_as_records(enrich_with_profile_state(changes, views)),
            streaming,
            topic=config.output_topic,
            output_mode="append",
        )
    decoders = {config.views_topic: decode_page_views, config.users_topic: decode_profiles}
    return [main, start_topics_dead_letter_query(spark, streaming, decoders)]


JOB = StreamingJob("user-enrichment", EnrichmentJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
