"""An order's life as a state machine, and its state as the fold of its events: plain Python, no Spark.

`apply_event(state, event)` is where the rules are defined; the order-event producer plans lives with it,
and the job's fold (Java: streamstack.jvm.OrderStates, for speed) is tested against it event by event.

    status (before)   OrderPlaced  OrderPaid  OrderShipped  OrderDelivered  OrderReturned  AmountCorrected
    none              placed       -          -             -               -              -
    placed            -            paid       -             -               -              placed
    paid              -            -          shipped       -               -              -
    shipped           -            -          -             delivered       -              -
    delivered         -            -          -             -               returned       -
    returned          -            -          -             -               -              -

`-` is an impossible transition: the event is rejected (`invalid_transition`, with a detail such as
"OrderShipped before OrderPaid", "OrderPaid after OrderReturned" or "second OrderPlaced") and the state
stays as it was. An amount is set by OrderPlaced and replaced by AmountCorrected, which is possible only
before payment (a paid amount is final). A return needs a delivery first. Returned is final.

Duplicates: each event carries an `event_id`. An event whose id is one this order has already APPLIED is a
redelivery (a producer retry): it is rejected as `duplicate_event` and changes nothing, so delivering an
event twice is idempotent. Ids are per order. A rejected event's id is not remembered: a redelivered event
that was impossible the first time is judged again against the state it meets.

`version` is the number of events applied; `updated_at` the event time of the last one applied. Event times
are data, not the order of folding: events are applied in log order, whatever their times say.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

EVENT_TYPES = (
    "OrderPlaced",
    "OrderPaid",
    "OrderShipped",
    "OrderDelivered",
    "OrderReturned",
    "AmountCorrected",
)
# The event types that carry an amount (required for them, ignored for the others).
AMOUNT_EVENTS = ("OrderPlaced", "AmountCorrected")

# Each event type: the status it requires (None: no state yet) and the status it leads to.
_TRANSITIONS: dict[str, tuple[str | None, str]] = {
    "OrderPlaced": (None, "placed"),
    "OrderPaid": ("placed", "paid"),
    "OrderShipped": ("paid", "shipped"),
    "OrderDelivered": ("shipped", "delivered"),
    "OrderReturned": ("delivered", "returned"),
    "AmountCorrected": ("placed", "placed"),
}
_STATUS_ORDER = ("placed", "paid", "shipped", "delivered", "returned")
# The event that leads to each status (for details: "OrderShipped before OrderPaid").
_EVENT_OF_STATUS = {"placed": "OrderPlaced", "paid": "OrderPaid", "shipped": "OrderShipped"}
_EVENT_OF_STATUS |= {"delivered": "OrderDelivered", "returned": "OrderReturned"}
# The timestamp field each event type sets.
TIME_FIELDS = {
    "OrderPlaced": "placed_at",
    "OrderPaid": "paid_at",
    "OrderShipped": "shipped_at",
    "OrderDelivered": "delivered_at",
    "OrderReturned": "returned_at",
    "AmountCorrected": "amount_corrected_at",
}

INVALID_TRANSITION = "invalid_transition"
DUPLICATE_EVENT = "duplicate_event"
REJECTION_REASONS = (INVALID_TRANSITION, DUPLICATE_EVENT)


@dataclass(frozen=True)
class OrderEvent:
    """One decoded event; `event_time` is ISO-8601 text (UTC, milliseconds) and only recorded."""

    event_id: str
    order_id: str
    type: str
    event_time: str
    amount: float | None = None


@dataclass(frozen=True)
class OrderState:
    """The fold of an order's applied events."""

    order_id: str
    status: str
    amount: float
    version: int
    updated_at: str
    last_event_id: str
    placed_at: str | None = None
    paid_at: str | None = None
    shipped_at: str | None = None
    delivered_at: str | None = None
    returned_at: str | None = None
    amount_corrected_at: str | None = None
    applied_event_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rejection:
    reason: str
    detail: str


def apply_event(state: OrderState | None, event: OrderEvent) -> OrderState | Rejection:
    """The order's state after `event`, or why the event cannot happen to an order in `state`.

    `event.type` is one of EVENT_TYPES and, for AMOUNT_EVENTS, `event.amount` is set: the decoder turns
    other events into dead letters before they reach the fold."""
    if state is not None and event.event_id in state.applied_event_ids:
        return Rejection(
            DUPLICATE_EVENT, f"{event.type} {event.event_id} already applied to {event.order_id}"
        )
    required, target = _TRANSITIONS[event.type]
    current = None if state is None else state.status
    if current != required:
        return Rejection(INVALID_TRANSITION, _why_impossible(event.type, current, required))
    amount = event.amount if event.type in AMOUNT_EVENTS and event.amount is not None else None
    if state is None:
        assert amount is not None, "OrderPlaced without an amount reached the fold"
        return OrderState(
            order_id=event.order_id,
            status=target,
            amount=amount,
            version=1,
            updated_at=event.event_time,
            last_event_id=event.event_id,
            placed_at=event.event_time,
            applied_event_ids=(event.event_id,),
        )
    return replace(
        state,
        status=target,
        amount=state.amount if amount is None else amount,
        version=state.version + 1,
        updated_at=event.event_time,
        last_event_id=event.event_id,
        applied_event_ids=(*state.applied_event_ids, event.event_id),
        **{TIME_FIELDS[event.type]: event.event_time},
    )


def _why_impossible(event_type: str, current: str | None, required: str | None) -> str:
    if current is None:
        return f"{event_type} before OrderPlaced"
    if event_type == "OrderPlaced":
        return "second OrderPlaced"
    if current == "returned":
        return f"{event_type} after OrderReturned"
    assert required is not None
    if _STATUS_ORDER.index(current) < _STATUS_ORDER.index(required):
        return f"{event_type} before {_EVENT_OF_STATUS[required]}"
    if event_type != "AmountCorrected" and _EVENT_OF_STATUS[current] == event_type:
        return f"second {event_type}"
    return f"{event_type} after {_EVENT_OF_STATUS[current]}"


def fold(events: list[OrderEvent], state: OrderState | None = None) -> OrderState | None:
    """An order's state after its events, in the order given (rejected events change nothing)."""
    for event in events:
        result = apply_event(state, event)
        if isinstance(result, OrderState):
            state = result
    return state
