package streamstack.jvm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The fold of order-state (jobs/order_state): each order's events applied to its state in log order, kept
 * by {@code flatMapGroupsWithState} keyed by order id, no timeout.
 *
 * <p>The rules are those of jobs/order_state/state_machine.py (`apply_event`, which stays the reference
 * the tests hold this class to, and which the order-event producer plans its events with): the table of
 * possible transitions, an impossible event rejected as {@code invalid_transition} with a detail naming
 * it, a redelivered event (an id the order has applied) rejected as {@code duplicate_event}.
 *
 * <p>Input columns, in this order (jobs.jvm.order_states builds them): order_id, event_id, type, event_time
 * (ISO text) string, amount double, key, value binary, topic string, partition int, offset long,
 * timestamp_ms long. Output: {@link #FOLD_OUTPUT}, per order and batch each rejected event (kind
 * "rejected", with its record) and then the new state if an event was applied (kind "state", with the
 * last applied event's position).
 */
public final class OrderStates {
  private static final int EVENT_ID = 1;
  private static final int TYPE = 2;
  private static final int EVENT_TIME = 3;
  private static final int AMOUNT = 4;
  private static final int KEY = 5;
  private static final int VALUE = 6;
  private static final int TOPIC = 7;
  private static final int PARTITION = 8;
  private static final int OFFSET = 9;
  private static final int TIMESTAMP_MS = 10;

  static final String INVALID_TRANSITION = "invalid_transition";
  static final String DUPLICATE_EVENT = "duplicate_event";

  /** The event types, each with the status it requires (null: no state yet) and the one it leads to. */
  private static final Map<String, String[]> TRANSITIONS =
      Map.of(
          "OrderPlaced", new String[] {null, "placed"},
          "OrderPaid", new String[] {"placed", "paid"},
          "OrderShipped", new String[] {"paid", "shipped"},
          "OrderDelivered", new String[] {"shipped", "delivered"},
          "OrderReturned", new String[] {"delivered", "returned"},
          "AmountCorrected", new String[] {"placed", "placed"});

  private static final List<String> STATUS_ORDER =
      List.of("placed", "paid", "shipped", "delivered", "returned");
  private static final Map<String, String> EVENT_OF_STATUS =
      Map.of(
          "placed", "OrderPlaced",
          "paid", "OrderPaid",
          "shipped", "OrderShipped",
          "delivered", "OrderDelivered",
          "returned", "OrderReturned");
  /** The step time each event type sets, as an index into {@link OrderState#times}. */
  private static final List<String> TIME_EVENTS =
      List.of(
          "OrderPlaced",
          "OrderPaid",
          "OrderShipped",
          "OrderDelivered",
          "OrderReturned",
          "AmountCorrected");

  private static final Set<String> AMOUNT_EVENTS = Set.of("OrderPlaced", "AmountCorrected");

  /** Per order: an {@link OrderState} without its id (the grouping key). */
  static final StructType STATE =
      withStepTimes(
              new StructType()
                  .add("status", DataTypes.StringType, false)
                  .add("amount", DataTypes.DoubleType, false)
                  .add("version", DataTypes.LongType, false)
                  .add("updated_at", DataTypes.StringType, false)
                  .add("last_event_id", DataTypes.StringType, false))
          .add("applied_event_ids", DataTypes.createArrayType(DataTypes.StringType, false), false);

  static final StructType FOLD_OUTPUT =
      withStepTimes(
              new StructType()
                  .add("kind", DataTypes.StringType, false)
                  .add("order_id", DataTypes.StringType, false)
                  .add("status", DataTypes.StringType)
                  .add("amount", DataTypes.DoubleType)
                  .add("version", DataTypes.LongType)
                  .add("updated_at", DataTypes.StringType)
                  .add("last_event_id", DataTypes.StringType))
          .add("dead_letter_reason", DataTypes.StringType)
          .add("dead_letter_detail", DataTypes.StringType)
          .add("key", DataTypes.BinaryType)
          .add("value", DataTypes.BinaryType)
          .add("topic", DataTypes.StringType)
          .add("partition", DataTypes.IntegerType)
          .add("offset", DataTypes.LongType)
          .add("timestamp_ms", DataTypes.LongType);

  /** The step time columns, one per event type in the order of {@link #TIME_EVENTS}. */
  private static StructType withStepTimes(StructType fields) {
    StructType with = fields;
    for (String column :
        List.of(
            "placed_at",
            "paid_at",
            "shipped_at",
            "delivered_at",
            "returned_at",
            "amount_corrected_at")) {
      with = with.add(column, DataTypes.StringType);
    }
    return with;
  }

  private OrderStates() {}

  /** Each order's events of the batch folded into its state (update mode, no timeout). */
  public static Dataset<Row> fold(Dataset<Row> events) {
    return events
        .groupByKey(new FirstColumnKey(), Encoders.STRING())
        .flatMapGroupsWithState(
            new Fold(),
            OutputMode.Update(),
            Encoders.row(STATE),
            Encoders.row(FOLD_OUTPUT),
            GroupStateTimeout.NoTimeout());
  }

  /** The fold of an order's applied events; {@code times} in the order of {@link #TIME_EVENTS}. */
  public record OrderState(
      String status,
      double amount,
      long version,
      String updatedAt,
      String lastEventId,
      String[] times,
      List<String> appliedEventIds) {}

  /** Why an event cannot happen: {@link #INVALID_TRANSITION} or {@link #DUPLICATE_EVENT}, and a detail. */
  public record Rejection(String reason, String detail) {}

  /**
   * The order's state after the event, or its {@link Rejection}. {@code type} is a known event type and,
   * for an OrderPlaced or AmountCorrected, {@code amount} is set: the decoder makes other events dead
   * letters before they reach the fold.
   */
  public static Object applyEvent(
      OrderState state, String orderId, String eventId, String type, String eventTime, Double amount) {
    if (state != null && state.appliedEventIds().contains(eventId)) {
      return new Rejection(
          DUPLICATE_EVENT, type + " " + eventId + " already applied to " + orderId);
    }
    String[] transition = TRANSITIONS.get(type);
    String current = state == null ? null : state.status();
    if (!java.util.Objects.equals(current, transition[0])) {
      return new Rejection(INVALID_TRANSITION, whyImpossible(type, current, transition[0]));
    }
    Double setAmount = AMOUNT_EVENTS.contains(type) ? amount : null;
    String[] times = state == null ? new String[TIME_EVENTS.size()] : state.times().clone();
    times[TIME_EVENTS.indexOf(type)] = eventTime;
    List<String> applied = new ArrayList<>(state == null ? List.of() : state.appliedEventIds());
    applied.add(eventId);
    if (state == null) {
      return new OrderState(transition[1], setAmount, 1, eventTime, eventId, times, applied);
    }
    return new OrderState(
        transition[1],
        setAmount == null ? state.amount() : setAmount,
        state.version() + 1,
        eventTime,
        eventId,
        times,
        applied);
  }

  static String whyImpossible(String type, String current, String required) {
    if (current == null) {
      return type + " before OrderPlaced";
    }
    if (type.equals("OrderPlaced")) {
      return "second OrderPlaced";
    }
    if (current.equals("returned")) {
      return type + " after OrderReturned";
    }
    if (STATUS_ORDER.indexOf(current) < STATUS_ORDER.indexOf(required)) {
      return type + " before " + EVENT_OF_STATUS.get(required);
    }
    if (!type.equals("AmountCorrected") && EVENT_OF_STATUS.get(current).equals(type)) {
      return "second " + type;
    }
    return type + " after " + EVENT_OF_STATUS.get(current);
  }


  static final class Fold implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Row> call(String orderId, Iterator<Row> rows, GroupState<Row> stored) {
      List<Row> events = new ArrayList<>();
      rows.forEachRemaining(events::add);
      // The log's order: a group's rows come in no guaranteed order, and an order's events share a
      // partition (the key is the order id).
      events.sort(
          Comparator.comparingInt((Row row) -> row.getInt(PARTITION))
              .thenComparingLong(row -> row.getLong(OFFSET)));
      OrderState state = stored.exists() ? fromRow(stored.get()) : null;
      Row applied = null;
      List<Row> out = new ArrayList<>();
      for (Row event : events) {
        Double amount = event.isNullAt(AMOUNT) ? null : event.getDouble(AMOUNT);
        Object result =
            applyEvent(
                state,
                orderId,
                event.getString(EVENT_ID),
                event.getString(TYPE),
                event.getString(EVENT_TIME),
                amount);
        if (result instanceof Rejection rejection) {
          out.add(rejected(orderId, state == null ? 0L : state.version(), rejection, event));
        } else {
          state = (OrderState) result;
          applied = event;
        }
      }
      if (state != null && applied != null) {
        stored.update(toRow(state));
        out.add(newState(orderId, state, applied));
      }
      return out.iterator();
    }

    private static OrderState fromRow(Row row) {
      String[] times = new String[TIME_EVENTS.size()];
      for (int i = 0; i < times.length; i++) {
        times[i] = row.getString(5 + i);
      }
      return new OrderState(
          row.getString(0),
          row.getDouble(1),
          row.getLong(2),
          row.getString(3),
          row.getString(4),
          times,
          new ArrayList<>(row.<String>getList(11)));
    }

    private static Row toRow(OrderState state) {
      Object[] values = new Object[12];
      values[0] = state.status();
      values[1] = state.amount();
      values[2] = state.version();
      values[3] = state.updatedAt();
      values[4] = state.lastEventId();
      System.arraycopy(state.times(), 0, values, 5, state.times().length);
      // Spark 4 encodes an array from a Java array or a Scala Seq, not from a java.util.List.
      values[11] = state.appliedEventIds().toArray(new String[0]);
      return RowFactory.create(values);
    }

    private static Row rejected(String orderId, long version, Rejection rejection, Row event) {
      return output(
          "rejected",
          orderId,
          null,
          null,
          version,
          null,
          null,
          new String[TIME_EVENTS.size()],
          rejection.reason(),
          rejection.detail(),
          event.get(KEY),
          event.get(VALUE),
          event);
    }

    private static Row newState(String orderId, OrderState state, Row lastApplied) {
      return output(
          "state",
          orderId,
          state.status(),
          state.amount(),
          state.version(),
          state.updatedAt(),
          state.lastEventId(),
          state.times(),
          null,
          null,
          null,
          null,
          lastApplied);
    }

    private static Row output(
        String kind,
        String orderId,
        String status,
        Double amount,
        Long version,
        String updatedAt,
        String lastEventId,
        String[] times,
        String reason,
        String detail,
        Object key,
        Object value,
        Row position) {
      List<Object> values =
          new ArrayList<>(
              Arrays.asList(kind, orderId, status, amount, version, updatedAt, lastEventId));
      values.addAll(Arrays.asList((Object[]) times));
      values.addAll(
          Arrays.asList(
              reason,
              detail,
              key,
              value,
              position.get(TOPIC),
              position.get(PARTITION),
              position.get(OFFSET),
              position.get(TIMESTAMP_MS)));
      return RowFactory.create(values.toArray());
    }
  }
}
