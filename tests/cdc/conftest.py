"""One PostgreSQL and one Kafka Connect worker (with Debezium) per test module, on the session's broker.

Each test captures its own database with its own connector, replication slot, publication and topics
(`Capture`), so tests share the processes but never each other's changes.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg import sql

from contracts.cdc import CdcSource, ConnectCluster, cdc_source, debezium_connector_config
from jobs.producers.cdc_workload import create_schema
from streamstack.local.connect import LocalConnect
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.postgres import LocalPostgres
from streamstack.runtimes import Runtimes
from streamstack.runtimes.cdc import ensure_cdc
from streamstack.runtimes.lock import CdcRuntimes
from tests.conftest import repo_root
from tests.kafka_helpers import latest_per_key, read_records, wait_for


@pytest.fixture(scope="session")
def cdc_runtimes() -> CdcRuntimes:
    return ensure_cdc(log=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="module")
def postgres(
    runtimes: Runtimes, cdc_runtimes: CdcRuntimes, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalPostgres]:
    server = LocalPostgres(runtimes, cdc_runtimes, tmp_path_factory.mktemp("postgres"), "postgres")
    try:
        yield server.start()
    finally:
        server.stop()
        server.remove_data()


@pytest.fixture(scope="module")
def connect(
    runtimes: Runtimes,
    cdc_runtimes: CdcRuntimes,
    kafka: LocalKafka,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalConnect]:
    prefix = f"cdc-{uuid.uuid4().hex[:8]}"
    cluster = ConnectCluster(
        f"{prefix}-connect", f"{prefix}-configs", f"{prefix}-offsets", f"{prefix}-status"
    )
    kafka.create_topics(
        [
            TopicSpec(cluster.config_storage_topic, compact=True),
            TopicSpec(cluster.offset_storage_topic, partitions=2, compact=True),
            TopicSpec(cluster.status_storage_topic, compact=True),
        ]
    )
    worker = LocalConnect(
        runtimes, cdc_runtimes, tmp_path_factory.mktemp("connect"), kafka.bootstrap_servers, cluster
    )
    try:
        yield worker.start()
    finally:
        worker.stop()


@dataclass
class Capture:
    """A database of its own with the application's tables, captured by a connector of its own onto topics
    of its own (the catalogue's source with every name made unique)."""

    postgres: LocalPostgres
    connect: LocalConnect
    kafka: LocalKafka
    source: CdcSource

    @property
    def topics(self) -> dict[str, str]:
        """table name (users, orders) -> its changelog topic."""
        return {table.table.split(".")[1]: table.topic for table in self.source.tables}

    def connection(self) -> psycopg.Connection:
        return self.postgres.connect(self.source.database)

    def start_connector(self) -> None:
        config = debezium_connector_config(
            self.source,
            hostname="127.0.0.1",
            port=self.postgres.port,
            user=self.postgres.user,
            password=self.postgres.password,
        )
        self.connect.put_connector(self.source.connector_name, config)
        self.connect.wait_until_running(self.source.connector_name)

    def workload_environment(self) -> dict[str, str]:
        """libpq's environment for `python -m jobs.producers.cdc_workload` (the password never on argv)."""
        return {
            **os.environ,
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.postgres.port),
            "PGDATABASE": self.source.database,
            "PGUSER": self.postgres.user,
            "PGPASSWORD": self.postgres.password,
        }

    def table(self, name: str) -> dict[str, dict[str, object]]:
        """The table's rows by key, each as the changelog's JSON value (amounts as floats, times parsed)."""
        key_column = self.source.table_for_topic(self.topics[name]).key_column
        with self.connection() as connection, connection.cursor(row_factory=psycopg.rows.dict_row) as cursor:
            cursor.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier("public", name)))
            return {str(row[key_column]): normalized(row) for row in cursor.fetchall()}

    def topic_table(self, name: str) -> dict[str, dict[str, object]]:
        """The changelog read as a table: the last value per key, tombstoned keys left out."""
        latest = latest_per_key(
            read_records(self.kafka.bootstrap_servers, self.topics[name]), tombstones=True
        )
        return {key: normalized(value) for key, value in latest.items() if value is not None}

    def wait_until_topics_hold_the_tables(self, timeout: float = 90.0) -> None:
        def caught_up() -> bool:
            return all(self.topic_table(name) == self.table(name) for name in self.topics)

        wait_for(caught_up, timeout, "the changelog topics to hold the tables", interval=1.0)

    def stop(self) -> None:
        self.connect.delete_connector(self.source.connector_name)


def normalized(row: Mapping[str, Any]) -> dict[str, object]:
    """A row as comparable values: Decimal -> float, timestamps (datetime or ISO text) -> aware datetime,
    null columns left out (a column added later is absent from the records written before it)."""
    result: dict[str, object] = {}
    for column, value in row.items():
        if value is None:
            continue
        if isinstance(value, Decimal):
            result[column] = float(value)
        elif column == "updated_at" and isinstance(value, str):
            result[column] = datetime.fromisoformat(value)
        else:
            result[column] = value
    return result


@pytest.fixture
def capture(
    postgres: LocalPostgres, connect: LocalConnect, kafka: LocalKafka, topic_name: str
) -> Iterator[Capture]:
    """A fresh database `cdc_<hex>` with the tables and its changelog topics; the connector not started."""
    suffix = topic_name.removeprefix("test-")
    catalogue = cdc_source()
    source = dataclasses.replace(
        catalogue,
        connector_name=f"{catalogue.connector_name}-{suffix}",
        database=f"cdc_{suffix}",
        slot_name=f"slot_{suffix}",
        publication_name=f"publication_{suffix}",
        tables=tuple(
            dataclasses.replace(table, topic=f"{topic_name}-{table.topic}") for table in catalogue.tables
        ),
        connect=connect.cluster,
    )
    with postgres.connect("postgres") as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(source.database)))
    kafka.create_topics([TopicSpec(table.topic, partitions=2, compact=True) for table in source.tables])
    with postgres.connect(source.database) as connection:
        create_schema(connection)
    result = Capture(postgres, connect, kafka, source)
    try:
        yield result
    finally:
        result.stop()


def run_workload(capture: Capture, *arguments: str) -> str:
    """`python -m jobs.producers.cdc_workload` against the capture's database; its output."""
    completed = subprocess.run(
        [sys.executable, "-m", "jobs.producers.cdc_workload", *arguments],
        env=capture.workload_environment(),
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout
