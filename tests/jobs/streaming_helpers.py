"""Plumbing for tests that run a streaming job: its config and queries in this process, or the window job as
a child process; the event-time format; what the queries counted. No job's semantics live here: each test
keeps its own reference."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.pipeline import DEAD_LETTER_FLAG, load_pipeline
from jobs.common.config import StreamingJobConfig
from jobs.common.session import TABLE_STATE_SETTINGS
from streamstack.local.jobs import spark_job_process
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import latest_per_key, read_records


def iso(moment: datetime) -> str:
    """The events' time format: UTC, ISO-8601 to the millisecond, with a Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def changelog_record(key: str, updated_at: datetime, **fields: object) -> tuple[bytes, bytes]:
    """A changelog upsert keyed by `key`: the fields in the order given, then `updated_at`."""
    return key.encode(), json.dumps({**fields, "updated_at": iso(updated_at)}).encode()


def user_profile(user: str, name: str, country: str, tier: str, updated_at: datetime) -> tuple[bytes, bytes]:
    """A users-changelog upsert."""
    return changelog_record(user, updated_at, user_id=user, name=name, country=country, tier=tier)


# The window job's hopping and session durations for a config without a windows topic (which ignores them).
UNUSED_WINDOW_KIND_DURATIONS = {
    "hop_window_duration": "1 minute",
    "hop_slide": "1 minute",
    "session_gap": "1 minute",
}


def catalogue_command_line(job: str) -> list[str]:
    """The job's command line as the local runtime and the chart give it: Kafka and the checkpoint root,
    then the dead-letter topic and the job's topics and settings from pipeline.yaml."""
    pipeline = load_pipeline()
    return [
        *("--bootstrap-servers", "127.0.0.1:9092", "--checkpoint-dir", "/tmp/checkpoints"),
        *(DEAD_LETTER_FLAG, pipeline.dead_letter_topic, *pipeline.job(job).arguments()),
    ]


def streaming_config(
    query_name: str, bootstrap_servers: str, workdir: Path, topic_prefix: str
) -> StreamingJobConfig:
    """The shared settings of a job run in this process: checkpoints under `workdir`/checkpoints, dead letters
    to `<topic_prefix>-dead-letters`, no metrics port of its own, a short trigger."""
    return StreamingJobConfig(
        query_name=query_name,
        bootstrap_servers=bootstrap_servers,
        checkpoint_dir=str(workdir / "checkpoints"),
        metrics_port=0,
        trigger_interval="500 milliseconds",
        dead_letter_topic=f"{topic_prefix}-dead-letters",
    )


def create_job_topics(kafka: LocalKafka, streaming: StreamingJobConfig, *topics: TopicSpec) -> None:
    """Create a job's topics, then its dead-letter topic with the catalogue's dead-letter topic config."""
    pipeline = load_pipeline()
    dead_letter_config = pipeline.topic(pipeline.dead_letter_topic).topic_config()
    kafka.create_topics([*topics, TopicSpec(streaming.dead_letter_topic, extra_config=dead_letter_config)])


def process_all(queries: Sequence[StreamingQuery]) -> None:
    for query in queries:
        query.processAllAvailable()


@contextmanager
def running(queries: Sequence[StreamingQuery]) -> Iterator[Sequence[StreamingQuery]]:
    """The started queries, stopped on the way out whatever happens."""
    try:
        yield queries
    finally:
        for query in queries:
            query.stop()


def input_rows(queries: Sequence[StreamingQuery]) -> dict[str, int]:
    """Rows each query has read, over its recent progress."""
    return {query.name: sum(p["numInputRows"] for p in query.recentProgress) for query in queries}


def dropped_by_watermark(query: StreamingQuery) -> int:
    return sum(
        operator.numRowsDroppedByWatermark
        for progress in query.recentProgress
        for operator in progress.stateOperators
    )


def check_appended_once(
    outputs: Sequence[tuple[int, Mapping[str, Any]]], emitted_after_phase: Sequence[Mapping[str, Any]]
) -> None:
    """An append-mode output read after each phase as (records, latest value per key) holds exactly what the
    test's reference emitted up to that phase, each key written once."""
    emitted: dict[str, Any] = {}
    for (count, latest), new in zip(outputs, emitted_after_phase, strict=True):
        emitted.update(new)
        assert latest == emitted
        assert count == len(latest)


def forget_last_commit(checkpoint: Path) -> int:
    """Delete the newest batch's commit, as a failure after the batch wrote its output but before it
    committed leaves the checkpoint: the next start runs that batch again. Returns the batch id."""
    last = max(int(name) for name in os.listdir(checkpoint / "commits") if name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    return last


def run_with_table_state(
    spark: SparkSession, start: Callable[[], list[StreamingQuery]], config: StreamingJobConfig
) -> None:
    """Start a job whose main query keeps tables as state, process what its topics hold, stop it; check
    that the table state settings (jobs.common.session.TABLE_STATE_SETTINGS) reached its first batch's
    main query and only it: not its dead-letter query, nor the session."""
    before = {key: spark.conf.get(key, None) for key in TABLE_STATE_SETTINGS}
    with running(start()) as queries:
        process_all(queries)
    assert {key: spark.conf.get(key, None) for key in TABLE_STATE_SETTINGS} == before
    rocksdb = TABLE_STATE_SETTINGS["spark.sql.streaming.stateStore.providerClass"]

    def provider(query_name: str) -> object:
        offsets = Path(config.checkpoint_for(query_name)) / "offsets" / "0"
        conf = json.loads(offsets.read_text().splitlines()[1])["conf"]
        return conf.get("spark.sql.streaming.stateStore.providerClass")

    assert provider(config.query_name) == rocksdb
    assert provider(f"{config.query_name}.dead-letters") not in (rocksdb, None)


def views_per_key(bootstrap_servers: str, topic: str) -> dict[str, int]:
    """A window job's per-url output read back: the latest `views` per key."""
    return {
        key: value["views"] for key, value in latest_per_key(read_records(bootstrap_servers, topic)).items()
    }


def start_window_job(
    runtimes: Runtimes,
    bootstrap_servers: str,
    *,
    checkpoint_dir: Path,
    log_path: Path,
    topics: tuple[str, str, str],
    settings: Sequence[str],
) -> tuple[ManagedProcess, str]:
    """The window job as deployed, a child process with a 1 s trigger, reading `topics` (input, output,
    dead letters; no windows or late topic) with pipeline.yaml's settings, then `settings` flags on top.
    Returns it started, and its metrics URL."""
    input_topic, output_topic, dead_letter_topic = topics
    port = free_port()
    process = spark_job_process(
        runtimes,
        "jobs.clickstream_windows",
        name="clickstream-windows",
        bootstrap_servers=bootstrap_servers,
        checkpoint_dir=checkpoint_dir,
        metrics_port=port,
        log_path=log_path,
        scratch_dir=log_path.parent / "scratch",
        trigger_interval="1 second",
        extra_args=(
            *load_pipeline().job("clickstream-windows").setting_arguments,
            "--input-topic",
            input_topic,
            "--output-topic",
            output_topic,
            "--dead-letter-topic",
            dead_letter_topic,
            *settings,
        ),
    ).start()
    return process, f"http://127.0.0.1:{port}/metrics"
