"""The clickstream-windows job's optional outputs: the window kinds (`--windows-topic`) and late views
(`--late-topic`), each its own query; jobs/clickstream_windows/main.py says when they run."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.transforms import (
    LATE_VIEW_TIME_HEADERS,
    count_hopping_views,
    count_session_views,
    count_tumbling_views,
    dimension_counts_as_records,
    late_views,
)
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.late_views import start_late_view_query as start_common_late_view_query


def start_late_view_query(decoded: DataFrame, config: WindowJobConfig, late_topic: str) -> StreamingQuery:
    """`<name>.late`: each batch, the views its tumbling windows would drop go to the late topic."""

    def select_late(batch: DataFrame, watermark_ms: int) -> DataFrame:
        return late_views(batch, config.window_duration, watermark_ms)

    return start_common_late_view_query(
        decoded,
        config.streaming,
        query_name=config.query_name("late"),
        watermark_delay=config.watermark_delay,
        late_topic=late_topic,
        select_late=select_late,
        time_headers=LATE_VIEW_TIME_HEADERS,
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
