"""The application workload of the CDC path: what the synthetic changelog producer writes to Kafka, done as
SQL on PostgreSQL's `users` and `orders` tables, for Debezium to capture.

The same seeded mix (jobs.producers.changelog.ChangelogGenerator): users are created, updated, deleted and
re-created; orders are placed (now and then for a user who does not exist, yet or any more), move through
their statuses, have their amount corrected, and are deleted. Each change is one statement in its own
transaction: an upsert (`INSERT ... ON CONFLICT DO UPDATE`) of the row after the change, or a `DELETE`.
`--rate` counts changes of both tables together.

The tables are made so that Debezium's record of a row (ExtractNewRecordState, JsonConverter without
schemas, decimal.handling.mode=double; see contracts/cdc.py) is the record the synthetic producer writes:
text ids and fields, `amount numeric(10,2)` (a JSON number), `updated_at timestamptz(3)` (ISO-8601 in UTC,
to the millisecond at most). `--schema-only` creates them (idempotent) and exits. No malformed rows: a
database holds none; the synthetic producer (`--changelog-source synthetic`) still tests dead letters.

The connection comes from libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD), so no
password is ever on a command line:

    PGHOST=127.0.0.1 PGPORT=5432 PGDATABASE=streamstack PGUSER=streamstack PGPASSWORD=... \\
        python -m jobs.producers.cdc_workload --rate 20
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType

import psycopg
from psycopg import sql

from jobs.producers.changelog import Change, ChangelogGenerator, TableName
from jobs.producers.common import positive_float, positive_int

# table -> (its primary key column, its columns in order); the DDL below makes exactly these.
TABLES: dict[TableName, tuple[str, tuple[str, ...]]] = {
    "users": ("user_id", ("user_id", "name", "country", "tier", "updated_at")),
    "orders": ("order_id", ("order_id", "user_id", "amount", "status", "updated_at")),
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS public.users (
    user_id    text PRIMARY KEY,
    name       text NOT NULL,
    country    text NOT NULL,
    tier       text NOT NULL,
    updated_at timestamptz(3) NOT NULL
);
CREATE TABLE IF NOT EXISTS public.orders (
    order_id   text PRIMARY KEY,
    user_id    text NOT NULL,  -- no foreign key: an order may name a user who does not exist (yet)
    amount     numeric(10, 2) NOT NULL,
    status     text NOT NULL,
    updated_at timestamptz(3) NOT NULL
);
"""


def create_schema(connection: psycopg.Connection) -> None:
    """The `users` and `orders` tables, if they do not exist."""
    connection.execute(SCHEMA)


def statement(change: Change) -> tuple[sql.Composed, tuple[object, ...]]:
    """The SQL of one change: the row after it upserted, or the row deleted."""
    key_column, columns = TABLES[change.table]
    table = sql.Identifier("public", change.table)
    if change.row is None:
        delete = sql.SQL("DELETE FROM {} WHERE {} = %s").format(table, sql.Identifier(key_column))
        return delete, (change.key,)
    upsert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}").format(
        table,
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        sql.Identifier(key_column),
        sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(column))
            for column in columns
            if column != key_column
        ),
    )
    return upsert, tuple(change.row[column] for column in columns)


def apply(connection: psycopg.Connection, change: Change) -> None:
    """One change in its own transaction (the connection is in autocommit mode)."""
    query, parameters = statement(change)
    connection.execute(query, parameters)


class Workload:
    """Applies the generator's changes at a steady rate until a limit or SIGTERM/SIGINT."""

    def __init__(self, connection: psycopg.Connection, users: int, seed: int) -> None:
        self.connection = connection
        self.generator = ChangelogGenerator(users, seed)
        self.applied = {"users": 0, "orders": 0, "deletes": 0}
        self.stopping = False

    def stop(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        self.stopping = True

    def run(self, rate: float, limit: int | None) -> int:
        interval, next_change, done = 1.0 / rate, time.monotonic(), 0
        while not self.stopping and (limit is None or done < limit):
            change = self.generator.next_change(time.time())
            apply(self.connection, change)
            self.applied[change.table] += 1
            self.applied["deletes"] += change.row is None
            done += 1
            next_change += interval
            delay = next_change - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_change = time.monotonic()
        return done


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cdc-workload", description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=positive_float, default=20.0, help="changes per second, both tables")
    parser.add_argument("--users", type=positive_int, default=1000, help="user ids user-0 .. user-<n-1>")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-events", type=int, default=None, help="stop after this many changes")
    parser.add_argument("--schema-only", action="store_true", help="create the tables, then exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        connection = psycopg.connect(autocommit=True)  # libpq's PG* environment
    except psycopg.OperationalError as error:
        print(f"error: cannot connect to PostgreSQL: {error}", file=sys.stderr)
        return 1
    with connection:
        create_schema(connection)
        if args.schema_only:
            return 0
        workload = Workload(connection, args.users, args.seed)
        signal.signal(signal.SIGTERM, workload.stop)
        signal.signal(signal.SIGINT, workload.stop)
        workload.run(args.rate, args.max_events)
    applied = workload.applied
    print(
        f"applied {applied['users']} user changes and {applied['orders']} order changes "
        f"({applied['deletes']} deletes)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
