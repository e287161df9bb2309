"""The window benchmark's rate arithmetic, on progress reports shaped like Spark's."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.bench_windows import throughput


def progress(start: str, rows: int, trigger_ms: int) -> dict[str, Any]:
    return {
        "timestamp": f"2026-11-22T12:00:{start}Z",
        "numInputRows": rows,
        "durationMs": {"triggerExecution": trigger_ms},
    }


def test_sustained_rate_leaves_out_the_first_and_last_batch() -> None:
    reports = [
        progress("00.000", 100, 3000),  # start-up: plan compilation, consumers created
        progress("03.000", 100, 1000),
        progress("04.000", 100, 1000),
        progress("05.000", 100, 2500),  # waits for a fetch at the end of the log
        progress("07.500", 0, 10),  # a no-data batch (watermark moved) carries no rows
    ]

    rates = throughput(list(reversed(reports)))

    assert rates["sustained_rows_per_second"] == pytest.approx(200 / 2.0)
    assert rates["drain_rows_per_second"] == pytest.approx(400 / 7.5)
    assert rates["rows"] == 400
    assert rates["batches"] == 4


def test_sustained_rate_needs_three_batches() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        throughput([progress("00.000", 100, 1000), progress("01.000", 100, 1000)])
