"""The benchmark's data and its rules, written once for the Python peers.

`classify` applies the window job's dead-letter checks (jobs.common.events.decode_events with the page-view
schema and the default EventLimits) to one Kafka record, in the job's order, so the first failing check
names the reason. The topic holds page views 10 ms apart in event time, one record in `DEAD_LETTER_EVERY`
a dead letter. Quix emits only closed windows (`.final()`): once it has counted every view, the benchmark
appends one marker view per url `MARKER_DELAY_MS` later in event time to Quix's own copy of the topic,
which closes every data window; its counts compare on the windows before the markers'.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import orjson

from jobs.common.config import EventLimits

PARTITIONS = 4
URLS = 50
WINDOW_MS = 10_000
GRACE_MS = 5_000  # the job's watermark delay
# Quix closes a key's windows on the newest timestamp of its (repartition) partition, and reads a backlog
# partition by partition in fetch-sized chunks: with the job's 5 s it drops views of a backlog as late.
# 30 minutes covers the chunks; the markers then close every window (within the job's 1 h limit for event
# times ahead of the record's timestamp).
QUIX_GRACE_MS = 30 * 60_000
DEAD_LETTER_EVERY = 100
MARKER_DELAY_MS = QUIX_GRACE_MS + 60_000

# (window start in epoch ms, url) -> views
Counts = Counter[tuple[int, str]]

_LIMITS = EventLimits()
_MAX_BYTES = _LIMITS.max_event_bytes
_FUTURE_US = _LIMITS.max_event_future_seconds * 1_000_000
_AGE_US = _LIMITS.max_event_age_seconds * 1_000_000
# The job's pattern (jobs.common.events._ISO_TIMESTAMP), ASCII digits only as in Java.
_ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})\Z", re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The page-view schema's fields (jobs.common.schemas.PAGE_VIEW: strings, then the event time), written out
# so that this module imports without pyspark, in the PyFlink peer's venv; main.py checks them at start.
FIELDS = (("user_id", "string"), ("url", "string"), ("event_time", "timestamp"))
_FIELDS = tuple(name for name, _ in FIELDS)


def classify(value: bytes | None, record_ms: int) -> tuple[str | None, int, str]:
    """(dead-letter reason or None, event time in epoch ms, url) of a page-view record."""
    if value is None:
        return "empty", 0, ""
    if len(value) > _MAX_BYTES:
        return "oversized", 0, ""
    try:
        view = orjson.loads(value)
    except orjson.JSONDecodeError:
        try:
            value.decode()
        except UnicodeDecodeError:
            return "not_utf8", 0, ""
        # The job, like orjson, refuses anything but blanks after the JSON value.
        return "malformed_json", 0, ""
    if type(view) is not dict:
        return "not_an_object", 0, ""
    for name in _FIELDS:
        field = view.get(name)
        if field is None:
            return "missing_field", 0, ""
        if type(field) is not str:
            return "wrong_type", 0, ""
    text = view["event_time"]
    if _ISO_TIMESTAMP.match(text) is None:
        return "bad_timestamp", 0, ""
    try:
        event_us = (datetime.fromisoformat(text) - _EPOCH) // _MICROSECOND
    except ValueError:
        return "bad_timestamp", 0, ""
    record_us = record_ms * 1000
    if event_us > record_us + _FUTURE_US or event_us < record_us - _AGE_US:
        return "event_time_out_of_range", 0, ""
    return None, event_us // 1000, view["url"]


def window_start(event_ms: int) -> int:
    return event_ms - event_ms % WINDOW_MS


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def page_view(i: int, event_time: datetime) -> bytes:
    return json.dumps(
        {"user_id": f"user-{i % 1000}", "url": f"/products/{i % URLS}", "event_time": iso(event_time)}
    ).encode()


class LivePageViews:
    """`page_view(i, now)` for a producer at 100,000s of events a second, byte for byte, at a fraction of its
    CPU (the producer shares the machine with the job it feeds): the event time's text is made once per
    millisecond and the rest comes from a template."""

    _TEMPLATE = b'{"user_id": "user-%d", "url": "/products/%d", "event_time": "%s"}'

    def __init__(self) -> None:
        self._millisecond = -1
        self._event_time = b""

    def __call__(self, i: int) -> bytes:
        millisecond = time.time_ns() // 1_000_000
        if millisecond != self._millisecond:
            self._millisecond = millisecond
            self._event_time = iso(at_millisecond(millisecond)).encode()
        return self._TEMPLATE % (i % 1000, i % URLS, self._event_time)


def at_millisecond(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms // 1000, UTC).replace(microsecond=epoch_ms % 1000 * 1000)


def dead_letter(i: int, event_time: datetime, now: datetime) -> tuple[bytes | None, str]:
    """A bad record of one of the kinds that every engine catches, the textbook Spark job included (it
    cannot tell a number from a string, so wrong types are left to the tests of the Python peers)."""
    good = page_view(i, event_time)
    kinds: list[tuple[bytes | None, str]] = [
        (good[:-7], "malformed_json"),
        (good.replace(b'"url"', b'"page"'), "missing_field"),
        (good.replace(b'"url": "', b'"url": null, "x": "'), "missing_field"),
        (page_view(i, event_time - timedelta(days=8)), "event_time_out_of_range"),
        (page_view(i, now + timedelta(hours=2)), "event_time_out_of_range"),  # the record is stamped >= now
        (good.replace(b'"event_time": "', b'"event_time": "yesterday '), "bad_timestamp"),
        (b"\xff\xfe" + good, "not_utf8"),
        (b"", "malformed_json"),
    ]
    return kinds[(i // DEAD_LETTER_EVERY) % len(kinds)]


def topic_records(events: int, now: datetime) -> Iterator[tuple[int, bytes | None, str | None, int]]:
    """(partition, value, expected dead-letter reason, event ms) of the benchmark topic, in order: page views
    100 a second in event time ending two minutes before `now`."""
    base = now - timedelta(milliseconds=10 * events, minutes=2)
    for i in range(events):
        event_time = base + timedelta(milliseconds=10 * i)
        if i % DEAD_LETTER_EVERY == DEAD_LETTER_EVERY - 1:
            value, reason = dead_letter(i, event_time, now)
            yield i % PARTITIONS, value, reason, 0
        else:
            yield i % PARTITIONS, page_view(i, event_time), None, int(event_time.timestamp() * 1000)


def closing_markers(events: int, now: datetime) -> tuple[list[tuple[int, bytes]], int]:
    """One view per url `MARKER_DELAY_MS` after the last view, and their window's start: a window engine
    that emits only closed windows closes every data window on them."""
    last = now - timedelta(minutes=2, milliseconds=10)
    marker = last + timedelta(milliseconds=MARKER_DELAY_MS)
    values = [(url % PARTITIONS, page_view(url, marker)) for url in range(URLS)]
    return values, window_start(int(marker.timestamp() * 1000))


def data_windows(counts: Counts, before_ms: int) -> Counts:
    return Counter({key: n for key, n in counts.items() if key[0] < before_ms})


def expected(events: int, now: datetime) -> tuple[Counts, Counter[str]]:
    """The counts and the dead letters by reason, from how the topic was made (independent of `classify`)."""
    counts: Counts = Counter()
    reasons: Counter[str] = Counter()
    for i, (_, _, reason, event_ms) in enumerate(topic_records(events, now)):
        if reason is not None:
            reasons[reason] += 1
        else:
            counts[(window_start(event_ms), f"/products/{i % URLS}")] += 1
    return counts, reasons


def classification_samples(now: datetime) -> list[tuple[bytes | None, int]]:
    """(value, Kafka timestamp ms) of records of every dead-letter class and the edge cases around them,
    for checking `classify` against the job's decoder."""
    record_ms = int(now.timestamp() * 1000)
    moment = now - timedelta(minutes=1)
    good = page_view(7, moment)

    def view(**fields: object) -> bytes:
        return json.dumps({"user_id": "u", "url": "/a", "event_time": iso(moment), **fields}).encode()

    values: list[bytes | None] = [
        good,
        b"  \n" + good + b" ",
        view(event_time="2026-11-22T12:00:00+01:00"),
        view(event_time="2026-11-22T12:00:00.123456789Z"),
        view(event_time="2026-11-22T12:00:00.1Z"),
        view(extra={"nested": [1, 2]}),
        None,
        b"",
        b"   ",
        b"x" * (_MAX_BYTES + 1),
        b"\xff\xfe" + good,
        good[:-1],
        good + b" trailing",
        good + b"{}",
        good + b"}",
        good + b"]",
        good + b", 0]",
        good + b"\x00",
        b"[1, 2]",
        b'"a string"',
        b"42",
        b"null",
        view(url=None),
        json.dumps({"user_id": "u", "event_time": iso(moment)}).encode(),
        view(url=7),
        view(url=7.5),
        view(url=True),
        view(url={"path": "/a"}),
        view(url=["/a"]),
        view(user_id=1),
        view(event_time=1764000000),
        view(event_time="yesterday"),
        view(event_time="2026-11-22 12:00:00Z"),
        view(event_time="2026-11-22T12:00:00"),
        view(event_time="2026-02-30T12:00:00Z"),
        view(event_time="2026-11-22T12:00:00.1234567890Z"),
        view(event_time=iso(now + timedelta(hours=2))),
        view(event_time=iso(now + timedelta(minutes=59))),
        view(event_time=iso(now - timedelta(days=8))),
        view(event_time=iso(now - timedelta(days=6))),
    ]
    return [(value, record_ms) for value in values]
