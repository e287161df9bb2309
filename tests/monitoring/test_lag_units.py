"""Lag exporter pieces without Kafka: status rules, lag arithmetic, checkpoints, config, collector, loop."""

from __future__ import annotations

import collections
import gc
import math
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contracts.errors import ConfigError
from contracts.kafka_security import jaas_config
from monitoring.lag_exporter.collector import ExporterHealth, LagCollector, render_lag_text
from monitoring.lag_exporter.config import ExporterConfig, parse_args
from monitoring.lag_exporter.loop import Refresher
from monitoring.lag_exporter.record_batches import parse_commit_key
from monitoring.lag_exporter.snapshot import (
    GroupLag,
    Inputs,
    PartitionLag,
    ProducedHistory,
    Snapshot,
    TopicPartitionOffsets,
    appended_at,
    build_snapshot,
    eta_seconds,
    lag_seconds,
)
from monitoring.lag_exporter.sources import (
    CheckpointError,
    CheckpointHealth,
    CheckpointSource,
    Position,
    parse_offsets_file,
)
from monitoring.lag_exporter.status import (
    History,
    Sample,
    ScalarHistory,
    Status,
    evaluate_group,
    evaluate_partition,
)
from tests.monitoring.checkpoints import write_query_checkpoint

TP = tuple[str, int]
WINDOW = 10.0


def samples(*points: tuple[float, int, int], last_commit: float | None = None) -> list[Sample]:
    return [Sample(at, committed, lag, last_commit) for at, committed, lag in points]


# -- status rules ---------------------------------------------------------------------------------------


def test_ok_when_lag_was_zero_anywhere_in_the_window() -> None:
    history = samples((0, 10, 5), (5, 10, 0), (10, 10, 5), (12, 10, 7))
    assert evaluate_partition(history, now=12, window=WINDOW) is Status.OK


def test_rewind_when_the_committed_offset_goes_down_even_before_the_window_is_complete() -> None:
    history = samples((0, 10, 5), (1, 4, 11))
    assert evaluate_partition(history, now=1, window=WINDOW) is Status.REWIND


def test_ok_until_the_window_is_complete() -> None:
    history = samples((0, 10, 5), (5, 10, 5))
    assert evaluate_partition(history, now=5, window=WINDOW) is Status.OK


def test_stop_when_the_offset_does_not_move_and_nothing_was_committed_in_the_window() -> None:
    history = samples((0, 10, 5), (5, 10, 6), (11, 10, 8), last_commit=-3.0)
    assert evaluate_partition(history, now=11, window=WINDOW) is Status.STOP
    no_commit_log = samples((0, 10, 5), (5, 10, 6), (11, 10, 8))
    assert evaluate_partition(no_commit_log, now=11, window=WINDOW) is Status.STOP


def test_stall_when_the_same_offset_keeps_being_committed() -> None:
    history = samples((0, 10, 5), (5, 10, 6), (11, 10, 8), last_commit=10.5)
    assert evaluate_partition(history, now=11, window=WINDOW) is Status.STALL


def test_warn_when_committing_but_lag_grows_over_the_window() -> None:
    # a dip between two samples (a commit landing before the producer's next write) does not hide the trend
    history = samples((0, 10, 5), (3, 12, 9), (6, 15, 8), (9, 17, 14), (11, 20, 18))
    assert evaluate_partition(history, now=11, window=WINDOW) is Status.WARN


def test_ok_when_committing_and_lag_shrinks() -> None:
    history = samples((0, 10, 20), (5, 20, 15), (11, 30, 12))
    assert evaluate_partition(history, now=11, window=WINDOW) is Status.OK


def test_a_rewind_leaves_the_window_and_the_status_recovers() -> None:
    history = samples((0, 10, 5), (1, 4, 11), (12, 20, 3), (14, 30, 2))
    assert evaluate_partition(history, now=14, window=WINDOW) is Status.OK


