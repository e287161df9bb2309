"""The window job's pure transforms on static DataFrames, checked against plain-Python expectations."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.clickstream_windows.transforms import (
    count_views_per_url,
    parse_page_views,
    window_counts_as_records,
)

pytestmark = pytest.mark.spark

BASE = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def _record(value: bytes | None) -> tuple[bytes | None]:
    return (value,)


def test_parse_keeps_valid_page_views_and_leaves_out_malformed(spark: SparkSession) -> None:
    valid = {"user_id": "user-1", "url": "/a", "event_time": "2026-11-22T12:00:01.500Z"}
    values = [
        json.dumps(valid).encode(),
        b"not json",
        json.dumps({"user_id": "user-2", "url": "/b"}).encode(),
        json.dumps({"user_id": "user-3", "url": "/c", "event_time": "yesterday"}).encode(),
        None,
    ]
    records = spark.createDataFrame([_record(value) for value in values], "value binary")

    parsed = parse_page_views(records)

    expected = spark.createDataFrame(
        [("user-1", "/a", (BASE + timedelta(seconds=1.5)).replace(tzinfo=None))],
        "user_id string, url string, event_time timestamp",
    )
    assertDataFrameEqual(parsed, expected)


def test_tumbling_window_counts_match_plain_python(spark: SparkSession) -> None:
    offsets_seconds = [0, 3, 9.999, 10, 12, 25, 29, 29.5, 31, 7, 14, 2]
    urls = ["/a", "/b", "/a", "/a", "/b", "/a", "/a", "/b", "/a", "/b", "/b", "/a"]
    views = [
        ("user-x", url, (BASE + timedelta(seconds=offset)).replace(tzinfo=None))
        for offset, url in zip(offsets_seconds, urls, strict=True)
    ]
    page_views = spark.createDataFrame(views, "user_id string, url string, event_time timestamp")

    counts = count_views_per_url(page_views, "10 seconds", "5 seconds")

    expected_counter: Counter[tuple[datetime, str]] = Counter()
    for offset, url in zip(offsets_seconds, urls, strict=True):
        window_start = BASE + timedelta(seconds=(offset // 10) * 10)
        expected_counter[(window_start, url)] += 1
    expected = spark.createDataFrame(
        [
            (start.replace(tzinfo=None), (start + timedelta(seconds=10)).replace(tzinfo=None), url, count)
            for (start, url), count in expected_counter.items()
        ],
        "window_start timestamp, window_end timestamp, url string, views long",
    )
    assertDataFrameEqual(counts, expected)


def test_records_are_keyed_by_window_start_and_url(spark: SparkSession) -> None:
    start = BASE.replace(tzinfo=None)
    counts = spark.createDataFrame(
        [(start, start + timedelta(seconds=10), "/a", 3)],
        "window_start timestamp, window_end timestamp, url string, views long",
    )

    [record] = window_counts_as_records(counts).collect()

    assert record["key"] == "2026-11-22T12:00:00.000Z|/a"
    assert json.loads(record["value"]) == {
        "window_start": "2026-11-22T12:00:00.000Z",
        "window_end": "2026-11-22T12:00:10.000Z",
        "url": "/a",
        "views": 3,
    }
