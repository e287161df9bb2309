"""User enrichment: each page view joined with its user's current profile (a stream-table join).

Input:  `--views-topic`, JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
        `--users-topic` (compacted), the CDC changelog of a users table: key = user id, value
        `{"user_id", "name", "country", "tier", "updated_at"}`, a null value (tombstone) deletes the user.
Output: `--output-topic`, one record per valid view, keyed by the view's position
        `<topic>/<partition>/<offset>`, value `{"user_id", "url", "event_time", "name", "country", "tier",
        "profile_updated_at"}`; the four profile fields are null when the user is unknown or deleted.
        Views are not deduplicated: the same view sent twice is enriched twice, under two keys.
How:    one query, `<name>`, reads both topics and runs `foreachBatch`. The users table is NOT kept as
        Spark state: each batch reads the users topic as a batch table, from its start up to the end
        offsets this batch was planned with (Spark writes them to `<checkpoint>/offsets/<batch id>` before
        the batch runs), keeps each user's last valid record and drops tombstones, and left-joins the
        batch's views against it. A stream-stream join was rejected: it would join a view with every
        profile version inside a time range rather than the latest, and it needs watermarks on event
        times that a changelog does not have.
Which profile a view sees: a view processed in batch N is joined with, for its user_id, the last valid
        record of that key in the users topic below batch N's end offset (dead letters never count). So
        a view sees every profile change that reached Kafka before its batch was planned, including
        changes that arrived after the view within the same trigger interval, and none that arrived
        later; it is never re-enriched when the profile changes afterwards. Event times play no part:
        this is processing-time ("latest as of the batch") semantics, not an event-time temporal join.
Re-runs: a batch re-run after a failure reads the same offsets, so it writes the same values under the
        same keys (at-least-once, idempotent). This holds while the log cleaner has not compacted the users
        topic past the batch's end in between; set the topic's min.compaction.lag.ms above the longest
        expected outage.
Cost:   every batch scans the whole users topic (compaction keeps it near one record per user). For
        tables too large for that, keep the table as state with transformWithStateInPandas instead.
Dead letters: malformed views and profiles (bad JSON, missing or mistyped fields, view event times out
        of range, profile records without a key (`missing_key`) or whose user_id differs from the key
        (`key_mismatch`)) go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}` (except the two
        changelog reasons, which jobs.common.events does not list yet). A bad profile record leaves the
        user's previous version in place, until the log cleaner removes the versions it supersedes
        (compaction keeps the last record per key, bad or not).
State:  `<checkpoint dir>/<query name>` per query: offsets and commits only; the table is the topic.
Replay: start with a new --checkpoint-dir and a new --output-topic; --starting-offsets applies to both
        topics, but the users table is always read from the start of the users topic.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.changelog import changelog_table, current_profiles, start_changelog_queries
from jobs.common.kafka_io import write_kafka_batch
from jobs.common.offset_log import BatchOffsets
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_page_views, decode_profiles
from jobs.user_enrichment.config import EnrichmentJobConfig
from jobs.user_enrichment.transforms import (
    enrich_views,
    enriched_views_as_records,
    page_views_with_source,
)


def enrich_batch(config: EnrichmentJobConfig, batch: DataFrame, offsets: BatchOffsets) -> None:
    """`<name>`: a batch's views joined with the users table as of the batch's end offsets."""
    streaming = config.streaming
    profiles = changelog_table(
        batch.sparkSession,
        streaming,
        config.users_topic,
        offsets,
        decode=decode_profiles,
        current=current_profiles,
    )
    views = page_views_with_source(
        decode_page_views(batch.where(F.col("topic") == config.views_topic), streaming.event_limits)
    )
    write_kafka_batch(
        enriched_views_as_records(enrich_views(views, profiles)), streaming, config.output_topic
    )


def start_queries(spark: SparkSession, config: EnrichmentJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    decoders = {config.views_topic: decode_page_views, config.users_topic: decode_profiles}
    return start_changelog_queries(spark, config.streaming, decoders, partial(enrich_batch, config))


JOB = StreamingJob("user-enrichment", EnrichmentJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