def test_group_status_is_err_for_stop_stall_rewind_and_warn_for_warn() -> None:
    assert evaluate_group([Status.OK, Status.OK]) is Status.OK
    assert evaluate_group([Status.OK, Status.WARN]) is Status.WARN
    for bad in (Status.STOP, Status.STALL, Status.REWIND):
        assert evaluate_group([Status.WARN, bad, Status.OK]) is Status.ERR


def test_history_keeps_the_window_and_one_anchor_before_it() -> None:
    reference, history = ScalarHistory(window=WINDOW), History(window=WINDOW)
    for at in range(0, 30, 2):
        kept = reference.record("key", Sample(float(at), at, 1))
        history.record(["key"], np.array([at]), np.array([1]), np.array([math.nan]), float(at))
    assert [sample.at for sample in kept] == [18.0, 20.0, 22.0, 24.0, 26.0, 28.0]  # 18 = 28 - 10: anchor
    assert history.samples("key") == kept
    assert history._times == [18.0, 20.0, 22.0, 24.0, 26.0, 28.0]  # older collections are dropped
    for kept_history in (reference, history):
        kept_history.retain([])
        assert len(kept_history) == 0


# -- lag arithmetic -------------------------------------------------------------------------------------


def test_lag_seconds_from_the_record_timestamp_zero_when_caught_up_never_negative() -> None:
    assert lag_seconds(10, 10, now=100.0, record_timestamp_ms=1_000, produced=()) == 0.0
    assert lag_seconds(5, 10, now=100.0, record_timestamp_ms=40_000, produced=()) == pytest.approx(60.0)
    assert lag_seconds(5, 10, now=100.0, record_timestamp_ms=200_000, produced=()) == 0.0  # clock skew


def test_lag_seconds_falls_back_to_interpolating_sampled_latest_offsets() -> None:
    points = [(100, 10.0), (100, 20.0), (200, 30.0), (300, 40.0)]
    # offset 150 was appended between t=20 (latest 100) and t=30 (latest 200)
    assert appended_at(150, points, now=50.0) == pytest.approx(25.0)
    assert lag_seconds(150, 300, now=50.0, record_timestamp_ms=None, produced=points) == pytest.approx(25.0)
    # older than every sample: the oldest sample's time is a lower bound
    assert lag_seconds(50, 300, now=50.0, record_timestamp_ms=None, produced=points) == pytest.approx(40.0)
    # not sampled yet (no point above it): 0, never NaN
    assert lag_seconds(299, 300, now=50.0, record_timestamp_ms=None, produced=[(250, 40.0)]) == 0.0
    assert not math.isnan(lag_seconds(1, 2, now=1.0, record_timestamp_ms=None, produced=()))


def test_produced_history_keeps_first_and_last_time_of_a_run() -> None:
    produced = ProducedHistory()
    for at, latest in ((1.0, 5), (2.0, 5), (3.0, 5), (4.0, 9)):
        produced.record(("t", 0), latest, at)
    assert produced.points(("t", 0)) == ((5, 1.0), (5, 3.0), (9, 4.0))


def test_eta_is_zero_when_caught_up_and_infinite_when_not_consuming() -> None:
    assert eta_seconds(0, 0.0) == 0.0
    assert eta_seconds(100, 0.0) == math.inf
    assert eta_seconds(100, 20.0) == pytest.approx(5.0)


def test_a_partition_whose_offsets_were_not_read_keeps_its_history_and_comes_back() -> None:
    """No row while its offsets are missing; its samples are kept, and when it comes back its status is
    the rules' on them (STOP: the offset did not move for the window), as the other partition's."""
    history, produced = History(WINDOW), ProducedHistory()
    positions = [Position("group", "g", "t", partition, 5) for partition in (0, 1)]
    reference = ScalarHistory(WINDOW)
    for step in range(8):
        now = 1_000.0 + 4 * step
        latest = {("t", 0): 50, ("t", 1): 50} if step not in (2, 3) else {("t", 0): 50}
        inputs = Inputs(positions, earliest={("t", 0): 0, ("t", 1): 0}, latest=latest)
        snapshot = build_snapshot(inputs, now, history, produced)
        rows = {row.partition: row for row in snapshot.partitions}
        assert set(rows) == set(range(len(latest)))
        if 1 in rows:
            samples = reference.record(("group", "g", "t", 1), Sample(now, 5, 45, None))
            assert rows[1].status is evaluate_partition(samples, now, WINDOW)
        assert len(history) == 2
    assert rows[0].status is rows[1].status is Status.STOP
    assert [sample.at for sample in history.samples(("group", "g", "t", 1))] == [
        1_016.0,
        1_020.0,
        1_024.0,
        1_028.0,
    ]
    build_snapshot(Inputs(positions[:1], {("t", 0): 0}, {("t", 0): 50}), 1_032.0, history, produced)
    assert len(history) == 1  # no longer reported: forgotten


