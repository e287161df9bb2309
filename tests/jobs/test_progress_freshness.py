"""End-to-end freshness from the observed metric `source_commits` of a CDC-fed query (jobs.common.progress):
it grows while input may be waiting (the view stalls behind newer commits), freezes at the last batch's
commit-to-view delay once Spark reports the query idle (an idle database does not age the view), and has
no series for a query whose records carry no commit time (the synthetic changelog producer)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from contracts.metrics import QUERY_PREFIX
from jobs.common.progress import (
    OBSERVED_SOURCE_COMMITS,
    QueryProgressCollector,
    QueryProgressStore,
    parse_spark_timestamp,
)
from streamstack.lag_status import ExporterState, StatusReport, build_rows, fetch_samples, parse_job, render
from streamstack.local.ports import free_port
from streamstack.local.status import read_job_status, render_table

BATCH_START = "2026-11-22T12:00:10.000Z"
START = parse_spark_timestamp(BATCH_START)


def progress(observed: dict[str, Any] | None, *, timestamp: str = BATCH_START) -> dict[str, Any]:
    return {
        "id": "q-1",
        "name": "user-view",
        "batchId": 3,
        "timestamp": timestamp,
        "numInputRows": 40,
        "durationMs": {"triggerExecution": 2000},
        "sources": [],
        "observedMetrics": {} if observed is None else {OBSERVED_SOURCE_COMMITS: observed},
    }


def freshness_at(store: QueryProgressStore, now: float) -> dict[str, float | None]:
    registry = CollectorRegistry()
    registry.register(
        QueryProgressCollector(store, trigger_interval_seconds=1.0, rate_limited=False, clock=lambda: now)
    )
    labels = {"query": "user-view"}
    return {
        name: registry.get_sample_value(f"streamstack_query_{name}", labels)
        for name in (
            "freshness_seconds",
            "source_commit_oldest_timestamp_seconds",
            "source_commit_newest_timestamp_seconds",
            "source_commit_applied_timestamp_seconds",
        )
    }


def test_freshness_grows_while_the_view_may_be_behind_and_freezes_once_the_query_is_idle() -> None:
    store = QueryProgressStore()
    store.started("q-1", "user-view")
    # Changes committed 5 s and 1 s before the batch started; the batch took 2 s.
    oldest_ms, newest_ms = int((START - 5) * 1000), int((START - 1) * 1000)
    store.progressed(progress({"oldest_ms": oldest_ms, "newest_ms": newest_ms, "changes": 7}))
    applied = START + 2

    right_after = freshness_at(store, applied)
    assert right_after == {
        "freshness_seconds": 7.0,
        "source_commit_oldest_timestamp_seconds": START - 5,
        "source_commit_newest_timestamp_seconds": START - 1,
        "source_commit_applied_timestamp_seconds": applied,
    }
    # No batch and no idle report since: a stalled view keeps ageing.
    assert freshness_at(store, applied + 60)["freshness_seconds"] == 67.0
    # Spark found no new input after the batch: the view holds everything, it stops ageing.
    store.idle("q-1", "2026-11-22T12:00:13.000Z")
    assert freshness_at(store, applied + 60)["freshness_seconds"] == 7.0
    assert freshness_at(store, applied + 3600)["freshness_seconds"] == 7.0


def test_a_batch_without_commit_times_keeps_the_last_ones_and_a_stopped_query_has_no_freshness() -> None:
    store = QueryProgressStore()
    store.started("q-1", "user-view")
    store.progressed(progress({"oldest_ms": int(START * 1000), "newest_ms": int(START * 1000), "changes": 1}))
    # A later batch of records without the header (Spark reports a null min/max and a zero count).
    store.progressed(
        progress({"oldest_ms": None, "newest_ms": None, "changes": 0}, timestamp="2026-11-22T12:00:20.000Z")
    )
    assert freshness_at(store, START + 30)["source_commit_applied_timestamp_seconds"] == START + 2
    store.terminated("q-1", failed=True)
    stopped = freshness_at(store, START + 30)
    assert stopped["freshness_seconds"] is None
    assert stopped["source_commit_oldest_timestamp_seconds"] == START


def test_records_without_a_commit_time_give_no_freshness_series() -> None:
    store = QueryProgressStore()
    store.started("q-1", "user-view")
    store.progressed(progress({"oldest_ms": None, "newest_ms": None, "changes": 0}))
    store.progressed(progress(None))
    assert set(freshness_at(store, START + 5).values()) == {None}


def test_streamstack_status_shows_the_freshness_a_driver_serves() -> None:
    """Both status views read the driver's endpoint (a real HTTP server with the real collector): the local
    table (streamstack.local.status) and `streamstack status --job-metrics-url` (streamstack.lag_status)."""
    store = QueryProgressStore()
    store.started("q-1", "user-view")
    oldest_ms = int((START - 5) * 1000)
    store.progressed(progress({"oldest_ms": oldest_ms, "newest_ms": oldest_ms, "changes": 1}))
    store.idle("q-1", "2026-11-22T12:00:13.000Z")
    registry = CollectorRegistry()
    registry.register(QueryProgressCollector(store, trigger_interval_seconds=1.0, rate_limited=False))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        status = read_job_status("user-view", url, process_running=True)
        assert status.freshness_seconds == 7.0
        assert "user-view end-to-end freshness: 7.0s" in render_table([status])
        (pressure,) = parse_job(fetch_samples(url, QUERY_PREFIX, "--job-metrics-url", 5.0))
        assert pressure.query == "user-view" and pressure.freshness_seconds == 7.0
        row = build_rows([], [pressure], "streamstack-")[0]
        exporter = ExporterState(
            "http://127.0.0.1:1/metrics", up=True, stale=False, last_success_timestamp_seconds=None
        )
        report = StatusReport(exporter=exporter, rows=[row])
        assert "end-to-end freshness of user-view: 7.0s" in render(report)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
