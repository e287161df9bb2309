"""Pure DataFrame -> DataFrame steps of the user enrichment job: decode views and profiles, join, encode."""

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
