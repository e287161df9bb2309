"""Source lag on the real components: PostgreSQL's replication slot read by the lag exporter, Debezium's and
Kafka Connect's JMX metrics scraped by Prometheus under the cluster's names, the CDC alerts' and panels'
queries on live series, and `streamstack status`.

One capture (database, connector, slot) on the module's PostgreSQL and Connect worker, one exporter and one
Prometheus for every assertion: the connector streams; a second connector whose task fails on its first
record; Connect stops (the slot goes inactive, retained WAL and lag grow while the database writes); Connect
comes back (the slot is active again, lag and retained WAL fall).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

from contracts.cdc import cdc_source, debezium_connector_config
from contracts.errors import ConfigError
from monitoring.lag_exporter.config import parse_args
from monitoring.lag_exporter.postgres_source import (
    PostgresSourceConfig,
    SourceCollector,
    SourceLoop,
    WalHistory,
)
from streamstack.local.connect import LocalCdcSource
from streamstack.local.ports import free_port
from streamstack.local.prometheus import LocalPrometheus
from streamstack.runtimes import Runtimes
from streamstack.runtimes.lock import CONNECT_JMX_EXPORTER_SET, CdcRuntimes, load_lock
from tests.cdc.conftest import Capture
from tests.conftest import repo_root
from tests.kafka_helpers import scrape, wait_for
from tests.monitoring.exporter_process import running_exporter
from tests.monitoring.test_queries_live import CDC_ONLY, Check, panel_checks, rule_checks
from tests.monitoring.test_rules import RULES_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WAL_DISK_BYTES = 8 * 1024**3
FILLER_BYTES = 4 * 1024**2  # WAL written while Connect is down, well above what the workload writes


def test_wal_history_interpolates_when_the_wal_passed_a_position() -> None:
    history = WalHistory(keep_seconds=100)
    for at, lsn in ((0.0, 1000), (10.0, 2000), (20.0, 2000), (30.0, 4000)):
        history.add(at, lsn)
    assert history.seconds_behind(4000, now=30.0) == 0.0  # confirmed everything
    assert history.seconds_behind(3000, now=30.0) == pytest.approx(5.0)  # halfway between 20 s and 30 s
    assert history.seconds_behind(1500, now=30.0) == pytest.approx(25.0)
    assert history.seconds_behind(500, now=30.0) == pytest.approx(30.0)  # older than the history: lower bound
    history.add(200.0, 5000)  # the readings older than 100 s are forgotten: the oldest left is 200 s
    assert history.seconds_behind(1500, now=230.0) == pytest.approx(30.0)
    history.add(201.0, 10)  # the WAL went back: another database, history restarts
    assert history.seconds_behind(10, now=201.0) == 0.0


def test_the_local_stack_passes_the_catalogues_slot_to_the_exporter_without_the_password(
    runtimes: Runtimes, cdc_runtimes: CdcRuntimes, tmp_path: Path
) -> None:
    """`local up` starts the exporter with LocalCdcSource.exporter_flags(): the catalogue's database and slot,
    the password by file; a missing database or slot fails naming the flag."""
    source = cdc_source()
    cdc = LocalCdcSource(
        runtimes, cdc_runtimes, source, tmp_path, bootstrap_servers="127.0.0.1:9092", record=lambda *_: None
    )
    (tmp_path / "postgres").mkdir()
    cdc.postgres.password_path.write_text("s3cret-password\n")
    flags = cdc.exporter_flags()
    assert "s3cret-password" not in " ".join(flags)
    config = parse_args(["--bootstrap-servers", "127.0.0.1:9092", *flags], env={})
    assert config.source is not None
    assert (config.source.database, config.source.slot) == (source.database, source.slot_name)
    assert config.source.port == cdc.postgres.port
    assert "password=s3cret-password" in config.source.conninfo()
    # The worker's JMX exporter: the lock's agent jar, verified, on a port of its own.
    [agent] = [a for a in load_lock().maven if a.jar_set == CONNECT_JMX_EXPORTER_SET]
    assert cdc_runtimes.jmx_exporter_agent is not None
    assert hashlib.sha256(cdc_runtimes.jmx_exporter_agent.read_bytes()).hexdigest() == agent.sha256
    assert cdc.connect.metrics_port is not None
    without_slot = [flag for flag in flags if flag not in ("--postgres-slot", source.slot_name)]
    with pytest.raises(ConfigError, match="--postgres-slot is required"):
        parse_args(["--bootstrap-servers", "127.0.0.1:9092", *without_slot], env={})
    assert parse_args(["--bootstrap-servers", "127.0.0.1:9092"], env={}).source is None


def test_an_unreachable_database_is_source_up_0_without_slot_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens on the port: the loop reports `source_up` 0 and no slot series (it never read one);
    the password file's content never reaches the log."""
    password_file = tmp_path / "password"
    password_file.write_text("never-logged\n")
    config = PostgresSourceConfig(
        host="127.0.0.1",
        port=free_port(),
        user="streamstack",
        database="streamstack",
        slot="streamstack_cdc",
        password_file=password_file,
        connect_timeout=2,
    )
    loop = SourceLoop(config, interval=1.0)
    registry = CollectorRegistry()
    registry.register(SourceCollector(loop.latest))
    labels = {"database": "streamstack", "slot": "streamstack_cdc"}
    assert loop.collect_once().up is False
    assert registry.get_sample_value("streamstack_lag_source_up", labels) == 0
    assert registry.get_sample_value("streamstack_lag_source_slot_active", labels) is None
    assert registry.get_sample_value("streamstack_lag_source_lag_bytes", labels) is None
    assert "reading replication slot streamstack_cdc failed" in caplog.text
    assert "never-logged" not in caplog.text
    password_file.unlink()
    loop.collect_once()
    assert "--postgres-password-file" in caplog.text  # a missing password file names the flag


