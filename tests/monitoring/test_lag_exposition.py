"""The exporter's fast paths against their reference: /metrics rendered once per snapshot equals what
prometheus_client renders, the record-batch scanner equals kafka-python's decoding, and the loop asks a
reader that reads several offsets per partition once per collection."""

from __future__ import annotations

import gzip
import http.client
import io
import math
import random
import struct
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from socketserver import StreamRequestHandler
from typing import Any

import numpy as np
import pytest
from kafka.errors import KafkaProtocolError
from kafka.future import Future
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetFetchResponse,
    OffsetSpec,
)
from kafka.protocol.parser import KafkaProtocol
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from monitoring.lag_exporter.collector import (
    ExporterHealth,
    LagCollector,
    LagExposition,
    _compress_beside,
    _format_values,
    metrics_app,
    render_lag_text,
    start_metrics_server,
)
from monitoring.lag_exporter.config import ExporterConfig
from monitoring.lag_exporter.kafka_reader import _send_windowed
from monitoring.lag_exporter.loop import Refresher
from monitoring.lag_exporter.record_batches import (
    FetchAnswer,
    GroupOffsetsAnswer,
    OffsetsAnswer,
    _group_offsets_answer_of,
    fetch_requests,
    group_offsets_request,
    list_offsets_request,
    scan_records,
)
from monitoring.lag_exporter.snapshot import (
    GroupLag,
    PartitionLag,
    ProducedHistory,
    Snapshot,
    TopicPartitionOffsets,
    appended_at,
)
from monitoring.lag_exporter.sources import CheckpointHealth
from monitoring.lag_exporter.status import (
    PARTITION_STATUSES,
    STATUS_BY_CODE,
    History,
    Sample,
    ScalarHistory,
    Status,
    consumption_rate,
    evaluate_partition,
)
from streamstack.local.ports import LOOPBACK, free_port
from tests.monitoring.test_lag_units import TP, FakeKafka

OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


def _row(group: str, partition: int | None, lag: int, status: Status, **values: Any) -> PartitionLag:
    fields: dict[str, Any] = {
        "source": "group",
        "group": group,
        "topic": "orders",
        "partition": partition,
        "committed": 1_234_567_890 - lag,
        "earliest": 5,
        "latest": 1_234_567_890,
        "lag": lag,
        "lag_seconds": lag / 7,
        "consumption_rate": 0.0 if lag else 12.5,
        "eta_seconds": math.inf if lag else 0.0,
        "lost_records": 0,
        "status": status,
    }
    return PartitionLag(**{**fields, **values})


def _snapshot(granularity: str = "partition") -> Snapshot:
    partition = (lambda p: p) if granularity == "partition" else (lambda p: None)
    return Snapshot(
        taken_at=1.0,
        partitions=(
            _row('we"ird\\group\nid', partition(0), 7, Status.STOP),
            _row("g", partition(1), 0, Status.OK, source="shadow", lost_records=3),
            _row("g", partition(2), 2_000_000, Status.WARN, topic='t"2'),
            # values the columns format apart: 10**6 and above, infinite, NaN, negative zero, subnormal
            _row(
                "h",
                partition(3),
                1,
                Status.STALL,
                topic="t3",
                committed=2**63 - 1,
                lost_records=10**7,
                lag_seconds=1_234_567.25,
                consumption_rate=1e21,
                eta_seconds=math.nan,
            ),
            _row(
                "h",
                partition(4),
                999_999,
                Status.REWIND,
                topic="t4",
                lag_seconds=5e-324,
                consumption_rate=999_999.9999,
                eta_seconds=-0.0,
                lost_records=999_999,
            ),
        ),
        groups=(
            GroupLag("group", 'we"ird\\group\nid', 7, 7, 1.0, Status.ERR),
            GroupLag("shadow", "g", 0, 0, 0.0, Status.OK),
        ),
        offsets=(TopicPartitionOffsets("orders", partition(0), 5, 1_234_567_890),),
        checkpoints=(CheckpointHealth("ck", "ck/q", False, "bad"), CheckpointHealth("ck", "ck/r", True)),
        granularity=granularity,
    )


@pytest.mark.parametrize("granularity", ["partition", "topic"])
def test_lag_text_rendered_once_is_what_prometheus_client_renders_in_both_formats(granularity: str) -> None:
    snapshot = _snapshot(granularity)
    registry = CollectorRegistry()
    registry.register(LagCollector(lambda: snapshot))
    rendered = "".join(render_lag_text(snapshot, rows_per_chunk=2))
    assert rendered == generate_latest(registry).decode()
    assert rendered + "# EOF\n" == openmetrics.generate_latest(registry).decode()  # type: ignore[no-untyped-call]
    empty = Snapshot(taken_at=1.0)  # families without samples keep their HELP and TYPE
    registry = CollectorRegistry()
    registry.register(LagCollector(lambda: empty))
    assert "".join(render_lag_text(empty)) == generate_latest(registry).decode()


def test_a_column_of_values_is_formatted_as_prometheus_client_formats_each() -> None:
    """Whole numbers below 1,024 come from a table, the rest one by one: the same text either way, at the
    table's edges, for ints and floats, and for the values floatToGoString treats apart."""
    generator = np.random.default_rng(17)
    ints = np.concatenate(
        [
            generator.integers(0, 40, 500),
            np.arange(1000, 1050),
            generator.integers(-(10**12), 10**12, 200),
            [0, 1023, 1024, 999_999, 1_000_000, 1_200_000, 2**53 - 1, 2**53, 2**63 - 1, -1, -(2**63)],
        ]
    ).astype(np.int64)
    floats = np.concatenate(
        [
            np.floor(generator.random(300) * 2000),
            generator.random(300) * 2000,
            generator.random(50) * 1e9,
            [0.0, -0.0, 1.0, 1023.0, 1023.5, 1024.0, 5e-324, 999_999.9999, 1e6, 1e21, -3.0],
            [math.inf, -math.inf, math.nan],
        ]
    )
    for column in (ints, floats, np.zeros(10), np.full(10, math.inf), floats[:0]):
        expected = [floatToGoString(value) for value in column.tolist()]  # type: ignore[no-untyped-call]
        assert _format_values(column) == expected
        assert _format_values(column.tolist()) == expected


