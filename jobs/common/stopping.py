"""A driver's stop on SIGTERM or Ctrl-C: its queries end between batches (jobs/jvm GracefulStop) and it exits
0, instead of the JVM's shutdown cutting them in a batch. The same on both sides: locally the supervisor
signals this process and its JVM together, and this process asks the JVM to stop the queries; in the cluster
the kubelet signals the driver's JVM, whose SIGTERM handler does it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

# Under the local supervisor's 15 s between SIGTERM and SIGKILL (streamstack.local.process) and a pod's
# default 30 s termination grace period; a micro-batch of the jobs takes a few seconds at most.
STOP_GRACE_SECONDS = 10.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_GRACE_MILLIS = int(STOP_GRACE_SECONDS * 1000)


def stop_between_batches(spark: SparkSession) -> None:
    """On the first SIGTERM or Ctrl-C (and on a SIGTERM to the JVM), stop the session's queries between
    batches; a second signal stops the driver at once."""
    jvm = spark._jvm
    assert jvm is not None
    jvm.streamstack.jvm.GracefulStop.install(spark._jsparkSession, _GRACE_MILLIS)

    def stop_queries() -> None:
        stop_queries_between_batches(spark)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_DFL)
        # Nothing through py4j here: the handler runs in the main thread, whose connection to the JVM is
        # waiting for the queries to end; another thread has its own.
        threading.Thread(target=stop_queries, name="stop-between-batches", daemon=True).start()

    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, on_signal)


def stop_queries_between_batches(spark: SparkSession) -> int:
    """Stop the session's queries now, each between batches (or cut after the grace period); returns how many
    were left with a batch not committed. `StreamingQuery.stop()` instead interrupts the running batch, even
    one that has run its sink and is not yet committed or its progress reported."""
    jvm = spark._jvm
    assert jvm is not None
    return int(jvm.streamstack.jvm.GracefulStop.stopQueries(spark._jsparkSession, _GRACE_MILLIS))


def await_queries(spark: SparkSession, queries: Sequence[StreamingQuery]) -> None:
    """Until a query fails (its StreamingQueryException is raised) or every query has stopped."""
    spark.streams.awaitAnyTermination()
    for query in queries:
        query.awaitTermination()
