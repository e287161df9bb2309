"""The lag exporter against real Kafka: values checked against the admin API and known timestamps, each
Burrow status from a scenario built for it, and the faults (broker down, deletions, corrupt checkpoints).

The refresh loop is stepped by hand (`Refresher.refresh()`), so every scenario is deterministic; the threaded
loop and the HTTP server are covered by test_lag_exporter_process.py.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException  # type: ignore[import-untyped]
from confluent_kafka import Producer as RdProducer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, UnsupportedVersionError
from kafka.protocol.consumer import OffsetSpec
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry

from monitoring.lag_exporter import kafka_reader, record_batches
from monitoring.lag_exporter.collector import ExporterHealth, LagCollector
from monitoring.lag_exporter.config import CheckpointDir, ExporterConfig, NameFilter
from monitoring.lag_exporter.kafka_reader import KafkaReader
from monitoring.lag_exporter.loop import Refresher
from monitoring.lag_exporter.status import Status
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import wait_for
from tests.monitoring.checkpoints import write_query_checkpoint

pytestmark = pytest.mark.integration


class Exporter:
    """A Refresher on a fresh registry, stepped by the test."""

    def __init__(self, bootstrap_servers: str, group_prefix: str, **overrides: Any) -> None:
        base = ExporterConfig(
            bootstrap_servers=bootstrap_servers,
            refresh_interval=0.5,
            window=3.0,
            kafka_timeout=5.0,
            groups=NameFilter.of([f"(streamstack-)?{group_prefix}.*"]),
        )
        self.config = dataclasses.replace(base, **overrides)
        self.registry = CollectorRegistry()
        self.reader = KafkaReader(self.config)
        self.refresher = Refresher(self.config, self.reader, ExporterHealth(self.registry))
        self.registry.register(LagCollector(self.refresher.latest))

    def refresh(self) -> bool:
        return self.refresher.refresh()

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def partition(
        self, name: str, group: str, topic: str, partition: int, source: str = "group"
    ) -> float | None:
        return self.value(name, source=source, group=group, topic=topic, partition=str(partition))

    def status(self, group: str, topic: str, partition: int) -> str:
        code = self.partition("streamstack_lag_status_code", group, topic, partition)
        return "absent" if code is None else Status(int(code)).name

    def group_status(self, group: str) -> str:
        for candidate in ("OK", "WARN", "ERR"):
            if self.value("streamstack_lag_group_status", source="group", group=group, status=candidate) == 1:
                return candidate
        return "absent"

    def close(self) -> None:
        self.reader.close()


@contextmanager
def exporter(bootstrap_servers: str, group_prefix: str, **overrides: Any) -> Iterator[Exporter]:
    instance = Exporter(bootstrap_servers, group_prefix, **overrides)
    try:
        yield instance
    finally:
        instance.close()


class Committer:
    """Commits offsets as consumer groups do (one client per group, no group membership)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._consumers: dict[str, KafkaConsumer] = {}

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        if group not in self._consumers:
            self._consumers[group] = KafkaConsumer(
                bootstrap_servers=self._bootstrap_servers, group_id=group, enable_auto_commit=False
            )
        self._consumers[group].commit(
            {TopicPartition(t, p): OffsetAndMetadata(offset, "", -1) for (t, p), offset in offsets.items()}
        )

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close(autocommit=False)
        self._consumers.clear()


@pytest.fixture
def committer(kafka: LocalKafka) -> Iterator[Committer]:
    instance = Committer(kafka.bootstrap_servers)
    try:
        yield instance
    finally:
        instance.close()


def produce_to(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    count: int,
    *,
    timestamps_ms: list[int] | None = None,
    producer: KafkaProducer | None = None,
) -> None:
    """Send `count` records to one partition (with the given timestamps) and wait until they are written."""
    own = producer is None
    client = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=0) if own else producer
    assert client is not None
    try:
        for index in range(count):
            timestamp = timestamps_ms[index] if timestamps_ms is not None else None
            client.send(topic, value=b"event-%d" % index, partition=partition, timestamp_ms=timestamp)
        client.flush(timeout=30)
    finally:
        if own:
            client.close(timeout=10)


