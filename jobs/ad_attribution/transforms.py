"""Pure DataFrame -> DataFrame steps of the ad attribution job: join each
impression with the clicks on it within the attribution window, keep the first click, encode."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.encoding import iso_millis, json_value
from jobs.common.events import valid_events


def impressions(decoded: DataFrame) -> DataFrame:
    """The valid impressions: impression_id, ad_id, user_id, impression_time."""
    return valid_events(decoded).select(
        "impression_id", "ad_id", "user_id", F.col("event_time").alias("impression_time")
    )


def clicks(decoded: DataFrame) -> DataFrame:
    """The valid clicks: click_id, click_impression_id, click_ad_id, click_time. The click's user_id is
    not used: the impression says whose it was."""
    return valid_events(decoded).select(
        "click_id",
        F.col("impression_id").alias("click_impression_id"),
        F.col("ad_id").alias("click_ad_id"),
        F.col("event_time").alias("click_time"),
    )


def join_clicks(
    impressions: DataFrame, clicks: DataFrame, attribution_window: str, watermark_delay: str
) -> DataFrame:
    """Each impression with every click on it (same impression id and ad id) at or after the impression and
    at most `attribution_window` later: one row per matching pair, and one row with null click columns
    for an impression that no click matched (a left outer join).

    A matching pair is emitted as soon as both sides have arrived; an unmatched impression once the
    watermark (the smaller of both sides' largest event time less `watermark_delay`) has passed its
    impression time plus the window, when no click can match it any more. A row at or behind the
    watermark on arrival is dropped."""
    window_end = F.col("impression_time") + F.expr(f"INTERVAL {attribution_window}")
    return impressions.withWatermark("impression_time", watermark_delay).join(
        clicks.withWatermark("click_time", watermark_delay),
        on=(
            (F.col("impression_id") == F.col("click_impression_id"))
            & (F.col("ad_id") == F.col("click_ad_id"))
            & (F.col("click_time") >= F.col("impression_time"))
            & (F.col("click_time") <= window_end)
        ),
        how="left_outer",
    )


def first_click_per_impression(joined: DataFrame) -> DataFrame:
    """One row per impression: its earliest matching click (ties: the smallest click id) and how many
    distinct clicks (by click id) matched. Duplicate clicks and impressions collapse: the same click id
    counts once, and the minimum does not depend on arrival order.

    Grouped by impression_time, the watermarked column of the join's left side: Spark emits an
    impression's row (append mode) once the join's output watermark passes it, which is when the join has
    emitted all of its pairs or its unmatched row."""
    click = F.when(
        F.col("click_id").isNotNull(),
        F.struct(F.col("click_time").alias("time"), F.col("click_id").alias("id")),
    )
    return (
        joined.select(
            "impression_id", "ad_id", "user_id", "impression_time", "click_id", click.alias("click")
        )
        .groupBy("impression_id", "ad_id", "user_id", "impression_time")
        .agg(F.min("click").alias("first_click"), F.size(F.collect_set("click_id")).alias("click_count"))
        .select(
            "impression_id",
            "ad_id",
            "user_id",
            "impression_time",
            F.col("first_click.id").alias("click_id"),
            F.col("first_click.time").alias("click_time"),
            "click_count",
        )
    )


def attribute_clicks(
    impressions: DataFrame, clicks: DataFrame, attribution_window: str, watermark_delay: str
) -> DataFrame:
    """Each impression, once final, with its first click within the attribution window (or none)."""
    return first_click_per_impression(join_clicks(impressions, clicks, attribution_window, watermark_delay))


def attributions_as_records(attributions: DataFrame) -> DataFrame:
    """Kafka key = impression id (one final row per impression, so a re-run batch overwrites it) and a
    JSON value with explicit nulls for an impression without a click."""
    clicked = F.col("click_time").isNotNull()
    seconds_to_click = (F.unix_millis(F.col("click_time")) - F.unix_millis(F.col("impression_time"))) / F.lit(
        1000.0
    )
    return attributions.select(
        F.col("impression_id").alias("key"),
        json_value(
            F.col("impression_id"),
            F.col("ad_id"),
            F.col("user_id"),
            iso_millis("impression_time").alias("impression_time"),
            F.col("click_id"),
            iso_millis("click_time").alias("click_time"),
            clicked.alias("clicked"),
            F.when(clicked, seconds_to_click).alias("seconds_to_click"),
            F.col("click_count"),
            keep_nulls=True,
        ),
    )
