"""The CDC source's part of `streamstack status`: source lag from the lag exporter's replication slot series
and the connector's state from Kafka Connect's metrics endpoint (its Prometheus JMX exporter).

- From the exporter (`streamstack_lag_source_*{database, slot}`, monitoring/lag_exporter/postgres_source.py):
  whether it can read the slot, whether the slot exists and a client streams from it, the source lag in bytes
  (WAL not confirmed by the connector) and seconds, the WAL retained for the slot.
- From Connect's metrics (`--connect-metrics-url`; locally the worker's JMX exporter, from the state file),
  with the names of contracts/connect_metrics.py: each connector's and task's state, and Debezium's
  MilliSecondsBehindSource (its `name` label is the connector's `topic.prefix`).

    source slot streamstack_cdc (database streamstack): active, lag 1.2 KiB / 0.4 s, retained WAL 3.1 MiB
    connector streamstack-cdc: RUNNING, task 0 RUNNING, Debezium 35 ms behind source
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts import connect_metrics, metrics

Samples = list[tuple[str, dict[str, str], float]]


@dataclass(frozen=True)
class SlotStatus:
    database: str
    slot: str
    readable: bool  # the exporter's last read of the slot succeeded
    exists: bool | None
    active: bool | None
    lag_bytes: float | None
    lag_seconds: float | None
    retained_wal_bytes: float | None


@dataclass(frozen=True)
class ConnectorStatus:
    connector: str
    state: str  # RUNNING, FAILED, PAUSED, ... (upper case, as Connect's REST API says it)
    tasks: tuple[tuple[str, str], ...]  # (task id, state)
    milliseconds_behind_source: float | None


def parse_slots(samples: Samples) -> list[SlotStatus]:
    """The slots the exporter reports, from its `source_*` series."""
    by_slot: dict[tuple[str, str], dict[str, float]] = {}
    for name, labels, value in samples:
        metric = name.removeprefix(metrics.LAG_PREFIX)
        if metric.startswith("source_") and "slot" in labels and "database" in labels:
            by_slot.setdefault((labels["database"], labels["slot"]), {})[metric] = value

    def flag(values: dict[str, float], metric: str) -> bool | None:
        return None if metric not in values else values[metric] == 1

    return [
        SlotStatus(
            database=database,
            slot=slot,
            readable=values.get(metrics.SOURCE_UP) == 1,
            exists=flag(values, metrics.SOURCE_SLOT_EXISTS),
            active=flag(values, metrics.SOURCE_SLOT_ACTIVE),
            lag_bytes=values.get(metrics.SOURCE_LAG_BYTES),
            lag_seconds=values.get(metrics.SOURCE_LAG_SECONDS),
            retained_wal_bytes=values.get(metrics.SOURCE_RETAINED_WAL_BYTES),
        )
        for (database, slot), values in sorted(by_slot.items())
    ]


def _topic_prefix(connector: str) -> str:
    """Debezium's `name` label: the connector's topic.prefix (contracts.cdc.debezium_connector_config)."""
    return connector.replace("-", "_").replace(".", "_")


def parse_connectors(samples: Samples) -> list[ConnectorStatus]:
    """Connectors and tasks whose state gauge is 1, with Debezium's streaming lag joined by topic prefix."""
    states: dict[str, str] = {}
    tasks: dict[str, dict[str, str]] = {}
    behind: dict[str, float] = {}
    for name, labels, value in samples:
        if name == connect_metrics.CONNECTOR_STATUS and value == 1:
            states[labels["connector"]] = labels["status"].upper()
        elif name == connect_metrics.TASK_STATUS and value == 1:
            tasks.setdefault(labels["connector"], {})[labels["task"]] = labels["status"].upper()
        elif name == connect_metrics.MILLISECONDS_BEHIND_SOURCE and labels.get("context") == "streaming":
            behind[labels["name"]] = value
    return [
        ConnectorStatus(
            connector=connector,
            state=states.get(connector, "-"),
            tasks=tuple(sorted(tasks.get(connector, {}).items())),
            milliseconds_behind_source=behind.get(_topic_prefix(connector)),
        )
        for connector in sorted(set(states) | set(tasks))
    ]


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def render_lines(slots: Sequence[SlotStatus], connectors: Sequence[ConnectorStatus]) -> list[str]:
    lines = []
    for slot in slots:
        where = f"source slot {slot.slot} (database {slot.database})"
        if slot.exists is False:
            state = "missing"
        elif slot.active is None:
            state = "not read yet"
        else:
            state = "active" if slot.active else "INACTIVE"
        seconds = "-" if slot.lag_seconds is None else f"{slot.lag_seconds:.1f} s"
        unread = "" if slot.readable else "; PostgreSQL unreachable at the last read, values are stale"
        lines.append(
            f"{where}: {state}, lag {_bytes(slot.lag_bytes)} / {seconds}, "
            f"retained WAL {_bytes(slot.retained_wal_bytes)}{unread}"
        )
    for connector in connectors:
        parts = [connector.state, *(f"task {task} {state}" for task, state in connector.tasks)]
        if connector.milliseconds_behind_source is not None:
            parts.append(f"Debezium {connector.milliseconds_behind_source:.0f} ms behind source")
        lines.append(f"connector {connector.connector}: {', '.join(parts)}")
    return lines
