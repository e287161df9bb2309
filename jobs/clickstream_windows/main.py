"""Clickstream window counts: page views per url in event-time tumbling windows.

Input:  a Kafka topic of JSON page views `{"user_id", "url", "event_time"}` (event_time ISO-8601, UTC).
Output: a Kafka topic keyed `<window start>|<url>` with `{"window_start", "window_end", "url", "views"}`.
        The query runs in update mode: a window's count is re-emitted as late rows arrive, under the same
        key, so the latest value per key is the count. Rows older than the watermark are dropped and
        counted in `streamstack_query_rows_dropped_by_watermark_total`.
State:  the checkpoint directory holds offsets, commits and the window state; restart resumes from it.
Metrics: progress of the query on http://<metrics-host>:<metrics-port>/metrics.
Offsets: each batch's end offsets are committed to the consumer group `streamstack-<query name>`
        (--shadow-group, --no-shadow-group), so Kafka lag tools see the query.

Run locally (streamstack local up does this for you):
    python -m jobs.clickstream_windows --master 'local[2]' --bootstrap-servers 127.0.0.1:9092 \
        --input-topic page-views --output-topic page-views-per-url \
        --checkpoint-dir /tmp/checkpoints/clickstream-windows --extra-jars <spark-sql-kafka jars>
In the cluster the same flags go in the SparkApplication's `arguments`, without --master and --extra-jars.
"""

from __future__ import annotations

import argparse
import sys

from jobs.clickstream_windows.transforms import (
    count_views_per_url,
    parse_page_views,
    window_counts_as_records,
)
from jobs.common.config import (
    ConfigError,
    StreamingJobConfig,
    add_streaming_job_arguments,
    require_duration,
    streaming_job_config,
)
from jobs.common.kafka_io import read_kafka_stream, write_kafka_stream
from jobs.common.progress import serve_progress_metrics
from jobs.common.session import build_session
from jobs.common.shadow_group import ShadowGroupCommitter

QUERY_NAME = "clickstream-windows"


def parse_args(argv: list[str] | None) -> tuple[StreamingJobConfig, str, str]:
    parser = argparse.ArgumentParser(prog="clickstream-windows", description=__doc__.splitlines()[0])
    add_streaming_job_arguments(parser, query_name=QUERY_NAME)
    parser.add_argument("--window-duration", default="10 seconds", help="tumbling window length")
    parser.add_argument("--watermark-delay", default="5 seconds", help="how late a row may be")
    args = parser.parse_args(argv)
    try:
        return (
            streaming_job_config(args),
            require_duration("--window-duration", args.window_duration),
            require_duration("--watermark-delay", args.watermark_delay),
        )
    except ConfigError as error:
        parser.error(str(error))


def main(argv: list[str] | None = None) -> int:
    config, window_duration, watermark_delay = parse_args(argv)
    spark = build_session(config)
    shadow_group = (
        ShadowGroupCommitter(config.bootstrap_servers, config.shadow_group) if config.shadow_group else None
    )
    serve_progress_metrics(spark, config.metrics_host, config.metrics_port, shadow_group)
    page_views = parse_page_views(read_kafka_stream(spark, config))
    counts = count_views_per_url(page_views, window_duration, watermark_delay)
    query = write_kafka_stream(window_counts_as_records(counts), config, output_mode="update")
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
