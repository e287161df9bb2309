"""Structured Streaming progress as Prometheus metrics, served by the driver.

A `StreamingQueryListener` keeps the latest progress of each query; a custom collector turns that snapshot
into metric families at scrape time, so a scrape never waits on Spark. Queries are labelled by their stable
query name (`query`), never by application or run id, so series survive restarts.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from contracts.metrics import (
    BATCH_SECONDS,
    BATCH_UTILIZATION,
    FRESHNESS_SECONDS,
    QUERY_ACTIVE,
    QUERY_FAILED,
    QUERY_PREFIX,
    RATE_LIMITED,
    SOURCE_COMMIT_APPLIED,
    SOURCE_COMMIT_NEWEST,
    SOURCE_COMMIT_OLDEST,
    WATERMARK_DELAY_SECONDS,
)
from contracts.shadow_groups import shadow_group
from jobs.common.config import StreamingJobConfig
from jobs.common.shadow_group import ShadowGroupCommitter

# Each of the two waits of `ProgressMetrics.detach`; with the stop's 10 s grace (jobs.common.stopping) under
# the local supervisor's 15 s before SIGKILL.
DETACH_TIMEOUT_SECONDS = 2.0
OBSERVED_DEAD_LETTERS = "dead_letters"
# A CDC-fed query's observed metric: the oldest and newest source commit time (epoch ms) of the records a
# batch applied, and how many records carried one (jobs.user_view.transforms.observe_source_commits).
OBSERVED_SOURCE_COMMITS = "source_commits"


def parse_spark_timestamp(text: str) -> float:
    """Seconds since the epoch from Spark's ISO-8601 progress timestamps ('...T12:00:00.000Z')."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _offsets_by_partition(offsets: Any) -> dict[str, dict[str, int]]:
    """Kafka source offsets arrive as JSON text or a dict: {topic: {partition: offset}}."""
    if isinstance(offsets, str):
        offsets = json.loads(offsets) if offsets.strip().startswith("{") else {}
    if not isinstance(offsets, dict):
        return {}
    return {
        topic: {str(partition): int(offset) for partition, offset in partitions.items()}
        for topic, partitions in offsets.items()
        if isinstance(partitions, dict)
    }


@dataclass
class QueryState:
    """What we know of one query: its last progress and totals accumulated over this driver's life."""

    active: bool = True
    failed: bool = False
    progress: dict[str, Any] = field(default_factory=dict)
    batches_total: int = 0
    batch_seconds_total: float = 0.0
    input_rows_total: int = 0
    rows_dropped_by_watermark_total: int = 0
    output_rows_total: int | None = None
    dead_letters_total: dict[str, int] = field(default_factory=dict)
    last_progress_unix: float = 0.0
    last_activity_unix: float = 0.0
    last_idle_unix: float = 0.0
    # The last batch that applied records with a source commit time: (oldest, newest, committed at).
    source_commits: tuple[float, float, float] | None = None


