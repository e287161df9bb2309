"""Ad attribution: each ad impression joined with the clicks on it (a stream-stream join), in event time.

Input:  `--impressions-topic`, JSON `{"impression_id", "ad_id", "user_id", "event_time"}`;
        `--clicks-topic`, JSON `{"click_id", "impression_id", "ad_id", "user_id", "event_time"}`
        (event_time ISO-8601 with a zone).
Output: `--output-topic` (compacted), one record per impression, keyed by impression id,
        value `{"impression_id", "ad_id", "user_id", "impression_time", "click_id", "click_time", "clicked",
        "seconds_to_click", "click_count"}`; click_id, click_time and seconds_to_click are null (present,
        not omitted) when clicked is false.
Join:   a click matches an impression when both impression id AND ad id are equal and
        impression_time <= click_time <= impression_time + `--attribution-window` (both ends inclusive):
        a click before its impression or after the window does not match. An impression that no click
        matches is emitted with clicked false (left outer join). The click's user_id is not compared.
        A click matching no impression (unknown id, other ad, out of the window) is not emitted anywhere.
Several clicks on one impression: the stream-stream join yields one row per matching (impression, click)
        pair; the job then keeps, per impression, the earliest click (ties: the smallest click_id) and
        counts the distinct click ids in click_count. So the result does not depend on arrival order, and
        a duplicated click (the same click_id sent again) or impression changes nothing: it yields the same
        pair again, which collapses. Impression ids are assumed unique: an id reused with another ad or
        time is a different impression under the same key, and the later write wins.
Timing: append mode, each impression emitted once, when final. The watermark is the smaller of the two
        inputs' largest event times less `--watermark-delay` (Spark's default min policy, so an idle input
        holds results back). An impression is final, and emitted, once the watermark passes
        impression_time + window; clicked or not, no row appears before. A row whose event time is at
        or behind the watermark on arrival is dropped as late (a late click leaves its impression
        unclicked; a late impression is never emitted), counted in
        `streamstack_query_rows_dropped_by_watermark_total{query}`.
Dead letters: malformed records of both inputs go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}`.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits, both sides of the join (impressions for
        the window plus the delay, clicks for the delay) and the per-impression first click; a restart
        resumes. The key is deterministic and the value a function of the impression's matching clicks,
        so a batch re-run after a failure rewrites the same records.
Replay: start with a new --checkpoint-dir and a new --output-topic, and --starting-offsets earliest (or
        per-partition JSON, or --starting-timestamp-ms): the logs are re-read into fresh attributions.
Metrics and how to run it: as every job (jobs.common.runner).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.ad_attribution.config import AttributionJobConfig
from jobs.ad_attribution.transforms import (
    attribute_clicks,
    attributions_as_records,
    clicks,
    impressions,
)
from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.runner import StreamingJob
from jobs.common.schemas import decode_clicks, decode_impressions


def start_queries(spark: SparkSession, config: AttributionJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    decoded_impressions = read_decoded_stream(spark, streaming, config.impressions_topic, decode_impressions)
    decoded_clicks = read_decoded_stream(spark, streaming, config.clicks_topic, decode_clicks)
    attributions = attribute_clicks(
        impressions(decoded_impressions),
        clicks(decoded_clicks),
        config.attribution_window,
        config.watermark_delay,
    )
    attributions_query = write_kafka_stream(
        attributions_as_records(attributions),
        streaming,
        topic=config.output_topic,
        output_mode="append",
    )
    return [attributions_query, start_dead_letter_query(streaming, [decoded_impressions, decoded_clicks])]


JOB = StreamingJob("ad-attribution", AttributionJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main
