"""Synthetic change data capture: upserts and deletes of a users table and an orders table, as changelogs.

Users go to `--topic`, keyed by user id, value `{"user_id", "name", "country", "tier", "updated_at"}`;
orders go to `--orders-topic`, keyed by order id, value `{"order_id", "user_id", "amount", "status",
"updated_at"}`. Each record is the row after the change; a delete is a tombstone (null value), as a CDC
connector writes them. Both topics are meant to be compacted.

The mix, seeded: users are created (ids `user-0` .. `user-<users - 1>`, the page-view producer's ids),
updated (tier, country or name), deleted, and re-created after a delete; orders are placed for existing
users (and now and then for a user who does not exist (yet), as a CDC stream across two tables delivers),
move through their statuses, have their amount corrected, and are deleted. `--rate` counts changes of
both tables together.

`--malformed-share` of the records (default 0.5%, 0: none) are malformed instead, to each table in turn and
each kind of dead letter in turn (jobs.producers.faults); they are keyed `malformed-<reason>`, never a row's
id, so they change no table. The changes themselves are the same as without them.

    python -m jobs.producers.changelog --bootstrap-servers 127.0.0.1:9092 --topic users --rate 20
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from jobs.producers.common import SendLoop, iso_millis, positive_float, positive_int, producer_parser
from jobs.producers.faults import EventShape, FaultSchedule, Malformer, add_malformed_share_argument

TableName = Literal["users", "orders"]

_NAMES = ("Ada", "Ben", "Chloé", "Dmitri", "Eun-ji", "Farah", "Gustav", "Hana", "Ines", "Jomo")
_COUNTRIES = ("DE", "FR", "IT", "ES", "PT", "NL", "PL", "SE", "US", "JP", "BR", "KE")
_TIERS = ("free", "basic", "gold")
# An order's status moves forward; a delivered order may still be returned.
_NEXT_STATUS = {"placed": "paid", "paid": "shipped", "shipped": "delivered", "delivered": "returned"}
_MAX_ORDERS_PER_USER = 5


def _row_shape(key_field: str, text_field: str, amount_field: str | None = None) -> EventShape:
    """A table's row: keyed by its id field, timed by `updated_at`, which is not an event time."""
    return EventShape(
        text_field, "updated_at", is_event_time=False, key_field=key_field, amount_field=amount_field
    )


SHAPES: dict[TableName, EventShape] = {
    "users": _row_shape("user_id", "name"),
    "orders": _row_shape("order_id", "status", amount_field="amount"),
}


@dataclass(frozen=True)
class Change:
    """One changelog record: the table, the row's primary key, the row after the change (None: deleted)."""

    table: TableName
    key: str
    row: dict[str, object] | None

    def encoded(self) -> tuple[bytes, bytes | None]:
        return self.key.encode(), None if self.row is None else json.dumps(self.row).encode()


def _iso(moment: float) -> str:
    return iso_millis(datetime.fromtimestamp(moment, UTC))


def example_row(table: TableName, now: float) -> dict[str, object]:
    """A well-formed row of the table, for a malformed record to break (which replaces its id)."""
    if table == "users":
        return {"user_id": "", "name": "Ada 0", "country": "DE", "tier": "free", "updated_at": _iso(now)}
    return {"order_id": "", "user_id": "user-0", "amount": 9.99, "status": "placed", "updated_at": _iso(now)}


