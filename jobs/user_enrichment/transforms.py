"""Pure DataFrame -> DataFrame steps of the user enrichment job: decode views and profiles, join, encode."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.common.changelog import current_rows, decode_changelog
from jobs.common.config import EventLimits
from jobs.common.events import decode_events
from jobs.common.schemas import (
    PAGE_VIEW,
    USER_PROFILE,
    USER_PROFILE_KEY_FIELD,
)

_ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def decode_page_views(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Kafka records with a typed page view or a dead-letter reason each (see jobs.common.events)."""
    return decode_events(kafka_records, PAGE_VIEW, limits)


def decode_profiles(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Users changelog records with a typed profile, a tombstone (null event) or a dead-letter reason."""
    return decode_changelog(kafka_records, USER_PROFILE, USER_PROFILE_KEY_FIELD, limits)


def page_views_with_source(decoded_views: DataFrame) -> DataFrame:
    """The valid page views with `source`, their `<topic>/<partition>/<offset>` in Kafka."""
    return decoded_views.where(F.col("dead_letter_reason").isNull()).select(
        F.format_string("%s/%d/%d", "topic", "partition", "offset").alias("source"),
        "event.*",
    )


def current_profiles(decoded_profiles: DataFrame) -> DataFrame:
    """The users table: one row per existing user (latest valid version; deleted users left out)."""
    return current_rows(decoded_profiles).select(
        F.col("record_key").alias("profile_user_id"),
        "name",
        "country",
        "tier",
        F.col("updated_at").alias("profile_updated_at"),
    )


def enrich_views(views: DataFrame, profiles: DataFrame) -> DataFrame:
    """Each view with its user's profile fields; null profile fields when the user is unknown or deleted.

    `views` from `page_views_with_source`, `profiles` from `current_profiles`: a left join on user id,
    so every view comes out exactly once (profiles has at most one row per user)."""
    return views.join(profiles, views["user_id"] == profiles["profile_user_id"], "left").select(
        "source",
        "user_id",
        "url",
        "event_time",
        "name",
        "country",
        "tier",
        "profile_updated_at",
    )


def _iso(column: str) -> Column:
    return F.date_format(F.col(column), _ISO_MILLIS)


def enriched_views_as_records(enriched: DataFrame) -> DataFrame:
    """Kafka key: the view's source position (a re-run batch overwrites what it wrote); value: the view
    and the profile fields as JSON, unknown profile fields as explicit nulls."""
    return enriched.select(
        F.col("source").alias("key"),
        F.to_json(
            F.struct(
                F.col("user_id"),
                F.col("url"),
                _iso("event_time").alias("event_time"),
                F.col("name"),
                F.col("country"),
                F.col("tier"),
                _iso("profile_updated_at").alias("profile_updated_at"),
            ),
            {"ignoreNullFields": "false"},
        ).alias("value"),
    )
