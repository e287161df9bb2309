"""Changelog topics (change data capture on compacted topics) read as the tables they describe.

The record key is the row's primary key, the value the row after the change, and a null value (a tombstone)
deletes the row. `decode_changelog` adds the changelog's own dead-letter rules to `decode_events`;
`current_rows` reduces a changelog, read as a batch, to its table; `changelog_table` reads that table as of a
batch's end offsets, and `start_changelog_queries` starts the queries of a job built on such tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.config import EventLimits, StreamingJobConfig
from jobs.common.events import Decoder, EventSchema, decode_events, start_topics_dead_letter_query
from jobs.common.kafka_io import read_topic_until
from jobs.common.offset_log import BatchOffsets, start_end_offsets_query


def decode_changelog(
    kafka_records: DataFrame, schema: EventSchema, key_field: str, limits: EventLimits
) -> DataFrame:
    """`decode_events` plus the changelog's own rules: a record without a key cannot be applied to any
    row (`missing_key`, tombstones included), and a value whose key field differs from the record key
    contradicts itself (`key_mismatch`). Such records are dead letters with a null `event`."""
    decoded = decode_events(kafka_records, schema, limits)
    record_key = F.col("key").cast("string")
    value_key = F.col("event").getField(key_field)
    missing_key = F.col("key").isNull()
    key_mismatch = value_key.isNotNull() & (value_key != record_key)
    reason = F.coalesce(
        F.col("dead_letter_reason"),
        F.when(missing_key, F.lit("missing_key")).when(key_mismatch, F.lit("key_mismatch")),
    )
    detail = F.coalesce(
        F.col("dead_letter_detail"),
        F.when(missing_key, F.lit(f"record has no key; the key is the {key_field}")).when(
            key_mismatch,
            F.format_string(f"record key %s differs from field '{key_field}' %s", record_key, value_key),
        ),
    )
    return decoded.withColumns(
        {
            "event": F.when(reason.isNull(), F.col("event")),
            "dead_letter_reason": reason,
            "dead_letter_detail": detail,
        }
    )


def current_rows(decoded_changelog: DataFrame) -> DataFrame:
    """The table a changelog describes: `record_key` plus the event fields of each key's last valid record,
    keys whose last record is a tombstone left out. "Last" is the highest offset: CDC producers partition
    by key, so all changes of a row are in one partition, in order. Dead letters change nothing."""
    latest = (
        decoded_changelog.where(F.col("dead_letter_reason").isNull())
        .groupBy(F.col("key").cast("string").alias("record_key"))
        .agg(
            F.max_by(
                F.struct(F.col("value").isNull().alias("deleted"), F.col("event")),
                F.struct(F.col("offset"), F.col("partition")),
            ).alias("latest")
        )
    )
    return latest.where(~F.col("latest.deleted")).select("record_key", "latest.event.*")


# What a user's profile holds besides its id and updated_at; the views that carry a profile keep these.
PROFILE_FIELDS = ("name", "country", "tier")


def current_profiles(decoded_profiles: DataFrame) -> DataFrame:
    """The users table: user_id, the profile fields and updated_at of each existing user."""
    return current_rows(decoded_profiles).select(
        F.col("record_key").alias("user_id"), *PROFILE_FIELDS, "updated_at"
    )


def changelog_table(
    spark: SparkSession,
    config: StreamingJobConfig,
    topic: str,
    offsets: BatchOffsets,
    *,
    decode: Decoder,
    current: Callable[[DataFrame], DataFrame],
) -> DataFrame:
    """The table a changelog topic describes as of a batch's end offsets: the topic read as a batch from its
    start up to those offsets, decoded, and reduced to its rows by `current` (e.g. `current_profiles`)."""
    return current(decode(read_topic_until(spark, config, topic, offsets.of(topic)), config.event_limits))


def start_changelog_queries(
    spark: SparkSession,
    config: StreamingJobConfig,
    decoders: Mapping[str, Decoder],
    process: Callable[[DataFrame, BatchOffsets], None],
    *,
    include_headers: bool = False,
    observe: Callable[[DataFrame], DataFrame] | None = None,
) -> list[StreamingQuery]:
    """The queries of a job that reads its topics (the keys of `decoders`) as tables in foreachBatch:
    `<name>` calls `process(batch, offsets)` on each batch of all of them (start_end_offsets_query, which
    takes `include_headers` and `observe`), and `<name>.dead-letters` sends their malformed records, each
    topic decoded by its decoder, to the dead-letter topic."""
    return [
        start_end_offsets_query(
            spark, config, list(decoders), process, include_headers=include_headers, observe=observe
        ),
        start_topics_dead_letter_query(spark, config, decoders),
    ]