def _health() -> tuple[CollectorRegistry, ExporterHealth]:
    registry = CollectorRegistry()
    health = ExporterHealth(registry)
    health.succeeded(at=1_700_000_000.0, duration=1.25)
    return registry, health


def _get(
    app: Callable[..., Iterable[bytes]], accept: str = "", encoding: str = "", query: str = ""
) -> tuple[str, dict[str, str], bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answer["status"], answer["headers"] = status, dict(headers)

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "QUERY_STRING": query,
        "HTTP_ACCEPT": accept,
        "HTTP_ACCEPT_ENCODING": encoding,
    }
    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body


def test_metrics_serves_the_lag_families_then_the_health_families_gzipped_or_not() -> None:
    health_registry, _ = _health()
    snapshot = _snapshot()
    latest: list[Snapshot | None] = [None]
    exposition = LagExposition()
    app = metrics_app(health_registry, exposition, lambda: latest[0])
    health_text = generate_latest(health_registry)

    status, headers, body = _get(app)
    assert status == "200 OK" and body == health_text  # before the first snapshot: health only

    latest[0] = snapshot
    lag_text = "".join(render_lag_text(snapshot)).encode()
    status, headers, body = _get(app)
    assert body == lag_text + health_text
    assert int(headers["Content-Length"]) == len(body)
    status, headers, body = _get(app, encoding="gzip")
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == lag_text + health_text
    assert int(headers["Content-Length"]) == len(body)
    assert exposition.prepare(snapshot) is exposition.prepare(snapshot)  # rendered once per snapshot
    chunks = list(exposition.prepare(snapshot).text_chunks(chunk_bytes=100))
    assert b"".join(chunks) == lag_text and max(len(chunk) for chunk in chunks) <= 100

    status, headers, body = _get(app, accept=OPENMETRICS_ACCEPT, encoding="gzip")
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)  # type: ignore[no-untyped-call]
        for sample in family.samples
    }
    labels = (("group", "g"), ("partition", "2"), ("source", "group"), ("topic", 't"2'))
    assert samples[("streamstack_lag_records", labels)] == 2_000_000
    assert samples[("streamstack_lag_status_code", labels)] == Status.WARN.code
    assert samples[("streamstack_lag_exporter_collection_duration_seconds", ())] == 1.25

    latest[0] = Snapshot(taken_at=2.0, partitions=(_row("h", 0, 1, Status.OK),))
    assert b'group="h"' in _get(app)[2] and b'group="g"' not in _get(app)[2]  # a new snapshot, rendered anew

    status, headers, body = _get(app, query="name[]=streamstack_lag_exporter_up")
    assert body.decode().splitlines()[-1] == "streamstack_lag_exporter_up 1.0"
    assert b"streamstack_lag_records" not in body and b"duration" not in body  # health families asked for


