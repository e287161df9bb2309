"""The order-state job (event sourcing) against real Kafka and Spark, checked against a plain-Python fold.

The reference below is written from the job's contract (jobs/order_state/main.py and the transition table
in jobs/order_state/state_machine.py), not from its code: per order, in log order, an event whose id was
already applied is a `duplicate_event`; an event the table does not allow from the order's status is an
`invalid_transition`; anything else moves the order to its next status, sets its step time, replaces the
amount (OrderPlaced, AmountCorrected) and adds one to the version. Event times are recorded, never sorted by.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.jvm.gateway import jvm_class
from jobs.jvm.order_states import ORDER_STATES_CLASS
from jobs.order_state.config import OrderStateJobConfig
from jobs.order_state.main import parse_args, start_queries
from jobs.order_state.state_machine import (
    AMOUNT_EVENTS,
    EVENT_TYPES,
    OrderEvent,
    OrderState,
    Rejection,
    apply_event,
)
from jobs.producers import order_events
from jobs.producers.order_events import OrderEventGenerator
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    catalogue_command_line,
    create_job_topics,
    iso,
    process_all,
    running,
    streaming_config,
)
from tests.kafka_helpers import TopicRecord, latest_per_key, produce, read_dead_letters, read_records

# Event times near now: the job dead-letters events more than 7 days from their Kafka timestamp.
BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
ORDERS = 60
SEED = 19

# --- the reference -------------------------------------------------------------------------------------

# status -> {event type: status after}; no entry: impossible.
ALLOWED: dict[str | None, dict[str, str]] = {
    None: {"OrderPlaced": "placed"},
    "placed": {"OrderPaid": "paid", "AmountCorrected": "placed"},
    "paid": {"OrderShipped": "shipped"},
    "shipped": {"OrderDelivered": "delivered"},
    "delivered": {"OrderReturned": "returned"},
    "returned": {},
}
STEP_FIELD = {
    "OrderPlaced": "placed_at",
    "OrderPaid": "paid_at",
    "OrderShipped": "shipped_at",
    "OrderDelivered": "delivered_at",
    "OrderReturned": "returned_at",
    "AmountCorrected": "amount_corrected_at",
}
TIME_FIELDS = tuple(STEP_FIELD.values())


@dataclass
class Reference:
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # source position -> reason


def reference_fold(records: Sequence[TopicRecord]) -> Reference:
    """The expected states and rejections of valid events, folded in each partition's offset order."""
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    reference = Reference()
    applied_ids: dict[str, set[str]] = {}
    for record in ordered:
        assert record.value is not None
        event = json.loads(record.value)
        order_id, event_type = event["order_id"], event["type"]
        state = reference.states.get(order_id)
        if event["event_id"] in applied_ids.get(order_id, set()):
            reference.rejected[record.position] = "duplicate_event"
            continue
        status = None if state is None else state["status"]
        if event_type not in ALLOWED[status]:
            reference.rejected[record.position] = "invalid_transition"
            continue
        if state is None:
            state = {"order_id": order_id, "version": 0, **dict.fromkeys(TIME_FIELDS)}
            reference.states[order_id] = state
        state["status"] = ALLOWED[status][event_type]
        if "amount" in event:
            state["amount"] = event["amount"]
        state[STEP_FIELD[event_type]] = event["event_time"]
        state["version"] += 1
        state["updated_at"] = event["event_time"]
        state["last_event_id"] = event["event_id"]
        applied_ids.setdefault(order_id, set()).add(event["event_id"])
    return reference


# --- the scenario ----------------------------------------------------------------------------------------


def event(
    event_id: str, order_id: str, event_type: str, seconds: float, amount: float | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event_id": event_id,
        "order_id": order_id,
        "type": event_type,
        "event_time": iso(BASE + timedelta(seconds=seconds)),
    }
    if amount is not None:
        body["amount"] = amount
    return body


