"""Prometheus side: the lag families of the latest snapshot, the exporter's own health metrics, /metrics.

`LagCollector.collect()` builds fresh metric families from whatever snapshot the refresh loop published last,
so a scrape never touches Kafka and a group, topic or partition that is gone from the snapshot is gone from
the output. The exporter's health (up, stale, collection duration, last success, errors) is ordinary direct
instrumentation on its own registry.

/metrics (`metrics_app`) does not render the lag families at each scrape: at 10,000 partitions x 100 groups
they are ~400,000 samples and ~50 MB of text, seconds of work. `LagExposition` renders them once per
snapshot (the refresh loop calls `prepare()` right after publishing one) into a gzip stream that is flushed
but not finished; a scrape copies the compressor, appends the health families rendered then, and finishes
the stream, so it costs the same at any number of series. The text is what prometheus_client renders for
the same families (checked by the tests), in both exposition formats: the lag samples are the same bytes in
the text format 0.0.4 and in OpenMetrics, whose `# EOF` ends the health part. The lag families come first,
the health families last. A client that does not accept gzip gets the stream decompressed on the fly.
`?name[]=...` selects among the health families only, as prometheus_client does for collectors that do not
describe their families.

Labels: `source` is `group`, `shadow` (group id starts with the shadow prefix) or `checkpoint`; `group` is
the consumer group id or the checkpoint's label; `partition` is absent with `--granularity topic`. Never
`job` or `instance`.
"""

from __future__ import annotations

import io
import socket
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from queue import Queue
from socketserver import ThreadingMixIn
from typing import Any, NamedTuple
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client import utils as prometheus_utils
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from zlib_ng import zlib_ng

from contracts.metrics import (
    CHECKPOINT_READABLE,
    EXPORTER_LAST_SUCCESS,
    EXPORTER_STALE,
    EXPORTER_UP,
    GROUP_MAX_SECONDS,
    GROUP_RECORDS,
    GROUP_STATUS_CODE,
    LAG_PREFIX,
    STATUS_CODE,
)
from monitoring.lag_exporter.snapshot import (
    CHUNK,
    OffsetColumns,
    PartitionColumns,
    PartitionLag,
    Snapshot,
    map_in_chunks,
)
from monitoring.lag_exporter.status import GROUP_STATUSES, Status

ERROR_KINDS = ("kafka", "group", "checkpoint", "timestamp", "commit_log", "internal")


