package streamstack.jvm;

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
 * the running batch. Each query ends after its running
 * batch, or is stopped when the grace period is over: a batch cut then is not committed and runs again at the
 * next start, as after a crash. Runs in the JVM, which the kubelet signals in the cluster (the Python driver
 * is its child there), from a SIGTERM handler; the Python driver calls {@link #stopQueries} itself when it
 * is signalled locally.
 */
public final class GracefulStop {

  private static final Logger LOG = LoggerFactory.getLogger(GracefulStop.class);
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
   * Stop every active query of the session after the batch it is running, if any, or when {@code
   * graceMillis} have passed; returns how many were left with a batch not committed. Each query is first
   * marked stopped, as {@code stop()} does, so that it starts no further batch; one that is not in a batch
   * is then stopped at once, and one that is ends when its batch has been committed. Spark itself
   * interrupts a batch whose query it finds marked stopped once the batch is planned ({@code
   * MicroBatchExecution.runBatch}), so a stop that lands while a batch is being planned leaves that batch
   * not committed, as one cut after the grace period is: it runs again at the next start, and the log line
   * counts it. Safe to call concurrently and again.
   */
  public static synchronized int stopQueries(SparkSession session, long graceMillis) {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(graceMillis);
    StreamingQuery[] queries = session.streams().active();
    for (StreamingQuery query : queries) {
      if (query instanceof StreamingQueryWrapper wrapper) {
        wrapper.streamingQuery().state().set(TERMINATED$.MODULE$);
      }
      if (!query.status().isTriggerActive()) {
        stopQuietly(query);
      }
    }
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
