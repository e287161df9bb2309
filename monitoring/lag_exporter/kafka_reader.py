"""Everything the exporter reads from Kafka (kafka-python and librdkafka); used only by the background loop.

- Consumer groups (kafka-python's admin API: ListGroups) and their committed offsets: OffsetFetch requests
  for up to 50 groups each, to the groups' coordinators, all sent at once (version 8, Kafka 3.0 and later;
  else through kafka-python's admin API).
- Which partitions exist and their leaders (Metadata), through librdkafka (confluent-kafka's AdminClient):
  one request for all topics, decoded in C outside the GIL, where kafka-python spent over a second of Python
  at 50,000 partitions (holding the GIL that scrapes wait for). The same request, so the same ACL (Describe
  on the topics). The loop may start it ahead (`read_partitions_ahead`), beside the groups' offsets.
- The partitions' earliest and latest offsets: ListOffsets requests for both, one per leader and spec, all
  sent at once through kafka-python's connections, to the leaders librdkafka's metadata named (kafka-python's
  `list_partition_offsets` asks for the metadata of every topic again, in Python, and waits for one leader
  after the other: at 50,000 partitions 2.2-2.7 s of 4.9 s of a warm collection). Partitions without a known
  leader or answered with an error are asked again through `list_partition_offsets`, which retries a moved
  leader and raises what it raised before (e.g. a topic deleted meanwhile).
- The timestamp of the record at a given offset (or at several offsets of a partition): Fetch requests to
  the partitions' leaders, up to 1,000 partitions each (each at its offset, at most 64 KiB each, 4 MiB per
  response; a partition whose batch is larger is asked again for the whole batch), two per leader in flight
  (at most six), each answer taken as it comes, the records decoded only up to the offsets asked for, and
  fetched again from the next batch or the next offset asked for when the answer held no such record, until
  every offset is answered or a time budget runs out. A record may be gone (compaction, a transaction
  marker): the next record's timestamp is taken.
- Commit times per (group, topic, partition) from the `__consumer_offsets` log, read from its end at start-up
  onwards: each OffsetCommit record (key versions 0 and 1: group, topic, partition) counts as a commit at the
  record's timestamp. This is how Burrow tells a consumer that commits the same offset (STALL) from one that
  stopped committing (STOP); it needs Read on that internal topic.

The reader keeps its clients between collections and closes them after any failure, so the next collection
reconnects from scratch (a restarted broker is picked up without restarting the exporter).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from types import MappingProxyType
from typing import Any

from confluent_kafka.admin import AdminClient as RdAdminClient  # type: ignore[import-untyped]
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.protocol.consumer import OffsetSpec

from monitoring.lag_exporter.config import ExporterConfig
from monitoring.lag_exporter.record_batches import (
    TP,
    FetchAnswer,
    GroupOffsetsAnswer,
    fetch_requests,
    group_offsets_request,
    list_offsets_request,
    parse_commit_key,
    scan_records,
)

log = logging.getLogger(__name__)

COMMIT_LOG_TOPIC = "__consumer_offsets"
_CONSUMER_GROUP_TYPES = (None, "", "classic", "consumer")
_CONSUMER_PROTOCOLS = ("", "consumer")
_GROUPS_PER_OFFSET_FETCH = 50
_FETCHES_IN_FLIGHT_PER_LEADER = 2
_MAX_FETCHES_IN_FLIGHT = 6  # 24 MiB of answers at most, on a cluster of 3 brokers or 30


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
        self._rd_admin: Any = None  # librdkafka's admin client, for metadata
        self._leaders: dict[TP, int] = {}  # leader node id per partition, from the latest partitions()
        self._metadata_ahead: Future[Any] | None = None  # read_partitions_ahead's, for the next partitions()
        self._commit_log: KafkaConsumer | None = None
        # the partitions of the commit log in the metadata of the latest partitions() (none: not seen), so
        # that its consumer need not ask for the metadata of every topic (decoded in Python)
        self._commit_log_partitions: list[int] = []
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

    def rd_admin(self) -> Any:
        """librdkafka's admin client with the same address and login (created on first use)."""
        if self._rd_admin is None:
            self._rd_admin = RdAdminClient(
                _librdkafka_options(self._options(), self._config.log_level.upper() == "DEBUG")
            )
        return self._rd_admin

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
        self._rd_admin = None  # librdkafka's client has no close(): released with its last reference
        self._metadata_ahead = None  # may still run: its answer is dropped, its thread ends in the timeout
        self._commit_log_partitions = []  # the next cluster may be another one
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

        One OffsetFetch request (version 8, Kafka 3.0 and later) per coordinator and
        `_GROUPS_PER_OFFSET_FETCH` groups, all sent at once, each answer decoded into plain offsets as it
        comes (`GroupOffsetsAnswer`): kafka-python's `list_group_offsets` waited for one coordinator after
        the other and made objects per partition (0.5-0.7 s of a first collection at 500 groups x 300
        partitions). A group answered with an error, and every group when that fails as a whole (an older
        broker), goes through `list_group_offsets`, up to `_GROUPS_PER_OFFSET_FETCH` at a time; if that
        fails (one group deleted meanwhile fails the whole answer), each group on its own, and the failing
        ones are reported.
        """
        wanted = list(groups)
        if not wanted:
            return {}, []
        admin = self.admin()
        result: dict[str, dict[TP, int]] = {}
        again: list[str] = []
        try:
            answers = admin._manager.run(_group_offsets, admin, wanted, self._timeout_ms)
        except KafkaError as error:
            log.debug("fetching offsets of groups at once failed (%s): through list_group_offsets", error)
            answers, again = [], wanted
        for answer in answers:
            for group, error_code, offsets in answer.groups:
                if error_code:
                    again.append(group)
                else:
                    result[group] = offsets
        failed: list[str] = []
        for start in range(0, len(again), _GROUPS_PER_OFFSET_FETCH):
            chunk = again[start : start + _GROUPS_PER_OFFSET_FETCH]
            try:
                result.update(_offsets(admin.list_group_offsets(dict.fromkeys(chunk))))
                continue
            except KafkaError as error:
                log.debug("fetching offsets of %d groups at once failed (%s); one by one", len(chunk), error)
            for group in chunk:
                try:
                    result.update(_offsets(admin.list_group_offsets({group: None})))
                except KafkaError as error:
                    log.warning("fetching committed offsets of group %s failed: %s", group, error)
                    failed.append(group)
        return result, failed

    # -- partitions and offsets ----------------------------------------------------------------------------

    def read_partitions_ahead(self) -> None:
        """Start reading the metadata the next `partitions()` answers from, in a thread of its own: the loop
        calls this before it reads the groups' offsets, which the metadata does not depend on (librdkafka
        waits for the answer and decodes it outside the GIL; 0.2-0.3 s of a first collection at 50,000
        partitions, now beside the groups'). Connects first: a cluster that does not answer, or refuses the
        login, fails the call here, before a thread and a librdkafka client (threads of its own) are started
        that would outlive the failed collection."""
        self.admin()
        self._metadata_ahead = _in_thread(self._metadata, "lag-metadata")

    def _metadata(self) -> Any:
        # One Metadata request for every topic (librdkafka asks for all at once when given none); topics
        # we may not Describe, or that are missing, are not in the answer or come with an error.
        return self.rd_admin().list_topics(timeout=self._config.kafka_timeout)

    def partitions(self, topics: Iterable[str]) -> dict[str, set[int]]:
        """{topic: partition ids} for those of `topics` that exist."""
        # taken even when not used: metadata read ahead serves this call only, never a later one
        ahead, self._metadata_ahead = self._metadata_ahead, None
        self.admin()  # connect even when there is nothing to ask: `up` means Kafka answered
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        metadata = ahead.result() if ahead is not None else self._metadata()
        commit_log = metadata.topics.get(COMMIT_LOG_TOPIC)
        self._commit_log_partitions = (
            sorted(commit_log.partitions) if commit_log is not None and commit_log.error is None else []
        )
        result: dict[str, set[int]] = {}
        leaders: dict[TP, int] = {}
        for name in wanted:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                continue
            result[name] = set(topic.partitions)
            leaders.update(((name, index), partition.leader) for index, partition in topic.partitions.items())
        self._leaders = leaders
        return result

    def _list_offsets(self, tps: Iterable[TP], spec: OffsetSpec) -> dict[TP, int]:
        # kafka-python, not librdkafka: at 10,000 partitions librdkafka's ListOffsets took 1.0-1.5 s where
        # kafka-python took 0.36-0.43 s (README, Benchmarks)
        specs = {TopicPartition(topic, partition): spec for topic, partition in tps}
        if not specs:
            return {}
        answer = self.admin().list_partition_offsets(specs, timeout_ms=self._timeout_ms)
        return {(tp.topic, tp.partition): int(value.offset) for tp, value in answer.items()}

    def latest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._list_offsets(tps, OffsetSpec.LATEST)

    def earliest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._list_offsets(tps, OffsetSpec.EARLIEST)

    def latest_and_earliest_offsets(self, tps: Iterable[TP]) -> tuple[dict[TP, int], dict[TP, int]]:
        """The latest and the earliest offsets of `tps` (the answers of `latest_offsets` and
        `earliest_offsets`): one ListOffsets request per leader and spec, all sent at once, to the leaders of
        the latest `partitions()`. What that does not answer (no known leader, an error code, a failed
        request) goes through kafka-python's `list_partition_offsets` as before, with its retries and its
        errors."""
        wanted = list(tps)
        if not wanted:
            return {}, {}
        admin = self.admin()
        leaders = self._leaders
        by_leader: dict[int, dict[str, list[int]]] = {}
        unrouted: list[TP] = []
        for topic, partition in wanted:
            leader = leaders.get((topic, partition), -1)
            if leader < 0:
                unrouted.append((topic, partition))
            else:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        latest: dict[TP, int] = {}
        earliest: dict[TP, int] = {}
        targets = [(latest, OffsetSpec.LATEST), (earliest, OffsetSpec.EARLIEST)]
        requests = [
            (leader, list_offsets_request(topics, spec))
            for _, spec in targets
            for leader, topics in by_leader.items()
        ]
        found_in = [found for found, _ in targets for _ in by_leader]  # where each request's answers go
        try:
            responses = admin._manager.run(_send_all, admin, requests, self._timeout_ms) if requests else []
        except KafkaError as error:
            log.debug("ListOffsets to the leaders failed (%s): through list_partition_offsets", error)
            responses, found_in, unrouted = [], [], wanted
        for found, answer in zip(found_in, responses, strict=True):
            found.update(
                ((topic, partition), offset)
                for topic, partition, error_code, offset in answer.partitions
                if error_code == 0
            )
        rest = [tp for tp in wanted if tp not in latest or tp not in earliest] if responses else unrouted
        if rest:
            latest.update(self._list_offsets(rest, OffsetSpec.LATEST))
            earliest.update(self._list_offsets(rest, OffsetSpec.EARLIEST))
        return latest, earliest

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

        def take(answer: FetchAnswer) -> None:
            for topic, partition, error_code, high_watermark, data in answer.partitions:
                tp = (topic, partition)
                if tp not in position:
                    continue
                offset = position.pop(tp)
                if error_code != 0:
                    continue  # e.g. not the leader any more: asked again next collection
                if not data:
                    if offset < high_watermark:
                        position[tp] = offset  # the response was full before this partition's turn
                    continue
                offsets = pending[tp]
                scan = scan_records(data, offsets)
                stamps = scan.timestamps
                for at, timestamp in stamps.items():
                    found[(topic, partition, at)] = timestamp
                if len(stamps) == len(offsets):  # each one answered (the usual): nothing more to fetch
                    continue
                rest = pending[tp] = [at for at in offsets if at not in stamps]
                if scan.needs_bytes is not None:
                    fetch_bytes[tp] = scan.needs_bytes
                    position[tp] = offset
                elif max(scan.resume_at or 0, rest[0]) > offset:
                    position[tp] = max(scan.resume_at or 0, rest[0])

        deadline = time.monotonic() + budget
        while position and time.monotonic() < deadline:
            # a partition asked again (more bytes, the next batch) is in the next pass's requests
            requests = fetch_requests(position, self._leaders, fetch_bytes)
            admin._manager.run(_send_windowed, admin, requests, deadline, _FETCHES_IN_FLIGHT_PER_LEADER, take)
        return found

    # -- commit log ----------------------------------------------------------------------------------------

    def commit_times(self, budget: float) -> Mapping[tuple[str, str, int], float]:
        """{(group, topic, partition): wall time (s) of the latest commit seen since start-up}: a read-only
        view of the reader's own dict (a copy took ~5 MB a collection at 150,000 group-partitions), valid
        until the next call of this or `forget_commits_before`.

        Reads `__consumer_offsets` from where the previous call stopped up to its end offsets as of now (at
        most `budget` seconds). The first call starts at the end of the log, so commits made before the
        exporter started are not known.
        """
        if self._commit_log is None:
            consumer = self._consumer()
            try:
                # from the metadata partitions() read, when it had them: kafka-python's partitions_for_topic
                # asks for the metadata of every topic and decodes it in Python (the consumer's set-up took
                # 0.45 s of a first collection at 50,000 partitions with it, 0.13 s without)
                ids = self._commit_log_partitions or consumer.partitions_for_topic(COMMIT_LOG_TOPIC)
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
        return MappingProxyType(self._commit_times)

    def forget_commits_before(self, cutoff: float) -> None:
        """Drop commit times older than `cutoff` (they no longer matter for any window): in place, where a
        new dict of the rest lived beside the old one."""
        times = self._commit_times
        for key in [key for key, at in times.items() if at < cutoff]:
            del times[key]


def _in_thread(function: Callable[[], Any], name: str) -> Future[Any]:
    """`function()` run in a new daemon thread: its result or its exception, in the future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(function())
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