def test_lag_in_records_equals_the_admin_api_at_rest(
    kafka: LocalKafka, topic_name: str, committer: Committer
) -> None:
    orders, payments = f"{topic_name}-orders", f"{topic_name}-payments"
    kafka.create_topics([TopicSpec(orders, partitions=3), TopicSpec(payments, partitions=2)])
    for partition, count in enumerate((30, 7, 0)):
        produce_to(kafka.bootstrap_servers, orders, partition, count)
    for partition, count in enumerate((12, 25)):
        produce_to(kafka.bootstrap_servers, payments, partition, count)
    groups = {
        f"{topic_name}-billing": {(orders, 0): 10, (orders, 1): 7, (orders, 2): 0},
        f"{topic_name}-audit": {(orders, 0): 30, (payments, 0): 3, (payments, 1): 20},
        f"streamstack-{topic_name}-query": {(payments, 0): 12, (payments, 1): 1},
    }
    for group, offsets in groups.items():
        committer.commit(group, offsets)

    # Ground truth straight from the admin API, at rest (nothing is producing or committing now).
    admin = kafka.admin()
    try:
        committed = admin.list_group_offsets(dict.fromkeys(groups))
        tps = [TopicPartition(orders, p) for p in range(3)] + [TopicPartition(payments, p) for p in range(2)]
        latest = admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
    finally:
        admin.close()
    truth = {
        (group, tp.topic, tp.partition): (meta.offset, latest[tp].offset - meta.offset)
        for group, offsets in committed.items()
        for tp, meta in offsets.items()
    }
    assert len(truth) == 8 and truth[(f"{topic_name}-billing", orders, 0)] == (10, 20)

    with exporter(kafka.bootstrap_servers, topic_name) as lag:
        assert lag.refresh()
        for (group, topic, partition), (offset, records) in truth.items():
            source = "shadow" if group.startswith("streamstack-") else "group"
            assert (
                lag.partition("streamstack_lag_committed_offset", group, topic, partition, source) == offset
            )
            assert lag.partition("streamstack_lag_records", group, topic, partition, source) == records
        for group in groups:
            source = "shadow" if group.startswith("streamstack-") else "group"
            expected_max = max(records for (g, _, _), (_, records) in truth.items() if g == group)
            assert lag.value("streamstack_lag_group_max_records", source=source, group=group) == expected_max
        for tp in tps:
            assert lag.value(
                "streamstack_lag_partition_latest_offset", topic=tp.topic, partition=str(tp.partition)
            ) == float(latest[tp].offset)
        assert lag.value("streamstack_lag_exporter_up") == 1


def test_lag_seconds_from_the_timestamp_of_the_record_at_the_committed_offset(
    kafka: LocalKafka, topic_name: str, committer: Committer
) -> None:
    kafka.create_topics([TopicSpec(topic_name, partitions=2)])
    now_ms = int(time.time() * 1000)
    timestamps = [now_ms - 100_000 + index * 10_000 for index in range(10)]  # 100 s ago, every 10 s
    produce_to(kafka.bootstrap_servers, topic_name, 0, 10, timestamps_ms=timestamps)
    produce_to(kafka.bootstrap_servers, topic_name, 1, 4, timestamps_ms=timestamps[:4])
    behind, caught_up = f"{topic_name}-behind", f"{topic_name}-caught-up"
    committer.commit(behind, {(topic_name, 0): 3, (topic_name, 1): 0})
    committer.commit(caught_up, {(topic_name, 0): 10, (topic_name, 1): 4})

    with exporter(kafka.bootstrap_servers, topic_name) as lag:
        assert lag.refresh()
        observed_at = time.time()
        for partition, offset in ((0, 3), (1, 0)):
            truth = observed_at - timestamps[offset] / 1000
            seconds = lag.partition("streamstack_lag_seconds", behind, topic_name, partition)
            assert seconds is not None and abs(seconds - truth) <= 1.0, (partition, seconds, truth)
        for partition in (0, 1):
            assert lag.partition("streamstack_lag_seconds", caught_up, topic_name, partition) == 0.0
        assert lag.value("streamstack_lag_group_max_seconds", source="group", group=behind) == pytest.approx(
            observed_at - timestamps[0] / 1000, abs=1.0
        )
        assert lag.value("streamstack_lag_exporter_errors_total", kind="timestamp") == 0


def test_data_loss_when_records_are_deleted_before_they_are_processed(
    kafka: LocalKafka, topic_name: str, committer: Committer
) -> None:
    kafka.create_topics([TopicSpec(topic_name, partitions=1)])
    now_ms = int(time.time() * 1000)
    timestamps = [now_ms - 50_000 + index * 5_000 for index in range(10)]
    produce_to(kafka.bootstrap_servers, topic_name, 0, 10, timestamps_ms=timestamps)
    slow, fine = f"{topic_name}-slow", f"{topic_name}-fine"
    committer.commit(slow, {(topic_name, 0): 2})
    committer.commit(fine, {(topic_name, 0): 8})
    admin = kafka.admin()
    try:
        admin.delete_records({TopicPartition(topic_name, 0): 6})  # retention took offsets 0-5
    finally:
        admin.close()

    with exporter(kafka.bootstrap_servers, topic_name) as lag:
        assert lag.refresh()
        observed_at = time.time()
        assert lag.partition("streamstack_lag_data_loss", slow, topic_name, 0) == 1
        assert lag.partition("streamstack_lag_lost_records", slow, topic_name, 0) == 4
        assert lag.partition("streamstack_lag_records", slow, topic_name, 0) == 8
        # the record at the committed offset is gone: the oldest kept one (offset 6) gives a lower bound
        seconds = lag.partition("streamstack_lag_seconds", slow, topic_name, 0)
        assert seconds == pytest.approx(observed_at - timestamps[6] / 1000, abs=1.0)
        assert lag.partition("streamstack_lag_data_loss", fine, topic_name, 0) == 0
        assert lag.partition("streamstack_lag_lost_records", fine, topic_name, 0) == 0
        assert lag.value("streamstack_lag_partition_earliest_offset", topic=topic_name, partition="0") == 6