class ExporterHealth:
    """The exporter's own metrics; one instance per registry (no module-level metric objects)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(LAG_PREFIX + name, documentation, registry=registry)

        self.up = gauge(EXPORTER_UP, "1 if the last collection reached Kafka, 0 if it failed")
        self.stale = gauge(
            EXPORTER_STALE,
            "1 while the values served are from an older collection because the last one failed",
        )
        self.duration = gauge("exporter_collection_duration_seconds", "How long the last collection took")
        self.last_success = gauge(EXPORTER_LAST_SUCCESS, "Unix time of the last successful collection")
        self.errors = Counter(
            LAG_PREFIX + "exporter_errors",
            "Errors while collecting, by kind (kafka, group, checkpoint, timestamp, commit_log, internal)",
            ["kind"],
            registry=registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind=kind)

    def error(self, kind: str, count: int = 1) -> None:
        self.errors.labels(kind=kind).inc(count)

    def succeeded(self, at: float, duration: float) -> None:
        self.up.set(1)
        self.stale.set(0)
        self.last_success.set(at)
        self.duration.set(duration)

    def failed(self, duration: float, have_values: bool) -> None:
        self.up.set(0)
        self.stale.set(1 if have_values else 0)
        self.duration.set(duration)


class _Family(NamedTuple):
    """One lag family: its name (after the prefix), help text, and either a value per row or, for a status
    family, the statuses it has a series for (1 for the row's status, 0 for the others)."""

    name: str
    documentation: str
    value: Callable[[Any], float] | None = None
    statuses: tuple[Status, ...] = ()


_PARTITION_FAMILIES = (
    _Family("committed_offset", "Next offset the consumer will process (its commit)", lambda r: r.committed),
    _Family(
        "records", "Lag in records: latest offset minus committed offset, never negative", lambda r: r.lag
    ),
    _Family(
        "seconds",
        "Lag in seconds: age of the oldest unprocessed record, 0 when caught up",
        lambda r: r.lag_seconds,
    ),
    _Family(
        "consumed_records_per_second",
        "Records per second the consumer committed over the window",
        lambda r: r.consumption_rate,
    ),
    _Family(
        "catch_up_eta_seconds",
        "Lag divided by the consumption rate over the window; +Inf when lagging and not consuming",
        lambda r: r.eta_seconds,
    ),
    _Family(
        "data_loss",
        "1 if the committed offset is below the earliest offset kept",
        lambda r: 1 if r.data_loss else 0,
    ),
    _Family("lost_records", "Records deleted before the consumer processed them", lambda r: r.lost_records),
    _Family(
        STATUS_CODE,
        "Partition status as a number: OK 1, WARN 2, STOP 4, STALL 5, REWIND 6",
        lambda r: r.status.code,
    ),
)
_GROUP_FAMILIES = (
    _Family(GROUP_RECORDS, "Sum of the lag in records over the group's partitions", lambda g: g.lag),
    _Family("group_max_records", "Highest lag in records of any partition of the group", lambda g: g.max_lag),
    _Family(
        GROUP_MAX_SECONDS,
        "Highest lag in seconds of any partition of the group",
        lambda g: g.max_lag_seconds,
    ),
    _Family(
        "group_status",
        "Burrow-style group status: 1 for the current status (OK, WARN, ERR)",
        statuses=GROUP_STATUSES,
    ),
    _Family(GROUP_STATUS_CODE, "Group status as a number: OK 1, WARN 2, ERR 3", lambda g: g.status.code),
)
_OFFSET_FAMILIES = (
    _Family("partition_earliest_offset", "Earliest offset kept in the partition", lambda o: o.earliest),
    _Family("partition_latest_offset", "Offset the next record appended will get", lambda o: o.latest),
)
_CHECKPOINT_FAMILIES = (
    _Family(
        CHECKPOINT_READABLE,
        "1 if the Spark checkpoint could be read at the last collection, 0 if missing or corrupt",
        lambda c: 1 if c.readable else 0,
    ),
)


class _Table(NamedTuple):
    """Rows of one kind with their label names and values, and the families rendered from them."""

    label_names: list[str]
    rows: Sequence[tuple[list[str], Any]]  # (label values, row)
    families: tuple[_Family, ...]


def _tables(snapshot: Snapshot) -> list[_Table]:
    by_partition = snapshot.granularity == "partition"

    def partition_values(row: PartitionLag) -> list[str]:
        base = [row.source, row.group, row.topic]
        return [*base, str(row.partition)] if by_partition else base

    return [
        _Table(
            ["source", "group", "topic", *(["partition"] if by_partition else [])],
            [(partition_values(row), row) for row in snapshot.partitions],
            _PARTITION_FAMILIES,
        ),
        *_other_tables(snapshot),
    ]


def _other_tables(snapshot: Snapshot, offsets: bool = True) -> list[_Table]:
    """The tables after the partitions': groups, partition offsets (with `offsets`; empty without),
    checkpoints."""
    by_partition = snapshot.granularity == "partition"
    return [
        _Table(
            ["source", "group"],
            [([group.source, group.group], group) for group in snapshot.groups],
            _GROUP_FAMILIES,
        ),
        _Table(
            ["topic", *(["partition"] if by_partition else [])],
            [
                ([entry.topic, *([str(entry.partition)] if by_partition else [])], entry)
                for entry in (snapshot.offsets if offsets else ())
            ],
            _OFFSET_FAMILIES,
        ),
        _Table(
            ["checkpoint", "group"],
            [([health.checkpoint, health.group], health) for health in snapshot.checkpoints],
            _CHECKPOINT_FAMILIES,
        ),
    ]


class LagCollector:
    """Yields the lag families of the latest snapshot (`snapshot()` returns None before the first one)."""

    def __init__(self, snapshot: Callable[[], Snapshot | None]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []  # no fixed set of series: registering must not trigger a collection

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        if snapshot is None:
            return
        for table in _tables(snapshot):
            for family in table.families:
                if family.value is None:
                    metric = GaugeMetricFamily(
                        LAG_PREFIX + family.name, family.documentation, labels=[*table.label_names, "status"]
                    )
                    for values, row in table.rows:
                        for candidate in family.statuses:
                            metric.add_metric([*values, candidate.name], 1 if candidate is row.status else 0)
                else:
                    metric = GaugeMetricFamily(
                        LAG_PREFIX + family.name, family.documentation, labels=table.label_names
                    )
                    for values, row in table.rows:
                        metric.add_metric(values, family.value(row))
                yield metric


# -- rendering once per snapshot -----------------------------------------------------------------------------


def _float_to_go_string(value: float) -> str:
    text: str = prometheus_utils.floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


_PARTITION_COLUMNS: dict[str, Callable[[PartitionColumns], npt.NDArray[Any]]] = {
    "committed_offset": lambda c: c.committed,
    "records": lambda c: c.lag,
    "seconds": lambda c: c.lag_seconds,
    "consumed_records_per_second": lambda c: c.consumption_rate,
    "catch_up_eta_seconds": lambda c: c.eta_seconds,
    "data_loss": lambda c: (c.lost_records > 0).astype(np.int64),
    "lost_records": lambda c: c.lost_records,
    STATUS_CODE: lambda c: c.status.astype(np.int64),
}


class _Rendering(NamedTuple):
    """One table to render: per label (in `label_names` order) the `name="value"` text of each distinct
    value and each row's index among them; per family the values of the rows; each row's status code."""

    label_names: list[str]
    labels: list[tuple[list[str], npt.NDArray[np.intp]]]
    families: tuple[_Family, ...]
    values: Callable[[_Family], list[Any] | npt.NDArray[Any]]
    codes: list[int]


def _pairs(name: str, values: Sequence[str]) -> list[str]:
    return [f'{name}="{_escape(value)}"' for value in values]


def _factorized(name: str, values: Sequence[str]) -> tuple[list[str], npt.NDArray[np.intp]]:
    seen: dict[str, int] = {}
    index = np.fromiter((seen.setdefault(value, len(seen)) for value in values), np.intp, len(values))
    return _pairs(name, list(seen)), index


def _renderings(snapshot: Snapshot) -> list[_Rendering]:
    by_partition = snapshot.granularity == "partition"
    columns = snapshot.columns
    partition_labels = [
        (_pairs("source", columns.sources), columns.source.astype(np.intp)),
        (_pairs("group", columns.groups), columns.group.astype(np.intp)),
        (_pairs("topic", columns.topics), columns.topic.astype(np.intp)),
    ]
    if by_partition and columns.partition is not None:
        numbers, index = np.unique(columns.partition, return_inverse=True)
        partition_labels.append((_pairs("partition", [str(n) for n in numbers.tolist()]), index))
    renderings = [
        _Rendering(
            ["source", "group", "topic", *(["partition"] if by_partition else [])],
            partition_labels,
            _PARTITION_FAMILIES,
            lambda family: _PARTITION_COLUMNS[family.name](columns),
            [],  # no status family per partition: its status is the code family alone
        )
    ]
    for table in _other_tables(snapshot, offsets=False):
        if table.families is _OFFSET_FAMILIES:  # 50,000 at the goal's size: as columns
            renderings.append(_offset_rendering(snapshot.offset_columns, by_partition))
            continue
        rows = [row for _, row in table.rows]
        renderings.append(
            _Rendering(
                table.label_names,
                [
                    _factorized(name, [values[i] for values, _ in table.rows])
                    for i, name in enumerate(table.label_names)
                ],
                table.families,
                lambda family, rows=rows: list(map(family.value, rows)),  # type: ignore[misc]
                [row.status.code for row in rows] if rows and hasattr(rows[0], "status") else [],
            )
        )
    return renderings


def _offset_rendering(offsets: OffsetColumns, by_partition: bool) -> _Rendering:
    labels = [(_pairs("topic", offsets.topics), offsets.topic.astype(np.intp))]
    if by_partition and offsets.partition is not None:
        numbers, index = np.unique(offsets.partition, return_inverse=True)
        labels.append((_pairs("partition", [str(n) for n in numbers.tolist()]), index))
    elif by_partition:  # rows folded per topic in a snapshot by partition (made from rows, in tests)
        labels.append(_factorized("partition", [str(row.partition) for row in offsets.rows()]))
    earliest, latest = offsets.earliest, offsets.latest
    return _Rendering(
        ["topic", *(["partition"] if by_partition else [])],
        labels,
        _OFFSET_FAMILIES,
        lambda family: earliest if family.name == "partition_earliest_offset" else latest,
        [],
    )


def render_lag_text(snapshot: Snapshot, rows_per_chunk: int = 2000) -> Iterator[str]:
    """The lag families of `snapshot` in the exposition text format, in chunks of about `rows_per_chunk`
    rows: byte for byte what prometheus_client renders for `LagCollector.collect()`, in the text format 0.0.4
    and (without its final `# EOF`) in OpenMetrics. Rendered from the snapshot's columns: each label's text
    made once per distinct value, the rows' label texts joined once for all families."""
    for table in _renderings(snapshot):
        order = sorted(range(len(table.label_names)), key=table.label_names.__getitem__)
        with_status = sorted([*table.label_names, "status"])
        split = with_status.index("status")  # labels sorted before `status`, then those after
        labels = _label_texts([table.labels[i] for i in order])
        count = len(labels)
        if not any(family.value is None for family in table.families):
            cuts = []
        elif split:  # where `status` goes: after the labels sorted before it and their commas
            cut = np.full(count, split, np.int64)
            for i in order[:split]:
                pairs, index = table.labels[i]
                cut += np.fromiter(map(len, pairs), np.int64, len(pairs))[index]
            cuts = cut.tolist()
        else:
            cuts = [0] * count
        for family in table.families:
            name = LAG_PREFIX + family.name
            documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
            header = f"# HELP {name} {documentation}\n# TYPE {name} gauge\n"
            if family.value is None:
                # per status code of a row, its lines: "{0}" the text up to the status value, "{1}" after it
                lines_of = {
                    status.code: "".join(
                        f"{{0}}{candidate.name}{{1}}{'1.0' if candidate is status else '0.0'}\n"
                        for candidate in family.statuses
                    )
                    for status in Status
                }
                step = max(1, rows_per_chunk // max(1, len(family.statuses)))
                for first in range(0, max(1, count), step):
                    lines = [header] if first == 0 else []
                    for all_labels, cut_at, current in zip(
                        labels[first : first + step],
                        cuts[first : first + step],
                        table.codes[first : first + step],
                        strict=True,
                    ):
                        if cut_at > len(all_labels):  # `status` sorts last
                            before, after = all_labels + ",", ""
                        else:  # `before` is empty or ends with its comma
                            before, after = all_labels[:cut_at], all_labels[cut_at:]
                        lines.append(
                            lines_of[current].format(
                                f'{name}{{{before}status="', f'"{"," if after else ""}{after}}} '
                            )
                        )
                    yield "".join(lines)
                continue
            values = table.values(family)
            for first in range(0, max(1, count), rows_per_chunk):
                # the values' texts a chunk at a time: 150,000 strings at once were 13 MB more at the peak
                texts = _format_values(values[first : first + rows_per_chunk])
                lines = [
                    f"{name}{{{all_labels}}} {text}\n"
                    for all_labels, text in zip(labels[first : first + rows_per_chunk], texts, strict=True)
                ]
                yield (header if first == 0 else "") + "".join(lines)


def _row_of(*values: str) -> tuple[str, ...]:
    return values


def _label_texts(labels: Sequence[tuple[list[str], npt.NDArray[np.intp]]]) -> list[str]:
    """Each row's labels joined by commas, the labels given as (texts of the distinct values, each row's
    index among them), in the order given: made CHUNK rows at a time, so that the rows' label texts and
    their tuples (~16 MB at 150,000 rows) do not live beside the joined texts (~20 MB), which the
    rendering keeps."""
    if not labels:
        return []
    tables = [np.array(texts, dtype=object) for texts, _ in labels]
    count = len(labels[0][1])
    result: list[str] = []
    for start in range(0, count, CHUNK):
        parts = [
            table[index[start : start + CHUNK]].tolist()
            for table, (_, index) in zip(tables, labels, strict=True)
        ]
        result.extend(map(",".join, map(_row_of, *parts)))
    return result


# "0.0" ... "1023.0": the text of most values of most families (statuses, data loss, lost records, lag in
# records, and the zeros of caught-up partitions), taken from here in bulk rather than formatted per row
_SMALL_WHOLE_NUMBERS = 1024
_SMALL_WHOLE_NUMBER_TEXTS = np.array([f"{number}.0" for number in range(_SMALL_WHOLE_NUMBERS)], dtype=object)


_EXACT_FLOAT_INTS = 2**53  # every int below it is a float exactly


def _go_exponent_text(value: int) -> str:
    """floatToGoString of an int in [10**6, 2**53), from its digits: 1234500 is 1.2345e+06."""
    digits = str(value)
    fraction = digits[1:].rstrip("0")
    exponent = len(digits) - 1
    return f"{digits[0]}.{fraction}e+{exponent:02d}" if fraction else f"{digits[0]}e+{exponent:02d}"


def _format_values(values: list[Any] | npt.NDArray[Any]) -> list[str]:
    """floatToGoString of each value; a column in bulk: a whole number in [0, 1024) (an int, or a float
    other than -0.0) from a table, the rest of [0, 10**6) an int with ".0" or a float's repr (the same for
    any value there), an int in [10**6, 2**53) in Go's exponent notation from its digits; the others
    (negative, infinite, NaN, larger) one at a time through floatToGoString."""
    if not isinstance(values, np.ndarray):
        return [
            f"{value}.0"
            if value.__class__ is int and 0 <= value < 1_000_000
            else repr(value)
            if value.__class__ is float and 0.0 <= value < 1e6
            else _float_to_go_string(value)
            for value in values
        ]
    floating = values.dtype.kind == "f"
    with np.errstate(invalid="ignore"):
        small = (values >= 0) & (values < _SMALL_WHOLE_NUMBERS)
        if floating:
            small &= (values == np.floor(values)) & ~np.signbit(values)
        texts = _SMALL_WHOLE_NUMBER_TEXTS[np.where(small, values, 0).astype(np.intp)]
        others = np.flatnonzero(~small)
        if len(others):
            other_values = values[others]
            near = (other_values >= 0) & (other_values < 1_000_000)
            plain = map_in_chunks(repr if floating else "{}.0".format, other_values[near].tolist())
            texts[others[near]] = np.array(plain, dtype=object)  # no Python loop over the rows
            far = ~near
            if floating:  # +Inf (the ETA of a consumer that does not move) in bulk
                infinite = np.isposinf(other_values)
                texts[others[infinite]] = "+Inf"
                far &= ~infinite
            else:  # offsets of a cluster that has run a while: Go's exponent notation, from the digits
                exponent = (other_values >= 1_000_000) & (other_values < _EXACT_FLOAT_INTS)
                exponent_texts = map_in_chunks(_go_exponent_text, other_values[exponent].tolist())
                texts[others[exponent]] = np.array(exponent_texts, dtype=object)
                far &= ~exponent
            for index, value in zip(others[far].tolist(), other_values[far].tolist(), strict=True):
                texts[index] = _float_to_go_string(value)
    return texts.tolist()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class RenderedLag:
    """The lag text of one snapshot as a flushed, unfinished gzip stream and the compressor's state.

    It refers to its snapshot weakly (`snapshot` is None once the snapshot is gone): the rendering of the
    previous snapshot is served while the next one is rendered, and holding on to that snapshot would keep
    its columns (~14 MB at 150,000 rows) alive through the rendering, the collection's peak."""

    snapshot_ref: weakref.ref[Snapshot]
    gzip_prefix: bytes
    compressor: Any  # zlib-ng's compress object after the prefix: copy it, feed it more, flush it
    text_bytes: int

    @property
    def snapshot(self) -> Snapshot | None:
        return self.snapshot_ref()

    def gzip_with(self, tail: bytes) -> list[bytes]:
        """The whole gzip member in two parts, sent one after the other: the kept stream of the lag text,
        then `tail` compressed and the member's end. Joining them into one `bytes` copied the stream into
        fresh memory at every scrape: at 50,000 partitions x 500 groups (6 MB) ~4 ms of page faults and
        copying, most of the time to a scrape's first byte, with the GIL held."""
        compressor = self.compressor.copy()
        return [self.gzip_prefix, compressor.compress(tail) + compressor.flush()]

    def text_chunks(self, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
        """The lag text, decompressed `chunk_bytes` at a time (the text is ~30 times the gzip stream)."""
        decompressor = zlib.decompressobj(wbits=31)
        pending = self.gzip_prefix
        while True:
            chunk = decompressor.decompress(pending, chunk_bytes)
            pending = decompressor.unconsumed_tail
            if chunk:
                yield chunk
            elif not pending:
                return


class LagExposition:
    """Lag families rendered and compressed once per snapshot; keeps the latest rendering.

    Compressed by zlib-ng at its level 2 (a gzip stream like zlib's): at 50,000 partitions x 500 groups, 148
    MB of text, 0.09 s of CPU for 6.0 MB, where zlib's level 1 took 0.25 s for 6.1 MB and its default level
    6 nearly four times as long."""

    def __init__(self, compression_level: int = 2) -> None:
        self._level = compression_level
        self._rendered: RenderedLag | None = None
        self._lock = threading.Lock()

    def prepare(self, snapshot: Snapshot) -> RenderedLag:
        """The rendering of `snapshot`, made now unless it is the one kept (the refresh loop calls this
        right after publishing a snapshot, so a scrape finds it ready)."""
        with self._lock:
            rendered = self._rendered
            if rendered is not None and rendered.snapshot is snapshot:
                return rendered
            compressor = zlib_ng.compressobj(self._level, zlib_ng.DEFLATED, 31)
            # written into one growing buffer, taken without a copy: a list of the compressed chunks and
            # their join would hold the stream (~9 MB at 150,000 rows) twice at the end
            stream = io.BytesIO()
            size = _compress_beside(render_lag_text(snapshot), compressor, stream)
            stream.write(compressor.flush(zlib_ng.Z_SYNC_FLUSH))
            rendered = RenderedLag(weakref.ref(snapshot), stream.getvalue(), compressor, size)
            del stream
            self._rendered = rendered
            return rendered

    def current(self, snapshot: Snapshot) -> RenderedLag:
        """What a scrape serves: the rendering of `snapshot`; while the loop is still rendering it, the
        previous one (so a scrape never waits for a rendering)."""
        rendered = self._rendered
        if rendered is not None and (rendered.snapshot is snapshot or self._lock.locked()):
            return rendered
        return self.prepare(snapshot)


_COMPRESS_QUEUE_CHUNKS = 4  # ~0.2 MB of text each


def _compress_beside(chunks: Iterator[str], compressor: Any, stream: io.BytesIO) -> int:
    """Compress `chunks` into `stream` in a thread of its own while this one renders the next chunks, and
    return the text's length in bytes. zlib-ng lets go of the GIL while it compresses: at 50,000 partitions x
    500 groups the rendering (~0.6 s) and the compression (~0.55 s) took one after the other ~1.1 s of each
    collection, on one core. The queue holds a few chunks, so the text is never all in memory."""
    queue: Queue[bytes | None] = Queue(maxsize=_COMPRESS_QUEUE_CHUNKS)
    failure: list[BaseException] = []

    def compress() -> None:
        try:
            while (data := queue.get()) is not None:
                stream.write(compressor.compress(data))
        except BaseException as error:  # reported by the rendering thread
            failure.append(error)
            while queue.get() is not None:  # let the rendering finish its puts
                pass

    worker = threading.Thread(target=compress, name="lag-text-compression", daemon=True)
    worker.start()
    size = 0
    try:
        for chunk in chunks:
            data = chunk.encode()
            size += len(data)
            queue.put(data)
            del data
    finally:
        queue.put(None)
        worker.join()
    if failure:
        raise failure[0]
    return size


_WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def metrics_app(
    health: CollectorRegistry, lag: LagExposition, latest: Callable[[], Snapshot | None]
) -> _WsgiApp:
    """The WSGI app serving /metrics (any path, as prometheus_client does): the lag families of the latest
    snapshot, then the health families of `health`."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET")])
            return [b""]
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET")])
            return [f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()]
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("200 OK", [])
            return [b""]
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        gzipped = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
        params = parse_qs(environ.get("QUERY_STRING", ""))
        snapshot = None if "name[]" in params else latest()
        rendered = None if snapshot is None else lag.current(snapshot)
        health_text = encoder(health.restricted_registry(params["name[]"]) if "name[]" in params else health)
        headers = [("Content-Type", content_type)]
        body: Iterable[bytes]
        if rendered is None:
            body = [_gzip(health_text) if gzipped else health_text]
        elif gzipped:
            body = rendered.gzip_with(health_text)
        else:
            headers.append(("Content-Length", str(rendered.text_bytes + len(health_text))))
            start_response("200 OK", headers)
            return _chain(rendered.text_chunks(), health_text)
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(sum(len(part) for part in body))))
        start_response("200 OK", headers)
        return body

    return app


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _chain(chunks: Iterator[bytes], tail: bytes) -> Iterator[bytes]:
    yield from chunks
    yield tail


class _SilentHandler(WSGIRequestHandler):
    # the body goes out in several writes (the kept gzip stream, then its small end): without TCP_NODELAY
    # the last one may wait for the client's delayed ACK (up to 40 ms on Linux), as in Go's servers
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """No access log."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight does not hold up a stop


def start_metrics_server(host: str, port: int, app: _WsgiApp) -> tuple[WSGIServer, threading.Thread]:
    """Serve `app` on host:port (IPv4 or IPv6) from a daemon thread, one thread per request."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(_ThreadingServer):
        address_family = family

    server = make_server(str(address[0]), port, app, Server, handler_class=_SilentHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread
