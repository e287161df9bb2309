"""Decoding input events: each kind of bad record gets its own dead-letter reason, good ones a typed event."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession

from jobs.common.config import EventLimits
from jobs.common.events import (
    DECODE_REASONS,
    EventField,
    EventSchema,
    dead_letter_records,
    decode_events,
    valid_events,
)

pytestmark = pytest.mark.spark

RECORD_TIME = datetime(2026, 11, 22, 12, 0, 0)
ORDER = EventSchema(
    name="order",
    fields=(
        EventField("order_id", "string"),
        EventField("amount", "double"),
        EventField("quantity", "long"),
        EventField("paid", "boolean"),
        EventField("coupon", "string", required=False),
        EventField("placed_at", "timestamp"),
    ),
    event_time_field="placed_at",
)
LIMITS = EventLimits(max_event_bytes=200, max_event_future_seconds=3600, max_event_age_seconds=86400)


def order(**overrides: object) -> bytes:
    body: dict[str, object] = {
        "order_id": "o-1",
        "amount": 12.5,
        "quantity": 2,
        "paid": True,
        "placed_at": "2026-11-22T11:59:00.000Z",
    }
    body.update(overrides)
    return json.dumps({key: value for key, value in body.items() if value is not ...}).encode()


CASES: list[tuple[str, bytes | None, str | None]] = [
    ("valid", order(), None),
    ("valid with optional field and integer amount", order(amount=12, coupon="X"), None),
    ("valid with zone offset", order(placed_at="2026-11-22T13:30:00+01:00"), None),
    ("null value", None, "empty"),
    ("oversized", order(coupon="x" * 300), "oversized"),
    ("non-UTF-8 bytes", b'{"order_id": "\xff\xfe"}', "not_utf8"),
    ("truncated JSON", order()[:-5], "malformed_json"),
    ("not JSON at all", b"order o-1 paid", "malformed_json"),
    # A JSON parser that stops after the first value would take these for the object at their start.
    ("text after the object", order() + b" trailing", "malformed_json"),
    ("a second object after the first", order() + b' {"order_id": "o-2"}', "malformed_json"),
    ("a stray closing brace", order() + b"}", "malformed_json"),
    ("a stray closing bracket", order() + b"]", "malformed_json"),
    ("an array's rest after the object", order() + b", 0]", "malformed_json"),
    ("a NUL byte after the object", order() + b"\x00", "malformed_json"),
    ("valid with blanks after", order() + b" \r\n\t ", None),
    ("valid with nested values and braces in text", order(coupon='}{"x": [1]}') + b" ", None),
    ("JSON array followed by a brace", b"[1] }", "malformed_json"),
    ("nested object followed by an object", order(coupon="}") + b"{}", "malformed_json"),
    ("JSON array", b"[1, 2, 3]", "not_an_object"),
    ("JSON string", b'"o-1"', "not_an_object"),
    ("JSON array after blanks", b" \t\r\n [1]", "not_an_object"),
    ("valid after blanks", b" \n\t\r" + order(), None),
    ("missing field", order(quantity=...), "missing_field"),
    ("null field", order(paid=None), "missing_field"),
    ("string where a number goes", order(amount="12.5"), "wrong_type"),
    ("number where a string goes", order(order_id=17), "wrong_type"),
    ("fraction where an integer goes", order(quantity=2.5), "wrong_type"),
    ("object where a boolean goes", order(paid={"yes": 1}), "wrong_type"),
    ("timestamp without a zone", order(placed_at="2026-11-22 11:59:00"), "bad_timestamp"),
    ("timestamp as a number", order(placed_at=1795000000), "wrong_type"),
    ("timestamp nonsense", order(placed_at="yesterday"), "bad_timestamp"),
    ("far future", order(placed_at="2030-01-01T00:00:00Z"), "event_time_out_of_range"),
    ("far past", order(placed_at="1970-01-01T00:00:00Z"), "event_time_out_of_range"),
]


def test_each_bad_record_gets_its_reason_and_good_ones_decode(spark: SparkSession) -> None:
    records = spark.createDataFrame(
        [(f"k{i}".encode(), value, "orders", 0, i, RECORD_TIME) for i, (_, value, _) in enumerate(CASES)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp",
    )

    decoded = decode_events(records, ORDER, LIMITS).orderBy("offset").collect()

    reasons = {CASES[row["offset"]][0]: row["dead_letter_reason"] for row in decoded}
    assert reasons == {name: reason for name, _, reason in CASES}
    assert {reason for _, _, reason in CASES if reason} == set(DECODE_REASONS)
    assert all(row["dead_letter_detail"] for row in decoded if row["dead_letter_reason"])


def test_valid_events_are_typed(spark: SparkSession) -> None:
    records = spark.createDataFrame(
        [
            (b"k", order(amount=12, coupon="X"), "orders", 0, 0, RECORD_TIME),
            (b"k", b"{", "orders", 0, 1, RECORD_TIME),
        ],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp",
    )

    rows = valid_events(decode_events(records, ORDER, LIMITS)).collect()

    assert [row.asDict() for row in rows] == [
        {
            "order_id": "o-1",
            "amount": 12.0,
            "quantity": 2,
            "paid": True,
            "coupon": "X",
            "placed_at": RECORD_TIME - timedelta(minutes=1),
        }
    ]


def test_tombstones_are_deletes_on_changelogs_and_dead_letters_elsewhere(spark: SparkSession) -> None:
    changelog = EventSchema(name="order-changes", fields=ORDER.fields, tombstones_allowed=True)
    records = spark.createDataFrame(
        [(b"o-1", order(), "orders", 0, 0, RECORD_TIME), (b"o-1", None, "orders", 0, 1, RECORD_TIME)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp",
    )

    rows = valid_events(decode_events(records, changelog, LIMITS), with_record_key=True).collect()

    assert [(row["record_key"], row["is_tombstone"], row["order_id"]) for row in rows] == [
        ("o-1", False, "o-1"),
        ("o-1", True, None),
    ]


def test_dead_letter_rows_keep_raw_bytes_and_carry_reason_and_origin(spark: SparkSession) -> None:
    raw = b'{"order_id": "\xff"}'
    records = spark.createDataFrame(
        [(b"k", raw, "orders", 3, 41, RECORD_TIME)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp",
    )

    [row] = dead_letter_records(decode_events(records, ORDER, LIMITS), "orders-job").collect()

    headers = {header["key"]: bytes(header["value"]).decode() for header in row["headers"]}
    assert row["key"] == "orders/3/41"
    assert bytes(row["value"]) == raw
    assert headers["dead_letter.reason"] == "not_utf8"
    assert headers["dead_letter.query"] == "orders-job"
    assert (headers["source.topic"], headers["source.partition"], headers["source.offset"]) == (
        "orders",
        "3",
        "41",
    )
    assert headers["source.timestamp"] == (RECORD_TIME.replace(tzinfo=UTC)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