def _value(samples: dict[str, float], name: str, slot: str) -> float | None:
    matches = [
        value for key, value in samples.items() if key.startswith(name + "{") and f'slot="{slot}"' in key
    ]
    return matches[0] if matches else None


def _insert_users(capture: Capture, count: int) -> None:
    with capture.connection() as connection:
        for _ in range(count):
            connection.execute(
                "INSERT INTO public.users VALUES (%s, 'n', 'NL', 'free', now())", (uuid.uuid4().hex[:10],)
            )


def _streamstack_status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamstack.cli", "status", *args],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _returns_series(prometheus: LocalPrometheus, promql: str) -> bool:
    return bool(prometheus.query(promql))


def _wait_for_series(prometheus: LocalPrometheus, promql: str, timeout: float) -> None:
    wait_for(lambda: _returns_series(prometheus, promql), timeout, f"Prometheus to have {promql}")


def _failing_connector(capture: Capture) -> tuple[str, dict[str, str]]:
    """A second connector on the users table whose task fails on its first record: its key transform asks
    for a column the key does not have (errors.tolerance none)."""
    name = f"{capture.source.connector_name}-broken"
    config = debezium_connector_config(
        capture.source,
        hostname="127.0.0.1",
        port=capture.postgres.port,
        user=capture.postgres.user,
        password=capture.postgres.password,
    )
    config.update(
        {
            "table.include.list": "public.users",
            "slot.name": f"{capture.source.slot_name}_broken",
            "publication.name": f"{capture.source.publication_name}_broken",
            "topic.prefix": name.replace("-", "_"),
            "transforms.key0.field": "no_such_column",
            "transforms.route0.regex": f"{name.replace('-', '_')}[.]public[.]users",
        }
    )
    return name, config