def test_snapshot_clamps_lag_flags_data_loss_and_folds_topics() -> None:
    positions = [
        Position("group", "g", "t", 0, 120),  # committed above latest: lag clamps at 0
        Position("group", "g", "t", 1, 5),  # below earliest: 15 records lost
        Position("shadow", "streamstack-q", "t", 1, 30),
        Position("group", "g", "gone", 0, 3),  # no offsets for it: dropped
    ]
    inputs = Inputs(positions, earliest={("t", 0): 0, ("t", 1): 20}, latest={("t", 0): 100, ("t", 1): 50})
    history, produced = History(WINDOW), ProducedHistory()
    snapshot = build_snapshot(inputs, 1000.0, history, produced)
    rows = {(row.group, row.partition): row for row in snapshot.partitions}
    assert set(rows) == {("g", 0), ("g", 1), ("streamstack-q", 1)}
    assert rows[("g", 0)].lag == 0
    assert rows[("g", 1)].lag == 45 and rows[("g", 1)].lost_records == 15 and rows[("g", 1)].data_loss
    groups = {group.group: group for group in snapshot.groups}
    assert groups["g"].max_lag == 45 and groups["g"].lag == 45

    folded = build_snapshot(inputs, 1001.0, History(WINDOW), ProducedHistory(), granularity="topic")
    by_group = {(row.source, row.group): row for row in folded.partitions}
    assert by_group[("group", "g")].partition is None
    assert by_group[("group", "g")].lag == 45 and by_group[("group", "g")].committed == 125
    assert [(entry.topic, entry.earliest, entry.latest) for entry in folded.offsets] == [("t", 20, 150)]


# -- checkpoints ----------------------------------------------------------------------------------------


def test_offsets_file_in_spark_format_with_several_sources() -> None:
    text = (
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"spark.sql.shuffle.partitions":"2"}}\n'
        '{"views":{"0":6,"1":4},"users":{"0":13}}\n-\n{"logOffset":5}\n{"views":{"1":2}}'
    )
    assert parse_offsets_file(text) == {("views", 0): 6, ("views", 1): 2, ("users", 0): 13}
    with pytest.raises(CheckpointError, match="unsupported offset log version"):
        parse_offsets_file('v2\n{}\n{"t":{"0":1}}')
    with pytest.raises(CheckpointError, match="incomplete"):
        parse_offsets_file('v1\n{"batchWatermarkMs":0,"batchTi')
    with pytest.raises(CheckpointError, match="line 3 is not JSON"):
        parse_offsets_file('v1\n{"batchWatermarkMs":0}\n{"views":{"0":')


def test_checkpoint_root_is_discovered_and_the_committed_batch_counts(tmp_path: Path) -> None:
    write_query_checkpoint(tmp_path / "root" / "q1", {0: {"t": {0: 5}}, 1: {"t": {0: 9}}}, committed=[0])
    write_query_checkpoint(tmp_path / "root" / "q2", {0: {"u": {0: 3, 1: 4}}}, committed=[0])
    (tmp_path / "root" / "not-a-query").mkdir()
    write_query_checkpoint(tmp_path / "single", {}, committed=[])
    source = CheckpointSource(
        parse_args(["--bootstrap-servers", "x:1", *_checkpoint_flags(tmp_path)]).checkpoints
    )

    read = source.read()

    assert {(p.group, p.topic, p.partition, p.committed) for p in read.positions} == {
        ("root/q1", "t", 0, 5),  # offsets/1 is the batch in flight: not processed yet
        ("root/q2", "u", 0, 3),
        ("root/q2", "u", 1, 4),
    }
    assert all(position.source == "checkpoint" and position.last_commit for position in read.positions)
    assert {(h.checkpoint, h.group, h.readable) for h in read.health} == {
        ("root", "root/q1", True),
        ("root", "root/q2", True),
        ("single", "single", True),
    }


