"""Everything the exporter reads from Kafka, through kafka-python; used only by the background loop.

- Consumer groups and their committed offsets (admin API: ListGroups, OffsetFetch).
- Which partitions exist, and their earliest and latest offsets (Metadata, ListOffsets).
- The timestamp of the record at a given offset (or at several offsets of a partition): Fetch requests to
  the partitions' leaders, up to 1,000 partitions each (each at its offset, at most 64 KiB each, 4 MiB per
  response; a partition whose batch is larger is asked again for the whole batch), the records decoded only
  up to the offsets asked for, and fetched again from the next batch or the next offset asked for when the
  answer held no such record, until every offset is answered or a time budget runs out. A record may be
  gone (compaction, a transaction marker): the next record's timestamp is taken.
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.protocol.consumer import FetchRequest, OffsetSpec
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch

from monitoring.lag_exporter.config import ExporterConfig

log = logging.getLogger(__name__)

TP = tuple[str, int]
COMMIT_LOG_TOPIC = "__consumer_offsets"
_CONSUMER_GROUP_TYPES = (None, "", "classic", "consumer")
_CONSUMER_PROTOCOLS = ("", "consumer")


class _RedactSecrets(logging.Filter):
    """kafka-python's admin client logs its whole configuration at DEBUG, the SASL password included."""

    SECRETS = ("sasl_plain_password", "ssl_password")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, Mapping) and any(record.args.get(key) for key in self.SECRETS):
            record.args = {**record.args, **{key: "<redacted>" for key in self.SECRETS if key in record.args}}
        return True


_REDACT_SECRETS = _RedactSecrets()


class _AdminClient(KafkaAdminClient):  # type: ignore[misc]
    """kafka-python 3.0 starts the admin client's IO thread before bootstrapping in the constructor and leaves
    it running when bootstrapping fails (broker down, wrong password): without this, every failed collection
    would leak a thread and its sockets."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            for part in ("_client", "_net"):
                if getattr(self, part, None) is not None:
                    getattr(self, part).close()
            raise


class KafkaReader:
    """Reads groups, offsets, record timestamps and commit times; one instance per exporter."""

    def __init__(self, config: ExporterConfig, client_id: str = "streamstack-lag-exporter") -> None:
        self._config = config
        self._client_id = client_id
        self._timeout_ms = int(config.kafka_timeout * 1000)
        logging.getLogger("kafka.admin.client").addFilter(_REDACT_SECRETS)  # idempotent
        self._admin: KafkaAdminClient | None = None
        self._leaders: dict[TP, int] = {}  # leader node id per partition, from the latest partitions()
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
            admin = _AdminClient(bootstrap_timeout_ms=self._timeout_ms, **self._options())
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
        for name in ("_admin", "_commit_log"):
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
        leaders: dict[TP, int] = {}
        for topic in admin.describe_topics(wanted):  # a missing topic comes back with an error code
            if topic.get("error_code", 0) != 0:
                continue
            name = topic["name"]
            result[name] = {partition["partition_index"] for partition in topic["partitions"]}
            leaders.update(
                ((name, partition["partition_index"]), partition["leader_id"])
                for partition in topic["partitions"]
            )
        self._leaders = leaders
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
        `budget` seconds. Partitions missing from the answer had no record in time (or no known leader)."""
        found = self.timestamps_at({tp: (offset,) for tp, offset in wanted.items()}, budget)
        return {(topic, partition): timestamp for (topic, partition, _), timestamp in found.items()}

    def timestamps_at(
        self, wanted: Mapping[TP, Iterable[int]], budget: float
    ) -> dict[tuple[str, int, int], int]:
        """{(topic, partition, offset): timestamp (ms) of the first record at or after the offset}, for the
        offsets answered within `budget` seconds; several offsets of a partition are read in one pass when
        their records come in the same fetch."""
        if not wanted:
            return {}
        admin = self.admin()
        unknown = {topic for topic, partition in wanted if (topic, partition) not in self._leaders}
        if unknown:  # not among the partitions() of this collection: ask for their leaders now
            known = self._leaders
            self.partitions(unknown)
            self._leaders = {**known, **self._leaders}
        pending = {
            tp: sorted(set(offsets)) for tp, offsets in wanted.items() if self._leaders.get(tp, -1) >= 0
        }
        pending = {tp: offsets for tp, offsets in pending.items() if offsets}
        position = {tp: offsets[0] for tp, offsets in pending.items()}  # where to fetch next
        fetch_bytes: dict[TP, int] = {}  # partitions whose batch is larger than _PARTITION_FETCH_BYTES
        found: dict[tuple[str, int, int], int] = {}
        deadline = time.monotonic() + budget
        while position:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            requests = _fetch_requests(position, self._leaders, fetch_bytes)
            for response in admin._manager.run(_send_all, admin, requests, remaining_ms):
                for topic in response.responses:
                    for partition in topic.partitions:
                        tp = (topic.topic, partition.partition_index)
                        if tp not in position:
                            continue
                        offset = position.pop(tp)
                        if partition.error_code != 0:
                            continue  # e.g. not the leader any more: asked again next collection
                        data = partition.records or b""
                        if not data:
                            if offset < partition.high_watermark:
                                position[tp] = offset  # the response was full before this partition's turn
                            continue
                        scan = scan_records(data, pending[tp])
                        for at, timestamp in scan.timestamps.items():
                            found[(*tp, at)] = timestamp
                        rest = pending[tp] = [at for at in pending[tp] if at not in scan.timestamps]
                        if not rest:
                            continue
                        if scan.needs_bytes is not None:
                            fetch_bytes[tp] = scan.needs_bytes
                            position[tp] = offset
                        elif max(scan.resume_at or 0, rest[0]) > offset:
                            position[tp] = max(scan.resume_at or 0, rest[0])
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
                ids = consumer.partitions_for_topic(COMMIT_LOG_TOPIC)
                if not ids:
                    # Kafka creates the topic with the first group's first commit: no commits yet.
                    consumer.close(autocommit=False, timeout_ms=1000)
                    return {}
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


