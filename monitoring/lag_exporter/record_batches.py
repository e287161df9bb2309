"""The Kafka wire formats the exporter decodes itself, kept apart from the clients that fetch them.

- `fetch_requests`: raw FetchRequests (up to 1,000 partitions each, 64 KiB per partition and 4 MiB per
  response, the leaders in turn), for reading the timestamps of records at given offsets without a consumer.
- `list_offsets_request`: a ListOffsetsRequest for one spec. Both requests are kafka-python's, their bodies
  encoded here in the flexible versions Kafka has spoken since 2.5 and 2.7, byte for byte what kafka-python
  encodes. Their answers come back as `FetchAnswer` and `OffsetsAnswer`: plain tuples, decoded here in those
  versions straight from kafka-python's receive buffer (older versions through kafka-python's objects).
- `group_offsets_request`: an OffsetFetchRequest (version 8, Kafka 3.0 and later) for the committed offsets
  of several groups, answered as a `GroupOffsetsAnswer` decoded here the same way.
- `scan_records`: the record batches of one partition's answer, decoded only up to the offsets asked for
  (message formats v0-v2; compressed v2 batches through kafka-python).
- `parse_commit_key`: the (group, topic, partition) of an OffsetCommit key of `__consumer_offsets`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetSpec,
)
from kafka.protocol.frame import KafkaBytes
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch

TP = tuple[str, int]

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
# max timestamp, producer id and epoch, base sequence, record count; then the records. Only the fields read
# here are unpacked, the others are padding.
_V2_HEADER = struct.Struct(">q13xhiqq14xi")
_COMPRESSION, _LOG_APPEND_TIME, _CONTROL = 0x07, 0x08, 0x20
_OffsetTime = tuple[int, int]


class Scan(NamedTuple):
    """What the records fetched for one partition told (made once per partition answered: a tuple, made
    three times faster than a frozen dataclass)."""

    timestamps: dict[int, int]  # offset asked for -> timestamp of the first data record at or after it
    resume_at: int | None = None  # the offset after the last complete batch fetched
    needs_bytes: int | None = None  # no complete batch: the first one is this long


def _varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """A zig-zag varint at `position`: (value, position after it)."""
    raw, position = _uvarint_at(data, position)
    return (raw >> 1) ^ -(raw & 1), position


def _uvarint_at(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """An unsigned varint at `position` (compact lengths, tag counts): (value, position after it)."""
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
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


# A zig-zag varint of one byte (the usual timestamp and offset delta of a record in a batch): its value.
_ONE_BYTE_VARINT = tuple((byte >> 1) ^ -(byte & 1) for byte in range(0x80))
# A record whose length is a zig-zag varint of two bytes (64-8,191 bytes long, the usual), by its first byte
# (0x80-0xFF) | its second (below 0x80) << 8: the bytes from its start to the next record's.
_TWO_BYTE_RECORD_SKIP = tuple(
    2 + (((raw := (index & 0x7F) | (index >> 8 << 7)) >> 1) ^ -(raw & 1)) if index & 0x80 else 0
    for index in range(0x8000)
)


def _v2_timestamps_at(
    data: bytes, start: int, end: int, base_offset: int, *, base_timestamp: int, wanted: Sequence[int]
) -> list[int] | None:
    """The timestamps of the records at the offsets `wanted` (ascending, within the batch) of an
    uncompressed v2 batch whose offset deltas are 0, 1, ... (its record count is its last offset delta + 1:
    nothing compacted away), so that the record at offset o is the batch's (o - base)th: the records before
    it are skipped by their length alone, one varint each, instead of decoding three. None if a record found
    that way is not within the batch or does not have the offset expected (then the caller decodes them all).
    """
    one_byte, two_byte_skip = _ONE_BYTE_VARINT, _TWO_BYTE_RECORD_SKIP
    found: list[int] = []
    position, index = start, 0
    try:
        for offset in wanted:
            target = max(0, offset - base_offset)
            if target - index > end - position:  # more records than bytes left: not a batch this reads
                return None
            for _ in range(target - index):  # skip a record: its length, usually one or two bytes
                first = data[position]
                if (second := data[position + 1]) < 0x80 and first >= 0x80:
                    position += two_byte_skip[first | second << 8]
                elif first < 0x80:
                    position += 1 + one_byte[first]
                else:
                    length, position = _varint(data, position)
                    position += length
            index = max(index, target)
            if not start <= position < end:
                return None
            # the record: its length, attributes (one byte), timestamp delta, offset delta
            body = position + 1 if data[position] < 0x80 else _varint(data, position)[1]
            if (byte := data[body + 1]) < 0x80:
                timestamp_delta, at = one_byte[byte], body + 2
            else:
                timestamp_delta, at = _varint(data, body + 1)
            offset_delta = one_byte[byte] if (byte := data[at]) < 0x80 else _varint(data, at)[0]
            if offset_delta != target:
                return None
            found.append(base_timestamp + timestamp_delta)
    except IndexError:  # a length beyond the data: not a batch this reads
        return None
    return found


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
            base, attributes, last_delta, base_time, max_time, records_count = _V2_HEADER.unpack_from(
                data, position
            )
            next_offset = base + last_delta + 1
            if next_offset <= offsets[index] or attributes & _CONTROL:
                resume_at, position = max(resume_at or 0, next_offset), end
                continue
            log_append_time = max_time if attributes & _LOG_APPEND_TIME else None
            stamps = None
            if attributes & _COMPRESSION:
                records = _parsed_records(data[position:end], magic)
            elif records_count == last_delta + 1 and records_count > 0:
                wanted = (
                    offsets[index:]
                    if offsets[-1] < next_offset
                    else [o for o in offsets[index:] if o < next_offset]
                )
                stamps = _v2_timestamps_at(
                    data, position + _V2_HEADER.size, end, base, base_timestamp=base_time, wanted=wanted
                )
            if stamps is not None:
                # each offset wanted has its own record (at it, or at the batch's base below it)
                if log_append_time is not None:
                    stamps = [log_append_time] * len(stamps)
                found.update(zip(wanted, stamps, strict=True))
                index += len(wanted)
                resume_at, position = max(resume_at or 0, next_offset), end
                continue
            if not attributes & _COMPRESSION:
                records = _v2_records(data, position + _V2_HEADER.size, end, base, base_time)
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


# -- answers -----------------------------------------------------------------------------------------------

FetchedPartition = tuple[str, int, int, int, bytes]  # topic, partition, error code, high watermark, records
ListedOffset = tuple[str, int, int, int]  # topic, partition, error code, offset


@dataclass(frozen=True)
class FetchAnswer:
    """A FetchResponse as the reader uses it: each partition's (topic, partition, error code, high
    watermark, records), in the answer's order; records b"" when there are none."""

    throttle_time_ms: int  # read by kafka-python's connection, which honours a broker's quota
    partitions: list[FetchedPartition]


