package streamstack.jvm;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;
import org.apache.spark.sql.execution.streaming.state.StateStore$;

/**
 * Stops a JVM's state stores when its Spark driver or executor stops: their maintenance (RocksDB snapshot
 * uploads, old file cleanup) finishes what it is doing and the stores are closed. Spark itself never stops
 * them outside its tests, so a snapshot upload running when the driver stops reports to the driver's state
 * store coordinator after the driver's RPC environment has gone, and logs an error at a normal stop. The
 * driver's shutdown runs after its scheduler has stopped and before that environment stops; in local mode
 * the executor's stores live in the driver's JVM, so that covers them. An executor in the cluster drains its
 * own when the driver tells it to stop, unless the SIGTERM that follows (from the kubelet when the driver's
 * pod goes, or a standalone worker) ends its JVM first. Set as {@code spark.plugins} by the jobs' session
 * (jobs.common.session).
 */
public final class StateStoreDrain implements SparkPlugin {

  @Override
  public DriverPlugin driverPlugin() {
    return new DriverPlugin() {
      @Override
      public void shutdown() {
        stopStateStores();
      }
    };
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void shutdown() {
        stopStateStores();
      }
    };
  }

  /** Once at a time: in local mode the driver and its executor stop in the same JVM, concurrently. */
  static synchronized void stopStateStores() {
    StateStore$.MODULE$.stop();
  }
}
