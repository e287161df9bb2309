"""The driver's progress listener on a real local Spark session: what it feeds the store, and what it costs
the driver in py4j round trips per event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.progress import ProgressListener, QueryProgressStore, add_progress_listener

# One call for the event's progress, one for its JSON; a few spare for Spark adding fields.
MAX_CALLS_PER_EVENT = 3
RELEASE_REFERENCE = "m\nd\n"  # py4j's MEMORY_COMMAND_NAME, MEMORY_DEL_SUBCOMMAND_NAME


class CountingStore(QueryProgressStore):
    """Counts progress events, and remembers the threads the listener's callbacks run on."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0
        self.callback_threads: set[int] = set()

    def started(self, query_id: str, name: str | None) -> None:
        self.callback_threads.add(threading.get_ident())
        super().started(query_id, name)

    def progressed(self, progress: dict[str, Any]) -> None:
        self.callback_threads.add(threading.get_ident())
        self.events += 1
        super().progressed(progress)

    def terminated(self, query_id: str, failed: bool) -> None:
        self.callback_threads.add(threading.get_ident())
        super().terminated(query_id, failed)


@pytest.fixture
def listened(spark: SparkSession) -> Iterator[tuple[CountingStore, list[int]]]:
    """A store fed by the listener, and the py4j commands sent by the listener's callback threads (the
    threads that reach the store), except py4j's release of object references, which a garbage
    collection sends for any thread's objects."""
    store = CountingStore()
    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    calls = [0]
    send_command: Callable[..., Any] = client.send_command

    def counting(command: str, *args: Any, **kwargs: Any) -> Any:
        # the thread is known to be a callback thread once it reached the store; its first event's
        # calls before that are counted by the started event's allowance
        if threading.get_ident() in store.callback_threads and not command.startswith(RELEASE_REFERENCE):
            calls[0] += 1
        return send_command(command, *args, **kwargs)

    client.send_command = counting
    wrapper = add_progress_listener(spark, ProgressListener(store))
    try:
        yield store, calls
    finally:
        spark._jsparkSession.streams().removeListener(wrapper)
        del client.send_command


def counted_per_key(spark: SparkSession) -> DataFrame:
    """A stateful query with observed metrics, so progress events carry a state operator and
    observed metrics, as the jobs' do."""
    rows = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    observed = rows.observe("dead_letters", F.sum((rows.value < 0).cast("long")).alias("rows"))
    return observed.groupBy((observed.value % 5).alias("key")).count()


def run_for(query: StreamingQuery, seconds: float, batches: int) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(query.recentProgress) < batches:
        time.sleep(0.2)


def wait_until_stored_inactive(store: QueryProgressStore, name: str) -> None:
    """Listener events arrive asynchronously, after `stop()` returns."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and store.snapshot()[name].active:
        time.sleep(0.1)


def test_the_listener_stores_each_progress_with_a_few_py4j_calls(
    spark: SparkSession, listened: tuple[CountingStore, list[int]], tmp_path: Any
) -> None:
    store, calls = listened
    query = (
        counted_per_key(spark)
        .writeStream.format("noop")
        .outputMode("update")
        .queryName("listener-cost")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        run_for(query, seconds=60, batches=4)
    finally:
        query.stop()
    wait_until_stored_inactive(store, "listener-cost")

    state = store.snapshot()["listener-cost"]
    assert store.events >= 3
    assert state.progress["name"] == "listener-cost"
    assert state.progress["stateOperators"] and "dead_letters" in state.progress["observedMetrics"]
    assert not state.active and not state.failed
    # started, progress events and terminated: at most MAX_CALLS_PER_EVENT each
    assert calls[0] <= MAX_CALLS_PER_EVENT * (store.events + 2), (calls[0], store.events)


def test_a_failed_query_is_stored_as_failed(
    spark: SparkSession, listened: tuple[CountingStore, list[int]], tmp_path: Any
) -> None:
    store, _ = listened

    def fail(_batch: DataFrame, batch_id: int) -> None:
        if batch_id >= 1:
            raise RuntimeError("the sink refuses the batch")

    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .load()
        .writeStream.foreachBatch(fail)
        .queryName("listener-failure")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.awaitTermination(60)
    except Exception:  # the sink's error, raised again by awaitTermination
        pass
    finally:
        query.stop()
    wait_until_stored_inactive(store, "listener-failure")
    state = store.snapshot()["listener-failure"]
    assert not state.active and state.failed
