"""Commit each completed batch's end offsets to a "shadow" consumer group.

Spark keeps its Kafka positions in the checkpoint and never commits them, so Burrow, kafka_exporter and
`kafka-consumer-groups.sh` see nothing. After every batch we commit the batch's end offsets (the next offset
to read, the same meaning as a Kafka commit) to a group that no consumer joins, so any Kafka tool sees where
the query is. Commits run on a worker thread and coalesce: a slow broker never delays Spark's listener.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]


class ShadowGroupCommitter:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        client_id: str = "streamstack-shadow",
        retry_seconds: float = 2.0,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.group_id = group_id
        self._retry_seconds = retry_seconds
        self._bootstrap_servers = bootstrap_servers
        self._client_id = client_id
        self._client_options = dict(client_options or {})
        self._pending: Offsets | None = None
        self._committing = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"shadow-group-{group_id}", daemon=True)
        self._thread.start()

    def submit(self, offsets: Offsets) -> None:
        """Queue these end offsets; a newer submission replaces one not yet committed."""
        with self._condition:
            self._pending = offsets
            self._condition.notify_all()

    def flush(self, timeout_seconds: float) -> bool:
        """Wait until what was submitted is committed; False after `timeout_seconds` if it is not."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._pending is None and not self._committing, timeout=timeout_seconds
            )

    def _run(self) -> None:
        consumer: KafkaConsumer | None = None
        while True:  # a daemon thread: it ends with the driver
            with self._condition:
                while self._pending is None:
                    self._condition.wait()
                offsets, self._pending = self._pending, None
                self._committing = True
            if offsets:
                consumer = self._commit(consumer, offsets)
            with self._condition:
                self._committing = False
                if offsets and consumer is None and self._pending is None:
                    # Keep the failed offsets unless newer ones arrived meanwhile, and try again: the
                    # query may not report again for a long time, and the group must still catch up.
                    self._pending = offsets
                self._condition.notify_all()
            if offsets and consumer is None:
                time.sleep(self._retry_seconds)

    def _commit(self, consumer: KafkaConsumer | None, offsets: Offsets) -> KafkaConsumer | None:
        try:
            if consumer is None:
                consumer = KafkaConsumer(
                    bootstrap_servers=self._bootstrap_servers,
                    group_id=self.group_id,
                    client_id=self._client_id,
                    enable_auto_commit=False,
                    **self._client_options,
                )
            consumer.commit(
                {
                    TopicPartition(topic, int(partition)): OffsetAndMetadata(offset, "", -1)
                    for topic, partitions in offsets.items()
                    for partition, offset in partitions.items()
                }
            )
        except KafkaError as error:
            log.warning("committing offsets to shadow group %s failed: %s", self.group_id, error)
            if consumer is not None:
                consumer.close(autocommit=False)
            return None
        return consumer
