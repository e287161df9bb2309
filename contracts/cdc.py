"""Change data capture, described once: which PostgreSQL tables Debezium captures, onto which changelog
topics, and Kafka Connect's identity (group and internal topics). Read from the `sources.cdc` section of
`pipeline.yaml`.

The local runtime (streamstack/local/connect.py) and the cluster (Strimzi `KafkaConnect`/`KafkaConnector`,
infra/) both build the connector from `debezium_connector_config()`, so the topics carry the same records
everywhere: keyed by the row's id as plain text (what the synthetic changelog producer writes), the value is
the row after the change as schemaless JSON (Debezium's `ExtractNewRecordState`), a delete is a tombstone.

    source = cdc_source()
    config = debezium_connector_config(source, hostname="127.0.0.1", port=5432, user="cdc", password="...")
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contracts.pipeline import (
    TOPIC_NAME_PATTERN,
    CatalogueError,
    Pipeline,
    _Fields,
    _require_in_catalogue,
    load_pipeline,
)
from contracts.record_headers import SOURCE_COMMIT_HEADER

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
# A PostgreSQL identifier (unquoted, lower case), a schema-qualified table and a Kafka Connect name.
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TABLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
# Connect needs its three internal topics compacted (it refuses to start otherwise).
CONNECT_TOPIC_POLICY = "compact"


@dataclass(frozen=True)
class CdcTable:
    """A captured table: `public.users` onto the changelog topic `users`, keyed by its `user_id`."""

    table: str
    topic: str
    key_column: str


@dataclass(frozen=True)
class ConnectCluster:
    """Kafka Connect's distributed-mode identity, the same locally and in the cluster."""

    group_id: str
    config_storage_topic: str
    offset_storage_topic: str
    status_storage_topic: str

    @property
    def internal_topics(self) -> tuple[str, str, str]:
        return (self.config_storage_topic, self.offset_storage_topic, self.status_storage_topic)


@dataclass(frozen=True)
class CdcSource:
    """The Debezium PostgreSQL connector: its name, database, replication slot and publication, tables and
    the Connect cluster that runs it."""

    connector_name: str
    database: str
    slot_name: str
    publication_name: str
    tables: tuple[CdcTable, ...]
    connect: ConnectCluster

    @property
    def topics(self) -> tuple[str, ...]:
        """The changelog topics the connector writes, in table order."""
        return tuple(table.topic for table in self.tables)

    def table_for_topic(self, topic: str) -> CdcTable:
        return {table.topic: table for table in self.tables}[topic]


def parse_cdc_source(raw: object, pipeline: Pipeline, path: str = "sources.cdc") -> CdcSource:
    """The `sources.cdc` section, checked against the catalogue's topics; errors name the field."""
    fields = _Fields(raw, path)
    fields.only("connectorName", "database", "slotName", "publicationName", "tables", "connect")
    topics = {topic.name: topic for topic in pipeline.topics}
    tables_fields = fields.child("tables")
    if not tables_fields.raw:
        raise CatalogueError(f"{tables_fields.path}: required, at least one schema.table")
    tables = []
    for name in tables_fields.raw:
        table_fields = tables_fields.child(name)
        if not isinstance(name, str) or not _TABLE.match(name):
            raise CatalogueError(f"{table_fields.path}: not a schema-qualified table name ({_TABLE.pattern})")
        table_fields.only("topic", "keyColumn")
        topic = table_fields.string("topic", TOPIC_NAME_PATTERN)
        _require_in_catalogue(table_fields.name("topic"), topic, topics, "topic")
        if topics[topic].cleanup_policy == "delete":
            raise CatalogueError(
                f"{table_fields.name('topic')}: {topic} is not compacted; a changelog must be"
            )
        tables.append(CdcTable(name, topic, table_fields.string("keyColumn", _IDENTIFIER)))
    if len({table.topic for table in tables}) != len(tables):
        raise CatalogueError(f"{tables_fields.path}: two tables share a topic")
    connect_fields = fields.child("connect")
    connect_fields.only("groupId", "configStorageTopic", "offsetStorageTopic", "statusStorageTopic")
    internal = {}
    for key in ("configStorageTopic", "offsetStorageTopic", "statusStorageTopic"):
        topic = connect_fields.string(key, TOPIC_NAME_PATTERN)
        _require_in_catalogue(connect_fields.name(key), topic, topics, "topic")
        if topics[topic].cleanup_policy != CONNECT_TOPIC_POLICY:
            raise CatalogueError(f"{connect_fields.name(key)}: {topic} must have cleanupPolicy compact")
        internal[key] = topic
    if len(set(internal.values())) != len(internal):
        raise CatalogueError(f"{connect_fields.path}: the three storage topics must differ")
    if set(internal.values()) & {table.topic for table in tables}:
        raise CatalogueError(f"{connect_fields.path}: a storage topic is also a changelog topic")
    return CdcSource(
        connector_name=fields.string("connectorName", _NAME),
        database=fields.string("database", _IDENTIFIER),
        slot_name=fields.string("slotName", _IDENTIFIER),
        publication_name=fields.string("publicationName", _IDENTIFIER),
        tables=tuple(tables),
        connect=ConnectCluster(
            group_id=connect_fields.string("groupId", _NAME),
            config_storage_topic=internal["configStorageTopic"],
            offset_storage_topic=internal["offsetStorageTopic"],
            status_storage_topic=internal["statusStorageTopic"],
        ),
    )


