"""A job driver's life, the same for every job: check topics, start session, metrics, queries; wait.

Metrics: http://<metrics host>:<metrics port>/metrics. Each query's batch end offsets are committed to the
        consumer group `streamstack-<query name>`, so Kafka lag tools see it.
Run locally (streamstack local up does this for you):
    python -m jobs.<module> --master 'local[2]' --bootstrap-servers 127.0.0.1:9092 \\
        --checkpoint-dir /tmp/checkpoints/<job> --extra-jars <spark-sql-kafka jars> \\
        --dead-letter-topic <topic> <the topics and settings of jobs.<job> in pipeline.yaml>
Every topic must exist: a missing one is named by its flag at start (exit code 2). In the cluster the same
flags go in the SparkApplication's `arguments`, without --master and --extra-jars.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.errors import ConfigError
from jobs.common import failures
from jobs.common.kafka_io import require_existing_topics
from jobs.common.progress import serve_progress_metrics
from jobs.common.session import build_session
from jobs.common.settings import JobSettings
from jobs.common.stopping import await_queries, stop_between_batches

JobSettingsT = TypeVar("JobSettingsT", bound=JobSettings)


@dataclass(frozen=True)
class StreamingJob(Generic[JobSettingsT]):
    """A job's entry points, from its name, its settings and how it starts its queries: `parse_args` (its
    command line, described by the first line of `runbook`) and `main` (run it)."""

    name: str
    settings: type[JobSettingsT]
    start_queries: Callable[[SparkSession, JobSettingsT], list[StreamingQuery]]
    runbook: str

    def parse_args(self, argv: list[str] | None) -> JobSettingsT:
        return self.settings.parse_args(argv, name=self.name, description=self.runbook.splitlines()[0])

    def main(self, argv: list[str] | None = None) -> int:
        return run_streaming_job(self.name, self.parse_args(argv), self.start_queries)


def run_streaming_job(
    program: str,
    config: JobSettingsT,
    start_queries: Callable[[SparkSession, JobSettingsT], list[StreamingQuery]],
) -> int:
    """Run until a query fails or SIGTERM (or Ctrl-C) stops the queries between batches (exit code 0,
    jobs.common.stopping); a query failing raises, so the driver exits non-zero and is restarted, after one
    `<program>: error:` line when the job can name the cause (jobs.common.failures).

    A missing topic is a configuration error reported before Spark starts (exit code 2, naming the flag).
    """
    streaming = config.streaming
    try:
        require_existing_topics(streaming, config.topics_by_flag())
    except ConfigError as error:
        print(f"{program}: error: {error}", file=sys.stderr)
        return 2
    spark = build_session(streaming)
    stop_between_batches(spark)
    progress = serve_progress_metrics(spark, streaming)
    queries = start_queries(spark, config)
    try:
        await_queries(spark, queries)
    except StreamingQueryException as failure:
        explanation = failures.explain_query_failure(failures.failure_text(failure), streaming)
        if explanation is not None:
            print(f"{program}: error: {explanation}", file=sys.stderr)
        raise
    finally:
        progress.detach(spark)
    return 0