@dataclass(frozen=True)
class OffsetsAnswer:
    """A ListOffsetsResponse as the reader uses it: each partition's (topic, partition, error code,
    offset)."""

    throttle_time_ms: int
    partitions: list[ListedOffset]


@dataclass(frozen=True)
class GroupOffsetsAnswer:
    """An OffsetFetchResponse (version 8) as the reader uses it: each group's (id, error code, committed
    offsets); the error code is the group's, or else the first of its partitions' (0: none); offsets below 0
    (none committed) are left out."""

    throttle_time_ms: int
    groups: list[tuple[str, int, dict[TP, int]]]


_FETCH_ANSWER_HEAD = struct.Struct(">ihi")  # throttle time, error code, session id
# partition, error code, high watermark; then the last stable and log start offsets, not read
_FETCH_ANSWER_PARTITION = struct.Struct(">ihq16x")
_INT32_SIZE = 4  # a fetched partition's preferred read replica, ListOffsets' throttle time
# partition, error code, (timestamp), offset, (leader epoch)
_LIST_OFFSETS_ANSWER_PARTITION = struct.Struct(">ih8xq4x")
_GROUP_OFFSET = struct.Struct(">iq4x")  # partition, committed offset, (committed leader epoch)
_ERROR_CODE = struct.Struct(">h")
_GROUP_OFFSETS_VERSION = 8  # the first to ask for several groups at once, the last to name topics


