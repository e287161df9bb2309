"""The CDC source of the catalogue (`sources.cdc`, contracts/cdc.py): what it reads, what it refuses by name,
and the Debezium connector config it builds."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from contracts.cdc import CONNECTOR_CLASS, cdc_source, debezium_connector_config
from contracts.pipeline import CATALOGUE_PATH, CatalogueError, load_pipeline, parse_pipeline


def _document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(CATALOGUE_PATH.read_text(encoding="utf-8"))
    return document


def test_the_catalogue_captures_both_changelogs_onto_the_topics_the_jobs_read() -> None:
    pipeline = load_pipeline()
    source = cdc_source(pipeline)
    read_by_jobs = {topic for job in pipeline.jobs for topic in job.topics_of(job.reads)}
    assert set(source.topics) <= read_by_jobs
    assert {pipeline.producer(p).topic for p in pipeline.job("user-view").producers} <= set(source.topics)
    for topic in source.connect.internal_topics:
        assert pipeline.topic(topic).cleanup_policy == "compact"
    assert pipeline.topic(source.connect.config_storage_topic).partitions == 1


def test_the_connector_config_routes_each_table_to_its_topic_with_its_key_and_the_row_after() -> None:
    source = cdc_source()
    config = debezium_connector_config(
        source, hostname="db.example", port=6543, user="cdc", password="${secrets:ns/pg:password}"
    )
    assert config["connector.class"] == CONNECTOR_CLASS
    assert config["plugin.name"] == "pgoutput"
    assert config["database.password"] == "${secrets:ns/pg:password}"
    assert (config["database.hostname"], config["database.port"]) == ("db.example", "6543")
    assert config["slot.name"] == source.slot_name
    assert config["publication.name"] == source.publication_name
    assert config["table.include.list"].split(",") == [table.table for table in source.tables]
    assert all(isinstance(value, str) for value in config.values())
    transforms = config["transforms"].split(",")
    assert transforms[0] == "unwrap"
    assert config["transforms.unwrap.type"] == "io.debezium.transforms.ExtractNewRecordState"
    assert config["transforms.unwrap.delete.tombstone.handling.mode"] == "delete-to-tombstone"
    # Every table: Debezium's topic is renamed to the changelog topic, then the key struct is unwrapped on it.
    for table in source.tables:
        schema, name = table.table.split(".")
        [route] = [t for t in transforms if config.get(f"transforms.{t}.replacement") == table.topic]
        assert re.fullmatch(config[f"transforms.{route}.regex"], f"{config['topic.prefix']}.{schema}.{name}")
        [key] = [t for t in transforms if config.get(f"transforms.{t}.field") == table.key_column]
        assert transforms.index(route) < transforms.index(key)
        predicate = config[f"transforms.{key}.predicate"]
        assert re.fullmatch(config[f"predicates.{predicate}.pattern"], table.topic)
        assert not any(
            re.fullmatch(config[f"predicates.{predicate}.pattern"], other.topic)
            for other in source.tables
            if other != table
        )
    assert config["key.converter"] == "org.apache.kafka.connect.storage.StringConverter"
    assert config["value.converter.schemas.enable"] == "false"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["sources"]["cdc"]["tables"]["public.users"].update(topic="people"),
            "sources.cdc.tables.public.users.topic: people is not a topic",
        ),
        (
            lambda d: d["sources"]["cdc"]["tables"]["public.users"].update(topic="page-views"),
            "sources.cdc.tables.public.users.topic: page-views is not compacted",
        ),
        (
            lambda d: d["sources"]["cdc"]["tables"]["public.users"].pop("keyColumn"),
            "sources.cdc.tables.public.users.keyColumn: required",
        ),
        (
            lambda d: d["sources"]["cdc"]["tables"].update({"users": {"topic": "users", "keyColumn": "id"}}),
            "sources.cdc.tables.users: not a schema-qualified table name",
        ),
        (lambda d: d["sources"]["cdc"].update(slotName="Bad-Slot"), "sources.cdc.slotName: 'Bad-Slot'"),
        (lambda d: d["sources"]["cdc"].update(snapshot="never"), "sources.cdc.snapshot: unknown field"),
        (lambda d: d["sources"].update(mysql={}), "sources.mysql: unknown field"),
        (
            lambda d: d["sources"]["cdc"]["connect"].update(offsetStorageTopic="dead-letters"),
            "sources.cdc.connect.offsetStorageTopic: dead-letters must have cleanupPolicy compact",
        ),
        (
            lambda d: d["sources"]["cdc"]["connect"].update(statusStorageTopic="connect-configs"),
            "sources.cdc.connect: the three storage topics must differ",
        ),
    ],
)
def test_a_cdc_mistake_fails_on_load_naming_the_field(mutate: Any, message: str) -> None:
    document = copy.deepcopy(_document())
    mutate(document)
    with pytest.raises(CatalogueError, match=re.escape(f"pipeline.yaml: {message}")):
        parse_pipeline(document)


def test_a_catalogue_without_cdc_says_so_when_asked_for_it() -> None:
    document = _document()
    del document["sources"]
    with pytest.raises(CatalogueError, match=r"sources\.cdc: required"):
        cdc_source(parse_pipeline(document))
