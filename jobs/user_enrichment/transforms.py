"""Pure DataFrame -> DataFrame steps of the user enrichment job: decode views and profiles, join, encode.

The job joins in `table.ProfileTable` (the users table as state): `views_for_table` and `profile_changes`
are its input, `enriched_from_table` its output. `enrich_views` is the same join on a users table read as a
batch (`jobs.common.changelog.current_profiles`): the stateless design before issue 16, kept so that
scripts/bench_tables can measure that design from git history (`--job-module`)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.changelog import PROFILE_FIELDS
from jobs.common.encoding import iso_millis, json_value, record_position

# Re-exported for the tests that import it from here.


def page_views_with_source(decoded_views: DataFrame) -> DataFrame:
    """The valid page views with `source`, their `<topic>/<partition>/<offset>` in Kafka."""
    return decoded_views.where(F.col("dead_letter_reason").isNull()).select(
        record_position().alias("source"),
        "event.*",
    )


def enrich_views(views: DataFrame, profiles: DataFrame) -> DataFrame:
    """Each view with its user's profile fields; null profile fields when the user is unknown or deleted.

    `views` from `page_views_with_source`, `profiles` from `jobs.common.changelog.current_profiles`: a
    left join on user id, so every view comes out exactly once (profiles has at most one row per user)."""
    profiles = profiles.select(
        F.col("user_id").alias("profile_user_id"),
        *PROFILE_FIELDS,
        F.col("updated_at").alias("profile_updated_at"),
    )
    return views.join(profiles, views["user_id"] == profiles["profile_user_id"], "left").select(
        "source", "user_id", "url", "event_time", *PROFILE_FIELDS, "profile_updated_at"
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


# --- the users table kept as state (jobs.user_enrichment.table) -------------------------------------------


def profile_changes(decoded_profiles: DataFrame) -> DataFrame:
    """The valid users-changelog records as rows of the users table's input (`table.ProfileTable`) with
    `is_change`: the user id is the record key, a tombstone is `deleted`; dead letters change nothing."""
    event = F.col("event")
    return decoded_profiles.where(F.col("dead_letter_reason").isNull()).select(
        F.col("key").cast("string").alias("user_id"),
        F.lit(True).alias("is_change"),
        "offset",
        "partition",
        F.lit(None).cast("string").alias("source"),
        F.lit(None).cast("string").alias("url"),
        F.lit(None).cast("long").alias("event_time_us"),
        F.col("value").isNull().alias("deleted"),
        *(event.getField(name).alias(name) for name in PROFILE_FIELDS),
        F.unix_micros(event.getField("updated_at")).alias("updated_at_us"),
    )


def views_for_table(views: DataFrame) -> DataFrame:
    """Views from `page_views_with_source` as rows of the users table's input, without `is_change`
    (`profile_changes`' columns)."""
    return views.select(
        "user_id",
        F.lit(False).alias("is_change"),
        F.lit(None).cast("long").alias("offset"),
        F.lit(None).cast("int").alias("partition"),
        "source",
        "url",
        F.unix_micros("event_time").alias("event_time_us"),
        F.lit(False).alias("deleted"),
        *(F.lit(None).cast("string").alias(name) for name in PROFILE_FIELDS),
        F.lit(None).cast("long").alias("updated_at_us"),
    )


def enriched_from_table(enriched: DataFrame) -> DataFrame:
    """The processor's output (`table.ENRICHED_VIEW`) in `enrich_views`' columns, times as timestamps."""
    return enriched.select(
        "source",
        "user_id",
        "url",
        F.timestamp_micros("event_time_us").alias("event_time"),
        *PROFILE_FIELDS,
        F.timestamp_micros("updated_at_us").alias("profile_updated_at"),
    )
