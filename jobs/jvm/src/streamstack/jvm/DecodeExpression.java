package streamstack.jvm;

import java.io.Serializable;
import java.util.List;
import java.util.Objects;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.FalseLiteral$;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.TimestampType;
import scala.Function1;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@link EventDecoder} as a Catalyst expression: {@code decode(value binary, record_time timestamp)} gives
 * the decoder's verdict struct as Spark's own internal row (UTF8String text, primitive fields), with no UDF
 * converters between the decoder and the plan, and generated code that calls the decoder directly (whole-stage
 * code generation keeps the projection it is in).
 *
 * <p>Registered per session as a temporary function, from pyspark: {@code DecodeExpression.register(
 * spark._jsparkSession.sessionState().functionRegistry(), name, spec)}; the class must be on the classpath of
 * the driver and the executors (the jobs image's Spark jars folder, or spark.jars).
 */
public final class DecodeExpression extends Expression implements Serializable {
  private static final long serialVersionUID = 1L;

  private final Expression value;
  private final Expression recordTime;
  private final String spec;
  private final EventDecoder decoder;

  public DecodeExpression(Expression value, Expression recordTime, String spec) {
    this(value, recordTime, new EventDecoder(spec));
  }

  private DecodeExpression(Expression value, Expression recordTime, EventDecoder decoder) {
    this.value = value;
    this.recordTime = recordTime;
    this.spec = decoder.spec();
    this.decoder = decoder;
  }

  /**
   * Registers {@code name(value binary, record_time timestamp)} in a session's function registry (a
   * temporary function, as {@code spark.udf().register} makes), for one decoder spec.
   */
  public static void register(FunctionRegistry registry, String name, String spec) {
    EventDecoder decoder = new EventDecoder(spec);
    Function1<Seq<Expression>, Expression> builder =
        arguments -> {
          if (arguments.size() != 2) {
            throw new IllegalArgumentException(
                name + " takes 2 arguments (value, record_time), got " + arguments.size());
          }
          return new DecodeExpression(arguments.apply(0), arguments.apply(1), decoder);
        };
    registry.createOrReplaceTempFunction(name, builder, "java_udf");
  }

  @Override
  public Seq<Expression> children() {
    return CollectionConverters.asScala(List.of(value, recordTime)).toList();
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return new DecodeExpression(newChildren.apply(0), newChildren.apply(1), decoder);
  }

  @Override
  public DataType dataType() {
    return decoder.dataType();
  }

  @Override
  public TypeCheckResult checkInputDataTypes() {
    if (!(value.dataType() instanceof BinaryType)) {
      return new TypeCheckResult.TypeCheckFailure(
          prettyName() + "'s value must be binary, not " + value.dataType().simpleString());
    }
    if (!(recordTime.dataType() instanceof TimestampType)) {
      return new TypeCheckResult.TypeCheckFailure(
          prettyName() + "'s record_time must be a timestamp, not " + recordTime.dataType().simpleString());
    }
    return TypeCheckResult.TypeCheckSuccess$.MODULE$;
  }

  @Override
  public boolean nullable() {
    return false;
  }

  /**
   * Not deterministic to Catalyst, though the verdict depends on the arguments only: so that the optimizer
   * evaluates the decoder once per record, in the projection it stands in. Deterministic, it would push a
   * filter on the verdict (the jobs' `dead_letter_reason IS NULL`, and the `IS NOT NULL` it infers on the
   * event time for a window) below that projection, inlining the decoder into the filter's condition once
   * per reference: a record parsed three times instead of once (as Spark's `asNondeterministic()` UDFs).
   */
  @Override
  public boolean deterministic() {
    return false;
  }

  @Override
  public String prettyName() {
    return "streamstack_decode";
  }

  @Override
  public Object eval(InternalRow input) {
    byte[] bytes = (byte[]) value.eval(input);
    Object micros = recordTime.eval(input);
    return decoder.decode(bytes, micros == null, micros == null ? 0L : (Long) micros);
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode bytes = value.genCode(ctx);
    ExprCode micros = recordTime.genCode(ctx);
    String reference = ctx.addReferenceObj("decoder", decoder, EventDecoder.class.getName());
    String code =
        bytes.code()
            + "\n"
            + micros.code()
            + "\n"
            + "org.apache.spark.sql.catalyst.InternalRow " + ev.value() + " = " + reference + ".decode("
            + bytes.isNull() + " ? null : " + bytes.value() + ", " + micros.isNull() + ", "
            + micros.isNull() + " ? 0L : " + micros.value() + ");";
    CodeBlock block =
        new CodeBlock(
            CollectionConverters.asScala(List.of(code)).toList(),
            CollectionConverters.asScala(List.<JavaCode>of()).toList());
    return ev.copy(block, FalseLiteral$.MODULE$, ev.value());
  }

  @Override
  public int productArity() {
    return 3;
  }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0:
        return value;
      case 1:
        return recordTime;
      case 2:
        return spec;
      default:
        throw new IndexOutOfBoundsException(Integer.toString(n));
    }
  }

  @Override
  public boolean canEqual(Object that) {
    return that instanceof DecodeExpression;
  }

  @Override
  public boolean equals(Object that) {
    if (!(that instanceof DecodeExpression)) {
      return false;
    }
    DecodeExpression other = (DecodeExpression) that;
    return value.equals(other.value) && recordTime.equals(other.recordTime) && spec.equals(other.spec);
  }

  @Override
  public int hashCode() {
    return Objects.hash(value, recordTime, spec);
  }
}
