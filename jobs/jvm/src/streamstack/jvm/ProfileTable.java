package streamstack.jvm;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
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
 * A users table kept as Spark state keyed by user, and the views of a batch enriched with it: per user and
 * batch, the batch's profile changes are applied in offset order, then each of the batch's views is emitted
 * with the resulting profile. That is the stream-table join of user-enrichment (jobs/user_enrichment) with a
 * cost per batch that follows the batch's rows, not the table's size.
 *
 * <p>Input columns, in this order (jobs.jvm.profile_table builds them): user_id string (the key), is_view
 * boolean, position long (the record's offset; a user's changes share one partition, so offsets order
 * them), deleted boolean (a tombstone), name, country, tier string, updated_at long (microseconds), source,
 * url string, event_time long (microseconds). A profile change uses the profile columns, a view the view
 * columns. Dead letters never reach it. Output: source, user_id, url, event_time, name, country, tier,
 * profile_updated_at; the profile columns null when the user is unknown or deleted.
 */
public final class ProfileTable {
  private static final int USER_ID = 0;
  private static final int IS_VIEW = 1;
  private static final int POSITION = 2;
  private static final int DELETED = 3;
  private static final int NAME = 4;
  private static final int COUNTRY = 5;
  private static final int TIER = 6;
  private static final int UPDATED_AT = 7;
  private static final int SOURCE = 8;
  private static final int URL = 9;
  private static final int EVENT_TIME = 10;

  static final StructType PROFILE =
      new StructType()
          .add("name", DataTypes.StringType)
          .add("country", DataTypes.StringType)
          .add("tier", DataTypes.StringType)
          .add("updated_at", DataTypes.LongType);

  static final StructType ENRICHED =
      new StructType()
          .add("source", DataTypes.StringType, false)
          .add("user_id", DataTypes.StringType, false)
          .add("url", DataTypes.StringType)
          .add("event_time", DataTypes.LongType)
          .add("name", DataTypes.StringType)
          .add("country", DataTypes.StringType)
          .add("tier", DataTypes.StringType)
          .add("profile_updated_at", DataTypes.LongType);

  private ProfileTable() {}

  /** The views of `changes` enriched with the profile table kept as state (append mode, no timeout). */
  public static Dataset<Row> enrich(Dataset<Row> changes) {
    return changes
        .groupByKey(new UserId(), Encoders.STRING())
        .flatMapGroupsWithState(
            new ApplyThenEnrich(),
            OutputMode.Append(),
            Encoders.row(PROFILE),
            Encoders.row(ENRICHED),
            GroupStateTimeout.NoTimeout());
  }

  static final class UserId implements MapFunction<Row, String> {
    private static final long serialVersionUID = 1L;

    @Override
    public String call(Row row) {
      return row.getString(USER_ID);
    }
  }

  static final class ApplyThenEnrich implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Row> call(String userId, Iterator<Row> rows, GroupState<Row> state) {
      Row lastChange = null;
      List<Row> views = new ArrayList<>();
      while (rows.hasNext()) {
        Row row = rows.next();
        if (row.getBoolean(IS_VIEW)) {
          views.add(row);
        } else if (lastChange == null || row.getLong(POSITION) > lastChange.getLong(POSITION)) {
          lastChange = row;
        }
      }
      if (lastChange != null) {
        if (lastChange.getBoolean(DELETED)) {
          state.remove();
        } else {
          state.update(
              RowFactory.create(
                  lastChange.get(NAME),
                  lastChange.get(COUNTRY),
                  lastChange.get(TIER),
                  lastChange.get(UPDATED_AT)));
        }
      }
      if (views.isEmpty()) {
        return Collections.emptyIterator();
      }
      Row profile = state.exists() ? state.get() : null;
      List<Row> enriched = new ArrayList<>(views.size());
      for (Row view : views) {
        enriched.add(
            RowFactory.create(
                view.getString(SOURCE),
                userId,
                view.get(URL),
                view.get(EVENT_TIME),
                profile == null ? null : profile.get(0),
                profile == null ? null : profile.get(1),
                profile == null ? null : profile.get(2),
                profile == null ? null : profile.get(3)));
      }
      return enriched.iterator();
    }
  }
}