def scenario(orders: int = ORDERS, seed: int = SEED) -> list[dict[str, Any]]:
    """Orders' lives interleaved across orders, with event times drawn at random (not in log order), some
    lives disturbed: two steps swapped (shipped before paid), an event after the return, a second
    OrderPlaced, an event of an order never placed, and redeliveries of earlier events."""
    rng = random.Random(seed)
    lives: list[list[dict[str, Any]]] = []
    for n in range(orders):
        order_id = f"order-{n}"
        steps = ["OrderPlaced"]
        if rng.random() < 0.3:
            steps.append("AmountCorrected")
        steps += ["OrderPaid", "OrderShipped", "OrderDelivered"][: rng.randint(0, 3)]
        if len(steps) >= 4 and steps[-1] == "OrderDelivered" and rng.random() < 0.4:
            steps += ["OrderReturned"]
        life = [
            event(
                f"{order_id}-e{i}",
                order_id,
                step,
                rng.uniform(0, 3600),
                round(rng.uniform(5, 500), 2) if step in ("OrderPlaced", "AmountCorrected") else None,
            )
            for i, step in enumerate(steps)
        ]
        roll = rng.random()
        if roll < 0.15 and len(life) >= 4:
            life[-2], life[-1] = life[-1], life[-2]  # e.g. shipped before paid
        elif roll < 0.25 and life[-1]["type"] == "OrderReturned":
            life.append(event(f"{order_id}-late", order_id, "OrderShipped", rng.uniform(0, 3600)))
        elif roll < 0.35:
            life.append(event(f"{order_id}-again", order_id, "OrderPlaced", rng.uniform(0, 3600), 1.0))
        if rng.random() < 0.3:
            life.insert(rng.randint(1, len(life)), dict(rng.choice(life)))  # a redelivery, later in the log
        lives.append(life)
    lives.append([event("ghost-e0", "order-ghost", "OrderPaid", 10.0)])
    # Interleave: each order's events keep their relative order, orders mix.
    cursors = [0] * len(lives)
    merged = []
    while any(c < len(life) for c, life in zip(cursors, lives, strict=True)):
        n = rng.choice([i for i, life in enumerate(lives) if cursors[i] < len(life)])
        merged.append(lives[n][cursors[n]])
        cursors[n] += 1
    return merged


# Named disturbances whose reason and detail the test checks one by one.
NAMED = [
    event("a-e0", "order-a", "OrderPlaced", 50.0, 20.0),
    event("a-e1", "order-a", "OrderShipped", 40.0),  # before paid
    event("a-e2", "order-a", "OrderPaid", 30.0),  # event time before both: still applied, log order counts
    event("a-e3", "order-a", "OrderShipped", 60.0),
    event("a-e2", "order-a", "OrderPaid", 30.0),  # redelivered
    event("a-e4", "order-a", "AmountCorrected", 70.0, 25.0),  # after payment
]
NAMED_DETAILS = {
    1: ("invalid_transition", "OrderShipped before OrderPaid"),
    4: ("duplicate_event", "OrderPaid a-e2 already applied to order-a"),
    5: ("invalid_transition", "AmountCorrected after OrderShipped"),
}

BAD_RECORDS: dict[tuple[bytes | None, bytes | None], str] = {
    (b"order-x", b"not json"): "malformed_json",
    (b"order-x", json.dumps({"event_id": "x", "order_id": "order-x", "type": "OrderPaid"}).encode()): (
        "missing_field"
    ),
    (None, json.dumps(event("y", "order-y", "OrderPaid", 1.0)).encode()): "missing_key",
    (b"order-z", json.dumps(event("z", "order-elsewhere", "OrderPaid", 1.0)).encode()): "key_mismatch",
    (b"order-w", json.dumps(event("w", "order-w", "OrderCancelled", 1.0)).encode()): "out_of_range",
    (b"order-v", json.dumps(event("v", "order-v", "OrderPlaced", 1.0)).encode()): "missing_field",
    (b"order-u", json.dumps(event("u", "order-u", "OrderPlaced", 1.0, -3.0)).encode()): "out_of_range",
}


def encoded(body: dict[str, Any]) -> tuple[bytes, bytes]:
    return str(body["order_id"]).encode(), json.dumps(body).encode()


# --- helpers -----------------------------------------------------------------------------------------------


def job_config(kafka: LocalKafka, tmp_path: Path, prefix: str, run: str) -> OrderStateJobConfig:
    return OrderStateJobConfig(
        streaming=streaming_config("order-state", kafka.bootstrap_servers, tmp_path / run, f"{prefix}-{run}"),
        input_topic=f"{prefix}-order-events",
        output_topic=f"{prefix}-{run}-order-state",
    )


def state_query(queries: Sequence[StreamingQuery]) -> StreamingQuery:
    return next(q for q in queries if q.name == "order-state")


def rejections_counted(query: StreamingQuery) -> Counter[str]:
    counted: Counter[str] = Counter()
    for progress in query.recentProgress:
        observed = progress.observedMetrics.get("dead_letters")
        if observed is not None:
            # A sum over a batch without rows of a reason is null.
            counted.update({reason: int(count or 0) for reason, count in observed.asDict().items()})
    return counted