def _after_tagged_fields(data: memoryview, position: int) -> int:
    """The position after the tagged fields at `position` (usually none: one zero byte), skipping any."""
    if data[position] == 0:
        return position + 1
    count, position = _uvarint_at(data, position)
    for _ in range(count):
        _, position = _uvarint_at(data, position)  # the tag
        size, position = _uvarint_at(data, position)
        position += size
    return position


def _compact_string_at(data: memoryview, position: int) -> tuple[str, int]:
    length, position = _uvarint_at(data, position)
    end = position + length - 1
    return str(data[position:end], "utf-8"), end


def _flexible_fetch_answer(data: memoryview, position: int) -> FetchAnswer:
    """A FetchResponse body of version 12 (the last one naming topics) from `position`."""
    throttle_time_ms = _FETCH_ANSWER_HEAD.unpack_from(data, position)[0]
    topics, position = _uvarint_at(data, position + _FETCH_ANSWER_HEAD.size)
    unpack_partition, partition_size = _FETCH_ANSWER_PARTITION.unpack_from, _FETCH_ANSWER_PARTITION.size
    partitions: list[FetchedPartition] = []
    for _ in range(topics - 1):  # compact arrays count one more than they hold
        topic, position = _compact_string_at(data, position)
        count, position = _uvarint_at(data, position)
        for _ in range(count - 1):
            index, error_code, high_watermark = unpack_partition(data, position)
            aborted, position = _uvarint_at(data, position + partition_size)  # 0: null
            for _ in range(aborted - 1):  # producer id and first offset, then tagged fields
                position = _after_tagged_fields(data, position + 16)
            size, position = _uvarint_at(data, position + _INT32_SIZE)  # after the preferred read replica
            end = position + max(size - 1, 0)  # 0: null
            partitions.append((topic, index, error_code, high_watermark, bytes(data[position:end])))
            position = _after_tagged_fields(data, end)
        position = _after_tagged_fields(data, position)
    return FetchAnswer(throttle_time_ms, partitions)


def _flexible_offsets_answer(data: memoryview, position: int) -> OffsetsAnswer:
    """A ListOffsetsResponse body of version 6 or later from `position`."""
    throttle_time_ms = int.from_bytes(data[position : position + _INT32_SIZE], "big", signed=True)
    topics, position = _uvarint_at(data, position + _INT32_SIZE)
    unpack_partition, partition_size = (
        _LIST_OFFSETS_ANSWER_PARTITION.unpack_from,
        _LIST_OFFSETS_ANSWER_PARTITION.size,
    )
    partitions: list[ListedOffset] = []
    for _ in range(topics - 1):
        topic, position = _compact_string_at(data, position)
        count, position = _uvarint_at(data, position)
        for _ in range(count - 1):
            index, error_code, offset = unpack_partition(data, position)
            partitions.append((topic, index, error_code, offset))
            position = _after_tagged_fields(data, position + partition_size)
        position = _after_tagged_fields(data, position)
    return OffsetsAnswer(throttle_time_ms, partitions)


def _flexible_group_offsets_answer(data: memoryview, position: int) -> GroupOffsetsAnswer:
    """An OffsetFetchResponse body of version 8 from `position`."""
    throttle_time_ms = int.from_bytes(data[position : position + _INT32_SIZE], "big", signed=True)
    count, position = _uvarint_at(data, position + _INT32_SIZE)
    unpack_offset, offset_size = _GROUP_OFFSET.unpack_from, _GROUP_OFFSET.size
    unpack_error = _ERROR_CODE.unpack_from
    groups: list[tuple[str, int, dict[TP, int]]] = []
    for _ in range(count - 1):
        group, position = _compact_string_at(data, position)
        offsets: dict[TP, int] = {}
        first_error = 0
        topics, position = _uvarint_at(data, position)
        for _ in range(topics - 1):
            topic, position = _compact_string_at(data, position)
            partitions, position = _uvarint_at(data, position)
            for _ in range(partitions - 1):
                partition, offset = unpack_offset(data, position)
                position += offset_size
                if (metadata := data[position]) < 0x80:  # a compact string's length + 1 (0: null)
                    position += max(metadata, 1)
                else:
                    metadata, position = _uvarint_at(data, position)
                    position += metadata - 1
                if data[position] == data[position + 1] == data[position + 2] == 0:  # no error, no tags
                    position += 3
                    if offset >= 0:
                        offsets[(topic, partition)] = offset
                    continue
                error_code = unpack_error(data, position)[0]
                position = _after_tagged_fields(data, position + _ERROR_CODE.size)
                if error_code:
                    first_error = first_error or error_code
                elif offset >= 0:
                    offsets[(topic, partition)] = offset
            position = _after_tagged_fields(data, position)
        group_error = unpack_error(data, position)[0]
        position = _after_tagged_fields(data, position + _ERROR_CODE.size)
        groups.append((group, group_error or first_error, offsets))
    return GroupOffsetsAnswer(throttle_time_ms, groups)


