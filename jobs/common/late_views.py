"""Late page views: the valid views a job's event-time state drops, routed to a late topic by a query of
their own (clickstream-windows and view-bursts). Each job decides which views its state drops; the rows, their
headers and the query are the same for both."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.config import StreamingJobConfig
from jobs.common.encoding import iso_millis, kafka_header, record_position, source_headers
from jobs.common.kafka_io import start_foreach_batch_query, write_kafka_batch
from jobs.common.offset_log import batch_watermark_ms

LateViewSelector = Callable[[DataFrame, int], DataFrame]
"""(a batch of `watermarked_view_records`, the batch's watermark in ms) -> the views the state drops."""


def watermarked_view_records(decoded: DataFrame, watermark_delay: str) -> DataFrame:
    """The valid page views with their Kafka origin and raw value, under the event-time watermark."""
    return (
        decoded.where(F.col("dead_letter_reason").isNull())
        .select("topic", "partition", "offset", "key", "value", "event.event_time")
        .withWatermark("event_time", watermark_delay)
    )


def late_views_as_records(
    late: DataFrame,
    watermark_ms: int,
    source_query: str,
    time_headers: Mapping[str, str] | None = None,
) -> DataFrame:
    """Late views as Kafka rows: the raw value, keyed `<topic>/<partition>/<offset>` (a re-run batch
    overwrites rather than duplicates), with the watermark, the event time, any further times of the
    job's (`time_headers`: header name -> timestamp column) and the origin in headers."""
    further_times = [
        kafka_header(header, iso_millis(column)) for header, column in (time_headers or {}).items()
    ]
    return late.select(
        record_position().alias("key"),
        F.col("value"),
        F.array(
            kafka_header("late.watermark", iso_millis(F.timestamp_millis(F.lit(watermark_ms)))),
            *further_times,
            kafka_header("late.event_time", iso_millis("event_time")),
            kafka_header("late.query", F.lit(source_query)),
            *source_headers(),
        ).alias("headers"),
    )


def start_late_view_query(
    decoded: DataFrame,
    streaming: StreamingJobConfig,
    *,
    query_name: str,
    watermark_delay: str,
    late_topic: str,
    select_late: LateViewSelector,
    time_headers: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """The query `query_name`: each batch, the views `select_late` picks at the batch's watermark go to
    `late_topic`. It keeps its own watermark over the same input and reads it from its offset log."""
    checkpoint = streaming.checkpoint_for(query_name)

    def route_late_views(batch: DataFrame, batch_id: int) -> None:
        watermark_ms = batch_watermark_ms(batch.sparkSession, checkpoint, batch_id)
        # Written even when nothing is late: scanning the batch is what advances this query's watermark.
        late = select_late(batch, watermark_ms)
        write_kafka_batch(
            late_views_as_records(late, watermark_ms, query_name, time_headers), streaming, late_topic
        )

    return start_foreach_batch_query(
        watermarked_view_records(decoded, watermark_delay),
        streaming,
        query_name=query_name,
        process=route_late_views,
    )