async def _send_all(admin: KafkaAdminClient, requests: list[tuple[int, Any]], timeout_ms: int) -> list[Any]:
    """Send every request at once (one per leader), then wait for the answers. kafka-python 3.0 has no public
    call for a raw request: this goes through the admin client's connection manager, as its own methods do
    (kafka-python is pinned; the Kafka tests exercise this path)."""
    pending = [
        admin._manager.send(request, node_id=leader, request_timeout_ms=timeout_ms)
        for leader, request in requests
    ]
    return [await answer for answer in pending]


async def _group_offsets(
    admin: KafkaAdminClient, groups: list[str], timeout_ms: int
) -> list[GroupOffsetsAnswer]:
    """The committed offsets of `groups`: their coordinators found (kafka-python caches them), then one
    request per coordinator and `_GROUPS_PER_OFFSET_FETCH` groups, all sent at once."""
    coordinators = await admin._find_coordinator_ids(groups)
    by_coordinator: dict[int, list[str]] = {}
    for group in groups:
        by_coordinator.setdefault(coordinators[group], []).append(group)
    requests = [
        (coordinator, group_offsets_request(ids[start : start + _GROUPS_PER_OFFSET_FETCH]))
        for coordinator, ids in by_coordinator.items()
        for start in range(0, len(ids), _GROUPS_PER_OFFSET_FETCH)
    ]
    return await _send_all(admin, requests, timeout_ms)


