"""Sessionization: each user's page views grouped into sessions by inactivity, in event time.

Input:  `--input-topic` (page-views), JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
Output: `--output-topic` (user-sessions, compacted), keyed `<user_id>|<session start>`, value
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
Metrics: http://<metrics host>:<metrics port>/metrics. Each query's batch end offsets are committed to the
        consumer group `streamstack-<query name>`, so Kafka lag tools see it.
Replay: start with a new --checkpoint-dir and a new --output-topic, and --starting-offsets earliest (or
        per-partition JSON, or --starting-timestamp-ms): the log is re-read into fresh sessions.

Run locally (streamstack local up does this for you):
    python -m jobs.sessionization --master 'local[2]' --bootstrap-servers 127.0.0.1:9092 \\
        --checkpoint-dir /tmp/checkpoints/sessionization --extra-jars <spark-sql-kafka jars>
The output and dead-letter topics must exist. In the cluster the same flags go in the SparkApplication's
`arguments`, without --master and --extra-jars.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.runner import run_streaming_job
from jobs.common.schemas import decode_page_views
from jobs.sessionization.config import SessionJobConfig
from jobs.sessionization.transforms import clicks, sessionize, sessions_as_records

QUERY_NAME = "sessionization"


def parse_args(argv: list[str] | None) -> SessionJobConfig:
    return SessionJobConfig.parse_args(argv, name=QUERY_NAME, description=__doc__.splitlines()[0])


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


def main(argv: list[str] | None = None) -> int:
    return run_streaming_job(QUERY_NAME, parse_args(argv), start_queries)


if __name__ == "__main__":
    sys.exit(main())