def test_a_corrupt_checkpoint_is_unreadable_and_keeps_its_last_positions(tmp_path: Path) -> None:
    query = tmp_path / "root" / "q1"
    write_query_checkpoint(query, {0: {"t": {0: 5}}}, committed=[0])
    source = CheckpointSource(
        parse_args(["--bootstrap-servers", "x:1", f"--checkpoint-dir=root={tmp_path / 'root'}"]).checkpoints
    )
    assert [p.committed for p in source.read().positions] == [5]
    (query / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":17')  # half-written
    (query / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}')

    read = source.read()

    assert [p.committed for p in read.positions] == [5]
    assert [(h.group, h.readable) for h in read.health] == [("root/q1", False)]
    assert read.errors and "offsets/1" in read.errors[0]


def _checkpoint_flags(tmp_path: Path) -> list[str]:
    return [f"--checkpoint-dir=root={tmp_path / 'root'}", f"--checkpoint-dir=single={tmp_path / 'single'}"]


# -- config ---------------------------------------------------------------------------------------------


def test_config_defaults_flags_and_environment() -> None:
    config = parse_args(["--bootstrap-servers", "k:9092"], env={})
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 9308)
    assert config.granularity == "partition" and config.shadow_prefix == "streamstack-"
    env = {
        "STREAMSTACK_LAG_BOOTSTRAP_SERVERS": "k:9093",
        "STREAMSTACK_LAG_REFRESH_INTERVAL": "2.5",
        "STREAMSTACK_LAG_GROUP_DENY": "console-.*,tmp-.*",
        "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "STREAMSTACK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": jaas_config("user", "secret"),
    }
    config = parse_args(["--listen", ":9400"], env=env)
    assert config.bootstrap_servers == "k:9093" and config.refresh_interval == 2.5
    assert config.listen_host == "127.0.0.1" and config.listen_port == 9400
    assert not config.groups("console-consumer-1") and config.groups("orders")
    assert config.security.client_options() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "user",
        "sasl_plain_password": "secret",
    }
    assert "secret" not in repr(config)
    allow = parse_args(
        ["--bootstrap-servers", "k:1", "--topic-allow", "orders.*", "--topic-deny", "orders-dlq"]
    )
    assert allow.topics("orders-v2") and not allow.topics("orders-dlq") and not allow.topics("payments")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([], "--bootstrap-servers"),
        (["--bootstrap-servers", "k:1", "--refresh-interval", "0"], "--refresh-interval"),
        (["--bootstrap-servers", "k:1", "--refresh-interval", "10", "--window", "15"], "--window"),
        (["--bootstrap-servers", "k:1", "--listen", "nowhere"], "--listen"),
        (["--bootstrap-servers", "k:1", "--group-allow", "("], "--group-allow"),
        (["--bootstrap-servers", "k:1", "--checkpoint-dir", "/no/name"], "--checkpoint-dir"),
    ],
)
def test_config_errors_name_the_flag(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        parse_args(argv, env={})


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "STREAMSTACK_KAFKA_SASL_MECHANISM"),
        (
            {
                "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SSL",
                "STREAMSTACK_KAFKA_SSL_CA_FILE": "/no/such/ca.pem",
            },
            "STREAMSTACK_KAFKA_SSL_CA_FILE",
        ),
    ],
)
def test_kafka_login_errors_name_the_variable(env: dict[str, str], variable: str) -> None:
    """The exporter reads the same login variables as the jobs, with the same checks."""
    with pytest.raises(ConfigError, match=variable):
        parse_args(["--bootstrap-servers", "k:1"], env=env)


# -- collector ------------------------------------------------------------------------------------------


