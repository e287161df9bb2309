"""Synthetic clickstream: JSON page views at a steady rate, keyed by user id.

Each event is `{"user_id": "user-17", "url": "/products/3", "event_time": "2026-01-01T12:00:00.123Z"}`.
Event time trails the send time by up to `--max-disorder-seconds` (random, seeded), so the stream arrives
out of event-time order the way real clients deliver it.

    python -m jobs.producers.clickstream --bootstrap-servers 127.0.0.1:9092 --topic page-views --rate 200
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType

from kafka import KafkaProducer


@dataclass(frozen=True)
class PageView:
    user_id: str
    url: str
    event_time: datetime

    def to_json(self) -> bytes:
        stamp = self.event_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return json.dumps({"user_id": self.user_id, "url": self.url, "event_time": stamp}).encode()


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


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="clickstream-producer", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=_positive_float, default=100.0, help="events per second")
    parser.add_argument("--users", type=_positive_int, default=1000)
    parser.add_argument("--urls", type=_positive_int, default=50)
    parser.add_argument("--max-disorder-seconds", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-events", type=int, default=None, help="stop after this many events")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    generator = PageViewGenerator(args.users, args.urls, args.max_disorder_seconds, args.seed)
    producer = KafkaProducer(bootstrap_servers=args.bootstrap_servers, acks="all", linger_ms=20)
    interval = 1.0 / args.rate
    next_send = time.monotonic()
    sent = 0
    try:
        while not stopping and (args.max_events is None or sent < args.max_events):
            view = generator.next_view(time.time())
            producer.send(args.topic, key=view.user_id.encode(), value=view.to_json())
            sent += 1
            next_send += interval
            delay = next_send - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_send = time.monotonic()  # fell behind by over a second: keep the rate, not a burst
    finally:
        producer.flush(timeout=10)
        producer.close(timeout=10)
    print(f"sent {sent} page views to {args.topic}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
