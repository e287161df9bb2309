"""The JVM decoder (jobs.jvm.decoder) against the SQL one (jobs.common.events.decode_events_sql): the same
reason, detail and typed event for every record of a corpus with every dead-letter class, edge cases around
each, and random corruptions of good records, for every schema the jobs decode. The JVM decoder is a Catalyst
expression: it runs inside whole-stage generated code, its interpreted path gives the same rows, and the
analyzer refuses arguments of the wrong type."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from jobs.common.config import EventLimits
from jobs.common.events import DECODE_REASONS, EventField, EventSchema, decode_events_sql
from jobs.common.schemas import CLICK, IMPRESSION, ORDER, PAGE_VIEW, USER_PROFILE
from jobs.common.session import sql_settings
from jobs.jvm.decoder import decode_events_jvm, decoder_spec, register_decoder
from jobs.jvm.gateway import jvm_class
from scripts.bench_windows.records import classification_samples, page_view

pytestmark = pytest.mark.spark

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
LIMITS = EventLimits(max_event_bytes=400, max_event_future_seconds=3600, max_event_age_seconds=86400)
# The decoder's own test schema: every kind, an optional field, the event time not last.
MIXED = EventSchema(
    name="mixed",
    fields=(
        EventField("id", "string"),
        EventField("placed_at", "timestamp"),
        EventField("amount", "double"),
        EventField("quantity", "long"),
        EventField("paid", "boolean"),
        EventField("coupon", "string", required=False),
        EventField("discount", "double", required=False),
    ),
    event_time_field="placed_at",
)
SCHEMAS = [PAGE_VIEW, IMPRESSION, CLICK, USER_PROFILE, ORDER, MIXED]
RECORD_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"

TIMESTAMPS = [
    "2026-11-22T11:59:00Z",
    "2026-11-22T11:59:00.1Z",
    "2026-11-22T11:59:00.123456Z",
    "2026-11-22T11:59:00.1234567Z",
    "2026-11-22T11:59:00.123456789Z",
    "2026-11-22T12:30:00+01:00",
    "2026-11-22T10:30:00-01:30",
    "2026-11-22T11:59:00Z\n",
    "2026-11-22T11:59:00Z\r\n",
    "2026-11-22T11:59:00Z\u2028",
    "2026-11-22T11:59:00Z\n\n",
    "2026-11-22T11:59:00Z ",
    " 2026-11-22T11:59:00Z",
    "2026-11-22T11:59:00.Z",
    "2026-11-22T11:59:00.1234567890Z",
    "2026-11-22T11:59:00+18:00",
    "2026-11-22T11:59:00+19:00",
    "2026-11-22T11:59:00+01:60",
    "2026-02-29T11:59:00Z",
    "2026-02-30T11:59:00Z",
    "2026-11-22T24:00:00Z",
    "2026-11-22T23:59:60Z",
    "2026-13-22T11:59:00Z",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
    "2026-11-22 11:59:00Z",
    "2026-11-22T11:59:00",
    "2026-11-22T11:59Z",
    "\uff12\uff10\uff12\uff16-11-22T11:59:00Z",  # fullwidth digits
    "yesterday",
    "",
    "2026-11-23T12:59:59Z",
    "2026-11-23T13:00:01Z",
    "2026-11-21T12:00:00Z",
    "2026-11-21T11:59:59.999999Z",
]
STRINGS = ["u-1", "", "ünïcødé ✓ 🚀", 'quote " and \\ back', "tab\tnew\nline", "\u0000nul", "x" * 50]
NUMBERS: list[object] = [
    0,
    -0,
    7,
    -7,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    10**40,
    1.5,
    -0.0,
    0.1,
    1e5,
]
NUMBER_TEXTS = [
    "1.50",
    "1E2",
    "1e-7",
    "-0",
    "-0.0",
    "12345678901234567890.123",
    "1e400",
    "0.1000000000000000055511",
]
OTHER_VALUES: list[object] = [True, False, None, [], [1, "a"], {}, {"a": {"b": [1]}}]


def _value(field: EventField, rng: random.Random) -> object:
    if field.kind == "string":
        return rng.choice(STRINGS)
    if field.kind == "timestamp":
        return rng.choice(TIMESTAMPS[:8])
    if field.kind == "boolean":
        return rng.choice([True, False])
    if field.kind == "long":
        return rng.choice([0, 7, -(2**63), 2**63 - 1])
    return rng.choice([0, 12.5, 3, 0.1, 1e300])


def _good(schema: EventSchema, rng: random.Random) -> dict[str, object]:
    return {f.name: _value(f, rng) for f in schema.fields if f.required or rng.random() < 0.5}


def _dumps(body: dict[str, object], rng: random.Random) -> bytes:
    return json.dumps(body, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 1])).encode()


def _field_variants(schema: EventSchema, rng: random.Random) -> Iterator[bytes]:
    """Every field replaced by every kind of JSON value, dropped, and duplicated."""
    for field in schema.fields:
        candidates: list[object] = [*STRINGS, *TIMESTAMPS, *NUMBERS, *OTHER_VALUES]
        for candidate in candidates:
            yield _dumps({**_good(schema, rng), field.name: candidate}, rng)
        for number in NUMBER_TEXTS:
            zero = json.dumps({**_good(schema, rng), field.name: 0})
            yield zero.replace(f'"{field.name}": 0', f'"{field.name}": {number}').encode()
        without = _good(schema, rng)
        without.pop(field.name, None)
        yield _dumps(without, rng)
        text = json.dumps(_good(schema, rng))
        yield (text[:-1] + f', "{field.name}": null}}').encode()  # a duplicate key
        yield (text[:-1] + ', "extra": 1, "extra": 2}').encode()
        yield (text[:-1] + ', "extra": {"a": 1, "a": 2}}').encode()


def _structural(schema: EventSchema, rng: random.Random) -> Iterator[bytes | None]:
    good = _dumps(_good(schema, rng), rng)
    yield from [None, b"", b" ", b"\n\t", b"x" * (LIMITS.max_event_bytes + 1), good + b" " * 400]
    yield from [
        b"\xff\xfe" + good,
        good[:-1] + b"\xc0\x80}",
        b'{"a": "\xed\xa0\x80"}',
        b'{"a": "\xf4\x90\x80\x80"}',
    ]
    yield from [
        b'{"a": "\xf0\x9f\x9a\x80"}',
        b'{"a": "\xe0\x80\x80"}',
        b"\xef\xbb\xbf" + good,
        b"\x00" + good,
    ]
    yield from [good[:-1], good + b" trailing", good + b"{}", good + b"}", good + b"]", good + b", 0]"]
    yield from [good + b"\x00", good + b" \r\n\t ", b" \n\t\r" + good, good + good, b"[" + good + b"]"]
    yield from [b"[1, 2]", b'"a string"', b"42", b"null", b"true", b"[1] x", b'"a" "b"', b"{} x", b"{}"]
    yield from [b"{,}", b'{"a" 1}', b"{'a': 1}", b'{"a": 01}', b'{"a": NaN}', b'{"a": 1,}', b"[" * 1200]
    yield from [b'{"a": "\x01"}', b"/* c */ " + good, good.replace(b'"', b"'")]
    # Lone surrogates, which only an escape can spell in UTF-8, in a key, a value, nested and at the root.
    yield from [
        b'{"a": "\\ud83d"}',
        b'{"a\\udc00": 1}',
        b'{"a": ["\\udc00x"]}',
        b'["\\ud83dx"]',
        b'"\\ud83d\\ude80"',
    ]
    yield good[:-1] + b', "user_id": "\\ud83d\\ude80", "name": "\\ud83d!", "order_id": "\\udc00"}'


def _corruptions(schema: EventSchema, rng: random.Random, count: int) -> Iterator[bytes]:
    """Good records with a byte or two flipped, dropped or inserted."""
    for _ in range(count):
        yield _corrupt(_dumps(_good(schema, rng), rng), rng, b'{}[]",:0123456789.eE+-tfnul \\\x00\x80\xff', 2)


def _corrupt(value: bytes, rng: random.Random, alphabet: bytes, most_edits: int) -> bytes:
    """`value` with one to `most_edits` bytes replaced by, or inserted from, `alphabet`, or dropped."""
    edited = bytearray(value)
    for _ in range(rng.randint(1, most_edits)):
        at = rng.randrange(len(edited))
        action = rng.randrange(3)
        if action == 0:
            edited[at] = rng.choice(alphabet)
        elif action == 1:
            del edited[at]
        else:
            edited.insert(at, rng.choice(alphabet))
    return bytes(edited)


def corpus(schema: EventSchema, seed: int) -> list[tuple[bytes | None, bytes | None, datetime]]:
    """(key, value, Kafka timestamp) records of every class for one schema."""
    rng = random.Random(seed)
    values: list[bytes | None] = [_dumps(_good(schema, rng), rng) for _ in range(200)]
    values += list(_field_variants(schema, rng))
    values += list(_structural(schema, rng))
    values += list(_corruptions(schema, rng, 400))
    if schema is PAGE_VIEW:
        values += [value for value, _ in classification_samples(NOW)]
    records = []
    for value in values:
        key = None if rng.random() < 0.02 else b"k"
        stamp = NOW + timedelta(microseconds=rng.choice([0, 1, -1, 123456]))
        records.append((key, value, stamp))
    return records


def _rows(decoded: DataFrame) -> list[Row]:
    # The event as Spark's text of it: every digit of doubles and microseconds, and years Python cannot hold.
    return (
        decoded.select(
            "offset", F.col("event").cast("string").alias("event"), "dead_letter_reason", "dead_letter_detail"
        )
        .orderBy("offset")
        .collect()
    )


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda schema: schema.name)
def test_jvm_decoder_matches_sql_decoder(spark: SparkSession, schema: EventSchema) -> None:
    records = spark.createDataFrame(
        [
            (key, value, "events", 0, offset, stamp.replace(tzinfo=None))
            for offset, (key, value, stamp) in enumerate(corpus(schema, seed=17))
        ],
        RECORD_SCHEMA,
    ).cache()

    sql_rows = _rows(decode_events_sql(records, schema, LIMITS))
    jvm_rows = _rows(decode_events_jvm(records, schema, LIMITS))

    mismatches = [(sql, jvm) for sql, jvm in zip(sql_rows, jvm_rows, strict=True) if sql != jvm]
    assert mismatches[:5] == [], f"{len(mismatches)} of {len(sql_rows)} records differ"
    reasons = {row["dead_letter_reason"] for row in sql_rows}
    expected = set(DECODE_REASONS) - ({"empty"} if schema.tombstones_allowed else set())
    if schema.event_time_field is None:
        expected.discard("event_time_out_of_range")
    assert expected <= reasons, f"the corpus lacks {expected - reasons}"
    assert sum(row["dead_letter_reason"] is None for row in sql_rows) >= 200
    records.unpersist()


def _records(spark: SparkSession, schema: EventSchema, seed: int) -> DataFrame:
    return spark.createDataFrame(
        [
            (key, value, "events", 0, offset, stamp.replace(tzinfo=None))
            for offset, (key, value, stamp) in enumerate(corpus(schema, seed=seed))
        ],
        RECORD_SCHEMA,
    )


def test_jvm_decoder_is_generated_code_and_interprets_alike(spark: SparkSession) -> None:
    records = _records(spark, MIXED, seed=29).cache()
    # Generated code only: a decoder whose code did not compile would fail here rather than fall back.
    generated_only = {"spark.sql.codegen.fallback": "false", "spark.sql.codegen.factoryMode": "CODEGEN_ONLY"}
    with sql_settings(spark, generated_only):
        decoded = decode_events_jvm(records, MIXED, LIMITS)
        # The decoder expression itself (not a UDF named after it), in a whole-stage code generation stage.
        plan = decoded._jdf.queryExecution().executedPlan().toString()
        stages = [line for line in plan.splitlines() if "streamstack_decode(value" in line]
        assert len(stages) == 1, plan
        assert stages[0].lstrip(" +-:").startswith("*("), plan
        generated = _rows(decoded)
    interpreted_only = {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    }
    with sql_settings(spark, interpreted_only):
        interpreted = _rows(decode_events_jvm(records, MIXED, LIMITS))
    records.unpersist()

    assert interpreted == generated
    assert set(DECODE_REASONS) <= {row["dead_letter_reason"] for row in generated}


def test_jvm_decoder_refuses_arguments_of_the_wrong_type(spark: SparkSession) -> None:
    records = _records(spark, PAGE_VIEW, seed=31).limit(1)
    name = register_decoder(spark, PAGE_VIEW, LIMITS)
    with pytest.raises(AnalysisException, match="value must be binary, not string"):
        records.select(F.call_function(name, F.col("value").cast("string"), F.col("timestamp"))).collect()
    with pytest.raises(AnalysisException, match="record_time must be a timestamp, not bigint"):
        records.select(F.call_function(name, F.col("value"), F.col("offset"))).collect()


def test_jvm_decoder_runs_once_per_record_under_the_jobs_filters(spark: SparkSession) -> None:
    """A window job's plan (valid events, a window on the event time, dead letters apart) calls the decoder
    in one place: the optimizer may not inline it into the filters above it, one parse per reference."""
    records = _records(spark, PAGE_VIEW, seed=37)
    decoded = decode_events_jvm(records, PAGE_VIEW, LIMITS)
    views = decoded.where(F.col("dead_letter_reason").isNull()).select("event.*")
    counts = views.groupBy(F.window("event_time", "10 seconds"), "url").count()
    dead_letters = decoded.where(F.col("dead_letter_reason").isNotNull())
    for query in (counts, dead_letters):
        plan = query._jdf.queryExecution().optimizedPlan().toString()
        assert plan.count("streamstack_decode(value") == 1, plan
    # And the rows are the ones of the unfiltered decode.
    everything = decoded.select("offset", "dead_letter_reason").collect()
    good = {row["offset"] for row in everything if row["dead_letter_reason"] is None}
    assert views.count() == len(good) > 0
    assert dead_letters.count() == len(everything) - len(good) > 0


# MIXED's fields with plain values: what the decoder reads without Jackson, and the texts put in their place.
FLAT_MIXED = (
    '{"id": "o-1", "placed_at": "2026-11-22T11:59:00.5Z", "amount": 12, "quantity": 3, "paid": true, '
    '"coupon": null}'
)
FLAT_EDGES = [
    *["0", "-0", "00", "01", "-", "+1", "1.", "1.5", "1e5", "1E5", "0x1", "-a", "7}", "7]"],
    *["123456789012345678", "-123456789012345678", "1234567890123456789", "9223372036854775807"],
    *["true", "truex", "tru", "True", "false", "fals", "null", "nul", "nullx", "t", "n", "f"],
    *['""', '"\x01"', '"\x1f"', '"\x7f"', '"é✓"', '"a', "[]", "{}", '{"a": 1}', "'a'", ""],
]
BLANKS = [" ", "\n", "\r", "\t", "\f", "\v", "\u00a0", "\u2028", ""]


def _flat_path_edges() -> Iterator[bytes]:
    """MIXED records around what the flat path accepts: each value replaced by numbers, words and strings
    just inside and outside JSON's grammar, other blanks between the tokens, and broken structure."""
    for field in ("placed_at", "amount", "quantity", "paid", "coupon", "id"):
        start = FLAT_MIXED.index(f'"{field}": ') + len(f'"{field}": ')
        comma = FLAT_MIXED.find(",", start)
        end = comma if comma >= 0 else len(FLAT_MIXED) - 1
        for text in FLAT_EDGES:
            yield (FLAT_MIXED[:start] + text + FLAT_MIXED[end:]).encode()
    for blank in BLANKS:
        for old in ("{", ":", ",", "}"):
            yield FLAT_MIXED.replace(old, f"{blank}{old}{blank}").encode()
    for broken in [
        FLAT_MIXED.replace(": ", " ", 1),
        FLAT_MIXED.replace(": ", ":: ", 1),
        FLAT_MIXED.replace(", ", " ", 1),
        FLAT_MIXED.replace(", ", ",, ", 1),
        FLAT_MIXED[:-1] + ",}",
        FLAT_MIXED[:-1],
        FLAT_MIXED + "}",
        FLAT_MIXED + " x",
        FLAT_MIXED[:-1] + ', "other": 1}',
        FLAT_MIXED[:-1] + ', "id": "o-2"}',
        FLAT_MIXED.replace('"id"', '"i\x01d"'),
        FLAT_MIXED.replace('"id"', "id"),
        "{}",
        "{ }",
        "[" + FLAT_MIXED + "]",
    ]:
        yield broken.encode()


