package streamstack.jvm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
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
 * The per-user state of view-bursts (jobs/view_bursts): the largest number of a user's page views whose
 * event times all lie less than the window apart, kept by {@code flatMapGroupsWithState} keyed by user
 * with an event-time timeout.
 *
 * <p>Per user the state holds the ascending view times an on-time view could still share a window with
 * (after watermark - window), the largest burst so far and the newest view time. A batch inserts the
 * user's new views, recomputes the largest window over the buffer (two pointers), emits when it grew (a
 * tie keeps the burst already emitted) and evicts what the watermark has passed. Timeout: at the newest
 * buffered view + the window (the buffer then empties), then at the newest view + the retention, when the
 * user is forgotten; a forgotten user starts again from 0.
 *
 * <p>Input columns, in this order (jobs.jvm.view_bursts builds them): user_id string,
 * view_ms long (event time, epoch ms), then the watermarked event time. Output: {@link #BURST}.
 */
public final class ViewBursts {
  /** Per user: the buffer, the largest burst (views, its first and last view) and the newest view. */
  static final StructType STATE =
      new StructType()
          .add("buffer", DataTypes.createArrayType(DataTypes.LongType, false), false)
          .add("views", DataTypes.LongType, false)
          .add("first_ms", DataTypes.LongType, false)
          .add("last_ms", DataTypes.LongType, false)
          .add("newest_ms", DataTypes.LongType, false);

  static final StructType BURST =
      new StructType()
          .add("user_id", DataTypes.StringType, false)
          .add("views", DataTypes.LongType, false)
          .add("first_ms", DataTypes.LongType, false)
          .add("last_ms", DataTypes.LongType, false);

  private ViewBursts() {}

  /** Each user's largest burst, in the batch where it grows (update mode). */
  public static Dataset<Row> largestBursts(Dataset<Row> views, long windowMs, long retentionMs) {
    return views
        .groupByKey(new FirstColumnKey(), Encoders.STRING())
        .flatMapGroupsWithState(
            new Bursts(windowMs, retentionMs),
            OutputMode.Update(),
            Encoders.row(STATE),
            Encoders.row(BURST),
            GroupStateTimeout.EventTimeTimeout());
  }

  /** {@code views} views, the first at {@code firstMs} and the last at {@code lastMs}. */
  public record Burst(long views, long firstMs, long lastMs) {
    static final Burst NONE = new Burst(0, 0, 0);
  }

  /** A user's state: the buffer (ascending), the largest burst so far and the newest view's time. */
  public record UserState(long[] buffer, Burst best, long newestMs) {}

  /** The state after a batch, and the burst to emit (null when the largest did not grow). */
  public record Step(UserState state, Burst emitted) {}

  /**
   * The largest run of {@code times} (ascending) whose last and first are less than {@code windowMs}
   * apart; of equal runs, the one that ends first.
   */
  public static Burst largestWindow(long[] times, long windowMs) {
    Burst best = Burst.NONE;
    int start = 0;
    for (int end = 0; end < times.length; end++) {
      long last = times[end];
      while (last - times[start] >= windowMs) {
        start++;
      }
      if (end - start + 1 > best.views()) {
        best = new Burst(end - start + 1, times[start], last);
      }
    }
    return best;
  }

  /**
   * A user's state after a batch brought {@code newTimes} (all after the watermark: Spark drops older
   * views before this step) and the watermark moved to {@code watermarkMs}. The buffer keeps only times
   * after {@code watermarkMs - windowMs}. A null state: the buffer is empty and nothing is new.
   */
  public static Step advance(UserState previous, long[] newTimes, long watermarkMs, long windowMs) {
    long[] added = newTimes.clone();
    Arrays.sort(added);
    long[] buffer = previous == null ? added : merge(previous.buffer(), added);
    Burst best = previous == null ? Burst.NONE : previous.best();
    Long newest = previous == null ? null : previous.newestMs();
    Burst emitted = null;
    if (added.length > 0) {
      Burst candidate = largestWindow(buffer, windowMs);
      if (candidate.views() > best.views()) {
        best = candidate;
        emitted = candidate;
      }
      long latest = added[added.length - 1];
      newest = newest == null ? latest : Math.max(latest, newest);
    }
    if (newest == null) {
      return new Step(null, emitted);
    }
    long[] kept = Arrays.copyOfRange(buffer, firstAfter(buffer, watermarkMs - windowMs), buffer.length);
    return new Step(new UserState(kept, best, newest), emitted);
  }

  static long[] merge(long[] left, long[] right) {
    long[] merged = new long[left.length + right.length];
    int i = 0;
    int j = 0;
    int k = 0;
    while (i < left.length && j < right.length) {
      merged[k++] = left[i] <= right[j] ? left[i++] : right[j++];
    }
    while (i < left.length) {
      merged[k++] = left[i++];
    }
    while (j < right.length) {
      merged[k++] = right[j++];
    }
    return merged;
  }

  /** The index of the first time in {@code sorted} above {@code bound} (Python's bisect_right). */
  static int firstAfter(long[] sorted, long bound) {
    int low = 0;
    int high = sorted.length;
    while (low < high) {
      int middle = (low + high) >>> 1;
      if (sorted[middle] <= bound) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    return low;
  }


  static final class Bursts implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    private final long windowMs;
    private final long retentionMs;

    Bursts(long windowMs, long retentionMs) {
      this.windowMs = windowMs;
      this.retentionMs = retentionMs;
    }

    @Override
    public Iterator<Row> call(String userId, Iterator<Row> rows, GroupState<Row> state) {
      List<Long> times = new ArrayList<>();
      while (rows.hasNext()) {
        times.add(rows.next().getLong(1));
      }
      long[] newTimes = times.stream().mapToLong(Long::longValue).toArray();
      long watermark = Math.max(state.getCurrentWatermarkMs(), 0L);
      UserState previous = state.exists() ? fromRow(state.get()) : null;
      if (previous != null && previous.newestMs() + retentionMs <= watermark) {
        // Forgotten, whether its timeout fired in an earlier batch or new views came first.
        previous = null;
      }
      Step step = advance(previous, newTimes, watermark, windowMs);
      UserState current = step.state();
      if (current == null) {
        state.remove();
      } else {
        Burst best = current.best();
        state.update(
            RowFactory.create(
                current.buffer(), best.views(), best.firstMs(), best.lastMs(), current.newestMs()));
        long[] buffer = current.buffer();
        long wake =
            buffer.length > 0 ? buffer[buffer.length - 1] + windowMs : current.newestMs() + retentionMs;
        state.setTimeoutTimestamp(Math.max(wake, watermark + 1));
      }
      Burst emitted = step.emitted();
      if (emitted == null) {
        return Collections.emptyIterator();
      }
      return Collections.singletonList(
              RowFactory.create(userId, emitted.views(), emitted.firstMs(), emitted.lastMs()))
          .iterator();
    }

    private static UserState fromRow(Row row) {
      List<Long> buffer = row.getList(0);
      long[] times = buffer.stream().mapToLong(Long::longValue).toArray();
      return new UserState(
          times, new Burst(row.getLong(1), row.getLong(2), row.getLong(3)), row.getLong(4));
    }
  }
}
