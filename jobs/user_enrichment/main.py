"""User enrichment: each page view joined with its user's current profile (a stream-table join).

Input:  `--views-topic`, JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
        `--users-topic` (compacted), the CDC changelog of a users table: key = user id, value
        `{"user_id", "name", "country", "tier", "updated_at"}`, a null value (tombstone) deletes the user.
Output: `--output-topic`, one record per valid view, keyed by the view's position
        `<topic>/<partition>/<offset>`, value `{"user_id", "url", "event_time", "name", "country", "tier",
        "profile_updated_at"}`; the four profile fields are null when the user is unknown or deleted.
        Views are not deduplicated: the same view sent twice is enriched twice, under two keys.
How:    one query, `<name>`, with two Kafka sources: the views topic, and the users topic always from its
        start. Both are decoded; the valid views and the valid profile changes (dead letters dropped) are
        put together, grouped by user id, and handed to `transformWithState` (Spark 4's keyed-state
        operator, row-based; jobs.user_enrichment.table), which keeps the users table as Spark state, one
        profile per user.
        Per user and batch it first applies the batch's profile changes in offset order (the last one
        counts; a tombstone clears the profile), then emits each of the batch's views with the resulting
        profile; the Kafka sink writes them (append mode, no timers, no watermark). A stream-stream join
        was rejected: it would join a view with every profile version inside a time range rather than the
        latest, and it needs watermarks on event times that a changelog does not have.
Which profile a view sees: a view processed in batch N is joined with, for its user_id, the last valid
        record of that key in the users topic below batch N's end offset (dead letters never count). So
        a view sees every profile change that reached Kafka before its batch was planned, including
        changes that arrived after the view within the same trigger interval, and none that arrived
        later; it is never re-enriched when the profile changes afterwards. Event times play no part:
        this is processing-time ("latest as of the batch") semantics, not an event-time temporal join.
        "Last" is by offset: CDC producers partition by key, so a user's changes are in one partition, in
        order (should they not be, a batch's changes of one user count in (offset, partition) order).
Cost:   a batch costs what its own records cost: its views and changes are shuffled by user id and each
        user in the batch touches its own state (one read or write), so the batch duration does not grow
        with the number of users. scripts/bench_tables (benchmarks/tables-2026-11-25.json; local[2], 2 s
        trigger, 100 views and 10 profile changes per second; 2-3 runs on a shared 2-core machine): median
        batch 3.1-3.9 s at 10k users, 3.1-3.4 s at 100k, 2.6-3.4 s at 1M (at most 1.08x of the same run's
        10k); the earlier stateless design, which read the whole users topic every batch: 4.8-5.6 s,
        5.1-5.6 s and 9.4-11.7 s (about 2x). The state grows with the table, about one RocksDB row per
        existing user: memory, local disk and checkpoint size, not batch time. The first batch of a new
        checkpoint reads the whole users topic into the state, once, one Python call per user: 186-209 s
        for 1M users on 2 cores.
State:  `<checkpoint dir>/<name>`: offsets, commits and `state/` (RocksDB state store, changelog
        checkpointing, `--shuffle-partitions` state partitions, fixed once the checkpoint exists). The
        job sets the RocksDB provider for its own query only. State files are written by the executors,
        so in a cluster the checkpoint must be on storage every executor reaches. A checkpoint written by
        the earlier, stateless version of this job (committed batches, no `state/`) is refused at start:
        resuming it would skip the users already read and enrich with an empty table; replay into a new
        --checkpoint-dir instead.
Re-runs: a batch re-run after a failure reads the same offsets and starts from the state the previous
        batch committed, so it writes the same values under the same keys (at-least-once, idempotent).
        A restart resumes from the committed state; compaction of the users topic no longer matters to it.
Replay: start with a new --checkpoint-dir and a new --output-topic; --starting-offsets and
        --starting-timestamp-ms apply to the views topic only: the users topic is always read from its
        start, as the first batch's table.
Dead letters: malformed views and profiles (bad JSON, missing or mistyped fields, view event times out
        of range, profile records without a key (`missing_key`) or whose user_id differs from the key
        (`key_mismatch`)) go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}`. A bad profile
        record leaves the user's previous version in place, in the state, even after the log cleaner has
        removed that version (compaction keeps the last record per key, bad or not); a new checkpoint
        reads only what the cleaner kept.
Metrics and how to run it: as every job (jobs.common.runner). The executors' Python needs pandas and
        pyarrow (pinned in pyproject.toml, installed in the jobs image).
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.events import start_topics_dead_letter_query
from jobs.common.kafka_io import read_kafka_stream, write_kafka_stream
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_page_views, decode_profiles
from jobs.common.state_store import require_state_in_checkpoint, rocksdb_state_store
from jobs.user_enrichment.config import EnrichmentJobConfig
from jobs.user_enrichment.table import ENRICHED_VIEW, ProfileTable
from jobs.user_enrichment.transforms import (
    enriched_from_table,
    enriched_views_as_records,
    page_views_with_source,
    profile_changes,
    views_for_table,
)


def enriched_views(spark: SparkSession, config: EnrichmentJobConfig) -> DataFrame:
    """Each valid view with its user's profile as of its batch: views and profile changes of the batch,
    grouped by user, through `ProfileTable` (the users table as state)."""
    streaming = config.streaming
    limits = streaming.event_limits
    views = decode_page_views(read_kafka_stream(spark, streaming, [config.views_topic]), limits)
    # The table must be whole: its topic is read from the start, whatever --starting-offsets says.
    from_start = replace(streaming, starting_offsets="earliest", starting_timestamp_ms=None)
    profiles = decode_profiles(read_kafka_stream(spark, from_start, [config.users_topic]), limits)
    rows = views_for_table(page_views_with_source(views)).unionByName(profile_changes(profiles))
    by_user = rows.groupBy("user_id")
    enriched = by_user.transformWithState(ProfileTable(), ENRICHED_VIEW, outputMode="Append", timeMode="None")
    return enriched_from_table(enriched)


def start_queries(spark: SparkSession, config: EnrichmentJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    require_state_in_checkpoint(
        spark,
        streaming.checkpoint_for(streaming.query_name),
        "it was written by the stateless user-enrichment, whose users table was not Spark state: resumed, "
        "it would enrich with a table missing every user read before",
    )
    records = enriched_views_as_records(enriched_views(spark, config))
    with rocksdb_state_store(spark):
        main = write_kafka_stream(records, streaming, topic=config.output_topic, output_mode="append")
    decoders = {config.views_topic: decode_page_views, config.users_topic: decode_profiles}
    return [main, start_topics_dead_letter_query(spark, streaming, decoders)]


JOB = StreamingJob("user-enrichment", EnrichmentJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