def test_a_gzip_scrape_sends_the_kept_stream_as_it_is_not_a_copy_of_it() -> None:
    """Over HTTP from the exporter's own server: the answer is the kept gzip stream of the lag text, then
    the health text's end, sent as two writes (with Nagle's algorithm off, so the second does not wait for
    the client's delayed ACK). Joined into one `bytes` at every scrape, the 6 MB stream at 50,000 x 500
    took ~4 ms of copying before the first byte, with the GIL held."""
    health_registry, _ = _health()
    snapshot = _snapshot()
    exposition = LagExposition()
    app = metrics_app(health_registry, exposition, lambda: snapshot)
    sent: list[list[bytes]] = []

    def recording(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = list(app(environ, start_response))
        sent.append(body)
        return body

    server, thread = start_metrics_server(LOOPBACK, free_port(), recording)
    try:
        connection = http.client.HTTPConnection(LOOPBACK, server.server_address[1], timeout=30)
        connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        response = connection.getresponse()
        body = response.read()
        connection.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert response.getheader("Content-Encoding") == "gzip"
    lag_text = "".join(render_lag_text(snapshot)).encode()
    assert gzip.decompress(body) == lag_text + generate_latest(health_registry)
    assert sent[0][0] is exposition.prepare(snapshot).gzip_prefix and len(sent[0]) == 2
    handler = server.RequestHandlerClass
    assert isinstance(handler, type) and issubclass(handler, StreamRequestHandler)
    assert handler.disable_nagle_algorithm is True


def test_health_changes_between_snapshots_show_at_once() -> None:
    health_registry, health = _health()
    snapshot = _snapshot()
    app = metrics_app(health_registry, LagExposition(), lambda: snapshot)
    health.error("timestamp", 2)
    text = gzip.decompress(_get(app, encoding="gzip")[2]).decode()
    assert 'streamstack_lag_exporter_errors_total{kind="timestamp"} 2.0' in text
    extra = Gauge("extra_gauge", "not from the snapshot", registry=health_registry)
    extra.set(3)
    assert "extra_gauge 3.0" in _get(app)[2].decode()


# -- the record-batch scanner --------------------------------------------------------------------------


def _batch(
    magic: int, compression: int, base: int, count: int, first_ms: int, *, gaps: Iterable[int] = ()
) -> tuple[bytes, list[tuple[int, int]]]:
    """A record batch and its (offset, timestamp) pairs; `gaps` are record indexes preceded by a missing
    offset (as compaction leaves them)."""
    builder = MemoryRecordsBuilder(magic, compression, 1 << 20, offset=base)
    truth, offset = [], base
    for index in range(count):
        if index in set(gaps):
            builder.skip(1)
            offset += 1
        timestamp = first_ms + 7 * index - index % 3  # not monotonic, as producers' clocks are not
        headers = [("h", b"x")] if magic == 2 and index % 4 == 0 else ([] if magic == 2 else None)
        builder.append(timestamp, None, b"v" * (index % 40), headers)
        truth.append((offset, timestamp))
        offset += 1
    builder.close()
    return bytes(builder.buffer()), truth


def _first_at_or_after(truth: list[tuple[int, int]], offset: int) -> int | None:
    return next((timestamp for at, timestamp in truth if at >= offset), None)


@pytest.mark.parametrize(("magic", "compression"), [(2, 0), (2, 1), (1, 0), (1, 1)])
def test_scan_finds_the_first_record_at_or_after_each_offset(magic: int, compression: int) -> None:
    first, first_truth = _batch(magic, compression, 100, 30, 1_700_000_000_000, gaps=(5, 6))
    second, second_truth = _batch(magic, compression, first_truth[-1][0] + 1, 20, 1_700_000_500_000)
    truth = first_truth + second_truth
    data = first + second
    kafka_python = [(record.offset, record.timestamp) for batch in MemoryRecords(data) for record in batch]
    assert kafka_python == truth
    for offsets in ([100], [104, 105, 106, 107], [90, 131, 140], [110, 133, 151], [149], [160]):
        scan = scan_records(data, offsets)
        expected = {at: _first_at_or_after(truth, at) for at in offsets}
        assert scan.timestamps == {at: ts for at, ts in expected.items() if ts is not None}
        if len(scan.timestamps) < len(offsets):
            assert scan.resume_at == truth[-1][0] + 1  # read everything: fetch on from the end


def test_scan_skips_to_the_offsets_asked_in_batches_without_gaps_and_decodes_batches_with_gaps() -> None:
    """Batches whose offsets have no gaps are read by skipping records by their length to the offsets asked;
    batches with gaps (compacted) record by record: on random batches (records of 0 to 9,000 bytes, so
    lengths of one to three varint bytes) and random offsets, the timestamps are kafka-python's."""
    generator = random.Random(31)
    for case in range(60):
        data, truth, base = b"", [], generator.randrange(0, 1000)
        for _ in range(generator.randrange(1, 4)):
            count = generator.randrange(1, 40)
            gaps = generator.sample(range(1, count + 1), generator.randrange(0, 3)) if count > 1 else []
            builder = MemoryRecordsBuilder(2, 0, 1 << 24, offset=0)  # deltas from 0, as a broker keeps them
            offset = base
            for index in range(count):
                if index in gaps:
                    builder.skip(1)
                    offset += 1
                timestamp = 1_700_000_000_000 + generator.randrange(-5000, 5000)
                size = generator.choice([0, 10, 60, 70, 200, 9000])
                builder.append(timestamp, None, b"v" * size, [])
                truth.append((offset, timestamp))
                offset += 1
            builder.close()
            data += struct.pack(">q", base) + bytes(builder.buffer())[8:]  # the base offset the broker gave
            base = offset
        kafka_python = [
            (record.offset, record.timestamp) for batch in MemoryRecords(data) for record in batch
        ]
        assert kafka_python == truth
        asked = sorted(set(generator.sample(range(truth[0][0] - 3, base + 3), 6)))
        scan = scan_records(data, asked)
        expected = {at: _first_at_or_after(truth, at) for at in asked}
        assert scan.timestamps == {at: ts for at, ts in expected.items() if ts is not None}, case


def test_scan_of_a_cut_off_batch_asks_for_its_length_or_resumes_after_the_whole_ones() -> None:
    first, truth = _batch(2, 0, 0, 40, 1_700_000_000_000)
    second, _ = _batch(2, 0, 40, 40, 1_700_000_100_000)
    assert scan_records(first[:100], [3]).needs_bytes == len(first)
    scan = scan_records(first + second[:50], [3, 45])
    assert scan.timestamps == {3: _first_at_or_after(truth, 3)}
    assert scan.resume_at == 40


def _with_attributes(batch: bytes, flags: int) -> bytes:
    """A v2 batch with extra attribute bits (the scanner does not check the CRC)."""
    (attributes,) = struct.unpack_from(">h", batch, 21)
    return batch[:21] + struct.pack(">h", attributes | flags) + batch[23:]


def test_scan_skips_control_batches_and_takes_log_append_time_from_the_batch() -> None:
    marker, _ = _batch(2, 0, 10, 1, 1_700_000_000_000)
    data, truth = _batch(2, 0, 11, 5, 1_700_000_000_500)
    scan = scan_records(_with_attributes(marker, 0x20) + data, [10, 12])
    assert scan.timestamps == {10: truth[0][1], 12: truth[1][1]}  # the marker at 10 is not a record
    appended = scan_records(_with_attributes(data, 0x08), [12])
    max_timestamp = struct.unpack_from(">q", data, 35)[0]
    assert appended.timestamps == {12: max_timestamp} and max_timestamp == max(ts for _, ts in truth)


def test_fetch_requests_ask_for_every_partition_taking_the_leaders_in_turn() -> None:
    """Every partition is in one request of at most 1,000, at its position; the leaders take turns, so a
    window of requests in flight keeps them all busy; a partition that needs a larger fetch comes first in
    its leader's requests, with the bytes it needs."""
    position = {(f"t{index // 10}", index % 10): index for index in range(2_500)}
    leaders = {tp: 1 if index < 2_100 else 2 for index, tp in enumerate(position)}
    big = ("t150", 0)  # leader 1's 1,501st
    requests = [
        (leader, FetchRequest.decode(request.encode(version=12), version=12))  # as sent to the brokers
        for leader, request in fetch_requests(position, leaders, {big: 1_000_000})
    ]
    assert [leader for leader, _ in requests] == [1, 2, 1, 1]
    asked: dict[tuple[str, int], tuple[int, int, int]] = {}
    for number, (leader, request) in enumerate(requests):
        parts = [(topic.topic, part) for topic in request.topics for part in topic.partitions]
        assert len(parts) <= 1_000
        for topic, part in parts:
            tp = (topic, part.partition)
            assert tp not in asked and leaders[tp] == leader
            asked[tp] = (part.fetch_offset, part.partition_max_bytes, number)
    assert {tp: offset for tp, (offset, _, _) in asked.items()} == position
    assert asked[big][1:] == (1_000_000, 0)
    first = requests[0][1].topics[0]
    assert (first.topic, first.partitions[0].partition) == big
    assert {size for tp, (_, size, _) in asked.items() if tp != big} == {64 * 1024}


class _Brokers:
    """The connection manager `_send_windowed` sends through, answering each request when told: kafka-python's
    own Futures, so that the coroutine awaits them as it does on the IO thread."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, object, Future]] = []
        self.most_in_flight = 0

    def send(self, request: object, node_id: int, request_timeout_ms: int) -> Future:
        future = Future()
        self.sent.append((node_id, request, future))
        self.most_in_flight = max(self.most_in_flight, sum(not f.is_done for _, _, f in self.sent))
        return future


def _drive(coroutine: Any, brokers: _Brokers) -> None:
    """Run `coroutine`, answering each request it waits for with the request itself."""
    try:
        waited = coroutine.send(None)
        while True:
            node, request, future = next(entry for entry in brokers.sent if entry[2] is waited)
            future.success(("answer", node, request))
            waited = coroutine.send(None)
    except StopIteration:
        pass


def test_fetch_requests_are_byte_for_byte_what_kafka_python_encodes_in_every_version() -> None:
    position = {
        (f"t{index // 300}" + "x" * (200 if index < 300 else 0), index % 300): 7 * index
        for index in range(900)
    }
    fetch_bytes = {("t2", 5): 3_000_000}
    [(_, ours)] = fetch_requests(position, dict.fromkeys(position, 1), fetch_bytes)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in sorted(position.items(), key=lambda item: item[0] not in fetch_bytes):
        by_topic.setdefault(topic, []).append(
            FetchRequest.FetchTopic.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=fetch_bytes.get((topic, partition), 64 * 1024),
            )
        )
    reference = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=4 * 1024 * 1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=parts) for topic, parts in by_topic.items()],
        forgotten_topics_data=[],
        rack_id="",
    )
    for version in range(4, 13):
        for request in (reference, ours):
            request.API_VERSION = version
            request.with_header(correlation_id=41, client_id="streamstack-lag-exporter")
        assert ours.encode(header=True, framed=True) == reference.encode(header=True, framed=True), version


@pytest.mark.parametrize("spec", [OffsetSpec.LATEST, OffsetSpec.EARLIEST])
def test_list_offsets_requests_are_byte_for_byte_what_kafka_python_encodes_in_every_version(
    spec: OffsetSpec,
) -> None:
    # one-byte and two-byte compact lengths: a name of 200 characters, a topic of 300 partitions
    topics = {
        f"t{index}" + "x" * (200 if index == 3 else 0): list(range(300 if index == 5 else 10))
        for index in range(8)
    }
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    for version in range(
        ListOffsetsRequest.min_version_for_timestamp(spec), ListOffsetsRequest.max_version + 1
    ):
        reference = ListOffsetsRequest(
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=name, partitions=[partition(partition_index=i, timestamp=spec) for i in indexes]
                )
                for name, indexes in topics.items()
            ],
        )
        ours = list_offsets_request(topics, spec)
        for request in (reference, ours):
            request.API_VERSION = version
            request.with_header(correlation_id=41, client_id="streamstack-lag-exporter")
        assert ours.encode(header=True, framed=True) == reference.encode(header=True, framed=True), version
        assert ListOffsetsRequest.decode(ours.encode(), version=version) == reference


def _answered(request: Any, version: int, response: Any) -> Any:
    """`request` sent through kafka-python's protocol parser, as its connections do, and `response` (of the
    same version) received in pieces as a socket may hand it over: what the parser decodes."""
    parser = KafkaProtocol(client_id="streamstack-lag-exporter")
    request.API_VERSION = version
    correlation_id = parser.send_request(request)
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    data = response.encode(header=True, framed=True)
    answers = [
        answer for at in range(0, len(data), 1000) for answer in parser.receive_bytes(data[at : at + 1000])
    ]
    assert [correlation for correlation, _ in answers] == [correlation_id]
    return answers[0][1]


def _fetch_response(version: int) -> Any:
    """A FetchResponse of every shape the reader meets: records, none (null) and empty, aborted transactions,
    an error, the tagged fields of version 12 (a diverging epoch, a new leader), a topic name of 200
    characters (two-byte compact lengths), records of 20 KB and 130 aborted transactions (three- and
    two-byte compact lengths), 300 partitions of a topic."""
    data = FetchResponse.FetchableTopicResponse.PartitionData
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for index in range(3):
        builder.append(timestamp=1_700_000_000_000 + index, key=None, value=b"v" * 40, headers=[])
    builder.close()
    records = builder.buffer()
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for index in range(20):
        builder.append(timestamp=1_700_000_000_000 + index, key=None, value=b"w" * 1000, headers=[])
    builder.close()
    large_records = builder.buffer()
    extra: dict[str, Any] = {}
    if version >= 12:
        extra = {
            "diverging_epoch": data.EpochEndOffset(epoch=3, end_offset=77),
            "current_leader": data.LeaderIdAndEpoch(leader_id=2, leader_epoch=5),
        }
    aborted = [data.AbortedTransaction(producer_id=11, first_offset=4)] * 2
    partitions = [
        data(
            partition_index=0, error_code=0, high_watermark=99, log_start_offset=2, records=records, **extra
        ),
        data(partition_index=1, error_code=0, high_watermark=5, aborted_transactions=aborted, records=None),
        data(partition_index=2, error_code=6, high_watermark=-1, records=b""),
        data(
            partition_index=3,
            error_code=0,
            high_watermark=20,
            aborted_transactions=[data.AbortedTransaction(producer_id=i, first_offset=i) for i in range(130)],
            records=large_records,
        ),
    ]
    many = [data(partition_index=i, error_code=0, high_watermark=i, records=records) for i in range(300)]
    return FetchResponse(
        throttle_time_ms=17,
        responses=[
            FetchResponse.FetchableTopicResponse(topic="t" + "x" * 200, partitions=partitions),
            FetchResponse.FetchableTopicResponse(topic="many", partitions=many),
            FetchResponse.FetchableTopicResponse(topic="none", partitions=[]),
        ],
    )


def test_fetch_answers_are_what_kafka_python_decodes_in_every_version() -> None:
    """The answer of our FetchRequest, decoded by kafka-python's own parser through the request's header:
    in version 12 straight from the receive buffer, before it through kafka-python's objects; the same
    partitions, error codes, high watermarks and records, and the throttle time the connection honours."""
    [(_, request)] = fetch_requests({("t", 0): 0}, {("t", 0): 1}, {})
    for version in range(4, 13):
        reference = FetchResponse.decode(_fetch_response(version).encode(version=version), version=version)
        answer = _answered(request, version, _fetch_response(version))
        assert isinstance(answer, FetchAnswer)
        assert answer.throttle_time_ms == reference.throttle_time_ms == 17, version
        assert answer.partitions == [
            (topic.topic, data.partition_index, data.error_code, data.high_watermark, data.records or b"")
            for topic in reference.responses
            for data in topic.partitions
        ], version
        assert len(answer.partitions) == 304
        assert len(answer.partitions[3][4]) > 1 << 14
        assert answer.partitions[0][4] == _fetch_response(version).responses[0].partitions[0].records


def test_list_offsets_answers_are_what_kafka_python_decodes_in_every_version() -> None:
    partition = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    topics = [
        ListOffsetsResponse.ListOffsetsTopicResponse(
            name=f"t{index}" + "x" * (200 if index == 1 else 0),
            partitions=[
                partition(
                    partition_index=i, error_code=3 if i == 7 else 0, timestamp=-1, offset=i * 1_000_003
                )
                for i in range(300 if index == 2 else 10)
            ],
        )
        for index in range(4)
    ]
    request = list_offsets_request({"t": [0]}, OffsetSpec.LATEST)
    for version in range(1, ListOffsetsResponse.max_version + 1):
        response = ListOffsetsResponse(throttle_time_ms=9, topics=topics)
        reference = ListOffsetsResponse.decode(response.encode(version=version), version=version)
        answer = _answered(request, version, response)
        assert isinstance(answer, OffsetsAnswer)
        assert answer.throttle_time_ms == (9 if version >= 2 else 0), version
        assert answer.partitions == [
            (topic.name, data.partition_index, data.error_code, data.offset)
            for topic in reference.topics
            for data in topic.partitions
        ], version
        assert answer.partitions[2] == ("t0", 2, 0, 2_000_006)
        assert len(answer.partitions) == 330


def test_group_offsets_answers_are_what_kafka_python_decodes() -> None:
    """The answer of our OffsetFetchRequest (version 8), decoded from the receive buffer: each group's
    committed offsets, without the partitions none was committed for (-1), and the error code of a group
    that failed, or of the first of its partitions that did."""
    group = OffsetFetchResponse.OffsetFetchResponseGroup
    topic = group.OffsetFetchResponseTopics
    partition = topic.OffsetFetchResponsePartitions

    def offsets(name: str, count: int, error_at: int = -1) -> Any:
        return topic(
            name=name,
            partitions=[
                partition(
                    partition_index=i,
                    committed_offset=-1 if i == 1 else 1_000 * i + 7,
                    committed_leader_epoch=-1 if i % 2 else 4,
                    metadata=None if i == 2 else "m" * (i % 5) + ("x" * 300 if i == 3 else ""),
                    error_code=72 if i == error_at else 0,
                )
                for i in range(count)
            ],
        )

    def response() -> Any:
        return OffsetFetchResponse(
            throttle_time_ms=5,
            groups=[
                group(
                    group_id="g" + "x" * 200, topics=[offsets("a", 300), offsets("b" * 150, 3)], error_code=0
                ),
                group(group_id="gone", topics=[], error_code=0),
                group(group_id="loading", topics=[], error_code=14),
                group(group_id="unstable", topics=[offsets("a", 4, error_at=2)], error_code=0),
            ],
        )

    answer = _answered(group_offsets_request(["g", "gone", "loading", "unstable"]), 8, response())
    reference = OffsetFetchResponse.decode(response().encode(version=8), version=8)
    assert isinstance(answer, GroupOffsetsAnswer)
    assert answer == _group_offsets_answer_of(reference)
    assert answer.throttle_time_ms == 5
    [(first, code, committed), *rest] = answer.groups
    assert (first, code) == ("g" + "x" * 200, 0)
    assert committed == {
        **{("a", i): 1_000 * i + 7 for i in range(300) if i != 1},
        ("b" * 150, 0): 7,
        ("b" * 150, 2): 2_007,
    }
    assert rest == [("gone", 0, {}), ("loading", 14, {}), ("unstable", 72, {("a", 0): 7, ("a", 3): 3_007})]


def test_a_truncated_fetch_answer_is_a_protocol_error() -> None:
    response = _fetch_response(12)
    [(_, request)] = fetch_requests({("t", 0): 0}, {("t", 0): 1}, {})
    parser = KafkaProtocol(client_id="streamstack-lag-exporter")
    request.API_VERSION = response.API_VERSION = 12
    response.with_header(correlation_id=parser.send_request(request))
    data = response.encode(header=True)
    cut = data[: len(data) // 2]
    with pytest.raises(KafkaProtocolError):
        parser.receive_bytes(len(cut).to_bytes(4, "big") + cut)


@pytest.mark.parametrize(("leaders", "most"), [(1, 2), (3, 6), (30, 6)])
def test_fetches_in_flight_are_two_per_leader_at_most_six_and_every_answer_is_taken_in_order(
    leaders: int, most: int
) -> None:
    """Requests go out while earlier answers are taken: two per leader in flight, never more than six (each
    answer may hold 4 MiB of records: a cluster of 30 brokers would otherwise hold 60 at once); every answer
    is taken once, in the order sent."""
    requests = [(leader, f"request-{turn}-{leader}") for turn in range(4) for leader in range(leaders)]
    brokers, taken = _Brokers(), list[object]()
    admin = type("Admin", (), {"_manager": brokers})()
    _drive(_send_windowed(admin, requests, time.monotonic() + 60, 2, taken.append), brokers)
    assert taken == [("answer", leader, request) for leader, request in requests]
    assert brokers.most_in_flight == most


# -- the loop with a reader of several offsets per partition -------------------------------------------


class ManyOffsetsKafka(FakeKafka):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[dict[TP, list[int]]] = []
        self.fail = False

    def record_timestamps(self, wanted: Mapping[TP, int], budget: float) -> dict[TP, int]:
        raise AssertionError("a reader of several offsets is asked once, through timestamps_at")

    def timestamps_at(
        self, wanted: Mapping[TP, Iterable[int]], budget: float
    ) -> dict[tuple[str, int, int], int]:
        self.asked.append({tp: sorted(offsets) for tp, offsets in wanted.items()})
        if self.fail:
            raise ConnectionError("fetch failed")
        return {
            (*tp, offset): self.timestamps[(*tp, offset)]
            for tp, offsets in wanted.items()
            for offset in offsets
            if (*tp, offset) in self.timestamps
        }


def test_the_loop_asks_for_every_offset_of_a_partition_at_once_and_caches_the_answers() -> None:
    kafka = ManyOffsetsKafka()
    kafka.committed = {"a": {("t", 0): 4}, "b": {("t", 0): 7}, "c": {("t", 0): 10}}
    kafka.latest = {("t", 0): 10}
    kafka.timestamps = {("t", 0, 4): 90_000, ("t", 0, 7): 95_000}
    registry = CollectorRegistry()
    config = ExporterConfig(bootstrap_servers="fake:1", refresh_interval=1, window=4)
    refresher = Refresher(config, kafka, ExporterHealth(registry), clock=lambda: 100.0)
    registry.register(LagCollector(refresher.latest))

    assert refresher.refresh()
    assert kafka.asked == [{("t", 0): [4, 7]}]  # group c is caught up: nothing to read for it
    labels = {"source": "group", "topic": "t", "partition": "0"}
    assert registry.get_sample_value("streamstack_lag_seconds", {**labels, "group": "a"}) == 10.0
    assert registry.get_sample_value("streamstack_lag_seconds", {**labels, "group": "b"}) == 5.0
    assert refresher.refresh()
    assert len(kafka.asked) == 1  # both answers cached

    kafka.committed["a"] = {("t", 0): 5}
    kafka.fail = True
    assert refresher.refresh()  # a failed lookup does not fail the collection
    assert kafka.asked[-1] == {("t", 0): [5]}
    assert registry.get_sample_value("streamstack_lag_exporter_errors_total", {"kind": "timestamp"}) == 1


# -- the status rules on the history's columns --------------------------------------------------------------


def test_statuses_and_rates_from_the_columns_equal_the_rules_on_samples() -> None:
    """Random histories, fed to two histories alike: the column evaluation must agree with
    evaluate_partition() and consumption_rate() on the Sample objects, for every sample of every history."""
    generator = random.Random(4)
    seen: set[Status] = set()
    for case in range(400):
        window = generator.choice([3.0, 10.0, 30.0])
        by_samples, by_columns = ScalarHistory(window), ScalarHistory(window)
        at = 1_000.0
        committed = generator.randrange(0, 10**12)
        for _ in range(generator.randrange(1, 40)):
            at += generator.choice([0.0, 0.5, 1.0, 1.0, 2.5, 7.0, -1.0])  # equal, steady, jumps, clock back
            committed += generator.choice([0, 0, 0, 1, 5, 100, -3])
            lag = generator.choice([0, 1, 5, 5, 40, generator.randrange(0, 10**9)])
            last_commit = generator.choice([None, at - 1.0, at - 2 * window, at])
            sample = Sample(at, committed, lag, last_commit)
            now = at + generator.choice([0.0, 0.0, 0.25, window])
            samples = by_samples.record(("g", case), sample)
            expected = (evaluate_partition(samples, now, window), consumption_rate(samples, now, window))
            assert by_columns.record_and_evaluate(("g", case), sample, now) == expected, (case, samples)
            seen.add(expected[0])
    assert seen == set(PARTITION_STATUSES)  # every rule was exercised


def test_partitions_sampled_at_the_same_times_share_them_and_keep_their_own_values() -> None:
    """The loop samples every partition at once: their time tuples are one object, and each partition's
    status, rate and samples are what a history holding only that partition gives, also for a partition
    that joins later (shorter history) and one that is sampled at other times."""
    window = 30.0
    shared, alone = ScalarHistory(window), {key: ScalarHistory(window) for key in ("a", "b", "late", "odd")}
    for step in range(12):
        now = 1_000.0 + 10 * step
        samples = {"a": Sample(now, 100 + step, 5, None), "b": Sample(now, 7, 3 + step, now - 1.0)}
        if step >= 6:
            samples["late"] = Sample(now, 50, 0 if step == 8 else 9, None)
        samples["odd"] = Sample(now + 0.5, 10 * step, 10, None)
        for key, sample in samples.items():
            evaluated = shared.record_and_evaluate(key, sample, now + 0.5)
            assert evaluated == alone[key].record_and_evaluate(key, sample, now + 0.5), (step, key)
    tracks = shared._tracks
    assert tracks["a"].times is tracks["b"].times and tracks["late"].times is not tracks["odd"].times
    assert tracks["a"].times == (1_080.0, 1_090.0, 1_100.0, 1_110.0)  # 1,080 is the window's anchor
    assert [sample.lag for sample in shared.record("b", Sample(1_120.0, 7, 20, 1_119.0))] == [12, 13, 14, 20]
    assert shared.record_and_evaluate("b", Sample(1_130.0, 7, 21, None), 1_130.0) == (Status.STOP, 0.0)
    assert len(shared) == 4
    shared.retain(["a"])
    assert len(shared) == 1


def test_statuses_and_rates_of_all_partitions_at_once_equal_the_rules_on_each_partitions_samples() -> None:
    """The column history (numpy, all partitions per collection) against evaluate_partition() and
    consumption_rate() on each partition's samples as ScalarHistory keeps them, on random histories: equal
    and repeated times, the clock going back, commits going back, lags of 0, huge offsets and lags, windows
    that fit 1 to 40 collections, partitions that join late, miss collections (then kept apart), are
    dropped and come back. Every status is reached, at every partition count the loop could see."""
    generator = random.Random(17)
    seen: set[Status] = set()
    for case in range(150):
        window = generator.choice([3.0, 10.0, 30.0, 300.0])
        miss = generator.choice([0.0, 0.0, 0.0, 0.03, 0.2])
        columns, reference = History(window), ScalarHistory(window)
        partitions = generator.randrange(1, 12)
        committed = [generator.choice([0, generator.randrange(0, 10**15)]) for _ in range(partitions)]
        at = 1_700_000_000.0
        for step in range(generator.randrange(1, 45)):
            at += generator.choice([0.0, 0.5, 1.0, 1.0, 2.5, 10.0, 10.0, 10.0, 400.0, -1.0])
            keys, offsets, lags, commits = [], [], [], []
            for partition in range(partitions):
                if (partition > 0 and step < partition) or generator.random() < miss:
                    continue  # joins late, or missed this collection
                committed[partition] += generator.choice([0, 0, 0, 1, 5, 100, -3])
                keys.append(("group", "g", "t", partition))
                offsets.append(committed[partition])
                lags.append(generator.choice([0, 1, 5, 5, 40, 10**12, generator.randrange(0, 10**9)]))
                commits.append(generator.choice([math.nan, at - 1.0, at - 2 * window, at, at - window]))
            codes, rates = columns.record(
                keys, np.array(offsets, np.int64), np.array(lags, np.int64), np.array(commits), at
            )
            for index, key in enumerate(keys):
                commit = None if math.isnan(commits[index]) else commits[index]
                samples = reference.record(key, Sample(at, offsets[index], lags[index], commit))
                expected = (evaluate_partition(samples, at, window), consumption_rate(samples, at, window))
                got = (STATUS_BY_CODE[int(codes[index])], float(rates[index]))
                assert got == expected, (case, step, key, samples)
                assert columns.samples(key) == samples, (case, step, key)
                seen.add(expected[0])
            if generator.random() < 0.05:  # a partition is no longer reported: forgotten, then new again
                gone = ("group", "g", "t", generator.randrange(partitions))
                keep = {("group", "g", "t", p) for p in range(partitions)} - {gone}
                columns.retain(keep)
                reference.retain(keep)
                assert columns.samples(gone) == []
            assert len(columns) == len(reference)
    assert seen == set(PARTITION_STATUSES)  # every rule was reached


class _CountedKeys(Sequence[tuple[str, str, str, int]]):
    """Keys as the snapshot hands them to the history (built from its columns): counts item lookups."""

    def __init__(self, keys: list[tuple[str, str, str, int]]) -> None:
        self._keys = keys
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, index: Any) -> Any:
        self.lookups += 1
        return self._keys[index]

    def __iter__(self) -> Iterator[tuple[str, str, str, int]]:
        return iter(self._keys)


def test_the_history_takes_many_new_keys_in_one_pass_and_a_few_one_by_one() -> None:
    """A first collection's keys are all new: taken in one pass over them (the snapshot's keys are cheap to
    iterate and dear to index: 0.5-0.7 s of a first collection at 150,000 keys), not one lookup per key; later
    collections look up the few new ones. Statuses and samples are those of keys given as a list."""
    keys = [("group", f"g{group}", "t", partition) for group in range(4) for partition in range(500)]
    counted, plain = History(30.0), History(30.0)
    for step, wanted in enumerate([keys[:1_000], keys[:1_010], keys]):
        given = _CountedKeys(wanted)
        offsets = np.arange(len(wanted), dtype=np.int64) + step
        lags = np.arange(len(wanted), dtype=np.int64) % 7
        commits = np.full(len(wanted), math.nan)
        now = 1_000.0 + 10 * step
        got = counted.record(given, offsets, lags, commits, now)
        expected = plain.record(wanted, offsets, lags, commits, now)
        assert [array.tolist() for array in got] == [array.tolist() for array in expected]
        assert given.lookups == [0, 10, 0][step], step
    assert all(counted.samples(key) == plain.samples(key) for key in keys[::97])


def test_column_history_keeps_collections_only_while_a_partition_needs_them() -> None:
    """One sample time per collection, shared by all partitions; collections older than every partition's
    anchor are dropped; a partition that misses a collection keeps its samples (apart) and its status."""
    history = History(30.0)
    keys = [("group", "g", "t", p) for p in range(3)]
    for step in range(12):
        now = 1_000.0 + 10 * step
        sampled = keys if step != 9 else keys[:2]  # partition 2 misses one collection
        codes, rates = history.record(
            sampled,
            np.array([100 + step, 7, 50][: len(sampled)]),
            np.array([5, 3 + step, 9][: len(sampled)]),
            np.array([math.nan, now - 1.0, math.nan][: len(sampled)]),
            now,
        )
    assert history._times == [1_080.0, 1_090.0, 1_100.0, 1_110.0]  # 1,080 is the window's anchor
    assert [STATUS_BY_CODE[int(code)] for code in codes] == [Status.OK, Status.STALL, Status.STOP]
    assert rates.tolist() == [0.1, 0.0, 0.0]
    assert [sample.at for sample in history.samples(keys[2])] == [1_080.0, 1_100.0, 1_110.0]
    assert len(history) == 3
    history.retain(keys[:1])
    assert len(history) == 1 and history.samples(keys[2]) == []


def test_column_history_is_int32_until_a_value_does_not_fit_and_sized_for_its_window_once() -> None:
    """Samples are kept as int32 while they fit and as int64 from the first that does not, with the same
    statuses, rates and samples as the per-partition history; the ring is allocated for a window's worth of
    collections once the pace is known, not grown a few slots at a time (a copy of the ring each time)."""
    window = 300.0
    history, reference = History(window), ScalarHistory(window)
    keys = [("group", "g", "t", p) for p in range(4)]
    shapes = []
    for step in range(40):
        now = 1_000.0 + 10 * step
        base = 2**31 - 20 if step >= 25 else 0  # partition 0's offsets cross int32's range at step 25
        offsets = [base + step, 7, 50 + 2 * step, 2**31 - 2 - step]  # its latest offset: 2**31 - 1 - step
        lags = [5, 3 + step, 0 if step % 7 == 0 else 9, 1]
        codes, rates = history.record(
            keys, np.array(offsets, np.int64), np.array(lags, np.int64), np.full(4, math.nan), now
        )
        assert history._committed.dtype == (np.int64 if step >= 25 else np.int32)
        shapes.append(history._committed.shape[0])
        for index, key in enumerate(keys):
            samples = reference.record(key, Sample(now, offsets[index], lags[index], None))
            expected = (evaluate_partition(samples, now, window), consumption_rate(samples, now, window))
            assert (STATUS_BY_CODE[int(codes[index])], float(rates[index])) == expected, (step, key)
            assert history.samples(key) == samples, (step, key)
    assert sorted(set(shapes)) == [5, 36]  # 1 + 4 spare; from the 6th: 300 s / 10 s + 2 + 4 spare
    assert {STATUS_BY_CODE[int(code)] for code in codes} >= {Status.REWIND, Status.STOP}


def test_produced_history_keeps_a_bounded_number_of_points() -> None:
    produced = ProducedHistory(limit=4)
    for offset in range(10):
        produced.record(("t", 0), offset, float(offset))
    assert produced.points(("t", 0)) == ((6, 6.0), (7, 7.0), (8, 8.0), (9, 9.0))
    assert produced.points(("t", 1)) == ()


def _reference_points(points: list[tuple[int, float]], latest: int, at: float, limit: int) -> None:
    """ProducedHistory's rule on one partition's list of points: a run of one offset keeps its first and
    last time; at most `limit` points, the oldest dropped."""
    if len(points) >= 2 and points[-1][0] == latest and points[-2][0] == latest:
        points[-1] = (latest, at)
        return
    points.append((latest, at))
    if len(points) > limit:
        del points[0]


def test_produced_history_columns_keep_the_points_of_the_per_partition_rule() -> None:
    """Recorded for many partitions at once, in columns, the points equal the rule applied to each
    partition alone, on random offsets: idle, busy and bursty partitions, limits below, at and above the
    columns' width (a partition then moves to arrays of its own), partitions forgotten and new again
    (their row reused), offsets near int64's ends."""
    generator = random.Random(23)
    for case in range(120):
        limit = generator.choice([1, 2, 3, 4, 5, 7, 256])
        produced = ProducedHistory(limit=limit)
        reference: dict[TP, list[tuple[int, float]]] = {}
        partitions = [("t", p) for p in range(generator.randrange(1, 30))]
        latest = {tp: generator.choice([0, 2**62, generator.randrange(0, 1000)]) for tp in partitions}
        busy = {tp: generator.choice([0.0, 0.0, 0.1, 0.5, 1.0]) for tp in partitions}
        at = 1_700_000_000.0
        for _ in range(generator.randrange(1, 60)):
            at += generator.choice([1.0, 10.0, 0.0])
            sampled = [tp for tp in partitions if generator.random() > 0.05]
            for tp in sampled:
                if generator.random() < busy[tp]:
                    latest[tp] += generator.choice([1, 7, -2])
            produced.record_all(sampled, [latest[tp] for tp in sampled], at)
            for tp in sampled:
                _reference_points(reference.setdefault(tp, []), latest[tp], at, limit)
            if generator.random() < 0.1:
                gone = generator.choice(partitions)
                keep = [tp for tp in partitions if tp != gone]
                produced.retain(keep)
                reference.pop(gone, None)
            for tp in partitions:
                assert produced.points(tp) == tuple(reference.get(tp, ())), (case, tp)
        assert len(produced) == len(reference)


