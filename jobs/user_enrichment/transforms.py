"""Pure DataFrame -> DataFrame steps of the user enrichment job: decode views and profiles, join, encode."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.changelog import PROFILE_FIELDS
from jobs.common.encoding import iso_millis, json_value, record_position


def page_views_with_source(decoded_views: DataFrame) -> DataFrame:
    """The valid page views with `source`, their `<topic>/<partition>/<offset>` in Kafka."""
    return decoded_views.where(F.col("dead_letter_reason").isNull()).select(
        record_position().alias("source"),
        "event.*",
    )


def profile_changes(decoded_profiles: DataFrame) -> DataFrame:
    """The users changelog's valid records as changes to the table: user_id (the record key), position (the
    offset: a user's changes share one partition), deleted (a tombstone), the profile fields and updated_at.
    Dead letters change nothing."""
    return decoded_profiles.where(F.col("dead_letter_reason").isNull()).select(
        F.col("key").cast("string").alias("user_id"),
        F.col("offset").alias("position"),
        F.col("value").isNull().alias("deleted"),
        *[F.col("event").getField(name).alias(name) for name in (*PROFILE_FIELDS, "updated_at")],
    )


def enriched_views_as_records(enriched: DataFrame) -> DataFrame:
    """Kafka key: the view's source position (a re-run batch overwrites what it wrote); value: the view
    and the profile fields as JSON, unknown profile fields as explicit nulls."""
    return enriched.select(
        F.col("source").alias("key"),
        json_value(
            F.col("user_id"),
            F.col("url"),
            iso_millis("event_time").alias("event_time"),
            F.col("name"),
            F.col("country"),
            F.col("tier"),
            iso_millis("profile_updated_at").alias("profile_updated_at"),
            keep_nulls=True,
        ),
    )
