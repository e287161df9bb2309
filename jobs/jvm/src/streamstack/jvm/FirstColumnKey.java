package streamstack.jvm;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Row;

/** The grouping key of a keyed state step whose input rows start with their key (a string). */
final class FirstColumnKey implements MapFunction<Row, String> {
  private static final long serialVersionUID = 1L;

  @Override
  public String call(Row row) {
    return row.getString(0);
  }
}
