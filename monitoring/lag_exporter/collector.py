"""Prometheus side: a custom Collector rendering the latest snapshot, and the exporter's own health metrics.

`LagCollector.collect()` builds fresh metric families from whatever snapshot the refresh loop published last,
so a scrape never touches Kafka and a group, topic or partition that is gone from the snapshot is gone from
the output. The exporter's health (up, stale, collection duration, last success, errors) is ordinary direct
instrumentation registered on the same registry.

Labels: `source` is `group`, `shadow` (group id starts with the shadow prefix) or `checkpoint`; `group` is
the consumer group id or the checkpoint's label; `partition` is absent with `--granularity topic`. Never
`job` or `instance`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from monitoring.lag_exporter.snapshot import PartitionLag, Snapshot
from monitoring.lag_exporter.status import GROUP_STATUSES, PARTITION_STATUSES

PREFIX = "streamstack_lag_"
ERROR_KINDS = ("kafka", "group", "checkpoint", "timestamp", "commit_log", "internal")


class ExporterHealth:
    """The exporter's own metrics; one instance per registry (no module-level metric objects)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.up = Gauge(
            PREFIX + "exporter_up",
            "1 if the last collection reached Kafka, 0 if it failed",
            registry=registry,
        )
        self.stale = Gauge(
            PREFIX + "exporter_stale",
            "1 while the values served are from an older collection because the last one failed",
            registry=registry,
        )
        self.duration = Gauge(
            PREFIX + "exporter_collection_duration_seconds",
            "How long the last collection took",
            registry=registry,
        )
        self.last_success = Gauge(
            PREFIX + "exporter_last_success_timestamp_seconds",
            "Unix time of the last successful collection",
            registry=registry,
        )
        self.errors = Counter(
            PREFIX + "exporter_errors",
            "Errors while collecting, by kind (kafka, group, checkpoint, timestamp, commit_log, internal)",
            ["kind"],
            registry=registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind=kind)

    def error(self, kind: str, count: int = 1) -> None:
        self.errors.labels(kind=kind).inc(count)

    def succeeded(self, at: float, duration: float) -> None:
        self.up.set(1)
        self.stale.set(0)
        self.last_success.set(at)
        self.duration.set(duration)

    def failed(self, duration: float, have_values: bool) -> None:
        self.up.set(0)
        self.stale.set(1 if have_values else 0)
        self.duration.set(duration)


def _gauge(name: str, documentation: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=list(labels))


class LagCollector:
    """Yields the lag families of the latest snapshot (`snapshot()` returns None before the first one)."""

    def __init__(self, snapshot: Callable[[], Snapshot | None]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []  # no fixed set of series: registering must not trigger a collection

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        if snapshot is None:
            return
        by_partition = snapshot.granularity == "partition"
        labels = ["source", "group", "topic", *(["partition"] if by_partition else [])]

        def values(row: PartitionLag) -> list[str]:
            base = [row.source, row.group, row.topic]
            return [*base, str(row.partition)] if by_partition else base

        committed = _gauge("committed_offset", "Next offset the consumer will process (its commit)", labels)
        records = _gauge(
            "records", "Lag in records: latest offset minus committed offset, never negative", labels
        )
        seconds = _gauge(
            "seconds", "Lag in seconds: age of the oldest unprocessed record, 0 when caught up", labels
        )
        rate = _gauge(
            "consumed_records_per_second", "Records per second the consumer committed over the window", labels
        )
        eta = _gauge(
            "catch_up_eta_seconds",
            "Lag divided by the consumption rate over the window; +Inf when lagging and not consuming",
            labels,
        )
        loss = _gauge("data_loss", "1 if the committed offset is below the earliest offset kept", labels)
        lost = _gauge("lost_records", "Records deleted before the consumer processed them", labels)
        status = _gauge(
            "status",
            "Burrow-style partition status: 1 for the current status (OK, WARN, STOP, STALL, REWIND)",
            [*labels, "status"],
        )
        code = _gauge(
            "status_code", "Partition status as a number: OK 1, WARN 2, STOP 4, STALL 5, REWIND 6", labels
        )
        for row in snapshot.partitions:
            label_values = values(row)
            committed.add_metric(label_values, row.committed)
            records.add_metric(label_values, row.lag)
            seconds.add_metric(label_values, row.lag_seconds)
            rate.add_metric(label_values, row.consumption_rate)
            eta.add_metric(label_values, row.eta_seconds)
            loss.add_metric(label_values, 1 if row.data_loss else 0)
            lost.add_metric(label_values, row.lost_records)
            for candidate in PARTITION_STATUSES:
                status.add_metric([*label_values, candidate.name], 1 if candidate is row.status else 0)
            code.add_metric(label_values, row.status.code)
        yield from (committed, records, seconds, rate, eta, loss, lost, status, code)

        group_labels = ["source", "group"]
        group_records = _gauge(
            "group_records", "Sum of the lag in records over the group's partitions", group_labels
        )
        group_max = _gauge(
            "group_max_records", "Highest lag in records of any partition of the group", group_labels
        )
        group_seconds = _gauge(
            "group_max_seconds", "Highest lag in seconds of any partition of the group", group_labels
        )
        group_status = _gauge(
            "group_status",
            "Burrow-style group status: 1 for the current status (OK, WARN, ERR)",
            [*group_labels, "status"],
        )
        group_code = _gauge(
            "group_status_code", "Group status as a number: OK 1, WARN 2, ERR 3", group_labels
        )
        for group in snapshot.groups:
            group_values = [group.source, group.group]
            group_records.add_metric(group_values, group.lag)
            group_max.add_metric(group_values, group.max_lag)
            group_seconds.add_metric(group_values, group.max_lag_seconds)
            for candidate in GROUP_STATUSES:
                group_status.add_metric(
                    [*group_values, candidate.name], 1 if candidate is group.status else 0
                )
            group_code.add_metric(group_values, group.status.code)
        yield from (group_records, group_max, group_seconds, group_status, group_code)

        offset_labels = ["topic", *(["partition"] if by_partition else [])]
        earliest = _gauge("partition_earliest_offset", "Earliest offset kept in the partition", offset_labels)
        latest = _gauge("partition_latest_offset", "Offset the next record appended will get", offset_labels)
        for entry in snapshot.offsets:
            offset_values = [entry.topic, *([str(entry.partition)] if by_partition else [])]
            earliest.add_metric(offset_values, entry.earliest)
            latest.add_metric(offset_values, entry.latest)
        yield from (earliest, latest)

        readable = _gauge(
            "checkpoint_readable",
            "1 if the Spark checkpoint could be read at the last collection, 0 if missing or corrupt",
            ["checkpoint", "group"],
        )
        for health in snapshot.checkpoints:
            readable.add_metric([health.checkpoint, health.group], 1 if health.readable else 0)
        yield readable
