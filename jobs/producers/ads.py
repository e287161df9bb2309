"""Synthetic ad traffic: impressions at a steady rate and, for some of them, a click a little later.

Impressions `{"impression_id", "ad_id", "user_id", "event_time"}` go to `--topic` (the local runner passes
`--bootstrap-servers --topic --rate`), clicks `{"click_id", "impression_id", "ad_id", "user_id",
"event_time"}` to `--clicks-topic`; both keyed by impression id. An impression is clicked with probability
`--click-probability`, after a delay drawn uniformly from `--min-click-delay-seconds` to
`--max-click-delay-seconds`: the click's event time is the impression's plus that delay, and it is sent
when that moment comes, so clicks follow their impressions as they would in production. Delays beyond the
join's attribution window make clicks that the job leaves unattributed.

`--malformed-share` of the impressions (default 0.5%, 0: none) are sent malformed instead, each kind of
dead letter in turn (jobs.producers.faults), and get no click.

Ads, users, click decisions and delays are drawn from a generator seeded by `--seed`; ids are
`imp-<run id>-<n>` and `clk-<run id>-<n>`, where `--run-id` defaults to the start time in milliseconds so a
restarted producer does not reuse impression ids (pass a fixed one for a fully reproducible run).
`--max-events` stops after that many impressions, once their clicks are sent; SIGTERM/SIGINT stop at once,
dropping clicks not yet due.

    python -m jobs.producers.ads --bootstrap-servers 127.0.0.1:9092 --rate 50 \\
        --topic <impressions> --clicks-topic <clicks>
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from jobs.producers.common import SendLoop, iso_millis, positive_float, positive_int, producer_parser
from jobs.producers.faults import EventShape, FaultSchedule, Malformer, add_malformed_share_argument

IMPRESSION_SHAPE = EventShape(text_field="ad_id", time_field="event_time")


@dataclass(frozen=True)
class _AdEvent:
    def fields(self) -> dict[str, object]:
        """The fields, in their declared order; times as ISO-8601 text."""
        return {name: iso_millis(v) if isinstance(v, datetime) else v for name, v in asdict(self).items()}

    def to_json(self) -> bytes:
        return json.dumps(self.fields()).encode()


@dataclass(frozen=True)
class AdImpression(_AdEvent):
    impression_id: str
    ad_id: str
    user_id: str
    event_time: datetime


@dataclass(frozen=True)
class AdClick(_AdEvent):
    click_id: str
    impression_id: str
    ad_id: str
    user_id: str
    event_time: datetime


class AdEventGenerator:
    """Deterministic for a given seed and run id: ads and users drawn uniformly, clicks by a coin flip."""

    def __init__(
        self,
        *,
        ads: int,
        users: int,
        click_probability: float,
        min_click_delay_seconds: float,
        max_click_delay_seconds: float,
        seed: int,
        run_id: str,
    ) -> None:
        self._random = random.Random(seed)
        self._ads = ads
        self._users = users
        self._click_probability = click_probability
        self._min_delay = min_click_delay_seconds
        self._max_delay = max_click_delay_seconds
        self._run_id = run_id
        self._impressions = 0
        self._clicks = 0

    def next_impression(self, now: float) -> tuple[AdImpression, AdClick | None]:
        """An impression at `now` and its click, if it gets one (event time `now` + the delay)."""
        impression = AdImpression(
            impression_id=f"imp-{self._run_id}-{self._impressions}",
            ad_id=f"ad-{self._random.randrange(self._ads)}",
            user_id=f"user-{self._random.randrange(self._users)}",
            event_time=datetime.fromtimestamp(now, UTC),
        )
        self._impressions += 1
        # Both draws happen for every impression, so one impression's outcome never shifts the next's.
        clicked = self._random.random() < self._click_probability
        delay = self._random.uniform(self._min_delay, self._max_delay)
        if not clicked:
            return impression, None
        click = AdClick(
            click_id=f"clk-{self._run_id}-{self._clicks}",
            impression_id=impression.impression_id,
            ad_id=impression.ad_id,
            user_id=impression.user_id,
            event_time=datetime.fromtimestamp(now + delay, UTC),
        )
        self._clicks += 1
        return impression, click


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = producer_parser("ads-producer", __doc__.splitlines()[0], topic_help="where impressions go")
    parser.add_argument("--clicks-topic", required=True, help="where clicks go")
    parser.add_argument("--rate", type=positive_float, default=50.0, help="impressions per second")
    parser.add_argument("--ads", type=positive_int, default=20)
    parser.add_argument("--users", type=positive_int, default=1000)
    parser.add_argument("--click-probability", type=_probability, default=0.2)
    parser.add_argument("--min-click-delay-seconds", type=_non_negative_float, default=0.5)
    parser.add_argument("--max-click-delay-seconds", type=_non_negative_float, default=40.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--run-id", default=None, help="part of every id (default: start time in ms)")
    add_malformed_share_argument(parser)
    parser.add_argument(
        "--max-events", type=positive_int, default=None, help="stop after this many impressions"
    )
    args = parser.parse_args(argv)
    if args.max_click_delay_seconds < args.min_click_delay_seconds:
        parser.error("--max-click-delay-seconds must not be less than --min-click-delay-seconds")
    if args.clicks_topic == args.topic:
        parser.error("--clicks-topic must differ from --topic")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    generator = AdEventGenerator(
        ads=args.ads,
        users=args.users,
        click_probability=args.click_probability,
        min_click_delay_seconds=args.min_click_delay_seconds,
        max_click_delay_seconds=args.max_click_delay_seconds,
        seed=args.seed,
        run_id=args.run_id if args.run_id is not None else str(int(time.time() * 1000)),
    )
    # Clicks waiting for their event time to come, by wall-clock due time (the sequence breaks ties).
    pending: list[tuple[float, int, AdClick]] = []
    sequence = itertools.count()
    clicks = 0
    schedule = FaultSchedule(args.malformed_share)
    malformer = Malformer(IMPRESSION_SHAPE, args.seed)
    with SendLoop(args.bootstrap_servers, args.rate) as loop:

        def send_due_clicks(now: float) -> None:
            nonlocal clicks
            while pending and pending[0][0] <= now:
                _, _, click = heapq.heappop(pending)
                loop.producer.send(args.clicks_topic, key=click.impression_id.encode(), value=click.to_json())
                clicks += 1

        def send_impression() -> None:
            now = time.time()
            send_due_clicks(now)
            impression, click = generator.next_impression(now)
            if schedule.next_kind() == "malformed":
                bad = malformer.malform(impression.impression_id, impression.fields(), now)
                loop.producer.send(args.topic, key=bad.key, value=bad.value)
                return
            loop.producer.send(args.topic, key=impression.impression_id.encode(), value=impression.to_json())
            if click is not None:
                heapq.heappush(pending, (click.event_time.timestamp(), next(sequence), click))

        impressions = loop.run(send_impression, limit=args.max_events)
        while pending and not loop.stopping:
            time.sleep(max(0.0, min(pending[0][0] - time.time(), 0.2)))
            send_due_clicks(time.time())
    print(
        f"sent {impressions} impressions to {args.topic} and {clicks} clicks to {args.clicks_topic}"
        + (f"; dropped {len(pending)} clicks not yet due" if pending else "")
        + schedule.summary(),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
