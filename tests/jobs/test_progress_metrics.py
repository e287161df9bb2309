"""The job-side backpressure metrics computed from Structured Streaming progress reports."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from jobs.common.progress import QueryProgressCollector, QueryProgressStore, parse_spark_timestamp

BATCH_TIME = "2026-11-22T12:00:10.000Z"


def progress(**overrides: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "id": "q-1",
        "name": "windows",
        "batchId": 7,
        "timestamp": BATCH_TIME,
        "numInputRows": 500,
        "inputRowsPerSecond": 250.0,
        "processedRowsPerSecond": 100.0,
        "durationMs": {"triggerExecution": 5000, "addBatch": 4200},
        "eventTime": {"watermark": "2026-11-22T12:00:04.000Z"},
        "stateOperators": [{"numRowsTotal": 40, "memoryUsedBytes": 4096, "numRowsDroppedByWatermark": 3}],
        "sources": [
            {
                "endOffset": {"views": {"0": 100, "1": 200}},
                "latestOffset": {"views": {"0": 150, "1": 200}},
            }
        ],
        "sink": {"numOutputRows": 12},
        "observedMetrics": {"dead_letters": {"malformed_json": 2, "oversized": 0}},
    }
    report.update(overrides)
    return report


def registry_for(store: QueryProgressStore, *, rate_limited: bool, now: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(
        QueryProgressCollector(
            store, trigger_interval_seconds=2.0, rate_limited=rate_limited, clock=lambda: now
        )
    )
    return registry


def test_backpressure_signals_from_a_slow_capped_batch() -> None:
    store = QueryProgressStore()
    store.started("q-1", "windows")
    store.progressed(progress())
    batch_end = parse_spark_timestamp(BATCH_TIME)
    registry = registry_for(store, rate_limited=True, now=batch_end + 30)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"streamstack_query_{name}", {"query": "windows", **labels})

    assert value("batch_utilization") == 2.5  # 5 s of work per 2 s trigger: falling behind
    assert value("rate_limited") == 1.0  # partition 0 stopped 50 short of the latest offset
    assert value("offsets_behind_latest", topic="views") == 50
    assert value("watermark_delay_seconds") == 6.0
    assert value("seconds_since_last_progress") == 30.0
    assert value("rows_dropped_by_watermark_total") == 3
    assert value("output_rows_total") == 12
    assert value("dead_letters_total", reason="malformed_json") == 2
    assert value("state_rows") == 40


def test_caught_up_uncapped_batch_is_not_rate_limited_and_counters_accumulate() -> None:
    store = QueryProgressStore()
    store.started("q-1", "windows")
    caught_up = [{"endOffset": {"views": {"0": 150}}, "latestOffset": {"views": {"0": 150}}}]
    store.progressed(progress(sources=caught_up, durationMs={"triggerExecution": 500}))
    store.progressed(progress(sources=caught_up, durationMs={"triggerExecution": 500}))
    registry = registry_for(store, rate_limited=False, now=parse_spark_timestamp(BATCH_TIME))

    labels = {"query": "windows"}
    assert registry.get_sample_value("streamstack_query_batch_utilization", labels) == 0.25
    assert registry.get_sample_value("streamstack_query_rate_limited", labels) == 0.0
    assert registry.get_sample_value("streamstack_query_batches_total", labels) == 2
    assert registry.get_sample_value("streamstack_query_batch_seconds_total", labels) == 1.0
    assert (
        registry.get_sample_value(
            "streamstack_query_dead_letters_total", {**labels, "reason": "malformed_json"}
        )
        == 4
    )


def test_foreach_batch_sinks_export_no_output_row_count() -> None:
    store = QueryProgressStore()
    store.started("q-1", "windows")
    store.progressed(progress(sink={"numOutputRows": -1}))
    registry = registry_for(store, rate_limited=False, now=parse_spark_timestamp(BATCH_TIME))
    assert registry.get_sample_value("streamstack_query_output_rows_total", {"query": "windows"}) is None
