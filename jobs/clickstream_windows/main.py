"""Clickstream window counts: page views per url and per user in tumbling, hopping and session windows.

Input:  `--input-topic` (page-views), JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
Output: `--output-topic` (page-views-per-url, compacted), query `<name>`: views per url in tumbling windows
        of `--window-duration`, keyed `<window start>|<url>`, value
        `{"window_start", "window_end", "url", "views"}`.
        `--windows-topic` (page-view-windows, compacted): views per url and per user, keyed
        `<kind>|<dimension>|<value>|<window start>`, value
        `{"kind", "dimension", "value", "window_start", "window_end", "views"}`, one query per kind
        (`--no-windows-topic` turns them off):
          `<name>.tumbling`  kind tumbling, dimensions url and user, windows of `--window-duration`;
          `<name>.hopping`   kind hopping, dimensions url and user, windows of `--hop-window-duration`
                             starting every `--hop-slide` (a view counts in each window containing it);
          `<name>.sessions`  kind session, dimension user, sessions of views at most `--session-gap`
                             apart; window_end is the last view + the gap (Spark's session end).
        Tumbling and hopping queries run in update mode: a window's count is re-emitted as rows arrive,
        under the same key, so the latest value per key is the count. The session query runs in append
        mode (Spark has no update mode for session windows): a session is emitted once, when the watermark
        passes its end, and is final: a later view within the gap starts a new session.
        Views are not deduplicated: the same view sent twice counts twice.
Late rows: the watermark trails the largest event time seen by `--watermark-delay`. A view whose window
        ended at or before the watermark (for sessions: whose own [event time, event time + gap) did) is
        dropped by that query and counted in `streamstack_query_rows_dropped_by_watermark_total{query}`
        (Spark counts rows after partial aggregation: late views of one window, key and input partition
        in one batch count once).
        With `--late-topic` (page-views-late; `--no-late-topic` disables it) the query `<name>.late`
        writes each view that the tumbling rule drops (window of `--window-duration` ended at or before
        the watermark) to that topic, raw value untouched, keyed `<topic>/<partition>/<offset>`, with the
        watermark, window end and origin in `late.*`/`source.*` headers, so a correction can be published.
        Structured Streaming does not expose the rows an aggregation drops, so `<name>.late` keeps its own
        watermark over the same input (same delay) and reads the watermark of each of its batches from its
        offset log (`<checkpoint>/offsets/<batch id>`, written before the batch runs, so a re-run batch
        routes the same views). Its batches are not the counting queries' batches, so its watermark can be
        one trigger apart from theirs: every view clearly behind the watermark is routed, but a view that
        arrives while the watermark moves past its window may be dropped without being routed, or routed
        although the count included it. Hopping and session windows drop by their own rules (above); the
        late topic follows the tumbling rule.
Dead letters: malformed records go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}`.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits and window state; a restart resumes.
        Outputs are keyed deterministically, so a batch re-run after a failure overwrites what it wrote.
Metrics: http://<metrics host>:<metrics port>/metrics. Each query's batch end offsets are committed to the
        consumer group `streamstack-<query name>`, so Kafka lag tools see it.
Replay: start with a new --checkpoint-dir and new output topics, and --starting-offsets earliest (or
        per-partition JSON, or --starting-timestamp-ms): the log is re-read into a fresh result.

Run locally (streamstack local up does this for you):
    python -m jobs.clickstream_windows --master 'local[2]' --bootstrap-servers 127.0.0.1:9092 \\
        --checkpoint-dir /tmp/checkpoints/clickstream-windows --extra-jars <spark-sql-kafka jars>
The output, windows, late and dead-letter topics must exist. In the cluster the same flags go in the
SparkApplication's `arguments`, without --master and --extra-jars.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.clickstream_windows.transforms import (
    count_hopping_views,
    count_session_views,
    count_tumbling_views,
    count_views_per_url,
    dimension_counts_as_records,
    late_views,
    late_views_as_records,
    page_views,
    watermarked_view_records,
    window_counts_as_records,
)
from jobs.common.config import (
    ConfigError,
    StreamingJobConfig,
    add_topic_argument,
    duration_seconds,
    parse_job_config,
    require_duration,
    require_topic,
    streaming_job_parser,
)
from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import start_foreach_batch_query, write_kafka_batch, write_kafka_stream
from jobs.common.offset_log import batch_watermark_ms
from jobs.common.runner import run_streaming_job
from jobs.common.schemas import decode_page_views

QUERY_NAME = "clickstream-windows"


@dataclass(frozen=True)
class WindowJobConfig:
    streaming: StreamingJobConfig
    input_topic: str
    output_topic: str
    window_duration: str
    watermark_delay: str
    # None turns an output (and its queries) off; the command line turns both on by default.
    windows_topic: str | None = None
    late_topic: str | None = None
    hop_window_duration: str = "30 seconds"
    hop_slide: str = "10 seconds"
    session_gap: str = "30 seconds"

    def __post_init__(self) -> None:
        for flag, topic in self.topics_by_flag().items():
            require_topic(flag, topic)
        for flag, value in (
            ("--window-duration", self.window_duration),
            ("--watermark-delay", self.watermark_delay),
            ("--hop-window-duration", self.hop_window_duration),
            ("--hop-slide", self.hop_slide),
            ("--session-gap", self.session_gap),
        ):
            require_duration(flag, value)
        if duration_seconds(self.hop_slide) > duration_seconds(self.hop_window_duration):
            raise ConfigError(
                f"--hop-slide {self.hop_slide!r}: must not exceed --hop-window-duration "
                f"{self.hop_window_duration!r}"
            )

    def topics_by_flag(self) -> dict[str, str]:
        """The topics the job reads and writes (besides dead letters), by flag; only those turned on."""
        topics = {"--input-topic": self.input_topic, "--output-topic": self.output_topic}
        if self.windows_topic is not None:
            topics["--windows-topic"] = self.windows_topic
        if self.late_topic is not None:
            topics["--late-topic"] = self.late_topic
        return topics

    def query_name(self, kind: str) -> str:
        """`<main query name>.<kind>`: tumbling, hopping, sessions, late."""
        return f"{self.streaming.query_name}.{kind}"


def parse_args(argv: list[str] | None) -> WindowJobConfig:
    parser = streaming_job_parser("clickstream-windows", __doc__.splitlines()[0], query_name=QUERY_NAME)
    add_topic_argument(parser, "--input-topic", "page-views", "page views to count")
    add_topic_argument(parser, "--output-topic", "page-views-per-url", "compacted topic of window counts")
    add_topic_argument(
        parser, "--windows-topic", "page-view-windows", "compacted topic of counts per url and user"
    )
    parser.add_argument(
        "--no-windows-topic", action="store_true", help="do not count per url and user by window kind"
    )
    add_topic_argument(parser, "--late-topic", "page-views-late", "views dropped as late, for corrections")
    parser.add_argument("--no-late-topic", action="store_true", help="do not route late views")
    parser.add_argument("--window-duration", default="10 seconds", help="tumbling window length")
    parser.add_argument("--hop-window-duration", default="30 seconds", help="hopping window length")
    parser.add_argument("--hop-slide", default="10 seconds", help="a hopping window starts this often")
    parser.add_argument("--session-gap", default="30 seconds", help="inactivity that ends a session")
    parser.add_argument("--watermark-delay", default="5 seconds", help="how late a row may be")
    return parse_job_config(
        parser,
        argv,
        lambda args, streaming: WindowJobConfig(
            streaming=streaming,
            input_topic=args.input_topic,
            output_topic=args.output_topic,
            windows_topic=None if args.no_windows_topic else args.windows_topic,
            late_topic=None if args.no_late_topic else args.late_topic,
            window_duration=args.window_duration.strip(),
            hop_window_duration=args.hop_window_duration.strip(),
            hop_slide=args.hop_slide.strip(),
            session_gap=args.session_gap.strip(),
            watermark_delay=args.watermark_delay.strip(),
        ),
    )


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


def start_queries(spark: SparkSession, config: WindowJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    decoded = read_decoded_stream(spark, streaming, config.input_topic, decode_page_views)
    views = page_views(decoded)
    counts = count_views_per_url(views, config.window_duration, config.watermark_delay)
    counts_query = write_kafka_stream(
        window_counts_as_records(counts),
        streaming,
        topic=config.output_topic,
        output_mode="update",
    )
    queries = [counts_query]
    if config.windows_topic is not None:
        queries.extend(start_window_kind_queries(views, config, config.windows_topic))
    if config.late_topic is not None:
        queries.append(start_late_view_query(decoded, config, config.late_topic))
    queries.append(start_dead_letter_query(streaming, [decoded]))
    return queries


def main(argv: list[str] | None = None) -> int:
    return run_streaming_job("clickstream-windows", parse_args(argv), start_queries)


if __name__ == "__main__":
    sys.exit(main())
