"""Clickstream window counts: page views per url and per user in tumbling, hopping and session windows.

Input:  `--input-topic`, JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
Output: `--output-topic` (compacted), query `<name>`: views per url in tumbling windows
        of `--window-duration`, keyed `<window start>|<url>`, value
        `{"window_start", "window_end", "url", "views"}`.
        `--windows-topic` (compacted): views per url and per user, keyed
        `<kind>|<dimension>|<value>|<window start>`, value
        `{"kind", "dimension", "value", "window_start", "window_end", "views"}`, one query per kind
        (none without `--windows-topic`):
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
        With `--late-topic` the query `<name>.late`
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
Replay: start with a new --checkpoint-dir and new output topics, and --starting-offsets earliest (or
        per-partition JSON, or --starting-timestamp-ms): the log is re-read into a fresh result.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.queries import start_late_view_query, start_window_kind_queries
from jobs.clickstream_windows.transforms import count_views_per_url, page_views, window_counts_as_records
from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_page_views


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


JOB = StreamingJob("clickstream-windows", WindowJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
