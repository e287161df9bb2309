"""Pure DataFrame -> DataFrame steps of the clickstream window job: parse, count, encode."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

PAGE_VIEW_SCHEMA = StructType(
    [
        StructField("user_id", StringType()),
        StructField("url", StringType()),
        StructField("event_time", TimestampType()),
    ]
)

_ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def parse_page_views(kafka_records: DataFrame) -> DataFrame:
    """Page views (user_id, url, event_time) from Kafka records whose value is a JSON page view.

    Records that are not JSON page views with all three fields are left out here; the dead-letter
    route for them is the job catalogue's concern.
    """
    parsed = F.from_json(F.col("value").cast("string"), PAGE_VIEW_SCHEMA)
    return (
        kafka_records.select(parsed.alias("view"))
        .select("view.user_id", "view.url", "view.event_time")
        .where(F.col("user_id").isNotNull() & F.col("url").isNotNull() & F.col("event_time").isNotNull())
    )


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


def _iso(column: str) -> Column:
    return F.date_format(F.col(column), _ISO_MILLIS)


def window_counts_as_records(counts: DataFrame) -> DataFrame:
    """Kafka key `<window start>|<url>` (deterministic, so re-emitted counts overwrite) and a JSON value."""
    return counts.select(
        F.concat_ws("|", _iso("window_start"), F.col("url")).alias("key"),
        F.to_json(
            F.struct(
                _iso("window_start").alias("window_start"),
                _iso("window_end").alias("window_end"),
                F.col("url"),
                F.col("views"),
            )
        ).alias("value"),
    )