def _row(
    group: str, partition: int | None, lag: int, status: Status = Status.OK, source: str = "group"
) -> PartitionLag:
    return PartitionLag(
        source=source,
        group=group,
        topic="t",
        partition=partition,
        committed=100 - lag,
        earliest=0,
        latest=100,
        lag=lag,
        lag_seconds=float(lag) / 10,
        consumption_rate=0.0,
        eta_seconds=math.inf if lag else 0.0,
        lost_records=0,
        status=status,
    )


def test_collector_renders_the_latest_snapshot_and_vanished_series_vanish() -> None:
    current: list[Snapshot | None] = [None]
    registry = CollectorRegistry()
    registry.register(LagCollector(lambda: current[0]))
    assert (
        registry.get_sample_value("streamstack_lag_records", _labels("g", 0)) is None
    )  # before any snapshot

    current[0] = Snapshot(
        taken_at=1.0,
        partitions=(_row("g", 0, 7, Status.STOP), _row("streamstack-q", 0, 0, source="shadow")),
        groups=(GroupLag("group", "g", 7, 7, 0.7, Status.ERR),),
        offsets=(TopicPartitionOffsets("t", 0, 0, 100),),
        checkpoints=(CheckpointHealth("ck", "ck/q", False, "bad"),),
    )
    value = registry.get_sample_value
    assert value("streamstack_lag_records", _labels("g", 0)) == 7
    assert value("streamstack_lag_committed_offset", _labels("g", 0)) == 93
    assert value("streamstack_lag_seconds", _labels("g", 0)) == pytest.approx(0.7)
    assert value("streamstack_lag_catch_up_eta_seconds", _labels("g", 0)) == math.inf
    assert value("streamstack_lag_status_code", _labels("g", 0)) == 4
    assert value("streamstack_lag_records", {**_labels("streamstack-q", 0), "source": "shadow"}) == 0
    assert value("streamstack_lag_group_max_records", {"source": "group", "group": "g"}) == 7
    assert value("streamstack_lag_group_status", {"source": "group", "group": "g", "status": "ERR"}) == 1
    assert value("streamstack_lag_group_status_code", {"source": "group", "group": "g"}) == 3
    assert value("streamstack_lag_partition_latest_offset", {"topic": "t", "partition": "0"}) == 100
    assert value("streamstack_lag_checkpoint_readable", {"checkpoint": "ck", "group": "ck/q"}) == 0
    text = generate_latest(registry).decode()
    assert 'job="' not in text and 'instance="' not in text

    current[0] = Snapshot(taken_at=2.0, partitions=(_row("streamstack-q", 0, 0, source="shadow"),))
    assert value("streamstack_lag_records", _labels("g", 0)) is None
    assert value("streamstack_lag_group_max_records", {"source": "group", "group": "g"}) is None


def test_topic_granularity_drops_the_partition_label() -> None:
    registry = CollectorRegistry()
    snapshot = Snapshot(taken_at=1.0, partitions=(_row("g", None, 3),), granularity="topic")
    registry.register(LagCollector(lambda: snapshot))
    assert (
        registry.get_sample_value("streamstack_lag_records", {"source": "group", "group": "g", "topic": "t"})
        == 3
    )
    assert registry.get_sample_value("streamstack_lag_records", _labels("g", 0)) is None