_PARTITION_FETCH_BYTES = 64 * 1024
# A response's records are held (and decoded by kafka-python) all at once: bounded so that reading the
# timestamps of 10,000 partitions costs a few MB at a time, not the whole answer's worth.
_RESPONSE_FETCH_BYTES = 4 * 1024 * 1024
_PARTITIONS_PER_FETCH = 1000
_FETCH_MAX_VERSION = 12  # the last version naming topics (13 and later name them by topic id)
_LENGTH = struct.Struct(">qi")  # every record batch (any format) starts with its base offset and length
_LENGTH_SIZE = _LENGTH.size
_MAGIC_AT = 16
# Message format v2: base offset, length, leader epoch, magic, crc, attributes, last offset delta, base and
# max timestamp, producer id and epoch, base sequence, record count; then the records.
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_COMPRESSION, _LOG_APPEND_TIME, _CONTROL = 0x07, 0x08, 0x20
_OffsetTime = tuple[int, int]


@dataclass(frozen=True)
class Scan:
    """What the records fetched for one partition told."""

    timestamps: dict[int, int]  # offset asked for -> timestamp of the first data record at or after it
    resume_at: int | None = None  # the offset after the last complete batch fetched
    needs_bytes: int | None = None  # no complete batch: the first one is this long


def _varint(data: bytes, position: int) -> tuple[int, int]:
    """A zig-zag varint at `position`: (value, position after it)."""
    raw = shift = 0
    while True:
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


def _v2_records(
    data: bytes, start: int, end: int, base_offset: int, base_timestamp: int
) -> Iterator[_OffsetTime]:
    """(offset, timestamp) of the records of an uncompressed v2 batch, decoding only those two fields."""
    position = start
    while position < end:
        length, body = _varint(data, position)
        position = body + length
        timestamp_delta, at = _varint(data, body + 1)  # after the attributes byte
        offset_delta, _ = _varint(data, at)
        yield base_offset + offset_delta, base_timestamp + timestamp_delta