def test_a_spark_checkpoint_gives_the_committed_offsets_and_lag(
    kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    kafka.create_topics([TopicSpec(topic_name, partitions=2)])
    produce_to(kafka.bootstrap_servers, topic_name, 0, 20)
    produce_to(kafka.bootstrap_servers, topic_name, 1, 10)
    root = tmp_path / "checkpoints"
    batches = {0: {topic_name: {0: 5, 1: 2}}, 1: {topic_name: {0: 12, 1: 7}}, 2: {topic_name: {0: 20, 1: 10}}}
    write_query_checkpoint(root / "enrich", batches, committed=[0, 1])  # batch 2 is in flight
    write_query_checkpoint(tmp_path / "single", {0: {topic_name: {0: 20, 1: 10}}}, committed=[0])
    checkpoints = (CheckpointDir("job", root), CheckpointDir("solo", tmp_path / "single"))

    with exporter(kafka.bootstrap_servers, topic_name, checkpoints=checkpoints) as lag:
        assert lag.refresh()
        for partition, committed, records in ((0, 12, 8), (1, 7, 3)):
            args = ("job/enrich", topic_name, partition, "checkpoint")
            assert lag.partition("streamstack_lag_committed_offset", *args) == committed
            assert lag.partition("streamstack_lag_records", *args) == records
            assert lag.partition("streamstack_lag_records", "solo", topic_name, partition, "checkpoint") == 0
        assert lag.value("streamstack_lag_group_max_records", source="checkpoint", group="job/enrich") == 8
        assert lag.value("streamstack_lag_checkpoint_readable", checkpoint="job", group="job/enrich") == 1


def test_each_status_comes_from_the_scenario_built_for_it(
    kafka: LocalKafka, topic_name: str, committer: Committer
) -> None:
    """Window 3 s, one refresh every 0.5 s; each scenario has its own group and partition."""
    kafka.create_topics([TopicSpec(topic_name, partitions=5)])
    scenarios = {"ok": 0, "stop": 1, "stall": 2, "rewind": 3, "warn": 4}
    for partition in scenarios.values():
        produce_to(kafka.bootstrap_servers, topic_name, partition, 20)
    group = {name: f"{topic_name}-{name}" for name in scenarios}

    def tp(name: str) -> tuple[str, int]:
        return (topic_name, scenarios[name])

    committer.commit(group["ok"], {tp("ok"): 20})
    committer.commit(group["stop"], {tp("stop"): 5})
    committer.commit(group["stall"], {tp("stall"): 5})
    committer.commit(group["rewind"], {tp("rewind"): 10})
    committer.commit(group["warn"], {tp("warn"): 5})
    ok_offset, warn_offset = 20, 5
    seen: dict[str, list[tuple[float, str]]] = {name: [] for name in scenarios}
    rewind_at: float | None = None
    tick_starts: list[float] = []
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=0)

    with exporter(kafka.bootstrap_servers, topic_name, window=3.0, refresh_interval=0.5) as lag:
        first = time.monotonic()
        while time.monotonic() - first < 5.0:
            started = time.monotonic()
            tick_starts.append(started)
            produce_to(kafka.bootstrap_servers, topic_name, scenarios["ok"], 3, producer=producer)
            ok_offset += 3
            committer.commit(group["ok"], {tp("ok"): ok_offset})  # keeps up
            committer.commit(group["stall"], {tp("stall"): 5})  # commits, never moves
            produce_to(kafka.bootstrap_servers, topic_name, scenarios["warn"], 6, producer=producer)
            warn_offset += 2
            committer.commit(group["warn"], {tp("warn"): warn_offset})  # moves, slower than the producer
            if rewind_at is None and started - first >= 3.5:
                committer.commit(group["rewind"], {tp("rewind"): 4})  # went back
                rewind_at = started - first
            assert lag.refresh()
            for name in scenarios:
                seen[name].append((time.monotonic() - first, lag.status(group[name], *tp(name))))
            time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
        producer.close(timeout=10)

        def statuses(name: str, since: float = 0.0, until: float = 99.0) -> set[str]:
            return {status for at, status in seen[name] if since <= at < until}

        assert statuses("ok") == {"OK"}, seen["ok"]
        # Nothing but OK until the window has filled.
        for name in ("stop", "stall", "warn"):
            assert statuses(name, until=2.9) == {"OK"}, (name, seen[name])
        assert seen["stop"][-1][1] == "STOP", seen["stop"]
        assert seen["stall"][-1][1] == "STALL", seen["stall"]
        assert seen["warn"][-1][1] == "WARN", seen["warn"]
        # REWIND shows at once (no full window needed) and stays while the rewind is in the window.
        assert rewind_at is not None
        assert "REWIND" not in statuses("rewind", until=rewind_at)
        assert statuses("rewind", since=rewind_at) == {"REWIND"}, seen["rewind"]
        expected_groups = {"ok": "OK", "stop": "ERR", "stall": "ERR", "rewind": "ERR", "warn": "WARN"}
        assert {name: lag.group_status(group[name]) for name in scenarios} == expected_groups
        codes = {
            name: lag.partition("streamstack_lag_status_code", group[name], *tp(name)) for name in scenarios
        }
        assert codes == {"ok": 1, "stop": 4, "stall": 5, "rewind": 6, "warn": 2}
        eta = lag.partition("streamstack_lag_catch_up_eta_seconds", group["stop"], *tp("stop"))
        assert eta == float("inf")
        rate = lag.partition("streamstack_lag_consumed_records_per_second", group["warn"], *tp("warn"))
        tick = (tick_starts[-1] - tick_starts[0]) / (len(tick_starts) - 1)
        assert rate == pytest.approx(2 / tick, rel=0.35)  # 2 records a tick


