"""View bursts: per user, the largest number of page views within any sliding window (a bot detector).

Input:  `--input-topic`, JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
Output: `--output-topic` (compacted), keyed `<user_id>`, value
        `{"user_id", "views", "first_view", "last_view", "over_threshold"}`: the largest number of the
        user's views that fall within `--window-length` of each other (last_view - first_view is less than
        the window length; the window slides with the views, it has no fixed boundaries: two views 59 s
        apart share a 60 s window whichever tumbling or hopping windows they fall in). first_view and
        last_view are the first and the last view of that burst. over_threshold: views > `--burst-threshold`.
        Views are not deduplicated (a page view has no id): the same view sent twice counts twice.
Timing: update mode. A user's record is written in the batch whose views make the user's largest burst
        larger, and only then: the latest record per key is the largest burst so far, and a topic reader
        sees it grow. Of two bursts of the same size the one written first stays. It is not final until
        the watermark passes last_view: an on-time view arriving out of order may still enlarge it.
Alerts: with `--alerts-topic`, the query `<name>.alerts` reads the output topic back and copies each record
        whose burst is over the threshold, as it is (one per growth above the threshold); its records are
        counted in `streamstack_query_output_rows_total{query="<name>.alerts"}`, which the Prometheus alert
        StreamstackViewBurstOverThreshold watches (monitoring/rules/streamstack-jobs.yaml).
Late rows: the watermark trails the largest event time seen by `--watermark-delay`. A view whose event time
        is at or before the watermark is dropped by Spark before the state sees it, and counted in
        `streamstack_query_rows_dropped_by_watermark_total{query}`. With `--late-topic` the query
        `<name>.late` writes each such view to that topic, raw value untouched, keyed
        `<topic>/<partition>/<offset>`, with the watermark and origin in `late.*`/`source.*` headers (the
        late topic of clickstream-windows; `late.query` tells them apart). As there, `<name>.late` keeps its
        own watermark over the same input and reads it from its offset log: it can be one trigger apart from
        the main query's, so a view arriving while the watermark moves past it may be dropped without
        being routed, or routed although it was counted.
How:    arbitrary stateful processing, `flatMapGroupsWithState` grouped by user with an event-time timeout,
        in the JVM (`streamstack.jvm.ViewBursts`, Java; jobs.jvm.view_bursts), so a batch starts no Python
        worker and converts no rows to pandas (it was `applyInPandasWithState` until 2026-11-27; a
        checkpoint of that version holds state of another schema, which Spark refuses at start: replay
        into a new checkpoint).
        Per user the state holds a time-ordered buffer of the view times an on-time view could still share
        a window with (after watermark - window length), the largest burst so far and the newest view time.
        Each batch inserts the user's new views, recomputes the largest window over the buffer (two
        pointers), emits when it grew, and evicts what the watermark has passed. Timeout: at the newest
        buffered view + the window length (the buffer then empties); then at the newest view +
        `--state-retention`, when the user is forgotten: state per user stays bounded by the views of one
        window, and the number of users by those active within the retention. A forgotten user starts again
        from 0; the record of their next burst replaces the old one.
Dead letters: malformed records go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}`.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits and (main query) the per-user buffers,
        bursts and timeouts; a restart, a SIGKILL too, resumes from them. Keys are per user, so a batch re-run
        after a failure writes the same records again.
Replay: start with a new --checkpoint-dir and a new --output-topic, and --starting-offsets earliest (or
        per-partition JSON, or --starting-timestamp-ms): the log is re-read into fresh bursts.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import read_kafka_stream, write_kafka_stream
from jobs.common.late_views import start_late_view_query
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_page_views
from jobs.view_bursts.config import BurstJobConfig
from jobs.view_bursts.transforms import (
    alerts,
    bursts_as_records,
    largest_bursts,
    late_views,
    page_views,
)


def start_queries(spark: SparkSession, config: BurstJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    decoded = read_decoded_stream(spark, streaming, config.input_topic, decode_page_views)
    bursts = largest_bursts(
        page_views(decoded), config.window_ms, config.watermark_delay, config.retention_ms
    )
    queries = [
        write_kafka_stream(
            bursts_as_records(bursts, config.threshold),
            streaming,
            topic=config.output_topic,
            output_mode="update",
        )
    ]
    if config.alerts_topic is not None:
        queries.append(
            write_kafka_stream(
                alerts(read_kafka_stream(spark, streaming, [config.output_topic])),
                streaming,
                query_name=config.query_name("alerts"),
                topic=config.alerts_topic,
                output_mode="append",
            )
        )
    if config.late_topic is not None:
        queries.append(
            start_late_view_query(
                decoded,
                streaming,
                query_name=config.query_name("late"),
                watermark_delay=config.watermark_delay,
                late_topic=config.late_topic,
                select_late=late_views,
            )
        )
    queries.append(start_dead_letter_query(streaming, [decoded]))
    return queries


JOB = StreamingJob("view-bursts", BurstJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
