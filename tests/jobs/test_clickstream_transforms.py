"""The window job's pure transforms on static DataFrames, checked against plain-Python expectations."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.clickstream_windows.transforms import (
    LATE_VIEW_TIME_HEADERS,
    count_hopping_views,
    count_session_views,
    count_views_per_url,
    dimension_counts_as_records,
    late_views,
    page_views,
    window_counts_as_records,
)
from jobs.common.config import EventLimits
from jobs.common.late_views import late_views_as_records
from jobs.common.schemas import decode_page_views

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
    records = spark.createDataFrame(
        [(value, BASE.replace(tzinfo=None)) for value in values], "value binary, timestamp timestamp"
    )

    parsed = page_views(decode_page_views(records, EventLimits()))

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


def _naive(moment: datetime) -> datetime:
    return moment.replace(tzinfo=None)


def test_hopping_counts_per_url_and_user_match_plain_python(spark: SparkSession) -> None:
    views = [("u1", "/a", 0.0), ("u2", "/a", 9.5), ("u1", "/b", 10.0), ("u1", "/a", 25.0), ("u2", "/b", 31.0)]
    frame = spark.createDataFrame(
        [(user, url, _naive(BASE + timedelta(seconds=s))) for user, url, s in views],
        "user_id string, url string, event_time timestamp",
    )

    counts = count_hopping_views(frame, "30 seconds", "10 seconds", "1 minute")

    # BASE is on a minute boundary, so windows aligned to the epoch start at multiples of 10 s after it.
    expected_counter: Counter[tuple[str, str, int]] = Counter()
    for user, url, offset in views:
        for start in range(int(offset // 10) * 10, int(offset) - 30, -10):
            expected_counter[("url", url, start)] += 1
            expected_counter[("user", user, start)] += 1
    expected = spark.createDataFrame(
        [
            (
                "hopping",
                dimension,
                value,
                _naive(BASE + timedelta(seconds=start)),
                _naive(BASE + timedelta(seconds=start + 30)),
                count,
            )
            for (dimension, value, start), count in expected_counter.items()
        ],
        "kind string, dimension string, value string, window_start timestamp, window_end timestamp, "
        "views long",
    )
    assertDataFrameEqual(counts.select(*expected.columns), expected)


def test_session_counts_end_one_gap_after_the_last_view(spark: SparkSession) -> None:
    views = [("u1", 0), ("u1", 20), ("u1", 41), ("u2", 5)]
    frame = spark.createDataFrame(
        [(user, "/a", _naive(BASE + timedelta(seconds=s))) for user, s in views],
        "user_id string, url string, event_time timestamp",
    )

    counts = count_session_views(frame, "20 seconds", "1 minute")

    # At most 20 s apart: u1's 0 and 20 share a session, 41 starts another.
    sessions = [("u1", 0, 20, 2), ("u1", 41, 41, 1), ("u2", 5, 5, 1)]
    expected = spark.createDataFrame(
        [
            (
                "session",
                "user",
                user,
                _naive(BASE + timedelta(seconds=first)),
                _naive(BASE + timedelta(seconds=last + 20)),
                count,
            )
            for user, first, last, count in sessions
        ],
        "kind string, dimension string, value string, window_start timestamp, window_end timestamp, "
        "views long",
    )
    assertDataFrameEqual(counts.select(*expected.columns), expected)


def test_dimension_records_are_keyed_by_kind_dimension_value_and_window_start(spark: SparkSession) -> None:
    start = _naive(BASE)
    counts = spark.createDataFrame(
        [("hopping", "user", "user-1", start, start + timedelta(seconds=30), 4)],
        "kind string, dimension string, value string, window_start timestamp, window_end timestamp, "
        "views long",
    )

    [record] = dimension_counts_as_records(counts).collect()

    assert record["key"] == "hopping|user|user-1|2026-11-22T12:00:00.000Z"
    assert json.loads(record["value"]) == {
        "kind": "hopping",
        "dimension": "user",
        "value": "user-1",
        "window_start": "2026-11-22T12:00:00.000Z",
        "window_end": "2026-11-22T12:00:30.000Z",
        "views": 4,
    }


def test_late_views_are_those_whose_tumbling_window_ended_by_the_watermark(spark: SparkSession) -> None:
    watermark = BASE + timedelta(seconds=20)
    offsets_seconds = [5.0, 9.999, 10.0, 19.999, 20.0, 35.0]
    records = spark.createDataFrame(
        [
            ("views", 1, offset, b"k", f"v{offset}".encode(), _naive(BASE + timedelta(seconds=s)))
            for offset, s in enumerate(offsets_seconds)
        ],
        "topic string, partition int, offset long, key binary, value binary, event_time timestamp",
    )

    late = late_views_as_records(
        late_views(records, "10 seconds", int(watermark.timestamp() * 1000)),
        int(watermark.timestamp() * 1000),
        "q.late",
        LATE_VIEW_TIME_HEADERS,
    ).collect()

    # Window end = the next multiple of 10 s; late when it is at or before the watermark (20 s).
    expected_offsets = [i for i, s in enumerate(offsets_seconds) if (s // 10 + 1) * 10 <= 20]
    assert [row["key"] for row in late] == [f"views/1/{offset}" for offset in expected_offsets]
    assert [bytes(row["value"]) for row in late] == [f"v{offset}".encode() for offset in expected_offsets]
    headers = {header["key"]: bytes(header["value"]).decode() for header in late[0]["headers"]}
    assert headers["late.watermark"] == "2026-11-22T12:00:20.000Z"
    assert headers["late.window_end"] == "2026-11-22T12:00:10.000Z"
    assert headers["source.offset"] == "0"
