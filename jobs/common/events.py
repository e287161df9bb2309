"""Decoding JSON events from Kafka, with every bad record routed to the dead-letter topic.

`decode_events` never fails on input: each record either yields a typed `event` struct or gets a
`dead_letter_reason` (a fixed code) and a `dead_letter_detail` (what exactly was wrong). Jobs compute on
`valid_events(...)`; `start_dead_letter_query` writes the rest, raw bytes untouched, to the dead-letter topic
with the reason and the record's origin in Kafka headers, keyed `<topic>/<partition>/<offset>` so a
re-run batch overwrites rather than duplicates. Each reason is counted in the observed metric
`dead_letters`, exported as `streamstack_dead_letters_total{query,reason}`.

The checks run in the JVM: `decode_events` calls jobs.jvm's EventDecoder (Java, every check in one pass per
record with Jackson's streaming parser) as a Catalyst expression, DecodeExpression, in the plan's generated
code (its jar is on every job's classpath, see jobs.common.session).
`decode_events_sql` is the same decoder in Spark SQL expressions (variant parsing, `schema_of_variant`), the
reference that tests/jobs/test_jvm_decoder.py holds the JVM one to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Literal, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from contracts.record_sizes import MAX_DEAD_LETTER_DETAIL_CHARS
from jobs.common.config import EventLimits, StreamingJobConfig
from jobs.common.encoding import kafka_header, record_position, source_headers
from jobs.common.kafka_io import read_kafka_stream, write_kafka_stream
from jobs.common.progress import OBSERVED_DEAD_LETTERS
from jobs.jvm.decoder import decode_events_jvm

FieldKind = Literal["string", "long", "double", "boolean", "timestamp"]
# Kafka records -> the same records, each with a typed `event` or a dead-letter reason.
Decoder = Callable[[DataFrame, EventLimits], DataFrame]

DECODE_REASONS = (
    "oversized",
    "not_utf8",
    "empty",
    "malformed_json",
    "not_an_object",
    "missing_field",
    "wrong_type",
    "bad_timestamp",
    "event_time_out_of_range",
)
# Reasons that only a job's own rules give: changelog keys (jobs.common.changelog) and values a job's
# types cannot hold. Listed here so that every reason is counted.
JOB_REASONS = ("missing_key", "key_mismatch", "out_of_range")
DEAD_LETTER_REASONS = DECODE_REASONS + JOB_REASONS

# ISO-8601 with a zone: 2026-11-22T12:00:00Z, 2026-11-22T12:00:00.123Z, 2026-11-22T13:00:00+01:00
_ISO_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"

_SPARK_TYPES: dict[FieldKind, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "timestamp": TimestampType(),
}
# What `schema_of_variant` may report for a JSON value of each kind.
_VARIANT_TYPES: dict[FieldKind, tuple[str, ...]] = {
    "string": ("STRING",),
    "long": ("BIGINT", "INT", "SMALLINT", "TINYINT"),
    "double": ("DOUBLE", "FLOAT", "BIGINT", "INT", "SMALLINT", "TINYINT", "DECIMAL"),
    "boolean": ("BOOLEAN",),
    "timestamp": ("STRING",),
}


@dataclass(frozen=True)
class EventField:
    name: str
    kind: FieldKind
    required: bool = True


@dataclass(frozen=True)
class EventSchema:
    """A JSON object event: its fields, and which timestamp field is its event time (checked for range)."""

    name: str
    fields: tuple[EventField, ...]
    event_time_field: str | None = None
    tombstones_allowed: bool = False

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if self.event_time_field is not None and self.event_time_field not in names:
            raise ValueError(f"event_time_field {self.event_time_field!r} is not a field of {self.name}")

    @classmethod
    def of(
        cls, name: str, fields: str, *, event_time_field: str | None = None, tombstones_allowed: bool = False
    ) -> EventSchema:
        """`EventSchema.of("page-view", "user_id:string url:string event_time:timestamp", ...)`: every
        field required, in that order."""
        parsed = tuple(
            EventField(field, cast(FieldKind, kind)) for field, kind in (f.split(":") for f in fields.split())
        )
        return cls(name, parsed, event_time_field=event_time_field, tombstones_allowed=tombstones_allowed)

    @property
    def struct_type(self) -> StructType:
        return StructType([StructField(f.name, _SPARK_TYPES[f.kind]) for f in self.fields])


_TEMP = "__decode_"


def _temp(name: str) -> Column:
    return F.col(f"{_TEMP}{name}")


def _field_columns(index: int, event_field: EventField) -> dict[str, Column]:
    """Per field, computed once per record from the field's own variant: its JSON type, its typed value,
    and its text for timestamps."""
    field_value = _temp(f"field_{index}")
    columns = {f"type_{index}": F.schema_of_variant(field_value)}
    if event_field.kind == "timestamp":
        columns[f"text_{index}"] = F.try_variant_get(field_value, "$", "string")
        columns[f"value_{index}"] = F.try_to_timestamp(F.try_variant_get(field_value, "$", "string"))
    else:
        columns[f"value_{index}"] = F.try_variant_get(
            field_value, "$", _SPARK_TYPES[event_field.kind].simpleString()
        )
    return columns


def _field_problems(index: int, event_field: EventField) -> list[tuple[Column, str, Column]]:
    """(condition, reason, detail) checks for one field, in the order they are reported."""
    variant_type = _temp(f"type_{index}")
    name = event_field.name
    absent = variant_type.isNull() | (variant_type == "VOID")
    allowed = _VARIANT_TYPES[event_field.kind]
    type_ok = reduce(
        lambda acc, t: acc | variant_type.startswith(t), allowed[1:], variant_type.startswith(allowed[0])
    )
    problems: list[tuple[Column, str, Column]] = []
    if event_field.required:
        problems.append((absent, "missing_field", F.lit(f"field '{name}' is missing or null")))
    problems.append(
        (
            ~absent & ~type_ok,
            "wrong_type",
            F.format_string(f"field '{name}' is %s, expected {event_field.kind}", variant_type),
        )
    )
    if event_field.kind == "timestamp":
        text = _temp(f"text_{index}")
        problems.append(
            (
                ~absent & (~text.rlike(_ISO_TIMESTAMP) | _temp(f"value_{index}").isNull()),
                "bad_timestamp",
                F.format_string(
                    f"field '{name}' is %s, expected ISO-8601 with a zone", F.to_json(F.struct(text))
                ),
            )
        )
    return problems


def decode_events(kafka_records: DataFrame, schema: EventSchema, limits: EventLimits) -> DataFrame:
    """Kafka records plus `event` (typed struct, null for dead letters), `dead_letter_reason` and
    `dead_letter_detail` (both null for good records). Tombstones (null values) are good records with a
    null event when the schema allows them (changelog topics), dead letters otherwise.

    Decoded in the JVM (jobs.jvm.decoder), with a quarter of `decode_events_sql`'s CPU and the same result
    for every record."""
    return decode_events_jvm(kafka_records, schema, limits)


def decode_events_sql(kafka_records: DataFrame, schema: EventSchema, limits: EventLimits) -> DataFrame:
    """`decode_events` in Spark SQL expressions only: the reference the JVM decoder is held to."""
    value = F.col("value")
    # Parse once and derive each field's type and value once, in their own projections: the checks
    # below refer to these columns many times, and inlined they would re-parse the JSON per reference.
    with_text = kafka_records.withColumn(f"{_TEMP}text", value.cast("string"))
    with_parsed = with_text.withColumn(f"{_TEMP}parsed", F.try_parse_json(_temp("text")))
    parsed = _temp("parsed")
    with_fields = with_parsed.select(
        "*",
        *[
            F.try_variant_get(parsed, f"$.{event_field.name}", "variant").alias(f"{_TEMP}field_{index}")
            for index, event_field in enumerate(schema.fields)
        ],
    )
    derived: dict[str, Column] = {
        "utf8": F.is_valid_utf8(_temp("text")),
        "bytes": F.octet_length(value),
        # Valid JSON is an object exactly when its first non-blank character is '{'; much cheaper per
        # record than the root's schema, which only a dead letter's detail needs.
        "is_object": F.expr(f"trim(LEADING ' \\t\\n\\r' FROM `{_TEMP}text`)").startswith("{"),
        # try_parse_json stops after the first JSON value and ignores the rest: `{...} trailing` parses.
        # When an object's first `}` is its last non-blank character (a flat object, the usual event)
        # nothing can follow the value. Otherwise check exactly: in `[<text>]` text after the value is an
        # error unless it starts with `]` and closes the array early, which `[<text>,0]` catches (its
        # length is then 1, not 2).
        "nothing_after_value": F.when(
            F.expr(f"trim(LEADING ' \\t\\n\\r' FROM `{_TEMP}text`)").startswith("{")
            & F.expr(
                f"instr(`{_TEMP}text`, '}}') = char_length(trim(TRAILING ' \\t\\n\\r' FROM `{_TEMP}text`))"
            ),
            F.lit(True),
        ).otherwise(
            (F.json_array_length(F.concat(F.lit("["), _temp("text"), F.lit("]"))) == 1)
            & (F.json_array_length(F.concat(F.lit("["), _temp("text"), F.lit(",0]"))) == 2)
        ),
    }
    for index, event_field in enumerate(schema.fields):
        derived.update(_field_columns(index, event_field))
    staged = with_fields.select("*", *[column.alias(f"{_TEMP}{name}") for name, column in derived.items()])

    checks: list[tuple[Column, str, Column]] = [
        (value.isNull(), "empty", F.lit("record has no value")),
        (
            _temp("bytes") > limits.max_event_bytes,
            "oversized",
            F.format_string(f"value is %d bytes, limit {limits.max_event_bytes}", _temp("bytes")),
        ),
        (~_temp("utf8"), "not_utf8", F.lit("value is not valid UTF-8")),
        (parsed.isNull(), "malformed_json", F.lit("value is not valid JSON")),
        (
            ~F.coalesce(_temp("nothing_after_value"), F.lit(False)),
            "malformed_json",
            F.lit("value has text after its JSON value"),
        ),
        (
            ~_temp("is_object"),
            "not_an_object",
            F.format_string("value is %s, expected a JSON object", F.schema_of_variant(parsed)),
        ),
    ]
    for index, event_field in enumerate(schema.fields):
        checks.extend(_field_problems(index, event_field))
    if schema.event_time_field is not None:
        time_index = next(i for i, f in enumerate(schema.fields) if f.name == schema.event_time_field)
        event_time = _temp(f"value_{time_index}")
        record_time = F.col("timestamp")
        too_new = event_time > record_time + F.make_dt_interval(secs=F.lit(limits.max_event_future_seconds))
        too_old = event_time < record_time - F.make_dt_interval(secs=F.lit(limits.max_event_age_seconds))
        checks.append(
            (
                too_new | too_old,
                "event_time_out_of_range",
                F.format_string(
                    f"{schema.event_time_field} %s is more than {limits.max_event_future_seconds} s after or "
                    f"{limits.max_event_age_seconds} s before the record's Kafka timestamp %s",
                    event_time.cast("string"),
                    record_time.cast("string"),
                ),
            )
        )

    # The first failing check names the reason; later checks assume the earlier ones passed.
    reason: Column = F.lit(None).cast("string")
    for condition, code, _ in reversed(checks):
        reason = F.when(F.coalesce(condition, F.lit(False)), F.lit(code)).otherwise(reason)
    if schema.tombstones_allowed:
        # On a changelog a record without a value is a delete, not a dead letter.
        reason = F.when(value.isNull(), F.lit(None).cast("string")).otherwise(reason)
    with_reason = staged.withColumn("dead_letter_reason", reason)
    detail: Column = F.lit(None).cast("string")
    for condition, code, message in reversed(checks):
        detail = F.when(
            (F.col("dead_letter_reason") == code) & F.coalesce(condition, F.lit(False)), message
        ).otherwise(detail)

    event = F.struct(*[_temp(f"value_{i}").alias(f.name) for i, f in enumerate(schema.fields)])
    decoded = with_reason.select(
        *kafka_records.columns,
        F.when(F.col("dead_letter_reason").isNull() & value.isNotNull(), event).alias("event"),
        "dead_letter_reason",
        F.when(F.col("dead_letter_reason").isNotNull(), detail).alias("dead_letter_detail"),
    )
    return decoded


def valid_events(decoded: DataFrame, *, with_record_key: bool = False) -> DataFrame:
    """The typed event fields of records that are not dead letters (and, for changelogs, the record key
    as `record_key` and whether the record is a tombstone as `is_tombstone`)."""
    good = decoded.where(F.col("dead_letter_reason").isNull())
    if with_record_key:
        return good.select(
            F.col("key").cast("string").alias("record_key"),
            F.col("value").isNull().alias("is_tombstone"),
            "event.*",
        )
    return good.select("event.*")


def dead_letter_records(decoded: DataFrame, source_query: str) -> DataFrame:
    """Dead letters as Kafka rows: the raw value, keyed by origin, the reason and origin in headers (the
    detail cut to `MAX_DEAD_LETTER_DETAIL_CHARS`: it may quote a field as large as the value)."""
    bad = decoded.where(F.col("dead_letter_reason").isNotNull())
    detail = F.left(F.col("dead_letter_detail"), F.lit(MAX_DEAD_LETTER_DETAIL_CHARS))
    return bad.select(
        record_position().alias("key"),
        F.col("value"),
        F.array(
            kafka_header("dead_letter.reason", F.col("dead_letter_reason")),
            kafka_header("dead_letter.detail", detail),
            kafka_header("dead_letter.query", F.lit(source_query)),
            *source_headers(timestamp=True),
        ).alias("headers"),
        F.col("dead_letter_reason"),
    )


def count_dead_letters(dead_letters: DataFrame) -> DataFrame:
    """Attach the per-reason counts of each batch as the observed metric `dead_letters`."""
    reason = F.col("dead_letter_reason")
    return dead_letters.observe(
        OBSERVED_DEAD_LETTERS,
        *[F.sum(F.when(reason == code, 1).otherwise(0)).alias(code) for code in DEAD_LETTER_REASONS],
    )


def dead_letter_query_name(config: StreamingJobConfig) -> str:
    return f"{config.query_name}.dead-letters"


def start_dead_letter_query(
    config: StreamingJobConfig, decoded_streams: Sequence[DataFrame]
) -> StreamingQuery:
    """One query per job sends the dead letters of all its inputs to the dead-letter topic."""
    name = dead_letter_query_name(config)
    records = reduce(
        DataFrame.unionByName,
        [dead_letter_records(decoded, config.query_name) for decoded in decoded_streams],
    )
    counted = count_dead_letters(records).drop("dead_letter_reason")
    return write_kafka_stream(
        counted, config, query_name=name, topic=config.dead_letter_topic, output_mode="append"
    )


def read_decoded_stream(
    spark: SparkSession,
    config: StreamingJobConfig,
    topic: str,
    decode: Decoder,
    *,
    include_headers: bool = False,
) -> DataFrame:
    """A topic read as a stream of its own and decoded: each record with a typed event or a dead-letter
    reason (and its Kafka `headers` when asked for)."""
    records = read_kafka_stream(spark, config, [topic], include_headers=include_headers)
    return decode(records, config.event_limits)


def start_topics_dead_letter_query(
    spark: SparkSession, config: StreamingJobConfig, decoders: Mapping[str, Decoder]
) -> StreamingQuery:
    """The dead-letter query of a job that reads several topics, its own query: each topic is read as its
    own source and decoded by its decoder. Two filtered
    branches of one source would each scan it, and Spark would count every record twice as input."""
    return start_dead_letter_query(
        config,
        [read_decoded_stream(spark, config, topic, decode) for topic, decode in decoders.items()],
    )