def _fetch_answer_of(response: Any) -> FetchAnswer:
    return FetchAnswer(
        response.throttle_time_ms or 0,
        [
            (
                topic.topic,
                partition.partition_index,
                partition.error_code,
                partition.high_watermark,
                partition.records or b"",
            )
            for topic in response.responses
            for partition in topic.partitions
        ],
    )


def _offsets_answer_of(response: Any) -> OffsetsAnswer:
    return OffsetsAnswer(
        response.throttle_time_ms or 0,
        [
            (topic.name, partition.partition_index, partition.error_code, partition.offset)
            for topic in response.topics
            for partition in topic.partitions
        ],
    )


def _group_offsets_answer_of(response: Any) -> GroupOffsetsAnswer:
    groups = []
    for group in response.groups:
        offsets: dict[TP, int] = {}
        first_error = 0
        for topic in group.topics:
            for partition in topic.partitions:
                if partition.error_code:
                    first_error = first_error or partition.error_code
                elif partition.committed_offset >= 0:
                    offsets[(topic.name, partition.partition_index)] = partition.committed_offset
        groups.append((group.group_id, group.error_code or first_error, offsets))
    return GroupOffsetsAnswer(response.throttle_time_ms or 0, groups)


class _AnswerDecoder:
    """What kafka-python's connection asks a request's header for (`get_response_class`) to read its answer
    with: the header as kafka-python parses it, the body into plain tuples. In the flexible versions the body
    is decoded here, from kafka-python's receive buffer as it is (its `read()` copied a 4 MiB answer twice
    into fresh pages) and without an object per partition; older versions through kafka-python's classes."""

    def __init__(
        self,
        response_class: Any,
        flexible: Callable[[memoryview, int], Any] | None,
        plain: Callable[[Any], Any],
    ) -> None:
        self._response_class = response_class  # of the request's version
        self._flexible = flexible
        self._plain = plain

    def parse_header(self, buffer: Any) -> Any:
        return self._response_class.parse_header(buffer)

    def decode(self, buffer: Any) -> Any:
        if self._flexible is None:
            return self._plain(self._response_class.decode(buffer))
        # kafka-python's buffer, read up to the body
        data, start = (buffer, buffer.tell()) if isinstance(buffer, KafkaBytes) else (buffer.read(), 0)
        with memoryview(data) as view:
            try:
                answer = self._flexible(view, start)
            except IndexError as error:  # kafka-python's parser turns ValueError into a protocol error
                raise ValueError(f"a truncated {self._response_class.__name__}") from error
        return answer


def _answer_decoder(api_key: int, version: int) -> _AnswerDecoder | None:
    if api_key == FetchRequest.API_KEY:
        flexible = _flexible_fetch_answer if version == _FLEXIBLE_FETCH else None
        return _AnswerDecoder(FetchResponse[version], flexible, _fetch_answer_of)
    if api_key == ListOffsetsRequest.API_KEY:
        flexible_offsets = _flexible_offsets_answer if version >= _FLEXIBLE_LIST_OFFSETS else None
        return _AnswerDecoder(ListOffsetsResponse[version], flexible_offsets, _offsets_answer_of)
    if api_key == OffsetFetchRequest.API_KEY:
        flexible_groups = _flexible_group_offsets_answer if version == _GROUP_OFFSETS_VERSION else None
        return _AnswerDecoder(OffsetFetchResponse[version], flexible_groups, _group_offsets_answer_of)
    return None


class _PlainAnswerHeader(RequestHeader, init=False):  # type: ignore[misc,call-arg]
    """The request header of `_FetchRequest`, `_ListOffsetsRequest` and `_GroupOffsetsRequest`:
    kafka-python's, whose answer is read by an `_AnswerDecoder`."""

    def get_response_class(self) -> _AnswerDecoder | None:
        return _answer_decoder(self.request_api_key, self.request_api_version)


