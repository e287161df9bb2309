"""A job driver's life, the same for every job: check topics, start session, metrics, queries; wait."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.config import ConfigError, StreamingJobConfig
from jobs.common.kafka_io import require_existing_topics
from jobs.common.progress import serve_progress_metrics
from jobs.common.session import build_session


def run_streaming_job(
    program: str,
    config: StreamingJobConfig,
    topics_by_flag: Mapping[str, str],
    start_queries: Callable[[SparkSession], list[StreamingQuery]],
) -> int:
    """Run until a query stops; a query failing raises, so the driver exits non-zero and is restarted.

    A missing topic is a configuration error reported before Spark starts (exit code 2, naming the flag).
    """
    try:
        require_existing_topics(config, topics_by_flag)
    except ConfigError as error:
        print(f"{program}: error: {error}", file=sys.stderr)
        return 2
    spark = build_session(config)
    serve_progress_metrics(spark, config)
    start_queries(spark)
    spark.streams.awaitAnyTermination()
    return 0
