"""Everything the exporter reads from Kafka, through kafka-python; used only by the background loop.

- Consumer groups and their committed offsets (admin API: ListGroups, OffsetFetch).
- Which partitions exist, and their earliest and latest offsets (Metadata, ListOffsets).
- The timestamp of the record at a given offset: one consumer assigned to the partitions asked for,
  seeks to each offset and polls until every partition has returned its first record (or a time budget runs
  out). A record may be gone (compaction, a transaction marker): the next record's timestamp is taken.
- Commit times per (group, topic, partition) from the `__consumer_offsets` log, read from its end at start-up
  onwards: each OffsetCommit record (key versions 0 and 1: group, topic, partition) counts as a commit at the
  record's timestamp. This is how Burrow tells a consumer that commits the same offset (STALL) from one that
  stopped committing (STOP); it needs Read on that internal topic.

The reader keeps its clients between collections and closes them after any failure, so the next collection
reconnects from scratch (a restarted broker is picked up without restarting the exporter).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.protocol.consumer import OffsetSpec

from monitoring.lag_exporter.config import ExporterConfig

log = logging.getLogger(__name__)

TP = tuple[str, int]
COMMIT_LOG_TOPIC = "__consumer_offsets"
_CONSUMER_GROUP_TYPES = (None, "", "classic", "consumer")
_CONSUMER_PROTOCOLS = ("", "consumer")


class KafkaReader:
    """Reads groups, offsets, record timestamps and commit times; one instance per exporter."""

    def __init__(self, config: ExporterConfig, client_id: str = "streamstack-lag-exporter") -> None:
        self._config = config
        self._client_id = client_id
        self._timeout_ms = int(config.kafka_timeout * 1000)
        self._admin: KafkaAdminClient | None = None
        self._timestamps: KafkaConsumer | None = None
        self._commit_log: KafkaConsumer | None = None
        self._commit_times: dict[tuple[str, str, int], float] = {}
        self.cluster_id: str | None = None

    # -- connection ----------------------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self._config.bootstrap_servers,
            "client_id": self._client_id,
            "request_timeout_ms": self._timeout_ms,
            "reconnect_backoff_max_ms": 1000,
            **self._config.security.client_options(),
        }

    def admin(self) -> KafkaAdminClient:
        if self._admin is None:
            admin = KafkaAdminClient(bootstrap_timeout_ms=self._timeout_ms, **self._options())
            try:
                self.cluster_id = admin.describe_cluster()["cluster_id"]
            except BaseException:
                admin.close()
                raise
            self._admin = admin
        return self._admin

    def _consumer(self) -> KafkaConsumer:
        return KafkaConsumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=256 * 1024,
            allow_auto_create_topics=False,
            **self._options(),
        )

    def close(self) -> None:
        """Close every client; the next call reconnects."""
        for name in ("_admin", "_timestamps", "_commit_log"):
            client = getattr(self, name)
            setattr(self, name, None)
            if client is None:
                continue
            try:
                if isinstance(client, KafkaConsumer):
                    client.close(autocommit=False, timeout_ms=1000)
                else:
                    client.close()
            except Exception as error:  # closing a client of a dead broker may fail in many ways
                log.debug("closing %s failed: %s", name, error)

    # -- groups --------------------------------------------------------------------------------------------

    def list_groups(self) -> list[str]:
        """Ids of the consumer groups (classic and KIP-848 consumer groups; not share or connect groups)."""
        groups = self.admin().list_groups()
        return sorted(
            group["group_id"]
            for group in groups
            if group.get("group_type") in _CONSUMER_GROUP_TYPES
            and group.get("protocol_type", "") in _CONSUMER_PROTOCOLS
        )

    def committed_offsets(self, groups: Iterable[str]) -> tuple[dict[str, dict[TP, int]], list[str]]:
        """{group: {(topic, partition): committed offset}} for groups that exist, and the groups that failed.

        One request per coordinator for all groups; if that fails (one group deleted meanwhile fails the
        whole response), each group is asked on its own and the failing ones are reported.
        """
        wanted = list(groups)
        if not wanted:
            return {}, []
        admin = self.admin()
        try:
            return _offsets(admin.list_group_offsets(dict.fromkeys(wanted))), []
        except KafkaError as error:
            log.debug("fetching offsets of %d groups at once failed (%s); one by one", len(wanted), error)
        result: dict[str, dict[TP, int]] = {}
        failed: list[str] = []
        for group in wanted:
            try:
                result.update(_offsets(admin.list_group_offsets({group: None})))
            except KafkaError as error:
                log.warning("fetching committed offsets of group %s failed: %s", group, error)
                failed.append(group)
        return result, failed

    # -- partitions and offsets ----------------------------------------------------------------------------

    def partitions(self, topics: Iterable[str]) -> dict[str, set[int]]:
        """{topic: partition ids} for those of `topics` that exist."""
        admin = self.admin()  # connect even when there is nothing to ask: `up` means Kafka answered
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        result: dict[str, set[int]] = {}
        for topic in admin.describe_topics(wanted):  # a missing topic comes back with an error code
            if topic.get("error_code", 0) != 0:
                continue
            result[topic["name"]] = {partition["partition_index"] for partition in topic["partitions"]}
        return result

    def _list_offsets(self, tps: Iterable[TP], spec: OffsetSpec) -> dict[TP, int]:
        specs = {TopicPartition(topic, partition): spec for topic, partition in tps}
        if not specs:
            return {}
        answer = self.admin().list_partition_offsets(specs, timeout_ms=self._timeout_ms)
        return {(tp.topic, tp.partition): int(value.offset) for tp, value in answer.items()}

    def latest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._list_offsets(tps, OffsetSpec.LATEST)

    def earliest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._list_offsets(tps, OffsetSpec.EARLIEST)

    # -- record timestamps ---------------------------------------------------------------------------------

    def record_timestamps(self, wanted: Mapping[TP, int], budget: float) -> dict[TP, int]:
        """{tp: timestamp (ms) of the first record at or after the offset}, for the partitions answered within
        `budget` seconds. Partitions missing from the answer had no record in time."""
        if not wanted:
            return {}
        if self._timestamps is None:
            self._timestamps = self._consumer()
        consumer = self._timestamps
        partitions = {
            TopicPartition(topic, partition): offset for (topic, partition), offset in wanted.items()
        }
        consumer.assign(list(partitions))
        consumer.resume(*partitions)  # a partition kept from the previous call keeps its pause otherwise
        for tp, offset in partitions.items():
            consumer.seek(tp, offset)
        found: dict[TP, int] = {}
        deadline = time.monotonic() + budget
        while len(found) < len(partitions):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            batches = consumer.poll(timeout_ms=max(1, int(min(remaining, 0.5) * 1000)))
            for tp, records in batches.items():
                key = (tp.topic, tp.partition)
                if key in found:
                    continue
                for record in records:
                    if record.offset >= partitions[tp]:
                        found[key] = int(record.timestamp)
                        consumer.pause(tp)
                        break
        return found

    # -- commit log ----------------------------------------------------------------------------------------

    def commit_times(self, budget: float) -> dict[tuple[str, str, int], float]:
        """{(group, topic, partition): wall time (s) of the latest commit seen since start-up}.

        Reads `__consumer_offsets` from where the previous call stopped up to its end offsets as of now (at
        most `budget` seconds). The first call starts at the end of the log, so commits made before the
        exporter started are not known.
        """
        if self._commit_log is None:
            consumer = self._consumer()
            try:
                ids = consumer.partitions_for_topic(COMMIT_LOG_TOPIC) or set()
                partitions = [TopicPartition(COMMIT_LOG_TOPIC, p) for p in sorted(ids)]
                consumer.assign(partitions)
                consumer.seek_to_end(*partitions)
                for tp in partitions:  # resolve the positions now, not at the next poll
                    consumer.position(tp, timeout_ms=self._timeout_ms)
            except BaseException:
                consumer.close(autocommit=False, timeout_ms=1000)
                raise
            self._commit_log = consumer
        consumer = self._commit_log
        partitions = list(consumer.assignment())
        end = consumer.end_offsets(partitions, timeout_ms=self._timeout_ms)
        deadline = time.monotonic() + budget
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for records in consumer.poll(timeout_ms=max(1, int(min(remaining, 0.5) * 1000))).values():
                for record in records:
                    parsed = parse_commit_key(record.key) if record.value is not None else None
                    if parsed is not None and self._config.groups(parsed[0]):
                        at = record.timestamp / 1000.0
                        if at > self._commit_times.get(parsed, 0.0):
                            self._commit_times[parsed] = at
        return dict(self._commit_times)

    def forget_commits_before(self, cutoff: float) -> None:
        """Drop commit times older than `cutoff` (they no longer matter for any window)."""
        self._commit_times = {key: at for key, at in self._commit_times.items() if at >= cutoff}


def _offsets(answer: Mapping[str, Mapping[Any, Any]]) -> dict[str, dict[TP, int]]:
    return {
        group: {
            (tp.topic, tp.partition): int(meta.offset) for tp, meta in offsets.items() if meta.offset >= 0
        }
        for group, offsets in answer.items()
    }


def parse_commit_key(key: bytes | None) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an OffsetCommit key of `__consumer_offsets`; None for other records.

    Key versions 0 and 1 are offset commits: int16 version, string group, string topic, int32 partition
    (strings are an int16 length then UTF-8). Version 2 is group metadata; later versions are KIP-848 and
    share-group records.
    """
    if key is None or len(key) < 2:
        return None
    try:
        (version,) = struct.unpack_from(">h", key, 0)
        if version not in (0, 1):
            return None
        position = 2
        strings = []
        for _ in range(2):
            (length,) = struct.unpack_from(">h", key, position)
            position += 2
            strings.append(key[position : position + length].decode())
            position += length
        (partition,) = struct.unpack_from(">i", key, position)
    except (struct.error, UnicodeDecodeError):
        return None
    return strings[0], strings[1], int(partition)
