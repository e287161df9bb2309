"""The benchmarks' one percentile: linear interpolation between the closest ranks."""

from __future__ import annotations

import pytest

from scripts.bench_exporter.scrape import latency_summary
from scripts.stats import percentile


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([7.0], 90) == 7.0
    assert percentile([10.0, 20.0, 30.0], 0) == 10.0
    assert percentile([10.0, 20.0, 30.0], 100) == 30.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)


def test_a_scrape_p99_of_few_scrapes_weighs_the_slowest() -> None:
    """The exporter benchmark's p99 of 50 scrapes lies between the two slowest (it was the second slowest,
    so one slow scrape in 50 never counted), and kafka_exporter's of 2 scrapes near the slower (it was the
    faster one, below its own median)."""
    fifty = [0.001 * ms for ms in range(1, 50)] + [0.090]
    ours = latency_summary(fifty)
    assert ours["p99_ms"] == pytest.approx(49 + 0.51 * (90 - 49))
    assert ours["p50_ms"] == pytest.approx(25.5)
    assert ours["max_ms"] == pytest.approx(90)
    theirs = latency_summary([51.556, 55.242])
    assert theirs["p50_ms"] < theirs["p99_ms"] <= theirs["max_ms"]
    assert theirs["p99_ms"] == pytest.approx(1000 * (51.556 + 0.99 * (55.242 - 51.556)))