def _flat_mixed(rng: random.Random) -> bytes:
    """A MIXED record the flat path reads: plain strings (some not ASCII), integers, words, the optional
    fields present or not, the keys in any order, any of JSON's blanks around every token."""
    fields = {
        "id": f'"o-{rng.randrange(10**6)}"',
        "placed_at": f'"{rng.choice(TIMESTAMPS[:7])}"',
        "amount": str(rng.randrange(-(10**6), 10**6)),
        "quantity": str(rng.choice([0, 7, 10**17, -(10**17) + 1, 999_999_999_999_999_999])),
        "paid": rng.choice(["true", "false"]),
        "coupon": rng.choice(["null", '"c-1"', '"ünï ✓"', '""']),
        "discount": rng.choice(["null", "0", "-3"]),
    }
    names = [name for name in fields if name not in ("coupon", "discount") or rng.random() < 0.7]
    rng.shuffle(names)

    def blank() -> str:
        return rng.choice(["", "", " ", "\n", "\t ", "\r\n  "])

    members = ",".join(f'{blank()}"{name}"{blank()}:{blank()}{fields[name]}{blank()}' for name in names)
    return (blank() + "{" + members + "}" + blank()).encode()


def test_the_jvm_decoders_flat_path_gives_jacksons_verdict(spark: SparkSession) -> None:
    """The decoder reads the usual record (a flat object of the schema's fields, no escapes) without Jackson
    and leaves every other value to it: both ways give the same verdict on every corpus record, on values
    at the edges of what the flat path accepts, and on thousands of corrupted flat records."""
    rng = random.Random(41)
    decoder_class = jvm_class(spark, "streamstack.jvm.EventDecoder")
    flat = [FLAT_MIXED.encode(), *(_flat_mixed(rng) for _ in range(300))]
    mixed = decoder_class(decoder_spec(MIXED, LIMITS))
    assert [value for value in flat if not mixed.readsFlat(value)] == []
    alphabet = b'{}[]",:0123456789.eE+-tfnul \t\n\x0c\x01\x7f\x80\xc3\xa9'
    corrupted = [_corrupt(rng.choice(flat), rng, alphabet, 3) for _ in range(4_000)]
    # Corruptions the flat path still reads (a digit for a digit, a blank for a blank): its own verdicts.
    assert sum(mixed.readsFlat(value) for value in corrupted) >= 400
    for schema in SCHEMAS:
        decoder = decoder_class(decoder_spec(schema, LIMITS))
        values = [value for _, value, _ in corpus(schema, seed=43)]
        if schema is MIXED:
            values += [*flat, *_flat_path_edges(), *corrupted]
        for value in values:
            no_record_time = rng.random() < 0.05
            micros = int(NOW.timestamp() * 1_000_000) + rng.choice([0, 1, -1, 123456, -(10**14)])
            verdict = decoder.decode(value, no_record_time, micros)
            reference = decoder.decodeWithJackson(value, no_record_time, micros)
            assert verdict.equals(reference), (schema.name, value, verdict.toString(), reference.toString())
    page_views = decoder_class(decoder_spec(PAGE_VIEW, LIMITS))
    assert all(page_views.readsFlat(page_view(i, NOW)) for i in range(100)), "a page view took Jackson's path"
