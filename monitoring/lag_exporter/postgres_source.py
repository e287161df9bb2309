"""Source lag: how far the CDC connector trails PostgreSQL, read from its replication slot.

Debezium reads PostgreSQL's WAL through a logical replication slot (`sources.cdc.slotName` of pipeline.yaml)
and confirms what it has written to Kafka (`confirmed_flush_lsn`); PostgreSQL keeps every
WAL segment from the slot's `restart_lsn` on. The database and slot are flags (the local stack passes the
catalogue's, from contracts/cdc.py). A background loop (`SourceLoop`) reads `pg_replication_slots`
every `--refresh-interval` seconds in one statement and publishes an immutable `SourceSnapshot`;
`SourceCollector.collect()` only renders the latest snapshot, so a scrape never talks to PostgreSQL.

Metrics (labels `database`, `slot`):
  streamstack_lag_source_up                       1 when the last read of PostgreSQL succeeded
  streamstack_lag_source_slot_exists              1 when the slot exists
  streamstack_lag_source_slot_active              1 when a client (Debezium's task) streams from the slot
  streamstack_lag_source_retained_wal_bytes       pg_current_wal_lsn() - restart_lsn: WAL kept for the slot
  streamstack_lag_source_lag_bytes                pg_current_wal_lsn() - confirmed_flush_lsn: WAL not yet
                                                  confirmed by the connector (the source lag in bytes)
  streamstack_lag_source_lag_seconds              how long ago the database's WAL stood at
                                                  confirmed_flush_lsn (the source lag in seconds, below)
  streamstack_lag_source_wal_disk_bytes           --postgres-wal-disk-bytes, when set (for the disk alert)
  streamstack_lag_source_last_success_timestamp_seconds
While PostgreSQL is unreachable the last slot values stay and `source_up` is 0.

Lag in seconds: the loop remembers when the database's WAL reached each position it read
(`pg_current_wal_lsn()` at each collection, for up to `HISTORY_SECONDS`) and interpolates the time the WAL
passed `confirmed_flush_lsn` between the two readings around it: 0 when the connector has confirmed
everything, growing by one second per second while it confirms nothing and the database writes. A position
older than the history gives the age of the oldest reading (a lower bound). The slot confirms only WAL that
carried changes of captured tables, so a database busy with other tables and idle on the captured ones shows
lag here (and retains WAL) until Debezium's heartbeat (`heartbeat.interval.ms`) confirms a newer position.

Credentials: the password comes from `--postgres-password-file` (a file holding only the password, e.g. a
mounted Secret; read at each connection) or libpq's `PGPASSWORD`, never from the command line; errors are
logged without the connection string.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from contracts import metrics
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

# How long the loop remembers when the WAL reached each position (seconds): the longest lag it can time.
HISTORY_SECONDS = 6 * 3600.0
LABELS = ("database", "slot")

_SLOT_QUERY = """
SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::numeric,
       s.slot_name IS NOT NULL,
       coalesce(s.active, false),
       (s.restart_lsn - '0/0'::pg_lsn)::numeric,
       (s.confirmed_flush_lsn - '0/0'::pg_lsn)::numeric
FROM (SELECT 1) AS one
LEFT JOIN pg_replication_slots AS s ON s.slot_name = %s AND s.database = %s
"""


@dataclass(frozen=True)
class PostgresSourceConfig:
    """Where the slot is: PostgreSQL's address, the login name, the database and slot (from the catalogue
    unless given), the password file (or None: libpq's PGPASSWORD), the WAL disk size (0: not known)."""

    host: str
    port: int
    user: str
    database: str
    slot: str
    password_file: Path | None = None
    wal_disk_bytes: float = 0.0
    connect_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.port <= 65535:
            raise ConfigError(f"--postgres-port {self.port}: not a TCP port")
        if not self.user:
            raise ConfigError("--postgres-user must not be empty")
        if self.wal_disk_bytes < 0:
            raise ConfigError(f"--postgres-wal-disk-bytes {self.wal_disk_bytes}: must be 0 or more")

    def conninfo(self) -> str:
        """libpq's connection string, the password read from its file now (not for logs)."""
        password = None
        if self.password_file is not None:
            try:
                password = self.password_file.read_text().strip()
            except OSError as error:
                raise ConfigError(
                    f"--postgres-password-file {self.password_file}: {error.strerror}"
                ) from None
        return psycopg.conninfo.make_conninfo(
            host=self.host,
            port=self.port,
            dbname=self.database,
            user=self.user,
            password=password,
            connect_timeout=max(1, int(self.connect_timeout)),
            application_name="streamstack-lag-exporter",
        )


def add_source_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str], env_prefix: str) -> None:
    """The `--postgres-*` flags; each reads its default from `<env_prefix>POSTGRES_...`."""

    def default(flag: str, fallback: str | None) -> str | None:
        return env.get(env_prefix + flag.lstrip("-").replace("-", "_").upper(), fallback)

    group = parser.add_argument_group(
        "source lag (PostgreSQL replication slot)",
        "Read the CDC connector's replication slot when --postgres-host is set. The password comes from "
        "--postgres-password-file or libpq's PGPASSWORD, never from a flag.",
    )
    group.add_argument("--postgres-host", default=default("--postgres-host", None))
    group.add_argument("--postgres-port", default=default("--postgres-port", "5432"))
    group.add_argument("--postgres-user", default=default("--postgres-user", "postgres"))
    group.add_argument(
        "--postgres-database",
        default=default("--postgres-database", None),
        help="the captured database (pipeline.yaml's sources.cdc.database)",
    )
    group.add_argument(
        "--postgres-slot",
        default=default("--postgres-slot", None),
        help="the connector's replication slot (sources.cdc.slotName)",
    )
    group.add_argument("--postgres-password-file", default=default("--postgres-password-file", None))
    group.add_argument(
        "--postgres-wal-disk-bytes",
        default=default("--postgres-wal-disk-bytes", "0"),
        help="size of the volume holding pg_wal, exported for the retained-WAL alert (0: not exported)",
    )


