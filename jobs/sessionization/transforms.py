"""Pure DataFrame -> DataFrame steps of the sessionization job: group clicks (page views, decoded by
`jobs.common.schemas.decode_page_views`) into sessions, encode the sessions."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.encoding import iso_millis, json_value
from jobs.common.events import valid_events


def clicks(decoded: DataFrame) -> DataFrame:
    """The valid clicks: user_id, url, event_time."""
    return valid_events(decoded)


def sessionize(clicks: DataFrame, session_gap: str, watermark_delay: str) -> DataFrame:
    """Each user's clicks grouped into sessions: clicks at most `session_gap` apart share a session.

    session_start is the first click's event time, session_end the last click's (not Spark's session
    window end, which adds the gap); duration_seconds is their difference. Clicks are not deduplicated.
    A click is dropped as late when `event_time + gap` is at or before the watermark; a session is
    complete, and emitted, once the watermark reaches its last click + gap."""
    return (
        clicks.withWatermark("event_time", watermark_delay)
        .groupBy(F.col("user_id"), F.session_window("event_time", session_gap).alias("session"))
        .agg(
            F.min("event_time").alias("session_start"),
            F.max("event_time").alias("session_end"),
            F.count(F.lit(1)).alias("page_count"),
            F.size(F.collect_set("url")).alias("distinct_urls"),
        )
        .select(
            "user_id",
            "session_start",
            "session_end",
            (
                (F.unix_millis(F.col("session_end")) - F.unix_millis(F.col("session_start"))) / F.lit(1000.0)
            ).alias("duration_seconds"),
            "page_count",
            "distinct_urls",
        )
    )


def sessions_as_records(sessions: DataFrame) -> DataFrame:
    """Kafka key `<user_id>|<session start>` (deterministic: a re-run batch overwrites) and a JSON value."""
    return sessions.select(
        F.concat_ws("|", F.col("user_id"), iso_millis("session_start")).alias("key"),
        json_value(
            F.col("user_id"),
            iso_millis("session_start").alias("session_start"),
            iso_millis("session_end").alias("session_end"),
            F.col("duration_seconds"),
            F.col("page_count"),
            F.col("distinct_urls"),
        ),
    )