def test_deleted_groups_and_topics_disappear(
    kafka: LocalKafka, topic_name: str, committer: Committer
) -> None:
    kept, dropped = f"{topic_name}-kept", f"{topic_name}-dropped"
    kafka.create_topics([TopicSpec(kept, partitions=1), TopicSpec(dropped, partitions=1)])
    produce_to(kafka.bootstrap_servers, kept, 0, 5)
    produce_to(kafka.bootstrap_servers, dropped, 0, 5)
    gone, both, only_dropped = f"{topic_name}-gone", f"{topic_name}-both", f"{topic_name}-only-dropped"
    committer.commit(gone, {(kept, 0): 1})
    committer.commit(both, {(kept, 0): 2, (dropped, 0): 2})
    committer.commit(only_dropped, {(dropped, 0): 3})
    committer.close()

    with exporter(kafka.bootstrap_servers, topic_name) as lag:
        assert lag.refresh()
        assert lag.partition("streamstack_lag_records", gone, kept, 0) == 4
        assert lag.partition("streamstack_lag_records", both, dropped, 0) == 3
        assert lag.value("streamstack_lag_group_max_records", source="group", group=only_dropped) == 2

        admin = kafka.admin()
        try:
            admin.delete_groups([gone])
            admin.delete_topics([dropped])
        finally:
            admin.close()

        def vanished() -> bool:
            assert lag.refresh()
            return (
                lag.partition("streamstack_lag_records", both, dropped, 0) is None
                and lag.value("streamstack_lag_partition_latest_offset", topic=dropped, partition="0") is None
            )

        wait_for(vanished, timeout=30, what="the deleted topic to vanish")
        assert lag.partition("streamstack_lag_records", gone, kept, 0) is None
        assert lag.value("streamstack_lag_group_max_records", source="group", group=gone) is None
        assert lag.value("streamstack_lag_group_max_records", source="group", group=only_dropped) is None
        assert lag.partition("streamstack_lag_records", both, kept, 0) == 3


def test_a_corrupt_checkpoint_counts_an_error_and_collection_goes_on(
    kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    kafka.create_topics([TopicSpec(topic_name, partitions=1)])
    produce_to(kafka.bootstrap_servers, topic_name, 0, 10)
    query = tmp_path / "root" / "q"
    write_query_checkpoint(query, {0: {topic_name: {0: 4}}}, committed=[0])
    checkpoints = (CheckpointDir("root", tmp_path / "root"), CheckpointDir("missing", tmp_path / "nowhere"))

    with exporter(kafka.bootstrap_servers, topic_name, checkpoints=checkpoints) as lag:
        assert lag.refresh()
        assert lag.value("streamstack_lag_checkpoint_readable", checkpoint="root", group="root/q") == 1
        assert lag.value("streamstack_lag_checkpoint_readable", checkpoint="missing", group="missing") == 0
        errors_before = lag.value("streamstack_lag_exporter_errors_total", kind="checkpoint")
        assert errors_before == 1  # the missing directory

        (query / "offsets" / "1").write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795325'
        )  # torn write
        (query / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}')
        assert lag.refresh()

        assert lag.value("streamstack_lag_checkpoint_readable", checkpoint="root", group="root/q") == 0
        assert lag.value("streamstack_lag_exporter_errors_total", kind="checkpoint") == errors_before + 2
        assert lag.value("streamstack_lag_exporter_up") == 1
        assert (
            lag.partition("streamstack_lag_records", "root/q", topic_name, 0, "checkpoint") == 6
        )  # last good


