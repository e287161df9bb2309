"""Synthetic clickstream: JSON page views at a steady rate, keyed by user id.

Each event is `{"user_id": "user-17", "url": "/products/3", "event_time": "2026-01-01T12:00:00.123Z"}`.
Event time trails the send time by up to `--max-disorder-seconds` (random, seeded), so the stream arrives
out of event-time order the way real clients deliver it. `--late-share` of the views (default 0.1%) trail it
by `--late-seconds` more, behind every job's watermark: the windows job drops them and routes them to its
late topic. `--malformed-share` of the records (default 0.5%) are malformed, each kind of dead letter in turn
(jobs.producers.faults); 0 turns either off.

    python -m jobs.producers.clickstream --bootstrap-servers 127.0.0.1:9092 --topic <topic> --rate 200
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from jobs.producers.common import SendLoop, iso_millis, positive_float, positive_int, producer_parser
from jobs.producers.faults import (
    DEFAULT_LATE_SECONDS,
    DEFAULT_LATE_SHARE,
    EventShape,
    FaultSchedule,
    Malformer,
    add_malformed_share_argument,
    share,
)

SHAPE = EventShape(text_field="url", time_field="event_time")


@dataclass(frozen=True)
class PageView:
    user_id: str
    url: str
    event_time: datetime

    def fields(self) -> dict[str, object]:
        return {"user_id": self.user_id, "url": self.url, "event_time": iso_millis(self.event_time)}

    def to_json(self) -> bytes:
        return json.dumps(self.fields()).encode()


class PageViewGenerator:
    """Deterministic for a given seed: users and urls drawn uniformly, event time jittered backwards."""

    def __init__(self, users: int, urls: int, max_disorder_seconds: float, seed: int) -> None:
        self._random = random.Random(seed)
        self._users = users
        self._urls = urls
        self._max_disorder = max_disorder_seconds

    def next_view(self, now: float) -> PageView:
        event_time = now - self._random.uniform(0.0, self._max_disorder)
        return PageView(
            user_id=f"user-{self._random.randrange(self._users)}",
            url=f"/products/{self._random.randrange(self._urls)}",
            event_time=datetime.fromtimestamp(event_time, UTC),
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = producer_parser("clickstream-producer", __doc__.splitlines()[0], topic_help=None)
    parser.add_argument("--rate", type=positive_float, default=100.0, help="events per second")
    parser.add_argument("--users", type=positive_int, default=1000)
    parser.add_argument("--urls", type=positive_int, default=50)
    parser.add_argument("--max-disorder-seconds", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-events", type=int, default=None, help="stop after this many events")
    add_malformed_share_argument(parser)
    parser.add_argument(
        "--late-share", type=share, default=DEFAULT_LATE_SHARE, help="share of views sent late (0: none)"
    )
    parser.add_argument(
        "--late-seconds",
        type=positive_float,
        default=DEFAULT_LATE_SECONDS,
        help="how far a late view's event time trails the others'",
    )
    args = parser.parse_args(argv)
    if args.malformed_share + args.late_share > 1:
        parser.error("--malformed-share and --late-share add up to more than 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    generator = PageViewGenerator(args.users, args.urls, args.max_disorder_seconds, args.seed)
    schedule = FaultSchedule(args.malformed_share, args.late_share)
    malformer = Malformer(SHAPE, args.seed)
    with SendLoop(args.bootstrap_servers, args.rate) as loop:

        def send_view() -> None:
            now = time.time()
            kind = schedule.next_kind()
            view = generator.next_view(now - args.late_seconds if kind == "late" else now)
            if kind == "malformed":
                bad = malformer.malform(view.user_id, view.fields(), now)
                loop.producer.send(args.topic, key=bad.key, value=bad.value)
            else:
                loop.producer.send(args.topic, key=view.user_id.encode(), value=view.to_json())

        sent = loop.run(send_view, limit=args.max_events)
    print(f"sent {sent} page views to {args.topic}{schedule.summary()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
