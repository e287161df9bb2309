"""User enrichment: each page view joined with its user's current profile (a stream-table join).

Input:  `--views-topic` (page-views), JSON page views `{"user_id", "url", "event_time"}` (ISO-8601, UTC).
        `--users-topic` (users, compacted), the CDC changelog of a users table: key = user id, value
        `{"user_id", "name", "country", "tier", "updated_at"}`, a null value (tombstone) deletes the user.
Output: `--output-topic` (page-views-enriched), one record per valid view, keyed by the view's position
        `<topic>/<partition>/<offset>`, value `{"user_id", "url", "event_time", "name", "country", "tier",
        "profile_updated_at"}`; the four profile fields are null when the user is unknown or deleted.
        Views are not deduplicated: the same view sent twice is enriched twice, under two keys.
How:    one query, `<name>`, reads both topics and runs `foreachBatch`. The users table is NOT kept as
        Spark state: each batch reads the users topic as a batch table, from its start up to the end
        offsets this batch was planned with (Spark writes them to `<checkpoint>/offsets/<batch id>` before
        the batch runs), keeps each user's last valid record and drops tombstones, and left-joins the
        batch's views against it. A stream-stream join was rejected: it would join a view with every
        profile version inside a time range rather than the latest, and it needs watermarks on event
        times that a changelog does not have.
Which profile a view sees: a view processed in batch N is joined with, for its user_id, the last valid
        record of that key in the users topic below batch N's end offset (dead letters never count). So
        a view sees every profile change that reached Kafka before its batch was planned, including
        changes that arrived after the view within the same trigger interval, and none that arrived
        later; it is never re-enriched when the profile changes afterwards. Event times play no part:
        this is processing-time ("latest as of the batch") semantics, not an event-time temporal join.
Re-runs: a batch re-run after a failure reads the same offsets, so it writes the same values under the
        same keys (at-least-once, idempotent). This holds while the log cleaner has not compacted the users
        topic past the batch's end in between; set the topic's min.compaction.lag.ms above the longest
        expected outage.
Cost:   every batch scans the whole users topic (compaction keeps it near one record per user). For
        tables too large for that, keep the table as state with transformWithStateInPandas instead.
Dead letters: malformed views and profiles (bad JSON, missing or mistyped fields, view event times out
        of range, profile records without a key (`missing_key`) or whose user_id differs from the key
        (`key_mismatch`)) go to `--dead-letter-topic` with the reason in headers (query
        `<name>.dead-letters`), counted in `streamstack_query_dead_letters_total{reason}` (except the two
        changelog reasons, which jobs.common.events does not list yet). A bad profile record leaves the
        user's previous version in place, until the log cleaner removes the versions it supersedes
        (compaction keeps the last record per key, bad or not).
State:  `<checkpoint dir>/<query name>` per query: offsets and commits only; the table is the topic.
Metrics: http://<metrics host>:<metrics port>/metrics. Each query's batch end offsets are committed to the
        consumer group `streamstack-<query name>`, so Kafka lag tools see it.
Replay: start with a new --checkpoint-dir and a new --output-topic; --starting-offsets applies to both
        topics, but the users table is always read from the start of the users topic.

Run locally (streamstack local up does this for you):
    python -m jobs.user_enrichment --master 'local[2]' --bootstrap-servers 127.0.0.1:9092 \\
        --checkpoint-dir /tmp/checkpoints/user-enrichment --extra-jars <spark-sql-kafka jars>
Every topic must exist (checked at start; a missing one is named by its flag). In the cluster the same
flags go in the SparkApplication's `arguments`, without --master and --extra-jars.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.config import (
    ConfigError,
    StreamingJobConfig,
    add_streaming_job_arguments,
    add_topic_argument,
    require_topic,
    streaming_job_config,
)
from jobs.common.events import start_dead_letter_query
from jobs.common.kafka_io import read_kafka_stream, read_topic_until
from jobs.common.offset_log import batch_end_offsets
from jobs.common.runner import run_streaming_job
from jobs.user_enrichment.transforms import (
    current_profiles,
    decode_page_views,
    decode_profiles,
    enrich_views,
    enriched_views_as_records,
    page_views_with_source,
)

QUERY_NAME = "user-enrichment"


@dataclass(frozen=True)
class EnrichmentJobConfig:
    streaming: StreamingJobConfig
    views_topic: str = "page-views"
    users_topic: str = "users"
    output_topic: str = "page-views-enriched"

    def __post_init__(self) -> None:
        require_topic("--views-topic", self.views_topic)
        require_topic("--users-topic", self.users_topic)
        require_topic("--output-topic", self.output_topic)
        if self.views_topic == self.users_topic:
            raise ConfigError(f"--users-topic {self.users_topic!r}: must differ from --views-topic")


def parse_args(argv: list[str] | None) -> EnrichmentJobConfig:
    parser = argparse.ArgumentParser(prog="user-enrichment", description=__doc__.splitlines()[0])
    add_streaming_job_arguments(parser, query_name=QUERY_NAME)
    add_topic_argument(parser, "--views-topic", "page-views", "page views to enrich")
    add_topic_argument(parser, "--users-topic", "users", "compacted changelog of user profiles")
    add_topic_argument(parser, "--output-topic", "page-views-enriched", "enriched page views")
    args = parser.parse_args(argv)
    try:
        return EnrichmentJobConfig(
            streaming=streaming_job_config(args),
            views_topic=args.views_topic,
            users_topic=args.users_topic,
            output_topic=args.output_topic,
        )
    except ConfigError as error:
        parser.error(str(error))


def start_enrichment_query(records: DataFrame, config: EnrichmentJobConfig) -> StreamingQuery:
    """`<name>`: each batch's views joined with the users table as of the batch's end offsets."""
    streaming = config.streaming
    checkpoint = streaming.checkpoint_for(streaming.query_name)

    def enrich_batch(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        end_offsets = batch_end_offsets(spark, checkpoint, batch_id)
        if config.users_topic not in end_offsets:
            raise RuntimeError(f"batch {batch_id} has no offsets for {config.users_topic} in {checkpoint}")
        users = read_topic_until(spark, streaming, config.users_topic, end_offsets[config.users_topic])
        profiles = current_profiles(decode_profiles(users, streaming.event_limits))
        views = page_views_with_source(
            decode_page_views(batch.where(F.col("topic") == config.views_topic), streaming.event_limits)
        )
        (
            enriched_views_as_records(enrich_views(views, profiles))
            .write.format("kafka")
            .option("kafka.bootstrap.servers", streaming.bootstrap_servers)
            .option("topic", config.output_topic)
            .save()
        )

    return (
        records.writeStream.queryName(streaming.query_name)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=streaming.trigger_interval)
        .foreachBatch(enrich_batch)
        .start()
    )


def start_queries(spark: SparkSession, config: EnrichmentJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    # The dead-letter query reads each topic as its own source: two filtered branches of one source would
    # each scan it, and Spark would count every record twice as input.
    decoded_views = decode_page_views(
        read_kafka_stream(spark, streaming, [config.views_topic]), streaming.event_limits
    )
    decoded_profiles = decode_profiles(
        read_kafka_stream(spark, streaming, [config.users_topic]), streaming.event_limits
    )
    return [
        start_enrichment_query(
            read_kafka_stream(spark, streaming, [config.views_topic, config.users_topic]), config
        ),
        start_dead_letter_query(streaming, [decoded_views, decoded_profiles]),
    ]


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    topics = {
        "--views-topic": config.views_topic,
        "--users-topic": config.users_topic,
        "--output-topic": config.output_topic,
    }
    return run_streaming_job(
        "user-enrichment", config.streaming, topics, lambda spark: start_queries(spark, config)
    )


if __name__ == "__main__":
    sys.exit(main())
