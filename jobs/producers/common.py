"""What every synthetic producer shares: its command line's common flags and argument types, a Kafka
producer flushed on the way out, and sending at a steady rate until a limit or SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import TypeVar

from kafka import KafkaProducer

from contracts.errors import ConfigError
from contracts.kafka_security import KafkaSecurity

NumberT = TypeVar("NumberT", int, float)


def _positive(text: str, parse: Callable[[str], NumberT], what: str) -> NumberT:
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def positive_float(text: str) -> float:
    return _positive(text, float, "a number")


def positive_int(text: str) -> int:
    return _positive(text, int, "a whole number")


def iso_millis(moment: datetime) -> str:
    """`2026-01-01T12:00:00.123Z`: ISO-8601 in UTC to the millisecond, as the jobs expect event times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def producer_parser(program: str, description: str, *, topic_help: str | None) -> argparse.ArgumentParser:
    """A producer's command line with the flags every producer takes: `--bootstrap-servers` and `--topic`."""
    parser = argparse.ArgumentParser(prog=program, description=description)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True, help=topic_help)
    return parser


# At the producers' tens of events a second, a shorter linger sends a request per record or two: 20 ms cost a
# kafka-python producer 0.046 cores at 50 events/s, 200 ms 0.015. 100 ms adds at most that to freshness.
LINGER_MS = 100


class SendLoop:
    """A Kafka producer that sends at a steady rate until a limit or SIGTERM/SIGINT, used as a context
    manager. Creating it installs the signal handlers: a signal lets the current send finish, then `run`
    returns. Leaving the context, even by an error, sends what the producer holds and closes it."""

    def __init__(self, bootstrap_servers: str, rate: float) -> None:
        self.stopping = False
        self._interval = 1.0 / rate
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        try:
            # Credentials come from the environment, as for the jobs (see KafkaSecurity).
            security = KafkaSecurity.from_environment(os.environ)
        except ConfigError as error:
            raise SystemExit(f"error: {error}") from None
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers, acks="all", linger_ms=LINGER_MS, **security.client_options()
        )

    def _stop(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    def __enter__(self) -> SendLoop:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.producer.flush(timeout=10)
        self.producer.close(timeout=10)

    def run(self, send: Callable[[], None], *, limit: int | None) -> int:
        """Call `send` at the rate until `limit` calls (None: no limit) or a signal; returns the number of
        calls. After falling behind by over a second it resumes the rate rather than bursting."""
        next_send = time.monotonic()
        sent = 0
        while not self.stopping and (limit is None or sent < limit):
            send()
            sent += 1
            next_send += self._interval
            delay = next_send - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_send = time.monotonic()
        return sent