def source_config_from_args(args: argparse.Namespace) -> PostgresSourceConfig | None:
    """None unless --postgres-host is set; then the database and slot are required (the callers pass
    pipeline.yaml's `sources.cdc.database` and `slotName`: the local stack from contracts/cdc.py, the chart
    from its values)."""
    if not args.postgres_host:
        return None
    database, slot = args.postgres_database, args.postgres_slot
    for flag, value in (("--postgres-database", database), ("--postgres-slot", slot)):
        if not value:
            raise ConfigError(f"{flag} is required with --postgres-host (pipeline.yaml's sources.cdc)")
    numbers = {}
    for flag, text in (
        ("--postgres-port", args.postgres_port),
        ("--postgres-wal-disk-bytes", args.postgres_wal_disk_bytes),
    ):
        try:
            numbers[flag] = float(text)
        except (TypeError, ValueError):
            raise ConfigError(f"{flag} {text!r}: not a number") from None
    return PostgresSourceConfig(
        host=args.postgres_host,
        port=int(numbers["--postgres-port"]),
        user=args.postgres_user,
        database=database,
        slot=slot,
        password_file=Path(args.postgres_password_file) if args.postgres_password_file else None,
        wal_disk_bytes=numbers["--postgres-wal-disk-bytes"],
    )


@dataclass(frozen=True)
class SlotReading:
    """One read of the slot: the database's WAL position and the slot's (None when there is no slot)."""

    at: float
    current_lsn: int
    exists: bool
    active: bool
    restart_lsn: int | None
    confirmed_flush_lsn: int | None


@dataclass(frozen=True)
class SourceSnapshot:
    database: str
    slot: str
    up: bool
    reading: SlotReading | None  # the last successful one
    lag_seconds: float | None
    wal_disk_bytes: float
    last_success: float | None


def read_slot(connection: psycopg.Connection, database: str, slot: str) -> SlotReading:
    row = connection.execute(_SLOT_QUERY, (slot, database)).fetchone()
    assert row is not None  # the outer side of the join always has its one row
    current, exists, active, restart, confirmed = row
    return SlotReading(
        at=time.time(),
        current_lsn=int(current),
        exists=bool(exists),
        active=bool(active),
        restart_lsn=None if restart is None else int(restart),
        confirmed_flush_lsn=None if confirmed is None else int(confirmed),
    )


class WalHistory:
    """When the database's WAL reached each position read: (time, lsn), oldest first."""

    def __init__(self, keep_seconds: float = HISTORY_SECONDS) -> None:
        self.keep_seconds = keep_seconds
        self._points: deque[tuple[float, int]] = deque()

    def add(self, at: float, lsn: int) -> None:
        if self._points and lsn < self._points[-1][1]:
            self._points.clear()  # the WAL went back: a different or restored database
        self._points.append((at, lsn))
        while self._points and self._points[0][0] < at - self.keep_seconds:
            self._points.popleft()

    def seconds_behind(self, lsn: int, now: float) -> float:
        """How long ago the WAL stood at `lsn`: 0 if at or past the newest reading, interpolated between
        readings, the age of the oldest reading if older than all of them."""
        if not self._points or lsn >= self._points[-1][1]:
            return 0.0
        previous: tuple[float, int] | None = None
        for at, position in self._points:
            if position > lsn:
                if previous is None:
                    return max(0.0, now - at)
                (t0, l0), (t1, l1) = previous, (at, position)
                passed = t0 + (t1 - t0) * (lsn - l0) / (l1 - l0)
                return max(0.0, now - passed)
            previous = (at, position)
        return 0.0  # not reached: the newest reading is > lsn