def test_a_leader_gone_quiet_ends_the_timestamp_read_at_its_budget_without_an_error(
    kafka: LocalKafka, topic_name: str
) -> None:
    """A fetch that times out at the read's budget (the broker paused, as a leader gone quiet) ends the read
    with the answers taken so far, none here, instead of raising them away; the next read gets them."""
    kafka.create_topics([TopicSpec(topic_name)])
    now_ms = int(time.time() * 1000)
    produce_to(
        kafka.bootstrap_servers, topic_name, 0, 3, timestamps_ms=[now_ms - 9_000, now_ms - 8_000, now_ms]
    )
    reader = KafkaReader(ExporterConfig(bootstrap_servers=kafka.bootstrap_servers, kafka_timeout=5.0))
    try:
        assert reader.partitions([topic_name]) == {topic_name: {0}}  # the leader is known
        os.kill(kafka.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert reader.timestamps_at({(topic_name, 0): [1]}, budget=1.0) == {}
            assert time.monotonic() - started < 4.0
        finally:
            os.kill(kafka.pid, signal.SIGCONT)
        assert reader.timestamps_at({(topic_name, 0): [1]}, budget=20.0) == {
            (topic_name, 0, 1): now_ms - 8_000
        }
    finally:
        reader.close()


def test_broker_down_serves_stale_values_and_recovers_on_a_new_broker(
    runtimes: Runtimes, tmp_path: Path, topic_name: str
) -> None:
    broker = LocalKafka(runtimes, tmp_path / "first", port=0, heap="512m").start()
    port = broker.port
    try:
        broker.create_topics([TopicSpec(topic_name, partitions=1)])
        produce_to(broker.bootstrap_servers, topic_name, 0, 8)
        committer = Committer(broker.bootstrap_servers)
        committer.commit(f"{topic_name}-g", {(topic_name, 0): 3})
        committer.close()

        with exporter(broker.bootstrap_servers, topic_name, kafka_timeout=2.0) as lag:
            assert lag.refresh()
            last_success = lag.value("streamstack_lag_exporter_last_success_timestamp_seconds")
            assert lag.partition("streamstack_lag_records", f"{topic_name}-g", topic_name, 0) == 5

            broker.stop()
            started = time.monotonic()
            assert not lag.refresh()
            assert time.monotonic() - started < 15  # bounded by --kafka-timeout, not hanging
            assert lag.value("streamstack_lag_exporter_up") == 0
            assert lag.value("streamstack_lag_exporter_stale") == 1
            assert lag.value("streamstack_lag_exporter_errors_total", kind="kafka") == 1
            assert lag.value("streamstack_lag_exporter_last_success_timestamp_seconds") == last_success
            assert lag.partition("streamstack_lag_records", f"{topic_name}-g", topic_name, 0) == 5  # kept

            # A fresh broker on the same address (its data is gone): the exporter reconnects by itself.
            broker = LocalKafka(runtimes, tmp_path / "second", port=port, heap="512m").start()
            wait_for(lag.refresh, timeout=30, what="the exporter to reach the new broker")
            assert lag.value("streamstack_lag_exporter_up") == 1
            assert lag.value("streamstack_lag_exporter_stale") == 0
            assert lag.value("streamstack_lag_exporter_last_success_timestamp_seconds") > last_success  # type: ignore[operator]
            assert lag.partition("streamstack_lag_records", f"{topic_name}-g", topic_name, 0) is None

            # No group has committed on the new broker, so __consumer_offsets does not exist yet: no commit
            # times, and no error. The first commit creates it, and the reader picks it up from then on.
            assert lag.reader.commit_times(1.0) == {}
            broker.create_topics([TopicSpec(topic_name, partitions=1)])
            committer = Committer(broker.bootstrap_servers)
            try:
                committer.commit(f"{topic_name}-g", {(topic_name, 0): 0})
                assert lag.reader.commit_times(1.0) == {}  # reading starts at the end of the log
                committer.commit(f"{topic_name}-g", {(topic_name, 0): 0})
                times = lag.reader.commit_times(5.0)
                assert set(times) == {(f"{topic_name}-g", topic_name, 0)}
                assert abs(times[(f"{topic_name}-g", topic_name, 0)] - time.time()) < 30
            finally:
                committer.close()
            assert lag.value("streamstack_lag_exporter_errors_total", kind="commit_log") == 0
    finally:
        broker.stop()


def test_partitions_and_leaders_from_librdkafka_are_what_kafka_python_describes(
    kafka: LocalKafka, topic_name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Metadata is read with librdkafka (one request for all topics): the same partition ids and leaders as
    kafka-python's DescribeTopics, missing topics left out; and librdkafka prints nothing on stderr (its logs
    bypass `logging`) when a broker cannot be reached."""
    three, one = f"{topic_name}-three", f"{topic_name}-one"
    kafka.create_topics([TopicSpec(three, partitions=3), TopicSpec(one, partitions=1)])
    config = ExporterConfig(bootstrap_servers=kafka.bootstrap_servers, kafka_timeout=5.0)
    reader = KafkaReader(config)
    admin = kafka.admin()
    try:
        described = {
            topic["name"]: {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}
            for topic in admin.describe_topics([three, one])
        }
        assert reader.partitions([three, one, f"{topic_name}-missing"]) == {three: {0, 1, 2}, one: {0}}
        assert reader._leaders == {
            (topic, partition): leader
            for topic, leaders in described.items()
            for partition, leader in leaders.items()
        }
        assert all(leader >= 0 for leader in reader._leaders.values())
    finally:
        admin.close()
        reader.close()

    unreachable = KafkaReader(ExporterConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", kafka_timeout=1.0))
    with pytest.raises(KafkaException, match=r"(?i)failed to get metadata|timed.?out"):
        unreachable.rd_admin().list_topics(timeout=1.0)
    unreachable.close()
    assert "FAIL" not in capfd.readouterr().err


def test_partitions_read_ahead_answer_the_next_call_only(kafka: LocalKafka, topic_name: str) -> None:
    """The loop starts the metadata read before the groups' offsets (`read_partitions_ahead`): the next
    `partitions()` answers from it what it answers without it; a later call reads the metadata again (a
    topic created since is there), and so does a reader closed after reading ahead."""
    first, later = f"{topic_name}-first", f"{topic_name}-later"
    kafka.create_topics([TopicSpec(first, partitions=2)])
    reader = KafkaReader(ExporterConfig(bootstrap_servers=kafka.bootstrap_servers, kafka_timeout=5.0))
    try:
        reader.read_partitions_ahead()
        ahead = reader._metadata_ahead
        assert ahead is not None
        assert reader.partitions([first, later]) == {first: {0, 1}}
        assert ahead.done() and reader._metadata_ahead is None
        leaders = dict(reader._leaders)
        assert reader.partitions([first, later]) == {first: {0, 1}} and reader._leaders == leaders

        reader.read_partitions_ahead()
        assert reader.partitions([]) == {}  # taken though not needed: not left for a later call
        kafka.create_topics([TopicSpec(later, partitions=1)])
        wait_for(lambda: later in reader.partitions([first, later]), timeout=30, what="the new topic")

        reader.read_partitions_ahead()
        reader.close()
        assert reader._metadata_ahead is None
        assert reader.partitions([first, later]) == {first: {0, 1}, later: {0}}
    finally:
        reader.close()


def test_latest_and_earliest_offsets_at_once_answer_what_list_partition_offsets_answers(
    kafka: LocalKafka, topic_name: str
) -> None:
    """Both ends of every partition in one ListOffsets request per leader and spec, sent at once: the same
    offsets as kafka-python's `list_partition_offsets` (records deleted at the start of a partition, an
    empty partition); a partition without a leader, or with a leader that cannot be reached, is asked
    through `list_partition_offsets` and gets its answer; a topic deleted after its leaders were read fails
    with the error `list_partition_offsets` raises."""
    kept, gone = f"{topic_name}-kept", f"{topic_name}-gone"
    kafka.create_topics([TopicSpec(kept, partitions=3), TopicSpec(gone, partitions=2)])
    for partition, count in enumerate((9, 0, 4)):
        produce_to(kafka.bootstrap_servers, kept, partition, count)
    produce_to(kafka.bootstrap_servers, gone, 1, 3)
    admin = kafka.admin()
    reader = KafkaReader(ExporterConfig(bootstrap_servers=kafka.bootstrap_servers, kafka_timeout=5.0))
    try:
        admin.delete_records({TopicPartition(kept, 0): 5})
        tps = [(kept, 0), (kept, 1), (kept, 2), (gone, 0), (gone, 1)]
        assert reader.partitions([kept, gone]) == {kept: {0, 1, 2}, gone: {0, 1}}
        expected = (reader.latest_offsets(tps), reader.earliest_offsets(tps))
        assert expected == (
            {(kept, 0): 9, (kept, 1): 0, (kept, 2): 4, (gone, 0): 0, (gone, 1): 3},
            {(kept, 0): 5, (kept, 1): 0, (kept, 2): 0, (gone, 0): 0, (gone, 1): 0},
        )
        assert reader.latest_and_earliest_offsets(tps) == expected
        assert reader.latest_and_earliest_offsets([]) == ({}, {})

        reader._leaders[(kept, 1)] = -1  # no leader
        assert reader.latest_and_earliest_offsets(tps) == expected
        reader._leaders[(kept, 2)] = 4242  # a node that is not in the cluster: the request fails
        assert reader.latest_and_earliest_offsets(tps) == expected

        assert reader.partitions([kept, gone])  # leaders known again, then the topic goes
        admin.delete_topics([gone])

        def old_fails() -> bool:
            try:
                reader.latest_offsets(tps)
            except KafkaError:
                return True
            return False

        wait_for(old_fails, timeout=30, what="list_partition_offsets to fail on the deleted topic")
        with pytest.raises(KafkaError) as old:
            reader.earliest_offsets(tps)
        with pytest.raises(type(old.value)):
            reader.latest_and_earliest_offsets(tps)
    finally:
        admin.close()
        reader.close()


def test_committed_offsets_of_many_groups_are_what_list_group_offsets_lists(
    kafka: LocalKafka, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committed offsets of 120 groups, 50 to an OffsetFetch request, all sent at once: what
    kafka-python's `list_group_offsets` lists, without partitions none was committed for; a group that
    committed nothing has none, a group that does not exist is no group. The same when those requests fail
    as a whole (a broker without version 8): then every group goes through `list_group_offsets`."""
    kafka.create_topics([TopicSpec(topic_name, partitions=3), TopicSpec(f"{topic_name}-b", partitions=2)])
    groups = [f"{topic_name}-g{index:03d}" for index in range(120)]
    admin = kafka.admin()
    reader = KafkaReader(ExporterConfig(bootstrap_servers=kafka.bootstrap_servers, kafka_timeout=5.0))
    try:
        for index, group in enumerate(groups[:-1]):  # the last one never commits
            admin.alter_group_offsets(
                group,
                {
                    TopicPartition(topic, partition): OffsetAndMetadata(index * 10 + partition, "", -1)
                    for topic, partitions in ((topic_name, 3), (f"{topic_name}-b", 2 if index % 3 else 0))
                    for partition in range(partitions)
                    if (index + partition) % 4
                },
            )
        listed = {
            group: {
                (tp.topic, tp.partition): meta.offset
                for tp, meta in admin.list_group_offsets({group: None})[group].items()
                if meta.offset >= 0
            }
            for group in groups
        }
        assert sum(map(len, listed.values())) > 300
        assert listed[groups[-1]] == {}
        wanted = [*groups, f"{topic_name}-no-such-group"]
        offsets, failed = reader.committed_offsets(wanted)
        assert failed == []
        assert {group: offsets[group] for group in groups} == listed
        assert offsets.get(f"{topic_name}-no-such-group", {}) == {}

        def refused(*_: Any, **__: Any) -> Any:
            raise UnsupportedVersionError("OffsetFetch v8")

        monkeypatch.setattr(kafka_reader, "group_offsets_request", refused)
        through_admin, failed = reader.committed_offsets(wanted)
        assert failed == []
        assert through_admin == offsets
    finally:
        admin.close()
        reader.close()