def test_interpolated_append_times_of_all_rows_at_once_equal_appended_at_on_each() -> None:
    """ProducedHistory.appended_at_all (the lag seconds of rows without a record timestamp, a column at a
    time) against appended_at() on each partition's points, exactly: offsets below, between, on and above
    the points, runs of one offset, partitions kept in the columns and in arrays of their own, unknown
    partitions, offsets too large for float64 differences."""
    generator = random.Random(29)
    for case in range(200):
        produced = ProducedHistory(limit=generator.choice([3, 4, 6, 256]))
        partitions = [("t", p) for p in range(generator.randrange(1, 12))]
        base = generator.choice([0, 10**6, 2**52 - 100, 2**62])
        latest = {tp: base + generator.randrange(0, 50) for tp in partitions}
        at = 1_700_000_000.0
        for _ in range(generator.randrange(1, 12)):
            at += generator.choice([0.0, 1.0, 10.0, 7.5])
            for tp in partitions:
                latest[tp] += generator.choice([0, 0, 1, 3, 40])
            produced.record_all(partitions, [latest[tp] for tp in partitions], at)
        asked = [*partitions, ("unknown", 0)]
        tps = [generator.choice(asked) for _ in range(40)]
        offsets = [latest.get(tp, base) - generator.randrange(-2, 200) for tp in tps]
        now = at + generator.choice([0.0, 5.0])
        got = produced.appended_at_all(tps, np.array(offsets, np.int64), now).tolist()
        expected = [appended_at(o, produced.points(tp), now) for tp, o in zip(tps, offsets, strict=True)]
        assert got == expected, case


