"""A shadow group's commits as a stopping driver leaves them (jobs.common.shadow_group): `flush` returns once
the last submitted offsets are in Kafka, or says it could not."""

from __future__ import annotations

import time

from jobs.common.progress import ShadowGroups
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from tests.kafka_helpers import group_offsets


def test_flush_returns_once_the_last_offsets_are_committed(kafka: LocalKafka) -> None:
    kafka.create_topics([TopicSpec("shadow-flush", partitions=2)])
    groups = ShadowGroups(kafka.bootstrap_servers, "streamstack-flush-")
    for batch in range(1, 4):
        groups.submit("query", {"shadow-flush": {"0": 10 * batch, "1": 20 * batch}})

    assert groups.flush(30.0)
    assert group_offsets(kafka, "streamstack-flush-query") == {0: 30, 1: 60}


def test_flush_gives_up_after_its_timeout_when_kafka_is_unreachable() -> None:
    groups = ShadowGroups(f"127.0.0.1:{free_port()}", "streamstack-flush-")
    groups.submit("query", {"shadow-flush": {"0": 1}})

    started = time.monotonic()
    assert not groups.flush(1.5)
    assert 1.4 <= time.monotonic() - started < 5