class SourceLoop:
    """Reads the slot every `interval` seconds on its own connection (reconnecting after a failure) and
    publishes a `SourceSnapshot`; `latest()` is what the collector renders."""

    def __init__(self, config: PostgresSourceConfig, interval: float) -> None:
        self.config = config
        self.interval = interval
        self.history = WalHistory()
        self._connection: psycopg.Connection | None = None
        self._latest = SourceSnapshot(
            config.database, config.slot, False, None, None, config.wal_disk_bytes, None
        )
        self._lock = threading.Lock()

    def latest(self) -> SourceSnapshot:
        with self._lock:
            return self._latest

    def collect_once(self) -> SourceSnapshot:
        previous = self.latest()
        try:
            if self._connection is None or self._connection.closed:
                self._connection = psycopg.connect(self.config.conninfo(), autocommit=True)
            reading = read_slot(self._connection, self.config.database, self.config.slot)
        except (psycopg.Error, ConfigError, OSError) as error:
            # psycopg's messages carry host, port and the server's text, never the password.
            log.warning("reading replication slot %s failed: %s", self.config.slot, str(error).strip())
            self.close()
            snapshot = SourceSnapshot(
                previous.database,
                previous.slot,
                False,
                previous.reading,
                previous.lag_seconds,
                previous.wal_disk_bytes,
                previous.last_success,
            )
        else:
            self.history.add(reading.at, reading.current_lsn)
            lag_seconds = (
                None
                if reading.confirmed_flush_lsn is None
                else self.history.seconds_behind(reading.confirmed_flush_lsn, reading.at)
            )
            snapshot = SourceSnapshot(
                self.config.database,
                self.config.slot,
                True,
                reading,
                lag_seconds,
                self.config.wal_disk_bytes,
                reading.at,
            )
        with self._lock:
            self._latest = snapshot
        return snapshot

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.collect_once()
                stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self.close()

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None


def _gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(metrics.LAG_PREFIX + name, documentation, labels=LABELS)


class SourceCollector:
    """Renders the latest `SourceSnapshot` (registered on the exporter's health registry)."""

    def __init__(self, latest: Callable[[], SourceSnapshot]) -> None:
        self._latest = latest

    def describe(self) -> list[Metric]:
        return []  # the families depend on the snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self._latest()
        labels = [snapshot.database, snapshot.slot]
        up = _gauge(metrics.SOURCE_UP, "1 when the last read of the replication slot succeeded")
        up.add_metric(labels, 1.0 if snapshot.up else 0.0)
        yield up
        if snapshot.last_success is not None:
            success = _gauge(
                metrics.SOURCE_LAST_SUCCESS, "Unix time of the last successful read of the replication slot"
            )
            success.add_metric(labels, snapshot.last_success)
            yield success
        if snapshot.wal_disk_bytes > 0:
            disk = _gauge(metrics.SOURCE_WAL_DISK_BYTES, "Size of the volume holding pg_wal (configured)")
            disk.add_metric(labels, snapshot.wal_disk_bytes)
            yield disk
        reading = snapshot.reading
        if reading is None:
            return
        exists = _gauge(metrics.SOURCE_SLOT_EXISTS, "1 when the replication slot exists")
        exists.add_metric(labels, 1.0 if reading.exists else 0.0)
        active = _gauge(metrics.SOURCE_SLOT_ACTIVE, "1 when a client streams from the replication slot")
        active.add_metric(labels, 1.0 if reading.active else 0.0)
        yield exists
        yield active
        if reading.restart_lsn is not None:
            retained = _gauge(
                metrics.SOURCE_RETAINED_WAL_BYTES,
                "WAL PostgreSQL keeps for the slot: current LSN - restart_lsn",
            )
            retained.add_metric(labels, float(max(0, reading.current_lsn - reading.restart_lsn)))
            yield retained
        if reading.confirmed_flush_lsn is not None:
            lag = _gauge(
                metrics.SOURCE_LAG_BYTES,
                "WAL not yet confirmed by the connector: current LSN - confirmed_flush_lsn",
            )
            lag.add_metric(labels, float(max(0, reading.current_lsn - reading.confirmed_flush_lsn)))
            yield lag
        if snapshot.lag_seconds is not None:
            seconds = _gauge(
                metrics.SOURCE_LAG_SECONDS,
                "How long ago the database's WAL stood at the slot's confirmed_flush_lsn",
            )
            seconds.add_metric(labels, snapshot.lag_seconds)
            yield seconds