async def _send_windowed(
    admin: KafkaAdminClient,
    requests: list[tuple[int, Any]],
    deadline: float,
    per_leader: int,
    take: Callable[[Any], None],
) -> None:
    """Send `requests` (the leaders in turn) keeping `per_leader` x leaders of them in flight, at most
    `_MAX_FETCHES_IN_FLIGHT` whatever the number of brokers (each answer may hold 4 MiB of records), and hand
    each answer to `take` as it comes (oldest first) while the brokers work on the next ones: at 50,000
    partitions, 17 passes of one request per leader, each waiting for the slowest, took 1.7 s. Requests
    not sent by `deadline` are not sent, and one that fails after it ends the reading, not the answers
    taken so far (the offsets not answered are asked again at a later collection)."""
    waiting = list(reversed(requests))
    in_flight: deque[Any] = deque()
    window = min(per_leader * len({leader for leader, _ in requests}), _MAX_FETCHES_IN_FLIGHT)
    while waiting or in_flight:
        while waiting and len(in_flight) < window:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                waiting.clear()
                break
            leader, request = waiting.pop()
            in_flight.append(admin._manager.send(request, node_id=leader, request_timeout_ms=remaining_ms))
        if not in_flight:
            break
        try:
            answer = await in_flight.popleft()
        except KafkaError:
            if time.monotonic() < deadline:
                raise
            return  # out of time (a request sent late times out at the deadline): what was taken stands
        take(answer)


def _offsets(answer: Mapping[str, Mapping[Any, Any]]) -> dict[str, dict[TP, int]]:
    return {
        group: {
            (tp.topic, tp.partition): int(meta.offset) for tp, meta in offsets.items() if meta.offset >= 0
        }
        for group, offsets in answer.items()
    }


_LIBRDKAFKA_NAMES = {
    "bootstrap_servers": "bootstrap.servers",
    "client_id": "client.id",
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanisms",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
}


def _librdkafka_options(options: Mapping[str, Any], debug: bool = False) -> dict[str, Any]:
    """kafka-python's keyword arguments (address, login, TLS) as librdkafka's configuration."""
    config: dict[str, Any] = {
        librdkafka: options[name] for name, librdkafka in _LIBRDKAFKA_NAMES.items() if name in options
    }
    config["socket.timeout.ms"] = options["request_timeout_ms"]
    config["reconnect.backoff.max.ms"] = options["reconnect_backoff_max_ms"]
    config["log.connection.close"] = False
    # its logs go to stderr, bypassing logging: only with --log-level debug (kafka-python's are silenced too;
    # a failure reaches the loop as an exception)
    config["log_level"] = 7 if debug else 0
    return config
