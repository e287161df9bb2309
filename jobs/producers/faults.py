"""The faulty records the synthetic producers mix in, so that a demo exercises the dead-letter and late-data
paths: `--malformed-share` of the records are malformed, each kind the jobs' decoders turn into a dead letter
in turn (jobs.common.events, jobs.common.schemas), and, where a producer has `--late-share`, that share of
events carry an event time far enough behind the watermark to be dropped.

Faults are spaced evenly rather than drawn: a share of 0.005 makes every 200th record malformed, so n records
hold n * share of them (give or take one) and every kind its equal part. Which field a kind breaks is drawn
from a generator seeded like the producer.

The defaults stay below what the alerts treat as a problem. StreamstackLateRowsDropped fires at 1% of a
query's input in Spark's units, a dropped row per state row a late view would have updated:
clickstream-windows.hopping counts each view under 2 dimensions in 3 windows, so 0.1% late views are 0.6%
there. At 50 events/s the dead-letter path still gets a record every 2 s and the late path one every 20 s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from jobs.common.config import EventLimits
from jobs.producers.common import iso_millis

DEFAULT_MALFORMED_SHARE = 0.005
DEFAULT_LATE_SHARE = 0.001
# Behind the watermark of every job that reads page views (pipeline.yaml: watermark delay plus window or
# session gap, under a minute), even for a job running a minute behind.
DEFAULT_LATE_SECONDS = 120.0

RecordKind = Literal["valid", "malformed", "late"]
Event = Mapping[str, object]

_LIMITS = EventLimits()


def share(text: str) -> float:
    """A share of records, from 0 (none) to 1 (all)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def add_malformed_share_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--malformed-share",
        type=share,
        default=DEFAULT_MALFORMED_SHARE,
        help="share of records malformed, each kind of dead letter in turn (0: none)",
    )


class FaultSchedule:
    """Which record is a fault: each kind's share of records, evenly spaced. Half a record apart, so equal
    shares alternate; when two fall on one record the later kind takes the next."""

    def __init__(self, malformed_share: float, late_share: float = 0.0) -> None:
        if malformed_share + late_share > 1.0:
            raise ValueError("the malformed and late shares add up to more than every record")
        self._shares: dict[RecordKind, float] = {"malformed": malformed_share, "late": late_share}
        self._credit: dict[RecordKind, float] = {"malformed": 0.0, "late": 0.5}
        self.counts: Counter[RecordKind] = Counter()

    def next_kind(self) -> RecordKind:
        for kind, kind_share in self._shares.items():
            self._credit[kind] += kind_share
        due: RecordKind = next((kind for kind, credit in self._credit.items() if credit >= 1.0), "valid")
        if due != "valid":
            self._credit[due] -= 1.0
        self.counts[due] += 1
        return due

    def summary(self) -> str:
        """`; 3 malformed, 2 late` for a producer's closing line; empty without faults."""
        faults = [f"{self.counts[kind]} {kind}" for kind in ("malformed", "late") if self.counts[kind]]
        return f"; {', '.join(faults)}" if faults else ""


@dataclass(frozen=True)
class EventShape:
    """What breaking a producer's events needs to know of them (all their fields are required)."""

    text_field: str  # a string field
    time_field: str  # an ISO-8601 timestamp field
    is_event_time: bool = True  # the decoders check it against the record's Kafka timestamp
    key_field: str | None = None  # a changelog's: the field its record key must equal
    amount_field: str | None = None  # a money field of limited range (orders)

    def malformed_kinds(self) -> tuple[str, ...]:
        """The dead-letter reasons this shape's malformed records provoke, in the order they are sent."""
        kinds = ["oversized", "not_utf8", "malformed_json", "not_an_object", "missing_field", "wrong_type"]
        kinds.append("bad_timestamp")
        if self.is_event_time:
            # On a changelog a null value is a delete, not a dead letter.
            kinds += ["empty", "event_time_out_of_range"]
        if self.key_field is not None:
            # A changelog record without a key (missing_key) cannot be sent: compacted topics refuse it.
            kinds.append("key_mismatch")
        if self.amount_field is not None:
            kinds.append("out_of_range")
        return tuple(kinds)


@dataclass(frozen=True)
class MalformedRecord:
    reason: str  # the dead-letter reason the jobs give it
    key: bytes | None
    value: bytes | None


def _json(event: Event | list[Event]) -> bytes:
    return json.dumps(event).encode()


class Malformer:
    """Malformed versions of well-formed events, one kind after another (`EventShape.malformed_kinds`)."""

    def __init__(self, shape: EventShape, seed: int) -> None:
        self._shape = shape
        self._kinds = itertools.cycle(shape.malformed_kinds())
        self._random = random.Random(seed)

    def malform(self, key: str, event: Event, now: float) -> MalformedRecord:
        shape = self._shape
        reason = next(self._kinds)
        if shape.key_field is not None:
            # Under a real row's key a dead letter would, once compacted, hide the row's last valid change:
            # one reserved key per kind keeps the table whole and the topic small.
            key = f"malformed-{reason}"
            event = {**event, shape.key_field: key}
        value: bytes | None
        match reason:
            case "oversized":
                value = _json({**event, "padding": "x" * _LIMITS.max_event_bytes})
            case "not_utf8":
                value = _json(event)[:-1] + b', "note": "\xff\xfe"}'
            case "malformed_json":
                value = _json(event)[:-1]
            case "not_an_object":
                value = _json([event])
            case "missing_field":
                missing = self._random.choice(sorted(event))
                value = _json({name: v for name, v in event.items() if name != missing})
            case "wrong_type":
                value = _json({**event, shape.text_field: self._random.randrange(1000)})
            case "bad_timestamp":
                without_zone = str(event[shape.time_field]).replace("T", " ")[:19]
                value = _json({**event, shape.time_field: without_zone})
            case "empty":
                value = None
            case "event_time_out_of_range":
                future = now + _LIMITS.max_event_future_seconds + 24 * 3600
                value = _json({**event, shape.time_field: iso_millis(datetime.fromtimestamp(future, UTC))})
            case "key_mismatch":
                value = _json({**event, str(shape.key_field): f"{key}-elsewhere"})
            case "out_of_range":
                value = _json({**event, str(shape.amount_field): 1e17})
            case _:
                raise AssertionError(reason)
        return MalformedRecord(reason, key.encode(), value)
