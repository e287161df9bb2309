package streamstack.jvm;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The per-user view of user-view (jobs/user_view) kept as Spark state, in two keyed steps per batch:
 *
 * <ol>
 *   <li>keyed by order: the orders table, one row per existing order (its user, amount, updated_at). A
 *       batch's last valid change of an order replaces or deletes it, and becomes a change of its user's
 *       orders: a removal for the user that held it before (deleted, or moved to another user) and the
 *       order's new version for the user that holds it now. An order's tombstone names no user: only this
 *       state knows whose total it leaves. Profile changes pass through (the batch's last per user).
 *   <li>keyed by user: the profile and the user's orders. The batch's changes are applied, and the user's
 *       view row is emitted when it differs from the row before the batch: the new row, or a tombstone when
 *       the profile is gone.
 * </ol>
 *
 * <p>Input columns, in this order (jobs.jvm.user_view_tables builds them): is_order boolean, record_key
 * string (the order id or user id), position long (the record's offset: a row's changes share one
 * partition), deleted boolean (a tombstone), user_id, name, country, tier string, amount decimal(18,2),
 * updated_at long (microseconds). Dead letters never reach it. Output: see {@link #VIEW}; `present` false is
 * a tombstone.
 */
public final class UserViewTables {
  private static final int IS_ORDER = 0;
  private static final int RECORD_KEY = 1;
  private static final int POSITION = 2;
  private static final int DELETED = 3;
  private static final int USER_ID = 4;
  private static final int NAME = 5;
  private static final int COUNTRY = 6;
  private static final int TIER = 7;
  private static final int AMOUNT = 8;
  private static final int UPDATED_AT = 9;

  private static final DataType AMOUNT_TYPE = DataTypes.createDecimalType(18, 2);
  // A sum of decimal(18,2) amounts, as Spark's own sum() types it.
  private static final DataType TOTAL_TYPE = DataTypes.createDecimalType(28, 2);

  /** An order as its owner's state holds it, and the state of step 1. */
  static final StructType ORDER =
      new StructType()
          .add("user_id", DataTypes.StringType, false)
          .add("amount", AMOUNT_TYPE)
          .add("updated_at", DataTypes.LongType);

  /** Step 1's output, step 2's input: a change of one user's profile or of one of the user's orders. */
  static final StructType USER_CHANGE =
      new StructType()
          .add("user_id", DataTypes.StringType, false)
          .add("is_order", DataTypes.BooleanType, false)
          .add("order_id", DataTypes.StringType)
          .add("deleted", DataTypes.BooleanType, false)
          .add("name", DataTypes.StringType)
          .add("country", DataTypes.StringType)
          .add("tier", DataTypes.StringType)
          .add("amount", AMOUNT_TYPE)
          .add("updated_at", DataTypes.LongType);

  /** Step 2's state: the profile (null fields and has_profile false when there is none) and the orders. */
  static final StructType USER =
      new StructType()
          .add("has_profile", DataTypes.BooleanType, false)
          .add("name", DataTypes.StringType)
          .add("country", DataTypes.StringType)
          .add("tier", DataTypes.StringType)
          .add("updated_at", DataTypes.LongType)
          .add("order_ids", DataTypes.createArrayType(DataTypes.StringType, false), false)
          .add("amounts", DataTypes.createArrayType(AMOUNT_TYPE, true), false)
          .add("order_updated_ats", DataTypes.createArrayType(DataTypes.LongType, true), false);

  static final StructType VIEW =
      new StructType()
          .add("user_id", DataTypes.StringType, false)
          .add("present", DataTypes.BooleanType, false)
          .add("name", DataTypes.StringType)
          .add("country", DataTypes.StringType)
          .add("tier", DataTypes.StringType)
          .add("order_count", DataTypes.LongType)
          .add("order_total", TOTAL_TYPE)
          .add("updated_at", DataTypes.LongType);

  private UserViewTables() {}

  /** The view rows that changed in the batch (append mode, no timeout, two stateful operators). */
  public static Dataset<Row> changedRows(Dataset<Row> changes) {
    Dataset<Row> userChanges =
        changes
            .groupByKey(new RowKey(), Encoders.STRING())
            .flatMapGroupsWithState(
                new OrderOwners(),
                OutputMode.Append(),
                Encoders.row(ORDER),
                Encoders.row(USER_CHANGE),
                GroupStateTimeout.NoTimeout());
    return userChanges
        .groupByKey(new FirstColumnKey(), Encoders.STRING())
        .flatMapGroupsWithState(
            new UserRows(),
            OutputMode.Append(),
            Encoders.row(USER),
            Encoders.row(VIEW),
            GroupStateTimeout.NoTimeout());
  }

  static final class RowKey implements MapFunction<Row, String> {
    private static final long serialVersionUID = 1L;

    @Override
    public String call(Row row) {
      // Orders and users are separate tables: their ids may coincide.
      return (row.getBoolean(IS_ORDER) ? "order:" : "user:") + row.getString(RECORD_KEY);
    }
  }


  static Row lastChange(Iterator<Row> rows) {
    Row last = rows.next();
    while (rows.hasNext()) {
      Row row = rows.next();
      if (row.getLong(POSITION) > last.getLong(POSITION)) {
        last = row;
      }
    }
    return last;
  }

  static Row orderChange(String userId, String orderId, boolean removed, Row order) {
    return RowFactory.create(
        userId,
        true,
        orderId,
        removed,
        null,
        null,
        null,
        removed ? null : order.get(1),
        removed ? null : order.get(2));
  }

  static final class OrderOwners implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Row> call(String key, Iterator<Row> rows, GroupState<Row> state) {
      Row change = lastChange(rows);
      if (!change.getBoolean(IS_ORDER)) {
        return Collections.singletonList(
                RowFactory.create(
                    change.getString(RECORD_KEY),
                    false,
                    null,
                    change.getBoolean(DELETED),
                    change.get(NAME),
                    change.get(COUNTRY),
                    change.get(TIER),
                    null,
                    change.get(UPDATED_AT)))
            .iterator();
      }
      String orderId = change.getString(RECORD_KEY);
      Row before = state.exists() ? state.get() : null;
      List<Row> out = new ArrayList<>(2);
      Row after = null;
      if (!change.getBoolean(DELETED)) {
        after = RowFactory.create(change.getString(USER_ID), change.get(AMOUNT), change.get(UPDATED_AT));
      }
      if (before != null && (after == null || !before.getString(0).equals(after.getString(0)))) {
        out.add(orderChange(before.getString(0), orderId, true, before));
      }
      if (after != null) {
        out.add(orderChange(after.getString(0), orderId, false, after));
        state.update(after);
      } else if (before != null) {
        state.remove();
      }
      return out.iterator();
    }
  }

  /** A user's profile and orders, mutable for the length of one call. */
  static final class UserTables {
    boolean hasProfile;
    String name;
    String country;
    String tier;
    Long updatedAt;
    final Map<String, Row> orders = new LinkedHashMap<>();

    static UserTables of(GroupState<Row> state) {
      UserTables user = new UserTables();
      if (!state.exists()) {
        return user;
      }
      Row row = state.get();
      user.hasProfile = row.getBoolean(0);
      user.name = (String) row.get(1);
      user.country = (String) row.get(2);
      user.tier = (String) row.get(3);
      user.updatedAt = row.isNullAt(4) ? null : row.getLong(4);
      List<String> ids = row.getList(5);
      List<BigDecimal> amounts = row.getList(6);
      List<Long> updatedAts = row.getList(7);
      for (int i = 0; i < ids.size(); i++) {
        user.orders.put(ids.get(i), RowFactory.create(amounts.get(i), updatedAts.get(i)));
      }
      return user;
    }

    void apply(Row change) {
      if (change.getBoolean(1)) {
        String orderId = change.getString(2);
        if (change.getBoolean(3)) {
          orders.remove(orderId);
        } else {
          orders.put(orderId, RowFactory.create(change.get(7), change.get(8)));
        }
      } else if (change.getBoolean(3)) {
        hasProfile = false;
        name = country = tier = null;
        updatedAt = null;
      } else {
        hasProfile = true;
        name = (String) change.get(4);
        country = (String) change.get(5);
        tier = (String) change.get(6);
        updatedAt = change.isNullAt(8) ? null : change.getLong(8);
      }
    }

    /** The view row: present iff the profile exists; updated_at the latest of profile and orders. */
    Row view(String userId) {
      if (!hasProfile) {
        return RowFactory.create(userId, false, null, null, null, null, null, null);
      }
      BigDecimal total = BigDecimal.ZERO.setScale(2);
      Long latest = updatedAt;
      for (Row order : orders.values()) {
        if (!order.isNullAt(0)) {
          total = total.add((BigDecimal) order.get(0));
        }
        if (!order.isNullAt(1) && (latest == null || order.getLong(1) > latest)) {
          latest = order.getLong(1);
        }
      }
      return RowFactory.create(
          userId, true, name, country, tier, (long) orders.size(), total, latest);
    }

    void saveTo(GroupState<Row> state) {
      if (!hasProfile && orders.isEmpty()) {
        state.remove();
        return;
      }
      String[] ids = new String[orders.size()];
      BigDecimal[] amounts = new BigDecimal[orders.size()];
      Long[] updatedAts = new Long[orders.size()];
      int i = 0;
      for (Map.Entry<String, Row> order : orders.entrySet()) {
        ids[i] = order.getKey();
        amounts[i] = (BigDecimal) order.getValue().get(0);
        updatedAts[i] = order.getValue().isNullAt(1) ? null : order.getValue().getLong(1);
        i++;
      }
      state.update(
          RowFactory.create(hasProfile, name, country, tier, updatedAt, ids, amounts, updatedAts));
    }
  }

  static boolean sameRow(Row a, Row b) {
    if (a.getBoolean(1) != b.getBoolean(1)) {
      return false;
    }
    if (!a.getBoolean(1)) {
      return true;
    }
    return Objects.equals(a.get(2), b.get(2))
        && Objects.equals(a.get(3), b.get(3))
        && Objects.equals(a.get(4), b.get(4))
        && a.getLong(5) == b.getLong(5)
        && ((BigDecimal) a.get(6)).compareTo((BigDecimal) b.get(6)) == 0
        && Objects.equals(a.get(7), b.get(7));
  }

  static final class UserRows implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Row> call(String userId, Iterator<Row> changes, GroupState<Row> state) {
      UserTables user = UserTables.of(state);
      Row before = user.view(userId);
      while (changes.hasNext()) {
        user.apply(changes.next());
      }
      user.saveTo(state);
      Row after = user.view(userId);
      return sameRow(before, after)
          ? Collections.emptyIterator()
          : Collections.singletonList(after).iterator();
    }
  }
}
