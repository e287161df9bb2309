"""Changelog topics: change data capture on compacted topics.

The record key is the row's primary key, the value the row after the change, and a null value (a tombstone)
deletes the row. `decode_changelog` adds the changelog's own dead-letter rules to `decode_events`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.config import EventLimits
from jobs.common.events import EventSchema, decode_events


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


# What a user's profile holds besides its id and updated_at; the views that carry a profile keep these.
PROFILE_FIELDS = ("name", "country", "tier")
