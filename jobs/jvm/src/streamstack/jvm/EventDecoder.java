package streamstack.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.io.Serializable;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.YearMonth;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * Every dead-letter check of jobs.common.events.decode_events in one pass over a Kafka record's value, with
 * Jackson's streaming parser (the one Spark's variant parser uses, configured as Spark configures it); the
 * usual record, a flat object of the schema's fields with no escapes, is read without it by a scan that
 * accepts nothing Jackson would read otherwise ({@link #readFlatObject}).
 *
 * <p>Input: the value's bytes and the record's Kafka timestamp in epoch microseconds. Output: Spark's internal
 * row of {@link #dataType()}: the dead-letter reason (null for a good record), the index of the field the
 * reason is about (-1 when none; -2 for malformed_json when the value is JSON followed by more text), and the
 * typed fields (text as UTF8String, timestamps as epoch microseconds). The reason's detail is left to Spark
 * SQL, which formats it only for dead letters, with the same expressions as the SQL decoder. Spark calls it
 * through {@link DecodeExpression}.
 *
 * <p>The schema comes as a spec string, parsed once: {@code max_bytes;future_us;age_us;tombstones;time_index;
 * name:kind:required,...}, kinds string, long, double, boolean, timestamp.
 */
public final class EventDecoder implements Serializable {
  private static final long serialVersionUID = 1L;

  static final int STRING = 0;
  static final int LONG = 1;
  static final int DOUBLE = 2;
  static final int BOOLEAN = 3;
  static final int TIMESTAMP = 4;

  // The field index of a malformed_json verdict: which of the SQL decoder's two checks failed.
  static final int NOT_JSON = -1;
  static final int TEXT_AFTER = -2;

  // What Spark's variant parser (org.apache.spark.types.variant.VariantUtil.JSON_FACTORY) uses: defaults.
  private static final JsonFactory JSON = new JsonFactory();
  // The same, reading bytes as UTF-8 without detecting their charset: for the values parser() knows to be
  // UTF-8 with no byte-order mark (detection costs a bootstrapper per record and would find UTF-8 there).
  private static final JsonFactory UTF8_JSON =
      JsonFactory.builder().disable(JsonFactory.Feature.CHARSET_DETECTION).build();
  private static final int MAX_DECIMAL_PRECISION = 38;

  private final String spec;
  private final long maxBytes;
  private final long futureMicros;
  private final long ageMicros;
  private final boolean tombstones;
  private final int timeIndex;
  private final String[] names;
  private final byte[][] nameBytes;
  private final int[] kinds;
  private final boolean[] required;

  public EventDecoder(String spec) {
    this.spec = spec;
    String[] parts = spec.split(";", -1);
    if (parts.length != 6) {
      throw new IllegalArgumentException("decoder spec has " + parts.length + " parts, expected 6: " + spec);
    }
    maxBytes = Long.parseLong(parts[0]);
    futureMicros = Long.parseLong(parts[1]);
    ageMicros = Long.parseLong(parts[2]);
    tombstones = parts[3].equals("1");
    timeIndex = Integer.parseInt(parts[4]);
    String[] fields = parts[5].split(",");
    names = new String[fields.length];
    nameBytes = new byte[fields.length][];
    kinds = new int[fields.length];
    required = new boolean[fields.length];
    for (int i = 0; i < fields.length; i++) {
      String[] field = fields[i].split(":");
      names[i] = field[0];
      nameBytes[i] = field[0].getBytes(StandardCharsets.UTF_8);
      kinds[i] = kind(field[1]);
      required[i] = field[2].equals("1");
    }
  }

  private static int kind(String name) {
    switch (name) {
      case "string":
        return STRING;
      case "long":
        return LONG;
      case "double":
        return DOUBLE;
      case "boolean":
        return BOOLEAN;
      case "timestamp":
        return TIMESTAMP;
      default:
        throw new IllegalArgumentException("unknown field kind " + name);
    }
  }

  public String spec() {
    return spec;
  }

  private static final UTF8String EMPTY = UTF8String.fromString("empty");
  private static final UTF8String OVERSIZED = UTF8String.fromString("oversized");
  private static final UTF8String NOT_UTF8 = UTF8String.fromString("not_utf8");
  private static final UTF8String MALFORMED_JSON = UTF8String.fromString("malformed_json");
  private static final UTF8String NOT_AN_OBJECT = UTF8String.fromString("not_an_object");
  private static final UTF8String MISSING_FIELD = UTF8String.fromString("missing_field");
  private static final UTF8String WRONG_TYPE_REASON = UTF8String.fromString("wrong_type");
  private static final UTF8String BAD_TIMESTAMP_REASON = UTF8String.fromString("bad_timestamp");
  private static final UTF8String OUT_OF_RANGE = UTF8String.fromString("event_time_out_of_range");
  private static final Integer NO_FIELD = -1;

  /** The verdict's type: reason string, field int, then f0, f1, ... (timestamps as long microseconds). */
  public StructType dataType() {
    List<StructField> fields = new ArrayList<>();
    fields.add(DataTypes.createStructField("reason", DataTypes.StringType, true));
    fields.add(DataTypes.createStructField("field", DataTypes.IntegerType, true));
    for (int i = 0; i < kinds.length; i++) {
      fields.add(DataTypes.createStructField("f" + i, sparkType(kinds[i]), true));
    }
    return DataTypes.createStructType(fields);
  }

  private static DataType sparkType(int kind) {
    switch (kind) {
      case STRING:
        return DataTypes.StringType;
      case DOUBLE:
        return DataTypes.DoubleType;
      case BOOLEAN:
        return DataTypes.BooleanType;
      default: // LONG, TIMESTAMP
        return DataTypes.LongType;
    }
  }

  private InternalRow verdict(UTF8String reason, int field) {
    Object[] values = new Object[2 + names.length];
    values[0] = reason;
    values[1] = field == -1 ? NO_FIELD : Integer.valueOf(field);
    return new GenericInternalRow(values);
  }

  /** The verdict on a record: its value (null for a tombstone) and its Kafka timestamp, unless that is null. */
  public InternalRow decode(byte[] value, boolean noRecordTime, long recordMicros) {
    return decode(value, noRecordTime, recordMicros, true);
  }

  /** {@link #decode} with Jackson reading every value: the reference its flat path is tested against. */
  public InternalRow decodeWithJackson(byte[] value, boolean noRecordTime, long recordMicros) {
    return decode(value, noRecordTime, recordMicros, false);
  }

  /** Whether {@link #decode} reads this value without Jackson (see {@link #readFlatObject}). */
  public boolean readsFlat(byte[] value) {
    return value != null
        && value.length <= maxBytes
        && Utf8.check(value) == Utf8.VALID
        && readFlatObject(value, new JsonToken[names.length], new Object[names.length]);
  }

  private InternalRow decode(byte[] value, boolean noRecordTime, long recordMicros, boolean flat) {
    if (value == null) {
      return tombstones ? verdict(null, -1) : verdict(EMPTY, -1);
    }
    if (value.length > maxBytes) {
      return verdict(OVERSIZED, -1);
    }
    int utf8 = Utf8.check(value);
    if (utf8 == Utf8.INVALID) {
      return verdict(NOT_UTF8, -1);
    }
    int n = names.length;
    // Per field: its JSON token (null when absent), and its text or value.
    JsonToken[] tokens = new JsonToken[n];
    Object[] raw = new Object[n];
    if (!flat || utf8 != Utf8.VALID || !readFlatObject(value, tokens, raw)) {
      Arrays.fill(tokens, null);
      Arrays.fill(raw, null);
      InternalRow refused = readWithJackson(value, utf8, tokens, raw);
      if (refused != null) {
        return refused;
      }
    }
    Object[] values = new Object[2 + n];
    values[1] = NO_FIELD;
    for (int i = 0; i < n; i++) {
      JsonToken token = tokens[i];
      if (token == null || token == JsonToken.VALUE_NULL) {
        if (required[i]) {
          return verdict(MISSING_FIELD, i);
        }
        continue;
      }
      Object typed = typed(kinds[i], token, raw[i]);
      if (typed == WRONG_TYPE) {
        return verdict(WRONG_TYPE_REASON, i);
      }
      if (typed == BAD_TIMESTAMP) {
        return verdict(BAD_TIMESTAMP_REASON, i);
      }
      values[2 + i] = typed;
    }
    if (timeIndex >= 0 && !noRecordTime && values[2 + timeIndex] != null) {
      long eventMicros = (Long) values[2 + timeIndex];
      if (eventMicros > recordMicros + futureMicros || eventMicros < recordMicros - ageMicros) {
        // The typed fields stay: the detail quotes the event time.
        values[0] = OUT_OF_RANGE;
        values[1] = timeIndex;
      }
    }
    return new GenericInternalRow(values);
  }

  /**
   * Jackson's reading of the value: null when it is an object, its schema fields' tokens and raw values in
   * `tokens` and `raw`; else the verdict (malformed_json or not_an_object).
   */
  private InternalRow readWithJackson(byte[] value, int utf8, JsonToken[] tokens, Object[] raw) {
    boolean isObject;
    try (JsonParser parser = parser(value)) {
      try {
        JsonToken root = parser.nextToken();
        if (root == null) {
          return verdict(MALFORMED_JSON, NOT_JSON);
        }
        isObject = root == JsonToken.START_OBJECT;
        // Spark refuses a lone surrogate in a string or key; valid UTF-8 can only spell one as an escape.
        boolean escapes = utf8 == Utf8.VALID_WITH_BACKSLASH;
        if (isObject) {
          readObject(parser, value, tokens, raw, escapes);
        } else {
          skipValue(parser, root, escapes);
        }
      } catch (IOException | RuntimeException e) {
        return verdict(MALFORMED_JSON, NOT_JSON);
      }
      // Nothing but blanks after the root value.
      try {
        if (parser.nextToken() != null) {
          return verdict(MALFORMED_JSON, TEXT_AFTER);
        }
      } catch (IOException | RuntimeException e) {
        return verdict(MALFORMED_JSON, TEXT_AFTER);
      }
    } catch (IOException e) {
      return verdict(MALFORMED_JSON, NOT_JSON);
    }
    // The SQL decoder calls a value an object when its first non-blank character is '{'.
    if (!isObject || !startsWithBrace(value)) {
      return verdict(NOT_AN_OBJECT, -1);
    }
    return null;
  }

  /**
   * The usual record read without Jackson, for a value with no backslash: one object whose keys are
   * schema fields, each once, whose values are strings, integers of at most 18 digits, true, false or null,
   * with JSON's blanks between. Fills `tokens` and `raw` as {@link #readObject} would and returns true;
   * false for anything else (a number with a fraction or exponent, a nested value, another key, a control
   * character in a string, any syntax error), which Jackson then reads for its verdict. JSON's grammar is
   * strict, so what this accepts Jackson accepts alike.
   */
  private boolean readFlatObject(byte[] value, JsonToken[] tokens, Object[] raw) {
    int end = value.length;
    int at = skipBlanks(value, 0);
    if (at >= end || value[at] != '{') {
      return false;
    }
    at = skipBlanks(value, at + 1);
    while (at < end && value[at] == '"') {
      int keyEnd = plainStringEnd(value, at + 1);
      int index = keyEnd < 0 ? -1 : indexOf(value, at + 1, keyEnd);
      if (index < 0 || tokens[index] != null) {
        return false;
      }
      at = skipBlanks(value, keyEnd + 1);
      if (at >= end || value[at] != ':') {
        return false;
      }
      at = skipBlanks(value, at + 1);
      if (at >= end) {
        return false;
      }
      byte first = value[at];
      if (first == '"') {
        int textEnd = plainStringEnd(value, at + 1);
        if (textEnd < 0) {
          return false;
        }
        tokens[index] = JsonToken.VALUE_STRING;
        raw[index] = plainText(kinds[index], value, at + 1, textEnd);
        at = textEnd + 1;
      } else if (first == '-' || isDigit(first)) {
        int numberEnd = plainIntegerEnd(value, at);
        if (numberEnd < 0) {
          return false;
        }
        tokens[index] = JsonToken.VALUE_NUMBER_INT;
        raw[index] = plainLong(value, at, numberEnd);
        at = numberEnd;
      } else if (isWord(value, at, TRUE_WORD)) {
        tokens[index] = JsonToken.VALUE_TRUE;
        at += TRUE_WORD.length;
      } else if (isWord(value, at, FALSE_WORD)) {
        tokens[index] = JsonToken.VALUE_FALSE;
        at += FALSE_WORD.length;
      } else if (isWord(value, at, NULL_WORD)) {
        tokens[index] = JsonToken.VALUE_NULL;
        at += NULL_WORD.length;
      } else {
        return false;
      }
      at = skipBlanks(value, at);
      if (at < end && value[at] == ',') {
        at = skipBlanks(value, at + 1);
      } else if (at < end && value[at] == '}') {
        return skipBlanks(value, at + 1) == end;
      } else {
        return false;
      }
    }
    return false;
  }

  private static final byte[] TRUE_WORD = {'t', 'r', 'u', 'e'};
  private static final byte[] FALSE_WORD = {'f', 'a', 'l', 's', 'e'};
  private static final byte[] NULL_WORD = {'n', 'u', 'l', 'l'};

  private static int skipBlanks(byte[] value, int at) {
    while (at < value.length && isBlank(value[at])) {
      at++;
    }
    return at;
  }

  private static boolean isBlank(byte b) {
    return b == ' ' || b == '\n' || b == '\r' || b == '\t';
  }

  /**
   * The closing quote of a string starting at `start` in a value with no backslash; -1 if a control
   * character (which JSON refuses unescaped) comes first, or there is no quote.
   */
  private static int plainStringEnd(byte[] value, int start) {
    for (int at = start; at < value.length; at++) {
      int b = value[at] & 0xFF;
      if (b == '"') {
        return at;
      }
      if (b < 0x20) {
        return -1;
      }
    }
    return -1;
  }

  /**
   * The end of an integer that starts at `start`, 0 or -?[1-9][0-9]{0,17} (a long for certain); -1 for -0,
   * a fraction, an exponent, a leading zero or a longer number, which Jackson reads.
   */
  private static int plainIntegerEnd(byte[] value, int start) {
    int at = value[start] == '-' ? start + 1 : start;
    if (at < value.length && value[at] == '0') {
      return at == start ? plainIntegerRest(value, at + 1) : -1;
    }
    int digits = at;
    while (at < value.length && isDigit(value[at])) {
      at++;
    }
    return at == digits || at - digits > 18 ? -1 : plainIntegerRest(value, at);
  }

  /** `at`, unless the number goes on there with a digit, a fraction or an exponent: then -1. */
  private static int plainIntegerRest(byte[] value, int at) {
    if (at == value.length) {
      return at;
    }
    byte next = value[at];
    return isDigit(next) || next == '.' || next == 'e' || next == 'E' ? -1 : at;
  }

  /** The integer between `start` and `end` that {@link #plainIntegerEnd} found. */
  private static long plainLong(byte[] value, int start, int end) {
    boolean negative = value[start] == '-';
    long magnitude = 0;
    for (int at = negative ? start + 1 : start; at < end; at++) {
      magnitude = magnitude * 10 + (value[at] - '0');
    }
    return negative ? -magnitude : magnitude;
  }

  private static boolean isDigit(byte b) {
    return b >= '0' && b <= '9';
  }

  private static boolean isWord(byte[] value, int at, byte[] word) {
    return Arrays.equals(value, at, Math.min(at + word.length, value.length), word, 0, word.length);
  }

  /** A string value's raw form as {@link #readObject} keeps it: what {@link #typed} reads for its kind. */
  private static Object plainText(int kind, byte[] value, int start, int end) {
    if (kind == STRING) {
      return UTF8String.fromBytes(value, start, end - start);
    }
    if (kind == TIMESTAMP) {
      for (int at = start; at < end; at++) {
        if (value[at] < 0) {
          return new String(value, start, end - start, StandardCharsets.UTF_8);
        }
      }
      return new Ascii(value, start, end - start);
    }
    return null; // a string is the wrong type for the other kinds, whatever it says
  }

  private int indexOf(byte[] value, int start, int end) {
    for (int i = 0; i < nameBytes.length; i++) {
      if (Arrays.equals(value, start, end, nameBytes[i], 0, nameBytes[i].length)) {
        return i;
      }
    }
    return -1;
  }

  private static final Object WRONG_TYPE = new Object();
  private static final Object BAD_TIMESTAMP = new Object();

  private static Object typed(int kind, JsonToken token, Object raw) {
    switch (kind) {
      case STRING:
        if (token != JsonToken.VALUE_STRING) {
          return WRONG_TYPE;
        }
        return raw instanceof UTF8String ? raw : UTF8String.fromString((String) raw);
      case BOOLEAN:
        if (token == JsonToken.VALUE_TRUE) {
          return Boolean.TRUE;
        }
        return token == JsonToken.VALUE_FALSE ? Boolean.FALSE : WRONG_TYPE;
      case LONG:
        return raw instanceof Long ? raw : WRONG_TYPE;
      case DOUBLE:
        if (raw instanceof Long) {
          return (double) (Long) raw;
        }
        if (raw instanceof Double) {
          return raw;
        }
        return WRONG_TYPE;
      default: // TIMESTAMP
        if (token != JsonToken.VALUE_STRING) {
          return WRONG_TYPE;
        }
        Long micros = Timestamps.parse((CharSequence) raw);
        return micros == null ? BAD_TIMESTAMP : micros;
    }
  }

  private static JsonParser parser(byte[] value) throws IOException {
    // Spark parses the value as a Java string. From bytes, Jackson would detect UTF-16/32 from zero bytes
    // at the start and skip a byte-order mark: take the string route for those few values.
    int head = Math.min(4, value.length);
    boolean detectable = value.length > 0 && (value[0] & 0xFF) == 0xEF;
    for (int i = 0; i < head && !detectable; i++) {
      detectable = value[i] == 0;
    }
    if (detectable) {
      return JSON.createParser(new String(value, StandardCharsets.UTF_8));
    }
    return UTF8_JSON.createParser(value);
  }

  private static boolean startsWithBrace(byte[] value) {
    int at = skipBlanks(value, 0);
    return at < value.length && value[at] == '{';
  }

  /** The root object: each schema field's token and raw value; every other value checked and skipped. */
  private void readObject(
      JsonParser parser, byte[] value, JsonToken[] tokens, Object[] raw, boolean escapes)
      throws IOException {
    HashSet<String> seen = null;
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      String name = parser.currentName();
      if (escapes) {
        checkSurrogates(name);
      }
      int index = indexOf(name);
      JsonToken valueToken = parser.nextToken();
      if (index >= 0) {
        if (tokens[index] != null) {
          throw new IOException("duplicate key");
        }
        tokens[index] = valueToken;
        if (valueToken == JsonToken.VALUE_STRING && !escapes && kinds[index] == STRING) {
          raw[index] = slice(parser, value);
        } else if (valueToken == JsonToken.VALUE_STRING && !escapes && kinds[index] == TIMESTAMP) {
          raw[index] = timestampText(parser, value);
        } else {
          raw[index] = scalar(parser, valueToken);
        }
        if (escapes && valueToken == JsonToken.VALUE_STRING) {
          checkSurrogates((String) raw[index]);
        }
      } else {
        if (seen == null) {
          seen = new HashSet<>();
        }
        if (!seen.add(name)) {
          throw new IOException("duplicate key");
        }
        skipValue(parser, valueToken, escapes);
      }
      if (index >= 0 && (valueToken == JsonToken.START_OBJECT || valueToken == JsonToken.START_ARRAY)) {
        skipValue(parser, valueToken, escapes);
      }
    }
    if (token != JsonToken.END_OBJECT) {
      throw new IOException("unexpected " + token);
    }
  }

  /**
   * A timestamp field's text: with no backslash in the value, its bytes in the value when they are all ASCII
   * (the only text the timestamp pattern can match, save a final non-ASCII line terminator), read in place
   * without a String; else the text, as {@link #scalar}.
   */
  private static Object timestampText(JsonParser parser, byte[] value) throws IOException {
    int start = textStart(parser, value);
    int end = start < 0 ? -1 : textEnd(value, start, true);
    return end < 0 ? parser.getText() : new Ascii(value, start, end - start);
  }

  /** Where the current string token's text starts in the value, or -1 if the parser has no byte offsets. */
  private static int textStart(JsonParser parser, byte[] value) {
    long quote = parser.currentTokenLocation().getByteOffset();
    if (quote < 0 || quote >= value.length || value[(int) quote] != '"') {
      return -1;
    }
    return (int) quote + 1;
  }

  /**
   * The index of the quote closing a string that starts at `start` in a value with no backslash, or -1 if
   * there is none, or, with `asciiOnly`, if a non-ASCII byte comes first.
   */
  private static int textEnd(byte[] value, int start, boolean asciiOnly) {
    for (int end = start; end < value.length; end++) {
      if (value[end] == '"') {
        return end;
      }
      if (asciiOnly && value[end] < 0) {
        return -1;
      }
    }
    return -1;
  }

  /** ASCII bytes of a value as characters, in place. */
  static final class Ascii implements CharSequence {
    private final byte[] bytes;
    private final int offset;
    private final int length;

    Ascii(byte[] bytes, int offset, int length) {
      this.bytes = bytes;
      this.offset = offset;
      this.length = length;
    }

    @Override
    public int length() {
      return length;
    }

    @Override
    public char charAt(int index) {
      if (index < 0 || index >= length) {
        throw new IndexOutOfBoundsException(index);
      }
      return (char) bytes[offset + index];
    }

    @Override
    public CharSequence subSequence(int start, int end) {
      return toString().subSequence(start, end);
    }

    @Override
    public String toString() {
      return new String(bytes, offset, length, StandardCharsets.US_ASCII);
    }
  }

  /**
   * A string field's text without decoding it: its bytes in the value (valid UTF-8, and with no backslash
   * in the value, the first quote after the opening one closes it); Jackson checks the string when it skips
   * it. The text, as {@link #scalar}, when the parser reads a copy of the value (no byte offsets).
   */
  private static Object slice(JsonParser parser, byte[] value) throws IOException {
    int start = textStart(parser, value);
    int end = start < 0 ? -1 : textEnd(value, start, false);
    return end < 0 ? parser.getText() : UTF8String.fromBytes(value, start, end - start);
  }

  private int indexOf(String name) {
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  /**
   * A scalar's value as the variant parser would type it: strings as String, integers that fit a long as
   * Long, other numbers as Double (Spark keeps some as decimals, all of which are doubles to a double field
   * and wrong to a long one), anything else null.
   */
  private static Object scalar(JsonParser parser, JsonToken token) throws IOException {
    switch (token) {
      case VALUE_STRING:
        return parser.getText();
      case VALUE_NUMBER_INT:
        if (parser.getNumberType() != JsonParser.NumberType.BIG_INTEGER) {
          return parser.getLongValue();
        }
        return floating(parser.getText());
      case VALUE_NUMBER_FLOAT:
        return floating(parser.getText());
      default:
        return null;
    }
  }

  /** Spark's VariantBuilder: a decimal when the text has only [-.0-9] and fits decimal(38), else a double. */
  private static Double floating(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c != '-' && c != '.' && (c < '0' || c > '9')) {
        return Double.parseDouble(text);
      }
    }
    BigDecimal decimal = new BigDecimal(text);
    if (decimal.scale() <= MAX_DECIMAL_PRECISION && decimal.precision() <= MAX_DECIMAL_PRECISION) {
      return decimal.doubleValue();
    }
    return Double.parseDouble(text);
  }

  /** Reads a value whose first token is current, to its end: nested objects may not repeat a key. */
  private static void skipValue(JsonParser parser, JsonToken first, boolean escapes) throws IOException {
    if (first == JsonToken.START_OBJECT) {
      HashSet<String> seen = new HashSet<>();
      JsonToken token;
      while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        if (escapes) {
          checkSurrogates(name);
        }
        if (!seen.add(name)) {
          throw new IOException("duplicate key");
        }
        skipValue(parser, parser.nextToken(), escapes);
      }
      if (token != JsonToken.END_OBJECT) {
        throw new IOException("unexpected " + token);
      }
    } else if (first == JsonToken.START_ARRAY) {
      JsonToken token;
      while ((token = parser.nextToken()) != JsonToken.END_ARRAY) {
        if (token == null) {
          throw new IOException("unexpected end");
        }
        skipValue(parser, token, escapes);
      }
    } else if (first == JsonToken.VALUE_STRING) {
      if (escapes) {
        checkSurrogates(parser.getText());
      }
    } else if (first == null || first == JsonToken.END_OBJECT || first == JsonToken.END_ARRAY) {
      throw new IOException("unexpected " + first);
    }
  }

  /** Spark's VariantBuilder.checkValidUnicodeString: every surrogate in a pair. */
  private static void checkSurrogates(String text) throws IOException {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= text.length() || !Character.isLowSurrogate(text.charAt(i + 1))) {
          throw new IOException("lone high surrogate");
        }
        i++;
      } else if (Character.isLowSurrogate(c)) {
        throw new IOException("lone low surrogate");
      }
    }
  }

  /** The SQL decoder's timestamp rules: its ISO-8601 pattern, then Spark's own string-to-timestamp cast. */
  static final class Timestamps {
    private Timestamps() {}

    static Long parse(CharSequence text) {
      if (!matchesIso(text)) {
        return null;
      }
      char last = text.charAt(text.length() - 1);
      if (last == 'Z' || (last >= '0' && last <= '9')) {
        return exact(text);
      }
      // A line terminator after the zone: as Spark's cast reads it (it trims).
      Option<Object> micros = DateTimeUtils.stringToTimestamp(UTF8String.fromString(text.toString()), ZoneOffset.UTC);
      return micros.isDefined() ? (Long) micros.get() : null;
    }

    /**
     * What Spark's string-to-timestamp cast gives for text that matches the pattern and ends at its zone:
     * null for a date or time that does not exist or an offset beyond +-18:00; digits after the sixth of
     * the fraction are cut off.
     */
    static Long exact(CharSequence s) {
      int year = number(s, 0, 4);
      int month = number(s, 5, 2);
      int day = number(s, 8, 2);
      int hour = number(s, 11, 2);
      int minute = number(s, 14, 2);
      int second = number(s, 17, 2);
      if (month < 1 || month > 12 || day < 1 || day > YearMonth.of(year, month).lengthOfMonth()) {
        return null;
      }
      if (hour > 23 || minute > 59 || second > 59) {
        return null;
      }
      int i = 19;
      long fraction = 0;
      if (s.charAt(i) == '.') {
        int digits = 0;
        for (i++; isDigit(s.charAt(i)); i++) {
          if (digits < 6) {
            fraction = fraction * 10 + (s.charAt(i) - '0');
            digits++;
          }
        }
        for (; digits < 6; digits++) {
          fraction *= 10;
        }
      }
      int offsetSeconds = 0;
      if (s.charAt(i) != 'Z') {
        int offsetHours = number(s, i + 1, 2);
        int offsetMinutes = number(s, i + 4, 2);
        if (offsetMinutes > 59 || offsetHours * 60 + offsetMinutes > 18 * 60) {
          return null;
        }
        offsetSeconds = (offsetHours * 3600 + offsetMinutes * 60) * (s.charAt(i) == '-' ? -1 : 1);
      }
      long epochDay = LocalDate.of(year, month, day).toEpochDay();
      long seconds = epochDay * 86400L + hour * 3600L + minute * 60L + second - offsetSeconds;
      return seconds * 1_000_000L + fraction;
    }

    private static int number(CharSequence s, int from, int count) {
      int value = 0;
      for (int i = from; i < from + count; i++) {
        value = value * 10 + (s.charAt(i) - '0');
      }
      return value;
    }

    /**
     * What {@code rlike} finds for ^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$ in
     * java.util.regex: ASCII digits, and '$' also matches before one final line terminator.
     */
    static boolean matchesIso(CharSequence s) {
      int n = s.length();
      if (n < 20) {
        return false;
      }
      if (!digits(s, 0, 4) || s.charAt(4) != '-' || !digits(s, 5, 2) || s.charAt(7) != '-'
          || !digits(s, 8, 2) || s.charAt(10) != 'T' || !digits(s, 11, 2) || s.charAt(13) != ':'
          || !digits(s, 14, 2) || s.charAt(16) != ':' || !digits(s, 17, 2)) {
        return false;
      }
      int i = 19;
      if (s.charAt(i) == '.') {
        int start = ++i;
        while (i < n && i - start < 9 && isDigit(s.charAt(i))) {
          i++;
        }
        if (i == start) {
          return false;
        }
        // A tenth digit cannot be followed by the zone: the regex would not match either.
      }
      if (i >= n) {
        return false;
      }
      char zone = s.charAt(i);
      if (zone == 'Z') {
        i++;
      } else if (zone == '+' || zone == '-') {
        if (i + 6 > n || !digits(s, i + 1, 2) || s.charAt(i + 3) != ':' || !digits(s, i + 4, 2)) {
          return false;
        }
        i += 6;
      } else {
        return false;
      }
      return atEnd(s, i);
    }

    private static boolean atEnd(CharSequence s, int i) {
      int rest = s.length() - i;
      if (rest == 0) {
        return true;
      }
      char c = s.charAt(i);
      if (rest == 1) {
        return c == '\n' || c == '\r' || c == '\u0085' || c == '\u2028' || c == '\u2029';
      }
      return rest == 2 && c == '\r' && s.charAt(i + 1) == '\n';
    }

    private static boolean isDigit(char c) {
      return c >= '0' && c <= '9';
    }

    private static boolean digits(CharSequence s, int from, int count) {
      for (int i = from; i < from + count; i++) {
        if (!isDigit(s.charAt(i))) {
          return false;
        }
      }
      return true;
    }
  }

  /** UTF-8 validity as Unicode defines it (no overlong forms, no surrogates, nothing above U+10FFFF). */
  static final class Utf8 {
    private Utf8() {}

    static final int INVALID = 0;
    static final int VALID = 1;
    static final int VALID_WITH_BACKSLASH = 2;

    /**
     * INVALID, or VALID / VALID_WITH_BACKSLASH: whether the value has a backslash (an escape) too, found in
     * the same pass.
     */
    static int check(byte[] b) {
      int i = 0;
      int n = b.length;
      boolean backslash = false;
      while (i < n) {
        int c = b[i] & 0xFF;
        if (c < 0x80) {
          backslash |= c == '\\';
          i++;
          continue;
        }
        int len;
        int lo = 0x80;
        int hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
          len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
          len = 3;
          if (c == 0xE0) {
            lo = 0xA0;
          } else if (c == 0xED) {
            hi = 0x9F;
          }
        } else if (c >= 0xF0 && c <= 0xF4) {
          len = 4;
          if (c == 0xF0) {
            lo = 0x90;
          } else if (c == 0xF4) {
            hi = 0x8F;
          }
        } else {
          return INVALID;
        }
        if (i + len > n) {
          return INVALID;
        }
        int second = b[i + 1] & 0xFF;
        if (second < lo || second > hi) {
          return INVALID;
        }
        for (int k = 2; k < len; k++) {
          int next = b[i + k] & 0xFF;
          if (next < 0x80 || next > 0xBF) {
            return INVALID;
          }
        }
        i += len;
      }
      return backslash ? VALID_WITH_BACKSLASH : VALID;
    }
  }
}