def fetch_requests(
    position: Mapping[TP, int], leaders: Mapping[TP, int], fetch_bytes: Mapping[TP, int]
) -> list[tuple[int, Any]]:
    """FetchRequests for every partition in `position`, up to 1,000 partitions each, taking the leaders in
    turn (each leader's first request, then each one's second, ...) so that a window of requests in flight
    keeps every leader busy. A partition needing more than the usual bytes goes first: the broker returns
    the first batch of the first partition whole, whatever the limits."""
    by_leader: dict[int, list[dict[str, list[_FetchAt]]]] = {}
    counts: dict[int, int] = {}  # partitions in each leader's requests so far
    for tp in sorted(position, key=lambda tp: tp not in fetch_bytes) if fetch_bytes else position:
        topic, partition = tp
        leader = leaders[tp]
        chunks = by_leader.setdefault(leader, [])
        count = counts.get(leader, 0)
        if count % _PARTITIONS_PER_FETCH == 0:
            chunks.append({})
        counts[leader] = count + 1
        chunks[-1].setdefault(topic, []).append(
            (partition, position[tp], fetch_bytes.get(tp, _PARTITION_FETCH_BYTES))
        )
    turns = max(map(len, by_leader.values()), default=0)
    return [
        (leader, _FetchRequest(chunks[turn]))
        for turn in range(turns)
        for leader, chunks in by_leader.items()
        if turn < len(chunks)
    ]


_FetchAt = tuple[int, int, int]  # partition, offset, most bytes
_FLEXIBLE_FETCH = 12  # compact arrays and strings, tagged fields; the last version naming topics too
_FETCH_HEAD = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation, session, epoch
# partition, current leader epoch, offset, last fetched epoch, log start offset, most bytes, no tagged fields
_FETCH_PARTITION = struct.Struct(">iiqiqiB")


class _FetchRequest(FetchRequest, init=False):  # type: ignore[misc,call-arg]
    """kafka-python's FetchRequest (versions 4-12) of these partitions, without a fetch session, its body
    encoded in one pass of `struct` in version 12 (Kafka 2.7 and later): kafka-python made an object per
    partition and encoded each field through generic code, 0.36 s of a first collection at 50,000
    partitions. Older versions go through kafka-python's own encoding. Answered with a `FetchAnswer`."""

    header_class = _PlainAnswerHeader

    def __init__(self, topics: Mapping[str, list[_FetchAt]]) -> None:
        super().__init__(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=_RESPONSE_FETCH_BYTES,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session
            topics=[],
            forgotten_topics_data=[],
            rack_id="",
            min_version=4,
            max_version=_FETCH_MAX_VERSION,
        )
        self._partitions = topics

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None:
            self.API_VERSION = version
        if self.API_VERSION == _FLEXIBLE_FETCH:
            return _with_header(self, _fetch_body(self._partitions), header, framed)
        self.topics = [
            FetchRequest.FetchTopic(topic=topic, partitions=[_fetch_partition(*at) for at in partitions])
            for topic, partitions in self._partitions.items()
        ]
        encoded: bytes = super().encode(header=header, framed=framed)
        return encoded


def _fetch_partition(partition: int, offset: int, most_bytes: int) -> Any:
    return FetchRequest.FetchTopic.FetchPartition(
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=most_bytes,
    )


def _fetch_body(topics: Mapping[str, list[_FetchAt]]) -> bytes:
    """A FetchRequest v12 body of the fields `_FetchRequest` sets (no forgotten topics, rack, cluster id)."""
    pack = _FETCH_PARTITION.pack
    parts = [_FETCH_HEAD.pack(-1, 0, 1, _RESPONSE_FETCH_BYTES, 0, 0, -1), _uvarint(len(topics) + 1)]
    for topic, partitions in topics.items():
        encoded = topic.encode()
        parts += (_uvarint(len(encoded) + 1), encoded, _uvarint(len(partitions) + 1))
        parts += [pack(partition, -1, offset, -1, -1, most, 0) for partition, offset, most in partitions]
        parts.append(b"\x00")  # the topic's tagged fields
    parts.append(b"\x01\x01\x00")  # no forgotten topics, an empty rack id, no tagged fields
    return b"".join(parts)


