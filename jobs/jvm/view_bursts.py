"""`largest_bursts_in_jvm`: view-bursts' per-user state, the JVM `ViewBursts` (`flatMapGroupsWithState`
keyed by user with an event-time timeout, Java), where it was a pandas function: a batch of a few views
then costs no Arrow round trip through a Python worker per task (the local stack's drivers share 2 cores).

Needs the jobs' jar on the classpath of the driver and the executors, as `jobs.jvm.decoder` does.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.jvm.gateway import jvm_class

VIEW_BURSTS_CLASS = "streamstack.jvm.ViewBursts"


def largest_bursts_in_jvm(views: DataFrame, window_ms: int, retention_ms: int) -> DataFrame:
    """Per user, each time it grows, the largest number of views less than `window_ms` apart: user_id,
    views, first_ms, last_ms. `views`: user_id and event_time, with a watermark on event_time (Spark
    refuses an event-time timeout unless the operator's input carries the watermarked column)."""
    spark = views.sparkSession
    columns = views.select(
        F.col("user_id").cast("string"), F.unix_millis("event_time").alias("view_ms"), "event_time"
    )
    bursts = jvm_class(spark, VIEW_BURSTS_CLASS).largestBursts(columns._jdf, window_ms, retention_ms)
    return DataFrame(bursts, spark)