def output_of(kafka: LocalKafka, config: OrderStateJobConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """The state topic as latest value per key, and the dead letters as position -> reason."""
    states = latest_per_key(read_records(kafka.bootstrap_servers, config.output_topic))
    letters = read_dead_letters(kafka.bootstrap_servers, config.streaming.dead_letter_topic)
    return states, {letter.origin: letter.reason for letter in letters}


# --- tests -------------------------------------------------------------------------------------------------


def test_the_state_machine_names_each_impossible_transition() -> None:
    """Pure: the details the runbook promises, from the one function that holds the rules."""
    state = None
    cases = [
        ("OrderPaid", "OrderPaid before OrderPlaced"),
        ("OrderPlaced", None),
        ("OrderPlaced", "second OrderPlaced"),
        ("OrderShipped", "OrderShipped before OrderPaid"),
        ("OrderReturned", "OrderReturned before OrderDelivered"),
        ("OrderPaid", None),
        ("OrderPaid", "second OrderPaid"),
        ("AmountCorrected", "AmountCorrected after OrderPaid"),
        ("OrderShipped", None),
        ("OrderDelivered", None),
        ("OrderReturned", None),
        ("OrderShipped", "OrderShipped after OrderReturned"),
        ("AmountCorrected", "AmountCorrected after OrderReturned"),
    ]
    for n, (event_type, detail) in enumerate(cases):
        result = apply_event(state, OrderEvent(f"e{n}", "o", event_type, f"t{n}", 1.0))
        if detail is None:
            assert not isinstance(result, Rejection), (event_type, result)
            state = result
        else:
            assert result == Rejection("invalid_transition", detail)
    assert state is not None and (state.status, state.version, state.returned_at) == ("returned", 5, "t10")


def described(state: OrderState) -> tuple[Any, ...]:
    times = tuple(getattr(state, name) for name in TIME_FIELDS)
    return (
        state.status,
        state.amount,
        state.version,
        state.updated_at,
        state.last_event_id,
        times,
        list(state.applied_event_ids),
    )


def described_in_jvm(state: Any) -> tuple[Any, ...]:
    return (
        state.status(),
        state.amount(),
        state.version(),
        state.updatedAt(),
        state.lastEventId(),
        tuple(state.times()),
        list(state.appliedEventIds()),
    )


@pytest.mark.spark
def test_the_jvm_fold_applies_the_state_machines_rules(spark: SparkSession) -> None:
    """The job's fold (Java) against the one Python function that holds the rules, event by event, on
    random lives: the same verdicts, details and states."""
    orders, rng = jvm_class(spark, ORDER_STATES_CLASS), random.Random(5)
    verdicts: Counter[str] = Counter()
    for life in range(300):
        state, state_in_jvm = None, None
        ids: list[str] = []
        for n in range(rng.randrange(1, 10)):
            event_type = rng.choice(EVENT_TYPES)
            event_id = rng.choice(ids) if ids and rng.random() < 0.2 else f"{life}-e{n}"
            ids.append(event_id)
            amount = round(rng.uniform(0, 100), 2) if event_type in AMOUNT_EVENTS else None
            event = OrderEvent(event_id, "o", event_type, f"t{n}", amount)
            expected = apply_event(state, event)
            result = orders.applyEvent(state_in_jvm, "o", event_id, event_type, f"t{n}", amount)
            if isinstance(expected, Rejection):
                assert result.getClass().getSimpleName() == "Rejection"
                assert (result.reason(), result.detail()) == (expected.reason, expected.detail)
                verdicts[expected.reason] += 1
            else:
                assert described_in_jvm(result) == described(expected)
                state, state_in_jvm = expected, result
                verdicts["applied"] += 1
    assert min(verdicts.values()) >= 50, verdicts


def test_catalogue_command_line_parses() -> None:
    config = parse_args(catalogue_command_line("order-state"))
    assert (config.input_topic, config.output_topic) == ("order-events", "order-state")


@pytest.mark.integration
@pytest.mark.spark
def test_order_states_match_the_reference_fold_and_a_replay_rebuilds_them(
    spark: SparkSession, kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    first = job_config(kafka, tmp_path, topic_name, "first")
    replay = job_config(kafka, tmp_path, topic_name, "replay")
    for config in (first, replay):
        create_job_topics(
            kafka,
            config.streaming,
            *([TopicSpec(first.input_topic, partitions=2)] if config is first else []),
            TopicSpec(config.output_topic, partitions=2, compact=True),
        )
    bootstrap, topic = kafka.bootstrap_servers, first.input_topic
    events = scenario()
    # Two phases, two batches at least: an order's later events meet the state its earlier batch stored.
    half = len(events) // 2
    phases = [[*events[:half], *NAMED[:3]], [*events[half:], *NAMED[3:]]]

    sent: list[TopicRecord] = []
    with running(start_queries(spark, first)) as queries:
        for n, phase in enumerate(phases):
            sent += produce(bootstrap, topic, [encoded(body) for body in phase])
            if n == 0:
                sent += produce(bootstrap, topic, list(BAD_RECORDS))
            process_all(queries)
        query = state_query(queries)
        counted = rejections_counted(query)
        last_progress = query.lastProgress
        assert last_progress is not None
        operator = last_progress.stateOperators[0]
        state_rows, state_bytes = operator.numRowsTotal, operator.memoryUsedBytes
        batches = len(query.recentProgress)
        plan = query._jsq.streamingQuery().lastExecution().executedPlan().toString()
    # The fold runs in the JVM: no Python worker per task for a batch of a few events.
    assert "FlatMapGroupsWithState" in plan and "Pandas" not in plan

    bad_positions = {
        r.position: BAD_RECORDS[(r.key, r.value)] for r in sent if (r.key, r.value) in BAD_RECORDS
    }
    valid = [r for r in sent if r.position not in bad_positions]
    reference = reference_fold(valid)
    states, dead_letters = output_of(kafka, first)

    # Every order's state, and only orders that were placed, exactly as the reference folds them.
    assert states == reference.states
    # The scenario exercises what it claims to.
    reasons = Counter(reference.rejected.values())
    assert reasons["invalid_transition"] >= 10 and reasons["duplicate_event"] >= 10, reasons
    assert states["order-a"]["status"] == "shipped" and states["order-a"]["amount"] == 20.0
    assert "order-ghost" not in states
    # Every rejected event and every malformed record is a dead letter with its reason, keyed by its origin.
    assert dead_letters == {**reference.rejected, **bad_positions}
    named = {r.position: n for n, r in enumerate(r for r in sent if r.key == b"order-a")}
    details = {
        record.key.decode(): (
            dict(record.headers)["dead_letter.reason"].decode(),
            dict(record.headers)["dead_letter.detail"].decode(),
        )
        for record in read_records(bootstrap, first.streaming.dead_letter_topic)
        if record.key is not None
    }
    named_details = {named[p]: details[p] for p in named if named[p] in NAMED_DETAILS}
    assert named_details == NAMED_DETAILS
    # Rejections are counted by reason in the query's observed metric, which the job exports.
    assert {reason: counted[reason] for reason in reasons} == dict(reasons)
    # One state row per order placed (none for rejected-only orders).
    assert state_rows == len(reference.states)
    print(
        f"\norder-state: {len(sent)} records in {batches} batches; state {state_rows} orders, "
        f"{state_bytes} bytes ({state_bytes / max(1, state_rows):.0f} bytes per order)"
    )

    # A replay from offset 0 into a fresh checkpoint rebuilds the same states and rejects the same events.
    with running(start_queries(spark, replay)) as queries:
        process_all(queries)
    replayed_states, replayed_dead_letters = output_of(kafka, replay)
    assert replayed_states == states
    assert replayed_dead_letters == dead_letters


def test_the_producer_sends_valid_lives_and_the_impossible_and_duplicate_events_it_means() -> None:
    """The synthetic producer's generator, folded by the reference: its valid events are all applied, each
    impossible event is an invalid transition and each re-sent event a duplicate, wherever they fall."""
    generator = OrderEventGenerator(open_orders=20, max_disorder_seconds=5.0, seed=3)
    now = BASE.timestamp()
    bodies: list[dict[str, object]] = []
    kinds: list[str] = []
    for n in range(2000):
        duplicate = generator.duplicate_event() if n % 37 == 36 else None
        if n % 41 == 40:
            bodies.append(generator.impossible_event(now + n))
            kinds.append("invalid_transition")
        elif duplicate is not None:
            bodies.append(duplicate)
            kinds.append("duplicate_event")
        else:
            bodies.append(generator.next_event(now + n))
            kinds.append("valid")
    records = [TopicRecord("t", 0, offset, *order_events.encoded(body)) for offset, body in enumerate(bodies)]
    reference = reference_fold(records)
    assert {int(p.split("/")[-1]): r for p, r in reference.rejected.items()} == {
        n: kind for n, kind in enumerate(kinds) if kind != "valid"
    }
    statuses = Counter(state["status"] for state in reference.states.values())
    assert set(statuses) == {"placed", "paid", "shipped", "delivered", "returned"}, statuses
    assert any(state["amount_corrected_at"] for state in reference.states.values())