def test_a_partition_has_one_series_per_family_and_its_status_as_a_code_alone() -> None:
    """At 150,000 group-partitions a 0/1 series per status was 750,000 series (38 % of the text), four
    fifths of them always 0; the status code says the same in 150,000. Groups keep both."""
    statuses = (Status.OK, Status.WARN, Status.STOP, Status.STALL, Status.REWIND)
    snapshot = Snapshot(
        taken_at=1.0,
        partitions=tuple(_row("g", index, index, status) for index, status in enumerate(statuses)),
        groups=(GroupLag("group", "g", 10, 4, 0.4, Status.ERR),),
    )
    families = list(text_string_to_metric_families("".join(render_lag_text(snapshot))))
    per_partition = collections.Counter(
        (sample.labels["group"], sample.labels["partition"])
        for family in families
        for sample in family.samples
        if "partition" in sample.labels and "topic" in sample.labels and "group" in sample.labels
    )
    partition_families = {
        family.name
        for family in families
        if any("partition" in s.labels and "group" in s.labels for s in family.samples)
    }
    assert "streamstack_lag_status" not in partition_families
    assert per_partition == {("g", str(index)): len(partition_families) for index in range(len(statuses))}
    assert len(partition_families) == 8
    codes = {
        sample.labels["partition"]: sample.value
        for family in families
        if family.name == "streamstack_lag_status_code"
        for sample in family.samples
    }
    assert codes == {str(index): float(status.code) for index, status in enumerate(statuses)}
    group_status = {
        sample.labels["status"]: sample.value
        for family in families
        if family.name == "streamstack_lag_group_status"
        for sample in family.samples
    }
    assert group_status == {"OK": 0.0, "WARN": 0.0, "ERR": 1.0}


def _labels(group: str, partition: int) -> dict[str, str]:
    return {"source": "group", "group": group, "topic": "t", "partition": str(partition)}


# -- the loop, with a fake Kafka ------------------------------------------------------------------------


class FakeKafka:
    """Stands in for KafkaReader: offsets from dicts; `down` makes every call fail like a dead broker."""

    def __init__(self) -> None:
        self.cluster_id: str | None = "c1"
        self.down = False
        self.committed: dict[str, dict[TP, int]] = {}
        self.latest: dict[TP, int] = {}
        self.earliest: dict[TP, int] = {}
        self.timestamps: dict[tuple[str, int, int], int] = {}
        self.closed = 0

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("broker down")

    def list_groups(self) -> list[str]:
        self._check()
        return sorted(self.committed)

    def committed_offsets(self, groups: Iterable[str]) -> tuple[dict[str, dict[TP, int]], list[str]]:
        self._check()
        return {group: dict(self.committed[group]) for group in groups}, []

    def partitions(self, topics: Iterable[str]) -> dict[str, set[int]]:
        self._check()
        result: dict[str, set[int]] = {}
        for topic, partition in self.latest:
            if topic in set(topics):
                result.setdefault(topic, set()).add(partition)
        return result

    def latest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        self._check()
        return {tp: self.latest[tp] for tp in tps}

    def earliest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        self._check()
        return {tp: self.earliest.get(tp, 0) for tp in tps}

    def record_timestamps(self, wanted: Mapping[TP, int], budget: float) -> dict[TP, int]:
        self._check()
        return {
            tp: self.timestamps[(*tp, offset)]
            for tp, offset in wanted.items()
            if (*tp, offset) in self.timestamps
        }

    def commit_times(self, budget: float) -> dict[tuple[str, str, int], float]:
        self._check()
        return {}

    def forget_commits_before(self, cutoff: float) -> None:
        pass

    def close(self) -> None:
        self.closed += 1


def test_loop_keeps_values_when_kafka_fails_marks_them_stale_and_recovers() -> None:
    kafka = FakeKafka()
    kafka.committed = {"g": {("t", 0): 4}, "streamstack-q": {("t", 0): 10}}
    kafka.latest = {("t", 0): 10}
    kafka.timestamps = {("t", 0, 4): 95_000}
    clock = [100.0]
    registry = CollectorRegistry()
    health = ExporterHealth(registry)
    config = ExporterConfig(bootstrap_servers="fake:1", refresh_interval=1, window=4)
    refresher = Refresher(config, kafka, health, clock=lambda: clock[0])
    registry.register(LagCollector(refresher.latest))
    value = registry.get_sample_value

    assert refresher.refresh()
    assert value("streamstack_lag_exporter_up") == 1 and value("streamstack_lag_exporter_stale") == 0
    assert value("streamstack_lag_records", _labels("g", 0)) == 6
    assert value("streamstack_lag_seconds", _labels("g", 0)) == pytest.approx(5.0)
    assert value("streamstack_lag_records", {**_labels("streamstack-q", 0), "source": "shadow"}) == 0
    assert value("streamstack_lag_exporter_last_success_timestamp_seconds") == 100.0

    kafka.down, clock[0] = True, 101.0
    assert not refresher.refresh()
    assert value("streamstack_lag_exporter_up") == 0 and value("streamstack_lag_exporter_stale") == 1
    assert value("streamstack_lag_records", _labels("g", 0)) == 6  # kept
    assert value("streamstack_lag_exporter_last_success_timestamp_seconds") == 100.0
    assert value("streamstack_lag_exporter_errors_total", {"kind": "kafka"}) == 1
    assert kafka.closed == 1

    kafka.down, clock[0] = False, 102.0
    del kafka.committed["streamstack-q"]  # deleted meanwhile
    assert refresher.refresh()
    assert value("streamstack_lag_exporter_up") == 1 and value("streamstack_lag_exporter_stale") == 0
    assert value("streamstack_lag_records", {**_labels("streamstack-q", 0), "source": "shadow"}) is None