class QueryProgressStore:
    """Thread-safe latest-progress snapshot per query name, fed by the listener."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names_by_id: dict[str, str] = {}
        self._queries: dict[str, QueryState] = {}

    def started(self, query_id: str, name: str | None) -> None:
        label = name or query_id
        with self._lock:
            self._names_by_id[query_id] = label
            state = self._queries.setdefault(label, QueryState())
            state.active, state.failed = True, False

    def progressed(self, progress: dict[str, Any]) -> None:
        label = progress.get("name") or str(progress.get("id"))
        with self._lock:
            self._names_by_id[str(progress.get("id"))] = label
            state = self._queries.setdefault(label, QueryState())
            state.progress = progress
            state.batches_total += 1
            state.batch_seconds_total += (
                float((progress.get("durationMs") or {}).get("triggerExecution", 0)) / 1000.0
            )
            state.input_rows_total += int(progress.get("numInputRows") or 0)
            state.rows_dropped_by_watermark_total += sum(
                int(op.get("numRowsDroppedByWatermark") or 0) for op in progress.get("stateOperators") or []
            )
            sink_rows = (progress.get("sink") or {}).get("numOutputRows")
            # foreachBatch sinks report -1: the rows they write are unknown to Spark, so no series.
            if sink_rows is not None and int(sink_rows) >= 0:
                state.output_rows_total = (state.output_rows_total or 0) + int(sink_rows)
            observed = (progress.get("observedMetrics") or {}).get(OBSERVED_DEAD_LETTERS) or {}
            for reason, count in observed.items():
                state.dead_letters_total[reason] = state.dead_letters_total.get(reason, 0) + int(count or 0)
            state.last_progress_unix = parse_spark_timestamp(progress["timestamp"])
            state.last_activity_unix = max(state.last_activity_unix, state.last_progress_unix)
            commits = (progress.get("observedMetrics") or {}).get(OBSERVED_SOURCE_COMMITS) or {}
            if int(commits.get("changes") or 0) > 0:
                # The batch has committed when its progress is reported: trigger start + its duration.
                trigger_ms = float((progress.get("durationMs") or {}).get("triggerExecution", 0))
                state.source_commits = (
                    float(commits["oldest_ms"]) / 1000.0,
                    float(commits["newest_ms"]) / 1000.0,
                    state.last_progress_unix + trigger_ms / 1000.0,
                )

    def idle(self, query_id: str, timestamp: str) -> None:
        with self._lock:
            label = self._names_by_id.get(query_id, query_id)
            state = self._queries.setdefault(label, QueryState())
            state.last_activity_unix = max(state.last_activity_unix, parse_spark_timestamp(timestamp))
            state.last_idle_unix = max(state.last_idle_unix, parse_spark_timestamp(timestamp))

    def terminated(self, query_id: str, failed: bool) -> None:
        with self._lock:
            label = self._names_by_id.get(query_id, query_id)
            state = self._queries.setdefault(label, QueryState())
            state.active, state.failed = False, failed

    def snapshot(self) -> dict[str, QueryState]:
        with self._lock:
            return {
                name: QueryState(
                    active=state.active,
                    failed=state.failed,
                    progress=state.progress,
                    batches_total=state.batches_total,
                    batch_seconds_total=state.batch_seconds_total,
                    input_rows_total=state.input_rows_total,
                    rows_dropped_by_watermark_total=state.rows_dropped_by_watermark_total,
                    output_rows_total=state.output_rows_total,
                    dead_letters_total=dict(state.dead_letters_total),
                    last_progress_unix=state.last_progress_unix,
                    last_activity_unix=state.last_activity_unix,
                    last_idle_unix=state.last_idle_unix,
                    source_commits=state.source_commits,
                )
                for name, state in self._queries.items()
            }


class QueryProgressCollector(Collector):
    """Builds fresh metric families from the store's snapshot on every scrape."""

    def __init__(
        self,
        store: QueryProgressStore,
        trigger_interval_seconds: float,
        rate_limited: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._trigger_interval_seconds = trigger_interval_seconds
        self._rate_limited = rate_limited
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(QUERY_PREFIX + name, doc, labels=["query", *labels])

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> CounterMetricFamily:
            return CounterMetricFamily(QUERY_PREFIX + name, doc, labels=["query", *labels])

        active = gauge(QUERY_ACTIVE, "1 while the query runs, 0 once it has stopped")
        failed = gauge(QUERY_FAILED, "1 if the query stopped with an exception")
        input_rate = gauge("input_rows_per_second", "Rate at which rows arrived in the last batch")
        processed_rate = gauge("processed_rows_per_second", "Rate at which the last batch processed rows")
        batch_duration = gauge("batch_duration_seconds", "Trigger execution time of the last batch")
        phase_duration = gauge(
            "batch_phase_duration_seconds", "Time the last batch spent in each phase", ("phase",)
        )
        batch_id = gauge("last_batch_id", "Id of the last completed batch")
        batch_rows = gauge("last_batch_input_rows", "Rows read by the last completed batch")
        last_progress = gauge("last_progress_timestamp_seconds", "When the last batch completed")
        behind = gauge(
            "offsets_behind_latest",
            "Records between the last batch's end offsets and the latest offsets it saw, per topic",
            ("topic",),
        )
        end_offset = gauge(
            "source_end_offset", "Next offset to read after the last batch", ("topic", "partition")
        )
        watermark = gauge("watermark_timestamp_seconds", "Event-time watermark of the last batch")
        state_rows = gauge("state_rows", "Rows held in state stores")
        state_bytes = gauge("state_memory_bytes", "Memory used by state stores")
        batches = counter("batches", "Completed batches since the driver started")
        batch_seconds = counter(
            BATCH_SECONDS,
            "Trigger execution time of the batches completed since the driver started; its rate is the "
            "share of time the query spends running batches (1: every batch starts late)",
        )
        input_rows = counter("input_rows", "Rows read since the driver started")
        dropped = counter("rows_dropped_by_watermark", "Rows older than the watermark, dropped by state ops")
        output_rows = counter(
            "output_rows", "Rows written to the sink since the driver started (not for foreachBatch sinks)"
        )
        dead_letters = counter(
            "dead_letters", "Malformed input records sent to the dead-letter topic, by reason", ("reason",)
        )
        utilization = gauge(
            BATCH_UTILIZATION,
            "Trigger execution time of the last batch / trigger interval; above 1 the query falls behind",
        )
        rate_limited = gauge(
            RATE_LIMITED,
            "1 if the last batch stopped short of the latest offsets because of maxOffsetsPerTrigger",
        )
        watermark_delay = gauge(
            WATERMARK_DELAY_SECONDS, "How far the watermark trails the last batch's trigger time"
        )
        since_progress = gauge(
            "seconds_since_last_progress", "Seconds since the query last reported a batch or being idle"
        )
        freshness = gauge(
            FRESHNESS_SECONDS,
            "Seconds the output trails the source database: now - the oldest source commit of the last "
            "batch while input may be waiting; that batch's commit-to-output delay once Spark finds no "
            "new input (an idle database does not age the view)",
        )
        commit_oldest = gauge(
            SOURCE_COMMIT_OLDEST, "Oldest source commit time among the changes the last such batch applied"
        )
        commit_newest = gauge(
            SOURCE_COMMIT_NEWEST, "Newest source commit time among the changes the last such batch applied"
        )
        commit_applied = gauge(
            SOURCE_COMMIT_APPLIED, "When the last batch that applied changes with a source commit time ended"
        )
        now = self._clock()

        for name, state in sorted(self._store.snapshot().items()):
            labels = [name]
            active.add_metric(labels, 1.0 if state.active else 0.0)
            failed.add_metric(labels, 1.0 if state.failed else 0.0)
            batches.add_metric(labels, float(state.batches_total))
            batch_seconds.add_metric(labels, state.batch_seconds_total)
            input_rows.add_metric(labels, float(state.input_rows_total))
            dropped.add_metric(labels, float(state.rows_dropped_by_watermark_total))
            if state.output_rows_total is not None:
                output_rows.add_metric(labels, float(state.output_rows_total))
            for reason, count in sorted(state.dead_letters_total.items()):
                dead_letters.add_metric([name, reason], float(count))
            if state.source_commits is not None:
                oldest, newest, applied = state.source_commits
                commit_oldest.add_metric(labels, oldest)
                commit_newest.add_metric(labels, newest)
                commit_applied.add_metric(labels, applied)
                if state.active:
                    # Spark reporting the query idle after that batch means no input was waiting: the
                    # view holds every change that reached Kafka, and its freshness is the batch's delay.
                    caught_up = state.last_idle_unix >= applied
                    freshness.add_metric(labels, max(0.0, (applied if caught_up else now) - oldest))
            progress = state.progress
            if not progress:
                continue
            if state.active:
                since_progress.add_metric(labels, max(0.0, now - state.last_activity_unix))
            input_rate.add_metric(labels, float(progress.get("inputRowsPerSecond") or 0.0))
            processed_rate.add_metric(labels, float(progress.get("processedRowsPerSecond") or 0.0))
            durations = progress.get("durationMs") or {}
            trigger_seconds = float(durations.get("triggerExecution", 0)) / 1000.0
            batch_duration.add_metric(labels, trigger_seconds)
            utilization.add_metric(labels, trigger_seconds / self._trigger_interval_seconds)
            behind_total = sum(_offsets_behind_by_topic(progress).values())
            rate_limited.add_metric(labels, 1.0 if self._rate_limited and behind_total > 0 else 0.0)
            for phase, millis in sorted(durations.items()):
                phase_duration.add_metric([name, phase], float(millis) / 1000.0)
            batch_id.add_metric(labels, float(progress.get("batchId", 0)))
            batch_rows.add_metric(labels, float(progress.get("numInputRows") or 0))
            last_progress.add_metric(labels, state.last_progress_unix)
            for topic, lag in _offsets_behind_by_topic(progress).items():
                behind.add_metric([name, topic], float(lag))
            for source in progress.get("sources") or []:
                for topic, partitions in _offsets_by_partition(source.get("endOffset")).items():
                    for partition, offset in sorted(partitions.items(), key=lambda item: int(item[0])):
                        end_offset.add_metric([name, topic, partition], float(offset))
            event_time = progress.get("eventTime") or {}
            if "watermark" in event_time:
                watermark_seconds = parse_spark_timestamp(event_time["watermark"])
                watermark.add_metric(labels, watermark_seconds)
                if watermark_seconds > 0:
                    watermark_delay.add_metric(labels, state.last_progress_unix - watermark_seconds)
            operators = progress.get("stateOperators") or []
            if operators:
                state_rows.add_metric(
                    labels, float(sum(int(op.get("numRowsTotal") or 0) for op in operators))
                )
                state_bytes.add_metric(
                    labels, float(sum(int(op.get("memoryUsedBytes") or 0) for op in operators))
                )

        yield from (active, failed, input_rate, processed_rate, batch_duration, phase_duration, batch_id)
        yield from (batch_rows, last_progress, behind, end_offset, watermark, state_rows, state_bytes)
        yield from (batches, batch_seconds, input_rows, dropped, output_rows, dead_letters)
        yield from (utilization, rate_limited, watermark_delay, since_progress)
        yield from (freshness, commit_oldest, commit_newest, commit_applied)


def _offsets_behind_by_topic(progress: dict[str, Any]) -> dict[str, int]:
    behind: dict[str, int] = {}
    for source in progress.get("sources") or []:
        end = _offsets_by_partition(source.get("endOffset"))
        latest = _offsets_by_partition(source.get("latestOffset"))
        for topic, partitions in latest.items():
            total = sum(
                max(0, offset - end.get(topic, {}).get(partition, offset))
                for partition, offset in partitions.items()
            )
            behind[topic] = behind.get(topic, 0) + total
    return behind


def kafka_end_offsets(progress: dict[str, Any]) -> dict[str, dict[str, int]]:
    """End offsets of every Kafka source of a batch, merged by topic."""
    merged: dict[str, dict[str, int]] = {}
    for source in progress.get("sources") or []:
        for topic, partitions in _offsets_by_partition(source.get("endOffset")).items():
            merged.setdefault(topic, {}).update(partitions)
    return merged


class ShadowGroups:
    """One committer per query, to the group `<prefix><query name>`, created on the query's first batch."""

    def __init__(
        self, bootstrap_servers: str, prefix: str, client_options: Mapping[str, Any] | None = None
    ) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._prefix = prefix
        self._client_options = dict(client_options or {})
        self._committers: dict[str, ShadowGroupCommitter] = {}
        self._lock = threading.Lock()

    def submit(self, query_name: str, offsets: dict[str, dict[str, int]]) -> None:
        with self._lock:
            committer = self._committers.get(query_name)
            if committer is None:
                committer = ShadowGroupCommitter(
                    self._bootstrap_servers,
                    shadow_group(query_name, self._prefix),
                    client_options=self._client_options,
                )
                self._committers[query_name] = committer
        committer.submit(offsets)

    def flush(self, timeout_seconds: float) -> bool:
        """Wait until every committer has committed what it was given, for at most `timeout_seconds` in
        all; False if one has not (Kafka unreachable: it keeps retrying until the driver exits)."""
        deadline = time.monotonic() + timeout_seconds
        with self._lock:
            committers = list(self._committers.values())
        return all(committer.flush(max(0.0, deadline - time.monotonic())) for committer in committers)


class ProgressListener:
    """Feeds query lifecycle and progress events into a QueryProgressStore and the shadow groups.

    Spark's `PythonStreamingQueryListener` interface implemented directly through py4j, not through
    pyspark's `StreamingQueryListener`: pyspark turns every progress event into Python objects field by
    field, hundreds of py4j round trips per event (1,727 for 4 events of a stateful query with observed
    metrics: every source, state operator and duration map entry; the observed metrics through class
    lookups that miss across Spark's whole classpath), all of it on the driver's listener thread. The store
    keeps the progress JSON, which is two calls.
    """

    def __init__(self, store: QueryProgressStore, shadow_groups: ShadowGroups | None = None) -> None:
        self._store = store
        self._shadow_groups = shadow_groups

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's callback names)
        self._store.started(event.id().toString(), event.name())

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        progress = json.loads(event.progress().json())
        self._store.progressed(progress)
        if self._shadow_groups is not None and progress.get("name"):
            self._shadow_groups.submit(progress["name"], kafka_end_offsets(progress))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        self._store.idle(event.id().toString(), event.timestamp())

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        self._store.terminated(event.id().toString(), failed=event.exception().isDefined())

    class Java:
        implements: ClassVar = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def add_progress_listener(spark: SparkSession, listener: ProgressListener) -> Any:
    """Register `listener` with the session's StreamingQueryManager (what `spark.streams.addListener` does
    for pyspark's listeners, without its event conversion); returns the registered Java listener, which
    `spark._jsparkSession.streams().removeListener` takes."""
    gateway: Any = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    wrapper = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(listener)
    spark._jsparkSession.streams().addListener(wrapper)
    return wrapper


@dataclass
class ProgressMetrics:
    """The job's progress listener, its store and shadow groups, as `serve_progress_metrics` set them up."""

    store: QueryProgressStore
    listener: Any
    shadow_groups: ShadowGroups | None

    def detach(self, spark: SparkSession, timeout_seconds: float = DETACH_TIMEOUT_SECONDS) -> None:
        """Before the driver exits: let the listener take the events Spark has not delivered yet (the last
        batches' progress, the queries' termination), remove it, and wait for the shadow groups' last
        commits. Otherwise Spark delivers those events to a Python process that has gone (an ERROR with a
        stack trace in the log of most stops) and the shadow groups keep the offsets of an earlier batch
        while the job is down."""
        timeout_ms = int(timeout_seconds * 1000)
        # A listener still busy after the timeout (a TimeoutException) is removed all the same.
        with contextlib.suppress(Py4JJavaError):
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)
        spark._jsparkSession.streams().removeListener(self.listener)
        if self.shadow_groups is not None:
            self.shadow_groups.flush(timeout_seconds)


def serve_progress_metrics(spark: SparkSession, config: StreamingJobConfig) -> ProgressMetrics:
    """Register the listener (with the job's shadow groups) and serve its metrics on
    http://<metrics host>:<metrics port>/metrics from a daemon thread. Call before starting queries, and
    `detach` the result before the driver exits."""
    store = QueryProgressStore()
    registry = CollectorRegistry()
    registry.register(
        QueryProgressCollector(
            store,
            trigger_interval_seconds=config.trigger_interval_seconds,
            rate_limited=config.max_offsets_per_trigger is not None,
        )
    )
    start_http_server(config.metrics_port, addr=config.metrics_host, registry=registry)
    shadow_groups = (
        ShadowGroups(
            config.bootstrap_servers, config.shadow_group_prefix, config.kafka_security.client_options()
        )
        if config.shadow_group_prefix
        else None
    )
    listener = add_progress_listener(spark, ProgressListener(store, shadow_groups))
    return ProgressMetrics(store, listener, shadow_groups)
