"""Pure DataFrame -> DataFrame steps of the clickstream window job: decode, count, encode."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.common.encoding import iso_millis, json_value
from jobs.common.events import valid_events

# Re-exported for the tests and scripts that import it from here.


def page_views(decoded: DataFrame) -> DataFrame:
    """The valid page views: user_id, url, event_time."""
    return valid_events(decoded)


def count_views_per_url(page_views: DataFrame, window_duration: str, watermark_delay: str) -> DataFrame:
    """Views per url in event-time tumbling windows; rows later than the watermark are dropped."""
    return (
        page_views.withWatermark("event_time", watermark_delay)
        .groupBy(F.window("event_time", window_duration).alias("window"), F.col("url"))
        .agg(F.count(F.lit(1)).alias("views"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "url",
            "views",
        )
    )


def window_counts_as_records(counts: DataFrame) -> DataFrame:
    """Kafka key `<window start>|<url>` (deterministic, so re-emitted counts overwrite) and a JSON value."""
    return counts.select(
        F.concat_ws("|", iso_millis("window_start"), F.col("url")).alias("key"),
        json_value(
            iso_millis("window_start").alias("window_start"),
            iso_millis("window_end").alias("window_end"),
            F.col("url"),
            F.col("views"),
        ),
    )


# --- Views per url and per user in tumbling, hopping and session windows -------------------------------

WINDOW_KINDS = ("tumbling", "hopping", "session")


def view_dimensions(page_views: DataFrame) -> DataFrame:
    """Each view as two rows, one per dimension it is counted under: ('url', url) and ('user', user_id)."""
    return page_views.select(
        "event_time",
        F.inline(
            F.array(
                F.struct(F.lit("url").alias("dimension"), F.col("url").alias("value")),
                F.struct(F.lit("user").alias("dimension"), F.col("user_id").alias("value")),
            )
        ),
    )


def _count_per_dimension(dimension_views: DataFrame, window: Column, kind: str) -> DataFrame:
    return (
        dimension_views.groupBy(window.alias("window"), F.col("dimension"), F.col("value"))
        .agg(F.count(F.lit(1)).alias("views"))
        .select(
            F.lit(kind).alias("kind"),
            "dimension",
            "value",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "views",
        )
    )


def count_tumbling_views(page_views: DataFrame, window_duration: str, watermark_delay: str) -> DataFrame:
    """Views per url and per user in tumbling windows; a row whose window ended at or before the
    watermark is dropped."""
    watermarked = page_views.withWatermark("event_time", watermark_delay)
    return _count_per_dimension(
        view_dimensions(watermarked), F.window("event_time", window_duration), "tumbling"
    )


def count_hopping_views(
    page_views: DataFrame, window_duration: str, slide: str, watermark_delay: str
) -> DataFrame:
    """Views per url and per user in overlapping windows of `window_duration` starting every `slide`: each
    view counts in every window that contains it, and is dropped only from windows already closed."""
    watermarked = page_views.withWatermark("event_time", watermark_delay)
    return _count_per_dimension(
        view_dimensions(watermarked), F.window("event_time", window_duration, slide), "hopping"
    )


def count_session_views(page_views: DataFrame, session_gap: str, watermark_delay: str) -> DataFrame:
    """Views per user in session windows: a user's views less than or exactly `session_gap` apart share a
    session. As in Spark, window_start is the first view and window_end the last view plus the gap (when
    the session closes). A view is dropped when its own `[event_time, event_time + gap)` ended at or
    before the watermark; a session is final once the watermark passes its end."""
    user_views = page_views.withWatermark("event_time", watermark_delay).select(
        "event_time", F.lit("user").alias("dimension"), F.col("user_id").alias("value")
    )
    return _count_per_dimension(user_views, F.session_window("event_time", session_gap), "session")


def dimension_counts_as_records(counts: DataFrame) -> DataFrame:
    """Kafka key `<kind>|<dimension>|<value>|<window start>` (deterministic: a re-emitted count overwrites)
    and a JSON value with the same fields and the count."""
    return counts.select(
        F.concat_ws("|", F.col("kind"), F.col("dimension"), F.col("value"), iso_millis("window_start")).alias(
            "key"
        ),
        json_value(
            F.col("kind"),
            F.col("dimension"),
            F.col("value"),
            iso_millis("window_start").alias("window_start"),
            iso_millis("window_end").alias("window_end"),
            F.col("views"),
        ),
    )


# --- Late views: routed to a topic for corrections --------------------------------------------------------


LATE_VIEW_TIME_HEADERS = {"late.window_end": "window_end"}
"""The late-view header a window job adds: the end of the tumbling window the view missed."""


def late_views(view_records: DataFrame, window_duration: str, watermark_ms: int) -> DataFrame:
    """The views a tumbling window count drops at this watermark: those whose window ended at or before it.

    Applied per batch (the watermark is a batch's constant) to the records of
    `jobs.common.late_views.watermarked_view_records`."""
    window_end = F.window("event_time", window_duration).end
    return view_records.select("*", window_end.alias("window_end")).where(
        F.col("window_end") <= F.timestamp_millis(F.lit(watermark_ms))
    )