def test_source_lag_follows_the_slot_through_a_connect_outage(
    capture: Capture, runtimes: Runtimes, tmp_path: Path
) -> None:
    started = time.monotonic()
    connect, postgres, slot = capture.connect, capture.postgres, capture.source.slot_name
    assert connect.metrics_url is not None, "the lock's JMX exporter agent is not in the CDC runtimes"
    _insert_users(capture, 20)
    capture.start_connector()
    _insert_users(capture, 20)  # streamed (not snapshotted) changes: Debezium's streaming metrics move
    broken, broken_config = _failing_connector(capture)
    connect.put_connector(broken, broken_config)

    flags = (
        f"--bootstrap-servers={capture.kafka.bootstrap_servers}",
        "--no-groups",
        "--refresh-interval=1",
        "--window=10",
        "--postgres-host=127.0.0.1",
        f"--postgres-port={postgres.port}",
        f"--postgres-user={postgres.user}",
        f"--postgres-database={capture.source.database}",
        f"--postgres-slot={slot}",
        f"--postgres-password-file={postgres.password_path}",
        f"--postgres-wal-disk-bytes={WAL_DISK_BYTES}",
    )
    with running_exporter(flags, tmp_path / "exporter.log") as exporter:
        assert postgres.password not in exporter.cmdline()
        exporter_target = exporter.url.split("/")[2]
        prometheus = LocalPrometheus(
            runtimes,
            tmp_path / "prometheus",
            {"lag-exporter": [exporter_target], "kafka-connect": [connect.metrics_url.split("/")[2]]},
            scrape_interval="1s",
            rule_files=(RULES_DIR / "streamstack-cdc.yaml",),
        ).start()
        try:

            def metric(name: str) -> float | None:
                return _value(scrape(exporter.url), name, slot)

            # --- streaming: slot active, Debezium's and Connect's metrics under the cluster's names
            wait_for(lambda: metric("streamstack_lag_source_slot_active") == 1, 60, "the slot to be active")
            assert metric("streamstack_lag_source_up") == 1
            assert metric("streamstack_lag_source_slot_exists") == 1
            assert metric("streamstack_lag_source_wal_disk_bytes") == WAL_DISK_BYTES
            prefix = capture.source.connector_name.replace("-", "_")
            name = capture.source.connector_name
            behind = f'debezium_metrics_millisecondsbehindsource{{context="streaming", name="{prefix}"}}'
            for promql in (
                f"{behind} >= 0",
                f'debezium_metrics_connected{{context="streaming", name="{prefix}"}} == 1',
                f'kafka_connect_connector_status{{connector="{name}", status="running"}} == 1',
                f'kafka_connect_connector_task_status{{connector="{name}", task="0", status="running"}} == 1',
                f'kafka_connect_connector_task_status{{connector="{broken}", status="failed"}} == 1',
                f'streamstack_lag_source_slot_active{{slot="{slot}"}} == 1',
            ):
                _wait_for_series(prometheus, promql, 90)

            # `streamstack status` against this exporter and Connect's metrics endpoint.
            status = _streamstack_status(
                "--exporter-url", exporter.url, "--connect-metrics-url", connect.metrics_url, "--json"
            )
            assert status.returncode == 0, status.stderr
            report = json.loads(status.stdout)
            [slot_status] = [entry for entry in report["source_slots"] if entry["slot"] == slot]
            assert slot_status["active"] is True and slot_status["exists"] is True
            assert slot_status["lag_bytes"] is not None and slot_status["lag_seconds"] is not None
            connectors = {entry["connector"]: entry for entry in report["connectors"]}
            assert connectors[name]["state"] == "RUNNING"
            assert connectors[name]["tasks"] == [["0", "RUNNING"]]
            assert connectors[name]["milliseconds_behind_source"] >= 0
            assert connectors[broken]["tasks"] == [["0", "FAILED"]]
            human = _streamstack_status(
                "--exporter-url", exporter.url, "--connect-metrics-url", connect.metrics_url
            )
            assert human.returncode == 0, human.stderr
            assert f"source slot {slot} (database {capture.source.database}): active, lag " in human.stdout
            assert f"connector {name}: RUNNING, task 0 RUNNING, Debezium " in human.stdout
            assert f"connector {broken}: RUNNING, task 0 FAILED" in human.stdout

            connect.delete_connector(broken)
            with postgres.connect(capture.source.database) as connection:
                connection.execute("SELECT pg_drop_replication_slot(%s)", (f"{slot}_broken",))

            # --- Connect stopped: the slot is inactive, retained WAL and lag grow while the database writes
            connect.stop()
            wait_for(lambda: metric("streamstack_lag_source_slot_active") == 0, 30, "the slot to be inactive")
            retained_before = metric("streamstack_lag_source_retained_wal_bytes")
            lag_before = metric("streamstack_lag_source_lag_bytes")
            assert retained_before is not None and lag_before is not None
            with capture.connection() as connection:
                connection.execute(
                    sql.SQL(
                        "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad "
                        "FROM generate_series(1, {}) AS g"
                    ).format(sql.Literal(FILLER_BYTES // 200))
                )
            _insert_users(capture, 5)
            wait_for(
                lambda: (
                    (metric("streamstack_lag_source_retained_wal_bytes") or 0)
                    > retained_before + FILLER_BYTES
                ),
                30,
                "retained WAL to grow while nobody reads the slot",
            )
            assert (metric("streamstack_lag_source_lag_bytes") or 0) > lag_before + FILLER_BYTES
            wait_for(
                lambda: (metric("streamstack_lag_source_lag_seconds") or 0) >= 2, 30, "lag seconds to grow"
            )
            peak_retained = metric("streamstack_lag_source_retained_wal_bytes")
            peak_seconds = metric("streamstack_lag_source_lag_seconds")
            assert peak_retained is not None and peak_seconds is not None
            pending = 'ALERTS{alertname="StreamstackCdcSlotInactive", alertstate="pending"}'
            wait_for(
                lambda: _returns_series(prometheus, pending), 30, "the slot-inactive alert to be pending"
            )

            # --- Connect back: the slot is active again, the connector confirms, PostgreSQL recycles WAL
            connect.restart()
            connect.wait_until_running(name)

            def caught_up() -> bool:
                # The workload goes on; a checkpoint lets PostgreSQL move restart_lsn once the connector has
                # confirmed past it.
                _insert_users(capture, 1)
                with postgres.connect(capture.source.database) as connection:
                    connection.execute("CHECKPOINT")
                retained = metric("streamstack_lag_source_retained_wal_bytes")
                lag = metric("streamstack_lag_source_lag_bytes")
                return (
                    metric("streamstack_lag_source_slot_active") == 1
                    and retained is not None
                    and retained < peak_retained - FILLER_BYTES
                    and lag is not None
                    and lag < FILLER_BYTES
                )

            wait_for(caught_up, 90, "retained WAL and lag to fall after Connect resumes", interval=1.0)
            seconds = metric("streamstack_lag_source_lag_seconds")
            assert seconds is not None and seconds < peak_seconds

            # Every CDC rule's and panel's queries return series from this Prometheus (what
            # tests/monitoring/test_queries_live.py checks for the rest). No connector is failed now: the
            # connector-failed rule's operand is checked without its status="failed" matcher (promtool tests
            # check it fires), the task-failed operand was checked live above.
            checks = [check for check in [*rule_checks(), *panel_checks()] if check.key in CDC_ONLY]
            assert {check.key for check in checks} == set(CDC_ONLY)
            relaxed = [
                Check(check.key, tuple(query.replace('{status="failed"}', "") for query in check.queries))
                for check in checks
            ]

            def empty() -> dict[str, list[str]]:
                return {
                    check.key: missing
                    for check in relaxed
                    if (missing := [q for q in check.queries if not _returns_series(prometheus, q)])
                }

            deadline = time.monotonic() + 30  # Connect's series come back with its next scrapes
            while empty() and time.monotonic() < deadline:
                time.sleep(1)
            assert empty() == {}
            assert postgres.password not in exporter.output()
        finally:
            prometheus.stop()
            if connect.exit_code() is not None:  # failed during the outage: the fixture deletes connectors
                connect.restart()
    print(f"source lag test: {time.monotonic() - started:.1f} s (shared machine)", file=sys.stderr)
