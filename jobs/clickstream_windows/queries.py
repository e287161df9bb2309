"""The clickstream-windows job's optional outputs: the window kinds (`--windows-topic`) and late views
(`--late-topic`), each its own query; jobs/clickstream_windows/main.py says when they run."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.transforms import (
    count_hopping_views,
    count_session_views,
    count_tumbling_views,
    dimension_counts_as_records,
    late_views,
    late_views_as_records,
    watermarked_view_records,
)
from jobs.common.kafka_io import start_foreach_batch_query, write_kafka_batch, write_kafka_stream
from jobs.common.offset_log import batch_watermark_ms


def start_late_view_query(decoded: DataFrame, config: WindowJobConfig, late_topic: str) -> StreamingQuery:
    """`<name>.late`: each batch, the views its tumbling windows would drop go to the late topic."""
    streaming = config.streaming
    name = config.query_name("late")
    checkpoint = streaming.checkpoint_for(name)

    def route_late_views(batch: DataFrame, batch_id: int) -> None:
        watermark_ms = batch_watermark_ms(batch.sparkSession, checkpoint, batch_id)
        # Written even when nothing is late: scanning the batch is what advances this query's watermark.
        write_kafka_batch(
            late_views_as_records(
                late_views(batch, config.window_duration, watermark_ms), watermark_ms, name
            ),
            streaming,
            late_topic,
        )

    return start_foreach_batch_query(
        watermarked_view_records(decoded, config.watermark_delay),
        streaming,
        query_name=name,
        process=route_late_views,
    )


def start_window_kind_queries(
    views: DataFrame, config: WindowJobConfig, windows_topic: str
) -> list[StreamingQuery]:
    """`<name>.tumbling`, `<name>.hopping` (update mode) and `<name>.sessions` (append mode)."""
    by_kind = (
        ("tumbling", count_tumbling_views(views, config.window_duration, config.watermark_delay), "update"),
        (
            "hopping",
            count_hopping_views(views, config.hop_window_duration, config.hop_slide, config.watermark_delay),
            "update",
        ),
        ("sessions", count_session_views(views, config.session_gap, config.watermark_delay), "append"),
    )
    return [
        write_kafka_stream(
            dimension_counts_as_records(counts),
            config.streaming,
            query_name=config.query_name(kind),
            topic=windows_topic,
            output_mode=output_mode,
        )
        for kind, counts, output_mode in by_kind
    ]