def test_the_loop_collects_without_cyclic_garbage_collection_and_enables_it_again() -> None:
    """A collection allocates millions of objects at 50,000 x 500; the cyclic collector's passes over them
    (10-140 ms each) stalled scrapes. The loop keeps it off during a collection, a failed one too, and on
    between collections."""
    enabled_during: list[bool] = []

    class Watched(FakeKafka):
        def list_groups(self) -> list[str]:
            enabled_during.append(gc.isenabled())
            if len(enabled_during) == 2:
                stop.set()
                raise RuntimeError("an unexpected failure")  # the loop logs it and goes on
            return super().list_groups()

    kafka = Watched()
    kafka.committed = {"g": {("t", 0): 4}}
    kafka.latest = {("t", 0): 10}
    stop = threading.Event()
    config = ExporterConfig(bootstrap_servers="fake:1", refresh_interval=0.01, window=4)
    refresher = Refresher(config, kafka, ExporterHealth(CollectorRegistry()))
    assert gc.isenabled()
    refresher.run(stop)
    assert enabled_during == [False, False]
    assert gc.isenabled()
    assert refresher.latest() is not None


def test_the_loop_reads_the_commit_log_beside_the_record_timestamps_and_applies_its_times() -> None:
    """The commit log and the record timestamps are read at the same time, in two threads (each mostly
    waits for brokers): here each read waits until the other one has started. The times read still make a
    partition whose committed offset does not move but is committed again STALL, not STOP."""
    waited = 2.0

    class Overlapping(FakeKafka):
        def __init__(self) -> None:
            super().__init__()
            self.commit_log_read = threading.Event()
            self.timestamps_read = threading.Event()
            self.commit_log_threads: set[str] = set()

        def commit_times(self, budget: float) -> dict[tuple[str, str, int], float]:
            self.commit_log_read.set()
            self.commit_log_threads.add(threading.current_thread().name)
            if not self.timestamps_read.wait(waited):
                raise TimeoutError("the record timestamps were not read meanwhile")
            return {("g", "t", 0): clock[0] - 0.5}

        def record_timestamps(self, wanted: Mapping[TP, int], budget: float) -> dict[TP, int]:
            self.timestamps_read.set()
            if not self.commit_log_read.wait(waited):
                raise TimeoutError("the commit log was not read meanwhile")
            return super().record_timestamps(wanted, budget)

    kafka = Overlapping()
    kafka.committed = {"g": {("t", 0): 4}}
    kafka.latest = {("t", 0): 10}
    clock = [100.0]
    registry = CollectorRegistry()
    config = ExporterConfig(bootstrap_servers="fake:1", refresh_interval=1, window=4)
    refresher = Refresher(config, kafka, ExporterHealth(registry), clock=lambda: clock[0])
    assert refresher.refresh()  # the first collection: the timestamp is read (later ones find it cached)
    assert kafka.commit_log_read.is_set() and kafka.timestamps_read.is_set()
    for now in (102.0, 104.5):
        clock[0] = now
        assert refresher.refresh()
    snapshot = refresher.latest()
    assert snapshot is not None
    assert [(row.group, row.status) for row in snapshot.partitions] == [("g", Status.STALL)]
    assert registry.get_sample_value("streamstack_lag_exporter_errors_total", {"kind": "commit_log"}) == 0
    assert registry.get_sample_value("streamstack_lag_exporter_errors_total", {"kind": "timestamp"}) == 0
    threads = kafka.commit_log_threads
    assert threads and all(name.startswith("lag-commit-log") for name in threads), threads