def test_produced_history_of_idle_partitions_stays_in_its_columns() -> None:
    """50,000 partitions whose latest offset does not move keep two points each in the columns: a few MB,
    where two arrays per partition took 16.6 MB (Python's allocations, tracemalloc: 7.9 MB now, most of it
    the dict of partitions)."""
    partitions = [(f"topic-{index // 10:04d}", index % 10) for index in range(50_000)]
    offsets = [index % 37 for index in range(50_000)]
    produced = ProducedHistory()
    tracemalloc.start()
    try:
        for step in range(5):
            produced.record_all(partitions, offsets, 1_700_000_000.0 + 10 * step)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert produced.points(partitions[7]) == ((7, 1_700_000_000.0), (7, 1_700_000_040.0))
    assert held < 9_000_000, held


def test_the_text_is_compressed_beside_the_rendering_and_a_failure_on_either_side_is_raised() -> None:
    chunks = [f"line {index} " * (index % 50) + "\n" for index in range(3000)]
    stream = io.BytesIO()
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    assert _compress_beside(iter(chunks), compressor, stream) == len("".join(chunks).encode())
    stream.write(compressor.flush())
    assert gzip.decompress(stream.getvalue()).decode() == "".join(chunks)

    class Broken:
        def compress(self, data: bytes) -> bytes:
            raise zlib.error("broken compressor")

    with pytest.raises(zlib.error, match="broken compressor"):  # raised while chunks were still coming
        _compress_beside(iter(chunks), Broken(), io.BytesIO())

    def failing_rendering() -> Iterator[str]:
        yield from chunks[:10]
        raise ValueError("rendering failed")

    with pytest.raises(ValueError, match="rendering failed"):
        _compress_beside(failing_rendering(), zlib.compressobj(), io.BytesIO())
    assert not [thread for thread in threading.enumerate() if thread.name == "lag-text-compression"]


def test_a_scrape_during_a_rendering_gets_the_previous_one_without_waiting() -> None:
    exposition = LagExposition()
    old, new = _snapshot(), _snapshot("topic")
    previous = exposition.prepare(old)
    with exposition._lock:  # the loop is rendering `new`
        assert exposition.current(new) is previous
    assert exposition.current(new).snapshot is new
