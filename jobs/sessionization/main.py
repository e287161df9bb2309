"""Sessionization: each user's page views grouped into sessions by inactivity, in event time.

Input:  `--input-topic`, JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
Output: `--output-topic` (compacted), keyed `<user_id>|<session start>`, value
        `{"user_id", "session_start", "session_end", "duration_seconds", "page_count", "distinct_urls"}`.
        A session is a user's views each at most `--session-gap` after the previous one (Spark's session
        window, per user). session_start is the first view's event time and session_end the LAST VIEW's
        event time (not last view + gap, Spark's session window end); duration_seconds is
        session_end - session_start (0 for a single view), page_count counts views, distinct_urls counts
        distinct urls. Views are not deduplicated: the same view sent twice counts twice.
        An out-of-order view that comes within the gap of two open sessions merges them into one.
Timing: append mode. The watermark trails the largest event time seen by `--watermark-delay`; a session is
        emitted once, when the watermark reaches its last view + gap, and is final: a view arriving later
        within the gap after it starts a new session. A view whose [event time, event time + gap) ended at
        or before the watermark is dropped and counted in
        `streamstack_query_rows_dropped_by_watermark_total{query}`.
Dead letters: malformed records go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}`.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits and the open sessions; a restart
        resumes. Keys are deterministic, so a batch re-run after a failure overwrites what it wrote.
Replay: start with a new --checkpoint-dir and a new --output-topic, and --starting-offsets earliest (or
        per-partition JSON, or --starting-timestamp-ms): the log is re-read into fresh sessions.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_page_views
from jobs.sessionization.config import SessionJobConfig
from jobs.sessionization.transforms import clicks, sessionize, sessions_as_records


def start_queries(spark: SparkSession, config: SessionJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    decoded = read_decoded_stream(spark, streaming, config.input_topic, decode_page_views)
    sessions = sessionize(clicks(decoded), config.session_gap, config.watermark_delay)
    sessions_query = write_kafka_stream(
        sessions_as_records(sessions),
        streaming,
        topic=config.output_topic,
        output_mode="append",
    )
    return [sessions_query, start_dead_letter_query(streaming, [decoded])]


JOB = StreamingJob("sessionization", SessionJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