def cdc_source(pipeline: Pipeline | None = None) -> CdcSource:
    """The catalogue's CDC source (pipeline.yaml's `sources.cdc`)."""
    catalogue = load_pipeline() if pipeline is None else pipeline
    if catalogue.cdc is None:
        raise CatalogueError("pipeline.yaml: sources.cdc: required for change data capture")
    return catalogue.cdc


def connect_worker_config() -> dict[str, str]:
    """What every Kafka Connect worker of the pipeline sets, locally and in the cluster: text keys and
    schemaless JSON values by default (the connector sets its own), and the changes of one row kept in
    order (one in-flight request per connection, an idempotent producer, acks=all)."""
    return {
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "producer.max.in.flight.requests.per.connection": "1",
        "producer.enable.idempotence": "true",
        "producer.acks": "all",
    }


def debezium_connector_config(
    source: CdcSource, *, hostname: str, port: int, user: str, password: str
) -> dict[str, str]:
    """The complete Debezium PostgreSQL connector config (`tasks.max` 1: one slot, one task).

    - pgoutput (PostgreSQL's built-in logical decoding plugin), the slot and the publication named in the
      catalogue; the publication is created by Debezium for exactly the captured tables (`filtered`).
    - Each table's records are routed to its changelog topic (one `RegexRouter` per table, on the
      `<prefix>.<schema>.<table>` topic Debezium would use).
    - Key: the key column's value as plain text (`ExtractField$Key` on Debezium's one-column key
      struct, then StringConverter), as the changelog topics carry it; value: the row after the change as
      schemaless JSON (`ExtractNewRecordState`), a tombstone for a delete (the delete event is dropped).
    - Numeric columns as JSON numbers (`decimal.handling.mode=double`); `timestamptz` as ISO-8601 text.
    - The source commit time in a header, `SOURCE_COMMIT_HEADER` (epoch ms as text), not in the value:
      the values keep the row's shape exactly, and the jobs that need the time read the header. For
      PostgreSQL `source.ts_ms` is the commit time of the row's transaction; for snapshot records it is
      the time the snapshot read the row.
    - `password` may be a literal or a config-provider reference (`${secrets:ns/name:password}`).
    """
    prefix = source.connector_name.replace("-", "_").replace(".", "_")
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": hostname,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": source.database,
        "topic.prefix": prefix,
        "slot.name": source.slot_name,
        "publication.name": source.publication_name,
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(table.table for table in source.tables),
        "snapshot.mode": "initial",
        "decimal.handling.mode": "double",
        "tombstones.on.delete": "true",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        "errors.tolerance": "none",
    }
    transforms = ["unwrap"]
    config.update(
        {
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            # The delete event becomes a true tombstone (null value, no schema) and Debezium's own tombstone
            # is dropped: one tombstone per delete. ("tombstone" would keep the delete as a record whose
            # value is the null `after` with its schema, which JsonConverter writes as the text `null`.)
            "transforms.unwrap.delete.tombstone.handling.mode": "delete-to-tombstone",
            # The commit time as the header `__source_ts_ms` (the prefix `__` is Debezium's default).
            "transforms.unwrap.add.headers": "source.ts_ms",
            "transforms.unwrap.add.headers.prefix": SOURCE_COMMIT_HEADER.removesuffix("source_ts_ms"),
        }
    )
    for n, table in enumerate(source.tables):
        schema, name = table.table.split(".")
        route = f"route{n}"
        transforms.append(route)
        config[f"transforms.{route}.type"] = "org.apache.kafka.connect.transforms.RegexRouter"
        config[f"transforms.{route}.regex"] = re.escape(f"{prefix}.{schema}.{name}")
        config[f"transforms.{route}.replacement"] = table.topic
    # The key of every table is a one-column struct {key_column: value}: take the value out of it.
    for n, table in enumerate(source.tables):
        extract = f"key{n}"
        transforms.append(extract)
        config[f"transforms.{extract}.type"] = "org.apache.kafka.connect.transforms.ExtractField$Key"
        config[f"transforms.{extract}.field"] = table.key_column
        config[f"transforms.{extract}.predicate"] = f"is{n}"
        config[f"predicates.is{n}.type"] = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
        config[f"predicates.is{n}.pattern"] = re.escape(table.topic)
    config["predicates"] = ",".join(f"is{n}" for n in range(len(source.tables)))
    config["transforms"] = ",".join(transforms)
    return config
