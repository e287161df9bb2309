"""A job driver's life, the same for every job: check topics, start session, metrics, queries; wait."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.errors import ConfigError
from jobs.common.kafka_io import require_existing_topics
from jobs.common.progress import serve_progress_metrics
from jobs.common.session import build_session
from jobs.common.settings import JobSettings

JobSettingsT = TypeVar("JobSettingsT", bound=JobSettings)


def run_streaming_job(
    program: str,
    config: JobSettingsT,
    start_queries: Callable[[SparkSession, JobSettingsT], list[StreamingQuery]],
) -> int:
    """Run until a query stops; a query failing raises, so the driver exits non-zero and is restarted.

    A missing topic is a configuration error reported before Spark starts (exit code 2, naming the flag).
    """
    streaming = config.streaming
    try:
        require_existing_topics(streaming, config.topics_by_flag())
    except ConfigError as error:
        print(f"{program}: error: {error}", file=sys.stderr)
        return 2
    spark = build_session(streaming)
    serve_progress_metrics(spark, streaming)
    start_queries(spark, config)
    spark.streams.awaitAnyTermination()
    return 0