def test_the_loop_starts_reading_partitions_before_the_groups_when_the_reader_can() -> None:
    """A reader with `read_partitions_ahead` is told to start before the groups are listed, every
    collection; the collection is the same."""
    calls: list[str] = []

    class ReadsAhead(FakeKafka):
        def read_partitions_ahead(self) -> None:
            calls.append("ahead")

        def list_groups(self) -> list[str]:
            calls.append("groups")
            return super().list_groups()

        def partitions(self, topics: Iterable[str]) -> dict[str, set[int]]:
            calls.append("partitions")
            return super().partitions(topics)

    kafka = ReadsAhead()
    kafka.committed = {"g": {("t", 0): 4}}
    kafka.latest = {("t", 0): 10}
    registry = CollectorRegistry()
    refresher = Refresher(ExporterConfig(bootstrap_servers="fake:1"), kafka, ExporterHealth(registry))
    registry.register(LagCollector(refresher.latest))
    assert refresher.refresh() and refresher.refresh()
    assert calls == ["ahead", "groups", "partitions"] * 2
    assert registry.get_sample_value("streamstack_lag_records", _labels("g", 0)) == 6


def test_history_forgets_what_the_last_collection_did_not_record() -> None:
    """`retain_recorded` (build_snapshot's way to forget gone partitions without a set of 150,000 keys)
    keeps exactly what the last `record` sampled, also partitions kept apart after a missed collection."""
    history = History(WINDOW)
    keys = [("group", "g", "t", p) for p in range(4)]

    def record(sampled: list[tuple[str, str, str, int]], now: float) -> None:
        count = len(sampled)
        history.record(sampled, np.full(count, 5), np.full(count, 1), np.full(count, math.nan), now)

    record(keys, 1.0)
    record(keys[:3], 2.0)  # partition 3 missed: kept apart
    record([keys[0], keys[1], keys[3]], 3.0)  # 3 back (apart), 2 missed (apart now)
    history.retain_recorded()
    assert len(history) == 3
    assert history.samples(keys[2]) == []
    assert [sample.at for sample in history.samples(keys[3])] == [1.0, 3.0]
    record(keys[:1], 4.0)
    history.retain_recorded()
    assert len(history) == 1 and [sample.at for sample in history.samples(keys[0])] == [1.0, 2.0, 3.0, 4.0]


def test_failures_before_any_collection_are_not_stale_values() -> None:
    """Stale means "serving an older collection's values": with none collected yet there is nothing stale."""
    kafka = FakeKafka()
    kafka.down = True
    registry = CollectorRegistry()
    health = ExporterHealth(registry)
    config = ExporterConfig(bootstrap_servers="fake:1", refresh_interval=1, window=4)
    refresher = Refresher(config, kafka, health, clock=lambda: 100.0)
    registry.register(LagCollector(refresher.latest))
    value = registry.get_sample_value

    for attempt in (1, 2, 3):
        assert not refresher.refresh()
        assert value("streamstack_lag_exporter_up") == 0
        assert value("streamstack_lag_exporter_stale") == 0, attempt
        assert value("streamstack_lag_exporter_errors_total", {"kind": "kafka"}) == attempt


def test_parse_commit_key_reads_offset_commit_keys_only() -> None:
    def string(text: str) -> bytes:
        return len(text).to_bytes(2, "big") + text.encode()

    commit = (1).to_bytes(2, "big") + string("grp") + string("orders") + (7).to_bytes(4, "big")
    assert parse_commit_key(commit) == ("grp", "orders", 7)
    assert parse_commit_key((2).to_bytes(2, "big") + string("grp")) is None  # group metadata
    assert parse_commit_key(commit[:9]) is None
    assert parse_commit_key(None) is None