_LIST_OFFSETS_PARTITION = struct.Struct(">iiqB")  # index, current leader epoch, timestamp, no tagged fields
_FLEXIBLE_LIST_OFFSETS = 6  # compact arrays and strings, tagged fields
_LIST_OFFSETS_TIMEOUT_FROM = 10


class _ListOffsetsRequest(ListOffsetsRequest, init=False):  # type: ignore[misc,call-arg]
    """kafka-python's ListOffsetsRequest for one spec, its body encoded from plain (topic, partitions) in one
    pass of `struct` for the flexible versions (6+, which Kafka 2.5 and later speak): kafka-python made an
    object per partition and encoded each field through generic code, ~0.47 s of every collection at 50,000
    partitions (both specs). Older versions go through kafka-python's own encoding. Answered with an
    `OffsetsAnswer`."""

    header_class = _PlainAnswerHeader

    def __init__(self, topics: Mapping[str, list[int]], spec: OffsetSpec) -> None:
        super().__init__(
            isolation_level=0,
            topics=[],
            min_version=max(ListOffsetsRequest.min_version_for_timestamp(spec), 0),
        )
        self._partitions = topics
        self._spec = int(spec)

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None:
            self.API_VERSION = version
        if self.API_VERSION is not None and self.API_VERSION >= _FLEXIBLE_LIST_OFFSETS:
            body = _list_offsets_body(self._partitions, self._spec, self.API_VERSION)
            return _with_header(self, body, header, framed)
        partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
        self.topics = [
            ListOffsetsRequest.ListOffsetsTopic(
                name=name, partitions=[partition(partition_index=i, timestamp=self._spec) for i in indexes]
            )
            for name, indexes in self._partitions.items()
        ]
        encoded: bytes = super().encode(header=header, framed=framed)
        return encoded


def list_offsets_request(topics: Mapping[str, list[int]], spec: OffsetSpec) -> Any:
    """A ListOffsetsRequest for `spec` of these partitions, as kafka-python's `list_partition_offsets` makes
    it (replica -1, read uncommitted, the lowest version the spec allows, the highest both sides speak)."""
    return _ListOffsetsRequest(topics, spec)


def _list_offsets_body(topics: Mapping[str, list[int]], spec: int, version: int) -> bytes:
    pack = _LIST_OFFSETS_PARTITION.pack
    parts = [struct.pack(">ib", -1, 0), _uvarint(len(topics) + 1)]  # replica id, isolation level
    for name, indexes in topics.items():
        encoded = name.encode()
        parts += (_uvarint(len(encoded) + 1), encoded, _uvarint(len(indexes) + 1))
        parts += [pack(index, -1, spec, 0) for index in indexes]
        parts.append(b"\x00")  # the topic's tagged fields
    if version >= _LIST_OFFSETS_TIMEOUT_FROM:
        parts.append(b"\x00\x00\x00\x00")  # timeout (for tiered storage): 0, as kafka-python sends
    parts.append(b"\x00")
    return b"".join(parts)


def _with_header(request: Any, body: bytes, header: bool, framed: bool) -> bytes:
    """`body` as kafka-python's `encode` returns it for a flexible version: after the request's header
    (version 2) if asked for, after its length if framed."""
    data = request.encode_header(flexible=True) + body if header else body
    return len(data).to_bytes(4, "big") + data if framed else data


class _GroupOffsetsRequest(OffsetFetchRequest, init=False):  # type: ignore[misc,call-arg]
    """kafka-python's OffsetFetchRequest in version 8, answered with a `GroupOffsetsAnswer`."""

    header_class = _PlainAnswerHeader


def group_offsets_request(groups: Sequence[str]) -> Any:
    """An OffsetFetchRequest for every committed offset of `groups` (as kafka-python's `list_group_offsets`
    asks, in version 8 only: a broker without it refuses to send it)."""
    return _GroupOffsetsRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None) for group in groups],
        min_version=_GROUP_OFFSETS_VERSION,
        max_version=_GROUP_OFFSETS_VERSION,
    )


def _uvarint(value: int) -> bytes:
    """An unsigned varint (compact lengths)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