def test_the_commit_log_is_read_from_its_end_without_asking_for_every_topic(
    kafka: LocalKafka, topic_name: str, committer: Committer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit log's consumer takes the partitions of `__consumer_offsets` from the metadata that
    `partitions()` read with librdkafka (kafka-python's `partitions_for_topic` asks for the metadata of every
    topic and decodes it in Python: 0.2 s of a first collection at 20,000 partitions) and starts at the log's
    end: a commit made before is not known, one made after is."""
    kafka.create_topics([TopicSpec(topic_name, partitions=1)])
    produce_to(kafka.bootstrap_servers, topic_name, 0, 3)
    group = f"{topic_name}-group"
    committer.commit(group, {(topic_name, 0): 1})
    config = ExporterConfig(
        bootstrap_servers=kafka.bootstrap_servers,
        kafka_timeout=5.0,
        groups=NameFilter.of([f"{topic_name}.*"]),
    )

    def every_topic(_consumer: KafkaConsumer, topic: str) -> set[int] | None:
        raise AssertionError(f"the metadata of every topic asked for, for {topic}")

    monkeypatch.setattr(KafkaConsumer, "partitions_for_topic", every_topic)
    reader = KafkaReader(config)
    try:
        assert reader.partitions([topic_name]) == {topic_name: {0}}
        assert (group, topic_name, 0) not in reader.commit_times(5.0)
        committed_at = time.time()
        committer.commit(group, {(topic_name, 0): 2})
        wait_for(lambda: (group, topic_name, 0) in reader.commit_times(1.0), timeout=30, what="the commit")
        assert reader.commit_times(1.0)[(group, topic_name, 0)] == pytest.approx(committed_at, abs=5.0)
    finally:
        reader.close()


def _records(bootstrap_servers: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """(offset, timestamp) of every data record of a partition, read by kafka-python's consumer."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        records: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend((record.offset, record.timestamp) for record in batch)
        return records
    finally:
        consumer.close(autocommit=False)


@pytest.mark.parametrize("partitions_per_fetch", [None, 1])
def test_record_timestamps_are_those_of_the_first_record_at_or_after_each_offset(
    kafka: LocalKafka, topic_name: str, partitions_per_fetch: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`timestamps_at`: for each offset asked, the timestamp of the first data record at or after it, as an
    independent consumer (kafka-python's KafkaConsumer) reads the records: several offsets of a partition,
    near each other and far apart; an offset held by a transaction marker (the next record's); a topic with
    broker-side timestamps (LogAppendTime). No answer, and no error, for an offset below the log start
    (deleted records), at or beyond the end, or in a topic deleted after its leaders were read; those do
    not hold the others up. (A guard for any other way of reading them: the librdkafka reader tried in
    stop 36 passed it too.) With one partition per fetch request, the same through requests kept in flight
    two per leader, each answer taken as it comes, and partitions asked again in later passes."""
    if partitions_per_fetch is not None:
        monkeypatch.setattr(record_batches, "_PARTITIONS_PER_FETCH", partitions_per_fetch)
    created, appended, gone = f"{topic_name}-create", f"{topic_name}-append", f"{topic_name}-gone"
    kafka.create_topics(
        [
            TopicSpec(created, partitions=4),
            TopicSpec(appended, extra_config={"message.timestamp.type": "LogAppendTime"}),
            TopicSpec(gone),
        ]
    )
    now_ms = int(time.time() * 1000)
    produce_to(
        kafka.bootstrap_servers, created, 0, 300, timestamps_ms=[now_ms - 1_000_000 + i for i in range(300)]
    )
    produce_to(kafka.bootstrap_servers, created, 1, 6)
    produce_to(kafka.bootstrap_servers, created, 2, 4)
    producer = RdProducer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": topic_name})
    producer.init_transactions(30)
    for first in (0, 2):  # records 0-1, a marker at 2, records 3-4, a marker at 5
        producer.begin_transaction()
        for index in range(first, first + 2):
            producer.produce(created, b"in-transaction", partition=3, timestamp=now_ms - 50_000 + index)
        producer.commit_transaction(30)
    produce_to(kafka.bootstrap_servers, appended, 0, 3, timestamps_ms=[now_ms - 500_000] * 3)
    produce_to(kafka.bootstrap_servers, gone, 0, 3)
    admin = kafka.admin()
    reader = KafkaReader(ExporterConfig(bootstrap_servers=kafka.bootstrap_servers, kafka_timeout=5.0))
    try:
        admin.delete_records({TopicPartition(created, 1): 3})
        wanted = {
            (created, 0): [250, 3, 4, 40, 41],
            (created, 1): [1],  # deleted
            (created, 2): [4],  # the end
            (created, 3): [0, 2, 3, 6],  # 2: a marker; 6: the end
            (appended, 0): [1],
        }
        truth = {tp: _records(kafka.bootstrap_servers, *tp) for tp in wanted if tp != (created, 1)}
        assert [offset for offset, _ in truth[(created, 3)]] == [0, 1, 3, 4]
        assert all(stamp > now_ms - 60_000 for _, stamp in truth[(appended, 0)])  # the broker's time
        expected = {
            (*tp, offset): next(stamp for at, stamp in truth[tp] if at >= offset)
            for tp, offsets in wanted.items()
            if tp in truth
            for offset in offsets
            if any(at >= offset for at, _ in truth[tp])
        }
        assert len(expected) == 5 + 3 + 1
        assert reader.timestamps_at(wanted, budget=20.0) == expected
        assert reader.timestamps_at({(created, 0): [299, 300, 1_000]}, budget=20.0) == {
            (created, 0, 299): now_ms - 1_000_000 + 299
        }

        assert reader.partitions([gone])
        leader = reader._leaders[(gone, 0)]
        admin.delete_topics([gone])
        wait_for(lambda: not reader.partitions([gone]), timeout=30, what="the topic to be gone")
        assert reader.partitions([created])
        reader._leaders[(gone, 0)] = leader  # as read before the deletion
        started = time.monotonic()
        assert reader.timestamps_at({(gone, 0): [0], (created, 2): [1]}, budget=20.0) == {
            (created, 2, 1): truth[(created, 2)][1][1]
        }
        assert time.monotonic() - started < 15.0
    finally:
        admin.close()
        reader.close()