def _parsed_records(batch: bytes, magic: int) -> Iterator[_OffsetTime]:
    """(offset, timestamp) of the records of a compressed or pre-v2 batch, decoded by kafka-python."""
    parsed = DefaultRecordBatch(batch) if magic >= 2 else LegacyRecordBatch(batch, magic)
    for record in parsed:
        yield record.offset, record.timestamp


def scan_records(data: bytes, offsets: Sequence[int]) -> Scan:
    """For each of `offsets` (ascending), the timestamp of the first data record at or after it in fetched
    record batches. Uncompressed v2 batches (the usual) are read here, decoding only each record's offset
    and timestamp, and only up to the last offset asked for; other batches by kafka-python. Control batches
    (transaction markers) are skipped; a partial batch at the end (the fetch limit) is ignored."""
    found: dict[int, int] = {}
    index, count = 0, len(offsets)
    resume_at: int | None = None
    position, size = 0, len(data)
    while index < count and position + _LENGTH_SIZE <= size:
        end = position + _LENGTH_SIZE + _LENGTH.unpack_from(data, position)[1]
        if end > size:
            if position == 0:
                return Scan(found, needs_bytes=end)
            break
        magic = data[position + _MAGIC_AT]
        records: Iterator[_OffsetTime]
        if magic >= 2:
            base, _, _, _, _, attributes, last_delta, base_time, max_time, *_ = _V2_HEADER.unpack_from(
                data, position
            )
            next_offset = base + last_delta + 1
            if next_offset <= offsets[index] or attributes & _CONTROL:
                resume_at, position = max(resume_at or 0, next_offset), end
                continue
            if attributes & _COMPRESSION:
                records = _parsed_records(data[position:end], magic)
            else:
                records = _v2_records(data, position + _V2_HEADER.size, end, base, base_time)
            log_append_time = max_time if attributes & _LOG_APPEND_TIME else None
        else:
            next_offset = 0
            records = _parsed_records(data[position:end], magic)
            log_append_time = None
        for offset, timestamp in records:
            next_offset = max(next_offset, offset + 1)
            while index < count and offset >= offsets[index]:
                found[offsets[index]] = log_append_time if log_append_time is not None else timestamp
                index += 1
            if index == count:
                break
        resume_at, position = max(resume_at or 0, next_offset), end
    return Scan(found, resume_at=resume_at)


def _fetch_requests(
    position: Mapping[TP, int], leaders: Mapping[TP, int], fetch_bytes: Mapping[TP, int]
) -> list[tuple[int, Any]]:
    """One FetchRequest per leader. A partition needing more than the usual bytes goes first: the broker
    returns the first batch of the first partition whole, whatever the limits."""
    by_leader: dict[int, dict[str, list[Any]]] = {}
    counts: dict[int, int] = {}
    for tp in sorted(position, key=lambda tp: tp not in fetch_bytes):
        topic, partition = tp
        leader = leaders[tp]
        if counts.get(leader, 0) >= _PARTITIONS_PER_FETCH:
            continue  # the next request
        counts[leader] = counts.get(leader, 0) + 1
        by_leader.setdefault(leader, {}).setdefault(topic, []).append(
            FetchRequest.FetchTopic.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=position[tp],
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=fetch_bytes.get(tp, _PARTITION_FETCH_BYTES),
            )
        )
    return [
        (
            leader,
            FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=_RESPONSE_FETCH_BYTES,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,  # no fetch session
                topics=[
                    FetchRequest.FetchTopic(topic=topic, partitions=parts) for topic, parts in topics.items()
                ],
                forgotten_topics_data=[],
                rack_id="",
                min_version=4,
                max_version=_FETCH_MAX_VERSION,
            ),
        )
        for leader, topics in by_leader.items()
    ]


async def _send_all(admin: KafkaAdminClient, requests: list[tuple[int, Any]], timeout_ms: int) -> list[Any]:
    """Send every request at once (one per leader), then wait for the answers. kafka-python 3.0 has no public
    call for a raw request: this goes through the admin client's connection manager, as its own methods do
    (kafka-python is pinned; the Kafka tests exercise this path)."""
    pending = [
        admin._manager.send(request, node_id=leader, request_timeout_ms=timeout_ms)
        for leader, request in requests
    ]
    return [await answer for answer in pending]


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