class ChangelogGenerator:
    """Deterministic for a given seed: keeps the two tables as they are after each change it makes, so
    updates and deletes hit rows that exist and re-creations hit rows that were deleted."""

    def __init__(self, users: int, seed: int) -> None:
        self._random = random.Random(seed)
        self._user_ids = [f"user-{n}" for n in range(users)]
        self._tables: dict[TableName, dict[str, dict[str, object]]] = {"users": {}, "orders": {}}
        self._users = self._tables["users"]
        self._deleted_users: set[str] = set()
        self._orders = self._tables["orders"]
        self._order_count = 0

    def next_change(self, now: float) -> Change:
        roll = self._random.random()
        if not self._users or roll < 0.10:
            return self._create_user(now)
        if roll < 0.24:
            return self._update_user(now)
        if roll < 0.27:
            return self._delete_user()
        if roll < 0.62 and len(self._orders) < _MAX_ORDERS_PER_USER * len(self._user_ids):
            return self._place_order(now)
        if roll < 0.94 and self._orders:
            return self._update_order(now)
        if self._orders:
            return self._delete_order()
        return self._place_order(now)

    # --- both tables -----------------------------------------------------------------------------------

    def _pick(self, table: TableName) -> str:
        """The key of an existing row of the table, at random."""
        return self._random.choice(sorted(self._tables[table]))

    def _upsert(self, table: TableName, key: str, row: dict[str, object], now: float) -> Change:
        """The row, updated now, as the table's row of that key."""
        row["updated_at"] = _iso(now)
        self._tables[table][key] = row
        return Change(table, key, dict(row))

    def _delete(self, table: TableName, key: str) -> Change:
        del self._tables[table][key]
        return Change(table, key, None)

    # --- users ------------------------------------------------------------------------------------------

    def _create_user(self, now: float) -> Change:
        never_created = len(self._user_ids) - len(self._users) - len(self._deleted_users)
        if self._deleted_users and (never_created == 0 or self._random.random() < 0.3):
            user_id = self._random.choice(sorted(self._deleted_users))  # re-created after a delete
            self._deleted_users.discard(user_id)
        elif never_created > 0:
            user_id = self._random.choice(
                [u for u in self._user_ids if u not in self._users and u not in self._deleted_users]
            )
        else:
            return self._update_user(now)
        row: dict[str, object] = {
            "user_id": user_id,
            "name": f"{self._random.choice(_NAMES)} {user_id.removeprefix('user-')}",
            "country": self._random.choice(_COUNTRIES),
            "tier": "free",
        }
        return self._upsert("users", user_id, row, now)

    def _update_user(self, now: float) -> Change:
        user_id = self._pick("users")
        row = self._users[user_id]
        change = self._random.random()
        if change < 0.6:
            row["tier"] = self._random.choice([t for t in _TIERS if t != row["tier"]])
        elif change < 0.9:
            row["country"] = self._random.choice([c for c in _COUNTRIES if c != row["country"]])
        else:
            row["name"] = f"{self._random.choice(_NAMES)} {user_id.removeprefix('user-')}"
        return self._upsert("users", user_id, row, now)

    def _delete_user(self) -> Change:
        user_id = self._pick("users")
        self._deleted_users.add(user_id)
        return self._delete("users", user_id)

    # --- orders -----------------------------------------------------------------------------------------

    def _place_order(self, now: float) -> Change:
        order_id = f"order-{self._order_count}"
        self._order_count += 1
        # Mostly for an existing user; sometimes for any id, which may not exist (yet, or any more).
        pool = sorted(self._users) if self._users and self._random.random() < 0.95 else self._user_ids
        row: dict[str, object] = {
            "order_id": order_id,
            "user_id": self._random.choice(pool),
            "amount": round(self._random.uniform(5.0, 500.0), 2),
            "status": "placed",
        }
        return self._upsert("orders", order_id, row, now)

    def _update_order(self, now: float) -> Change:
        order_id = self._pick("orders")
        row = self._orders[order_id]
        if self._random.random() < 0.8:
            row["status"] = _NEXT_STATUS.get(str(row["status"]), "returned")
        else:
            row["amount"] = round(self._random.uniform(5.0, 500.0), 2)  # a corrected amount
        return self._upsert("orders", order_id, row, now)

    def _delete_order(self) -> Change:
        return self._delete("orders", self._pick("orders"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = producer_parser(
        "changelog-producer", __doc__.splitlines()[0], topic_help="the users changelog topic"
    )
    parser.add_argument("--orders-topic", required=True, help="the orders changelog topic")
    parser.add_argument("--rate", type=positive_float, default=20.0, help="changes per second, both tables")
    parser.add_argument("--users", type=positive_int, default=1000, help="user ids user-0 .. user-<n-1>")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-events", type=int, default=None, help="stop after this many changes")
    add_malformed_share_argument(parser)
    args = parser.parse_args(argv)
    if args.orders_topic == args.topic:
        parser.error(f"--orders-topic {args.orders_topic!r}: must differ from --topic")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    generator = ChangelogGenerator(args.users, args.seed)
    topics: dict[TableName, str] = {"users": args.topic, "orders": args.orders_topic}
    sent = {"users": 0, "orders": 0, "deletes": 0}
    schedule = FaultSchedule(args.malformed_share)
    malformers = itertools.cycle(
        [(table, Malformer(shape, args.seed + n)) for n, (table, shape) in enumerate(SHAPES.items())]
    )
    with SendLoop(args.bootstrap_servers, args.rate) as loop:

        def send_change() -> None:
            now = time.time()
            if schedule.next_kind() == "malformed":
                table, malformer = next(malformers)
                bad = malformer.malform("", example_row(table, now), now)
                loop.producer.send(topics[table], key=bad.key, value=bad.value)
                return
            change = generator.next_change(now)
            key, value = change.encoded()
            loop.producer.send(topics[change.table], key=key, value=value)
            sent[change.table] += 1
            sent["deletes"] += value is None

        loop.run(send_change, limit=args.max_events)
    print(
        f"sent {sent['users']} user changes to {args.topic} and {sent['orders']} order changes to "
        f"{args.orders_topic} ({sent['deletes']} deletes){schedule.summary()}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
