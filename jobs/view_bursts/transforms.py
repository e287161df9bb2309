"""Pure steps of the view-bursts job: per user, the largest number of page views within any sliding window
of `window_ms` (views less than `window_ms` apart in event time), kept by Spark's arbitrary stateful
processing (`flatMapGroupsWithState` with an event-time timeout, the JVM `ViewBursts`: jobs.jvm.view_bursts);
plus the encoding of bursts, alerts and late views.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.encoding import iso_millis, json_value
from jobs.common.events import valid_events
from jobs.jvm.view_bursts import largest_bursts_in_jvm


def page_views(decoded: DataFrame) -> DataFrame:
    """The valid page views: user_id, url, event_time."""
    return valid_events(decoded)


def largest_bursts(
    page_views: DataFrame, window_ms: int, watermark_delay: str, retention_ms: int
) -> DataFrame:
    """Per user, each time it grows, the largest number of views within any `window_ms` of event time:
    user_id, views, first_view, last_view (update mode). Views at or before the watermark are dropped
    (and counted) by Spark before the state function sees them."""
    views = page_views.withWatermark("event_time", watermark_delay)
    return largest_bursts_in_jvm(views, window_ms, retention_ms).select(
        "user_id",
        "views",
        F.timestamp_millis("first_ms").alias("first_view"),
        F.timestamp_millis("last_ms").alias("last_view"),
    )


def bursts_as_records(bursts: DataFrame, threshold: int) -> DataFrame:
    """Kafka key `<user_id>` (compacted: the latest is the largest) and a JSON value; `over_threshold` when
    the burst has more views than `threshold`."""
    return bursts.select(
        F.col("user_id").alias("key"),
        json_value(
            F.col("user_id"),
            F.col("views"),
            iso_millis("first_view").alias("first_view"),
            iso_millis("last_view").alias("last_view"),
            (F.col("views") > F.lit(threshold)).alias("over_threshold"),
        ),
    )


def alerts(burst_records: DataFrame) -> DataFrame:
    """The burst records (the output topic read back) whose burst is over the threshold, as they were."""
    over = F.try_variant_get(F.try_parse_json(F.col("value").cast("string")), "$.over_threshold", "boolean")
    return burst_records.where(F.coalesce(over, F.lit(False))).select("key", "value")


# --- Late views: routed to a topic for corrections --------------------------------------------------------


def late_views(view_records: DataFrame, watermark_ms: int) -> DataFrame:
    """The views the burst state drops at this watermark: event time at or before it (per batch)."""
    return view_records.where(F.col("event_time") <= F.timestamp_millis(F.lit(watermark_ms)))
