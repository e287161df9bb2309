"""Synthetic order events for the order-state job: each order's life as events, keyed by order id.

Each record is keyed by its order id (so an order's events share a partition, in order) with value
`{"event_id", "order_id", "type", "event_time", "amount"}` (amount only with OrderPlaced and
AmountCorrected). Orders are placed, have their amount corrected now and then before payment, are paid,
shipped, delivered and sometimes returned (jobs/order_state/state_machine.py); several are open at once, so
their events interleave. Event time trails the send time by up to `--max-disorder-seconds`: events arrive
out of event-time order, which the job ignores (it folds in log order).

Faults, spaced evenly (jobs.producers.faults): `--impossible-share` of the records (default 0.5%) are an
impossible event for an existing order (shipped before paid, anything after returned, a second
OrderPlaced, an event for an order never placed, in turn), which the job rejects as `invalid_transition`;
`--duplicate-share` (default 0.5%) re-send an earlier event of an order unchanged (a producer retry), which
the job rejects as `duplicate_event`; `--malformed-share` (default 0.5%) are malformed, each kind of dead
letter in turn, keyed `malformed-<reason>`. The valid events are the same whatever the shares.

    python -m jobs.producers.order_events --bootstrap-servers 127.0.0.1:9092 --topic order-events --rate 20
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobs.producers.common import SendLoop, iso_millis, positive_float, positive_int, producer_parser
from jobs.producers.faults import EventShape, Malformer, add_malformed_share_argument, share

SHAPE = EventShape(text_field="type", time_field="event_time", key_field="order_id", amount_field="amount")
# The next event of an order in each status; a delivered order is returned now and then, else finished.
_NEXT = {"placed": "OrderPaid", "paid": "OrderShipped", "shipped": "OrderDelivered"}
_STATUS_AFTER = {
    "OrderPlaced": "placed",
    "OrderPaid": "paid",
    "OrderShipped": "shipped",
    "OrderDelivered": "delivered",
    "OrderReturned": "returned",
    "AmountCorrected": "placed",
}
_IMPOSSIBLE_KINDS = ("shipped_before_paid", "after_returned", "second_placed", "never_placed")


@dataclass
class OpenOrder:
    order_id: str
    status: str
    events: list[dict[str, object]] = field(default_factory=list)


def _iso(moment: float) -> str:
    return iso_millis(datetime.fromtimestamp(moment, UTC))


class OrderEventGenerator:
    """Deterministic for a given seed: keeps up to `open_orders` orders in flight and, per call, either
    places an order or moves one forward; remembers finished orders a while for impossible events."""

    def __init__(self, open_orders: int, max_disorder_seconds: float, seed: int) -> None:
        self._random = random.Random(seed)
        self._open_limit = open_orders
        self._max_disorder = max_disorder_seconds
        self._open: dict[str, OpenOrder] = {}
        self._returned: list[OpenOrder] = []
        self._orders = 0
        self._events = 0
        self._impossible = itertools.cycle(_IMPOSSIBLE_KINDS)

    def _event(
        self, order: OpenOrder, event_type: str, now: float, amount: float | None = None
    ) -> dict[str, object]:
        self._events += 1
        event: dict[str, object] = {
            "event_id": f"event-{self._events}",
            "order_id": order.order_id,
            "type": event_type,
            "event_time": _iso(now - self._random.uniform(0.0, self._max_disorder)),
        }
        if amount is not None:
            event["amount"] = amount
        return event

    def _amount(self) -> float:
        return round(self._random.uniform(5.0, 500.0), 2)

    def next_event(self, now: float) -> dict[str, object]:
        """A valid next event of some order (and the generator's orders moved on by it)."""
        if len(self._open) < self._open_limit and (not self._open or self._random.random() < 0.3):
            order = OpenOrder(f"order-{self._orders}", "placed")
            self._orders += 1
            self._open[order.order_id] = order
            event = self._event(order, "OrderPlaced", now, self._amount())
        else:
            order = self._open[self._random.choice(sorted(self._open))]
            if order.status == "placed" and self._random.random() < 0.15:
                event = self._event(order, "AmountCorrected", now, self._amount())
            elif order.status == "delivered":
                event = self._event(order, "OrderReturned", now)
            else:
                event = self._event(order, _NEXT[order.status], now)
            order.status = _STATUS_AFTER[str(event["type"])]
            if order.status == "delivered" and self._random.random() < 0.8:
                del self._open[order.order_id]  # finished: not returned
            elif order.status == "returned":
                del self._open[order.order_id]
                self._returned = [*self._returned[-99:], order]
        order.events.append(event)
        return event

    def impossible_event(self, now: float) -> dict[str, object]:
        """An event the state machine rejects, for an existing order where one fits (it changes nothing)."""
        kind = next(self._impossible)
        placed = [o for o in self._open.values() if o.status == "placed"]
        if kind == "shipped_before_paid" and placed:
            return self._event(self._random.choice(placed), "OrderShipped", now)
        if kind == "after_returned" and self._returned:
            return self._event(self._random.choice(self._returned), "OrderPaid", now)
        if kind == "second_placed" and self._open:
            return self._event(self._open[self._random.choice(sorted(self._open))], "OrderPlaced", now, 1.0)
        ghost = OpenOrder(f"order-never-placed-{self._events}", "none")
        return self._event(ghost, "OrderDelivered", now)

    def duplicate_event(self) -> dict[str, object] | None:
        """An earlier valid event of an order still open, re-sent unchanged (None: no order open yet)."""
        orders = [o for o in self._open.values() if o.events]
        if not orders:
            return None
        return self._random.choice(self._random.choice(orders).events)


def encoded(event: dict[str, object]) -> tuple[bytes, bytes]:
    return str(event["order_id"]).encode(), json.dumps(event).encode()


class Schedule:
    """Which record is which fault: each kind's share of records, evenly spaced (as faults.FaultSchedule)."""

    def __init__(self, shares: dict[str, float]) -> None:
        if sum(shares.values()) > 1.0:
            raise SystemExit("error: the fault shares add up to more than every record")
        self._shares = shares
        self._credit = {kind: index / max(1, len(shares)) for index, kind in enumerate(shares)}

    def next_kind(self) -> str:
        for kind, kind_share in self._shares.items():
            self._credit[kind] += kind_share
        due = next((kind for kind, credit in self._credit.items() if credit >= 1.0), "valid")
        if due != "valid":
            self._credit[due] -= 1.0
        return due


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = producer_parser(
        "order-events-producer", __doc__.splitlines()[0], topic_help="the order events topic"
    )
    parser.add_argument("--rate", type=positive_float, default=20.0, help="events per second")
    parser.add_argument("--open-orders", type=positive_int, default=200, help="orders in flight at once")
    parser.add_argument("--max-disorder-seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-events", type=int, default=None, help="stop after this many records")
    parser.add_argument("--impossible-share", type=share, default=0.005, help="share of impossible events")
    parser.add_argument("--duplicate-share", type=share, default=0.005, help="share of re-sent events")
    add_malformed_share_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    generator = OrderEventGenerator(args.open_orders, args.max_disorder_seconds, args.seed)
    schedule = Schedule(
        {
            "impossible": args.impossible_share,
            "duplicate": args.duplicate_share,
            "malformed": args.malformed_share,
        }
    )
    malformer = Malformer(SHAPE, args.seed)
    sent = {"valid": 0, "impossible": 0, "duplicate": 0, "malformed": 0}
    with SendLoop(args.bootstrap_servers, args.rate) as loop:

        def send_event() -> None:
            now = time.time()
            kind = schedule.next_kind()
            duplicate = generator.duplicate_event() if kind == "duplicate" else None
            if kind == "malformed":
                example = {"event_id": "", "order_id": "", "type": "OrderPlaced", "event_time": _iso(now)}
                bad = malformer.malform("", {**example, "amount": 9.99}, now)
                loop.producer.send(args.topic, key=bad.key, value=bad.value)
            elif kind == "impossible":
                key, value = encoded(generator.impossible_event(now))
                loop.producer.send(args.topic, key=key, value=value)
            elif duplicate is not None:
                key, value = encoded(duplicate)
                loop.producer.send(args.topic, key=key, value=value)
            else:
                kind = "valid"
                key, value = encoded(generator.next_event(now))
                loop.producer.send(args.topic, key=key, value=value)
            sent[kind] += 1

        loop.run(send_event, limit=args.max_events)
    print(
        f"sent {sent['valid']} order events to {args.topic}; {sent['impossible']} impossible, "
        f"{sent['duplicate']} duplicate, {sent['malformed']} malformed",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
