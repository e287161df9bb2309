package streamstack.jvm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.streaming.checkpointing.HDFSMetadataLog;
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution;
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper;
import org.apache.spark.sql.execution.streaming.runtime.TERMINATED$;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryException;
import org.apache.spark.util.SignalUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.runtime.AbstractFunction0;

/**
 * A driver's streaming queries stopped between batches when it is asked to stop (SIGTERM from the kubelet or
 * the local supervisor, Ctrl-C), instead of killed in the middle of one by the JVM's shutdown (the
 * executor's and the SparkContext's shutdown hooks). Structured Streaming has no such setting ({@code
 * spark.streaming.stopGracefullyOnShutdown} is the DStream API's), and {@code StreamingQuery.stop()} cuts
 * the running batch. Each query ends at its first pause between batches, or after the batch it is in when
 * half the grace period has passed, or is stopped when the grace period is over: a batch cut then is not
 * committed and runs again at the next start, as after a crash. Runs in the JVM, which the kubelet signals
 * in the cluster (the Python driver is its child there), from a SIGTERM handler; the Python driver calls
 * {@link #stopQueries} itself when it is signalled locally.
 */
public final class GracefulStop {

  private static final Logger LOG = LoggerFactory.getLogger(GracefulStop.class);
  // How often a query in a batch is looked at again: well under a batch's few seconds.
  private static final long POLL_MILLIS = 10;
  private static boolean installed;

  private GracefulStop() {}

  /**
   * Stop the session's queries this way when the JVM gets SIGTERM; once per JVM. The signal is then handled:
   * the JVM exits when the driver's main program ends, which it does once its queries have stopped. Not a
   * shutdown hook: a JVM that shuts down because its Python driver is gone (killed, its pipe closed) has no
   * batch worth waiting for and stops at once, as before.
   */
  public static synchronized void install(SparkSession session, long graceMillis) {
    if (installed) {
      return;
    }
    installed = true;
    SignalUtils.register(
        "TERM",
        new AbstractFunction0<Object>() {
          @Override
          public Object apply() {
            stopQueries(session, graceMillis);
            return Boolean.TRUE;
          }
        });
  }

  /**
   * Stop every active query of the session between batches, or when {@code graceMillis} have passed; returns
   * how many were left with a batch not committed. A query that is not in a batch is stopped at once, and one
   * that is, as soon as that batch has ended: it is not marked stopped while its batch is still being planned,
   * because Spark interrupts a batch whose query it finds marked stopped once the batch is planned ({@code
   * MicroBatchExecution.runBatch}), and that batch would then run again at the next start. A query still in a
   * batch after half the grace period (one batch after another, with no pause between) is marked stopped, as
   * {@code stop()} does, so that it starts no further batch and ends when its batch is committed (unless the
   * mark lands while that batch is planned); one still in it when the grace period is over is stopped there.
   * The log line counts what was not committed. Safe to call concurrently and again.
   */
  public static synchronized int stopQueries(SparkSession session, long graceMillis) {
    long start = System.nanoTime();
    long deadline = start + TimeUnit.MILLISECONDS.toNanos(graceMillis);
    long markBy = start + TimeUnit.MILLISECONDS.toNanos(graceMillis / 2);
    StreamingQuery[] queries = session.streams().active();
    List<StreamingQuery> inBatch = new ArrayList<>(Arrays.asList(queries));
    while (true) {
      inBatch.removeIf(GracefulStop::stopIfBetweenBatches);
      if (inBatch.isEmpty() || System.nanoTime() >= markBy) {
        break;
      }
      try {
        Thread.sleep(POLL_MILLIS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    inBatch.forEach(GracefulStop::markStoppedAndStopIfIdle);
    int cutAfterGrace = 0;
    for (StreamingQuery query : queries) {
      long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
      try {
        // Not isActive(): that reads the state just set, not whether the query's thread has ended.
        if (!query.awaitTermination(Math.max(left, 1))) {
          cutAfterGrace++;
          stopQuietly(query);
        }
      } catch (StreamingQueryException e) {
        // it failed in its last batch: its own error is logged and raised to the driver
      }
    }
    int notCommitted = 0;
    for (StreamingQuery query : queries) {
      if (query instanceof StreamingQueryWrapper wrapper && hasBatchNotCommitted(wrapper.streamingQuery())) {
        notCommitted++;
      }
    }
    if (queries.length > 0) {
      LOG.warn(
          "Stopping: {} streaming queries stopped between batches, {} with a batch not committed (it runs"
              + " again at the next start), {} of them cut after the {} ms grace",
          queries.length - notCommitted,
          notCommitted,
          cutAfterGrace,
          graceMillis);
    }
    return notCommitted;
  }

  /**
   * Whether the query is done with: stopped now because it is between batches, or ended already. Marked
   * stopped first, so that no batch starts after the check; one that started just before the mark is awaited
   * with the others.
   */
  private static boolean stopIfBetweenBatches(StreamingQuery query) {
    if (!query.isActive()) {
      return true;
    }
    if (query.status().isTriggerActive()) {
      return false;
    }
    markStoppedAndStopIfIdle(query);
    return true;
  }

  /** Marked stopped, as {@code stop()} does, so that it starts no further batch; stopped now if idle. */
  private static void markStoppedAndStopIfIdle(StreamingQuery query) {
    if (query instanceof StreamingQueryWrapper wrapper) {
      wrapper.streamingQuery().state().set(TERMINATED$.MODULE$);
    }
    if (!query.status().isTriggerActive()) {
      stopQuietly(query);
    }
  }

  /** Its offset log plans a batch its commit log does not have. */
  static boolean hasBatchNotCommitted(StreamExecution execution) {
    return latestBatchId(execution.offsetLog()) > latestBatchId(execution.commitLog());
  }

  private static long latestBatchId(HDFSMetadataLog<?> log) {
    Option<Object> latest = log.getLatestBatchId();
    return latest.isDefined() ? (Long) latest.get() : -1L;
  }

  private static void stopQuietly(StreamingQuery query) {
    try {
      query.stop();
    } catch (java.util.concurrent.TimeoutException e) {
      LOG.warn("Stopping: query {} did not stop in time", query.name(), e);
    }
  }
}
