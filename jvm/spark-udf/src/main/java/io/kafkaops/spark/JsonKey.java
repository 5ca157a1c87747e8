package io.kafkaops.spark;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/**
 * The new key of a record under a {@code field:} or {@code jsonpath:} key rule, read from its JSON
 * value: the JVM twin of Python's {@code kafkaops.backfill.extract_key_or_reason} (with
 * {@code _key_bytes}), giving byte-identical keys and the same dead-letter reasons, so a record goes
 * where the Python code sends it. {@code tests/integration/test_json_key_parity.py} holds the two
 * side by side.
 *
 * <p>One pass over the bytes, no tree, no per-token objects: a scanner written after CPython's
 * {@code json} decoder (the C {@code scanner}) rather than a general JSON library, because the two
 * must accept and refuse exactly the same values, and because a library's tokenizer alone costs more
 * than this whole pass (measured on a 340-byte record: Jackson's streaming parser ~0.54 us just to
 * walk the tokens, this class ~0.3 us for the key).
 * What Python does, and so this class:
 * <ul>
 * <li><b>Encoding</b>: {@code json.loads(bytes)} picks the encoding with {@code json.detect_encoding}
 * (UTF-8, UTF-8 with BOM, UTF-16/32 by BOM or by the zero bytes among the first four) and decodes with
 * {@code errors='surrogatepass'}: UTF-8 strictly (no overlong forms, nothing above U+10FFFF, no
 * truncated sequences), except that UTF-8-encoded surrogates ({@code ED A0 80..ED BF BF}) are kept as
 * surrogate code points. UTF-16/32 are transcoded here to such UTF-8 first (a lone surrogate code unit
 * becomes its 3-byte form, as Python keeps it as a code point).</li>
 * <li><b>Grammar</b>: RFC 8259 JSON, whitespace {@code [ \t\n\r]}, plus the constants {@code NaN},
 * {@code Infinity} and {@code -Infinity} (those spellings only). Strings take any code point but
 * U+0000..U+001F raw (Python's strict mode); escapes are {@code \" \\ \/ \b \f \n \r \t} and {@code &#92;uXXXX}.
 * The whole value is read: an error anywhere, also after the key field or after the value, makes it
 * "not JSON". Strings and floats have no length limit; an integer of more than 4300 digits is refused,
 * as Python's {@code int()} refuses it (the default {@code sys.get_int_max_str_digits()}).</li>
 * <li><b>Nesting</b>: Python's decoder recurses per array/object and raises {@code RecursionError}
 * (which {@code extract_key_or_reason} reports as {@code the value is not JSON: nested too deeply}) at
 * a depth that depends on how deep the Python stack already is: 996 for a plain top-level
 * {@code json.loads} under the default recursion limit of 1000, some dozens less inside a framework.
 * This class accepts up to {@link #MAX_DEPTH} (995) nested arrays/objects and refuses deeper values
 * with the same reason, so a value nested a little less than 995 deep (how much less depends on the
 * caller's Python stack) may be refused by Python and read here.</li>
 * <li><b>Duplicate names</b>: the last occurrence wins (a Python dict), whatever the earlier ones gave
 * (a key or a reason). Names compare as Python strings: escapes decoded, an escaped surrogate pair
 * ({@code &#92;ud83d&#92;ude00}) joined into one code point, UTF-8-encoded surrogates never joined, so
 * {@code ED A0 BD ED B8 80} is not the name {@code F0 9F 98 80}.</li>
 * <li><b>The key</b>: a string becomes its UTF-8 bytes, but a string holding a surrogate code point
 * (a lone {@code &#92;ud800}, or UTF-8-encoded surrogates) gives {@link #LONE_SURROGATE}; {@code true}/
 * {@code false} themselves; an integer its canonical decimal ({@code -0} is {@code 0}); a float
 * {@code json.dumps(float(text))} ({@link #pythonFloatRepr}; {@code 1e400} is {@code Infinity});
 * {@code NaN}/{@code Infinity}/{@code -Infinity} themselves; null, an object or an array a reason.</li>
 * </ul>
 * Known difference: reasons quote a step name with Python's {@code repr}, whose "printable" test
 * follows the JVM's Unicode tables (Java 17: Unicode 13) rather than Python 3.11's (Unicode 14), so a
 * step name holding a character assigned in between is escaped here and not in Python. The text after
 * {@code the value is not JSON: } is this class's own (the byte offset, not Python's line/column).
 *
 * <p>Instances are immutable and serializable; {@link #extract} is thread-safe.
 */
public final class JsonKey implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The deepest nesting of arrays/objects accepted (see the class comment). */
    public static final int MAX_DEPTH = 995;
    /** Python's default {@code sys.get_int_max_str_digits()}. */
    public static final int MAX_INT_DIGITS = 4300;
    /** Python caps a not-JSON reason at 300 characters. */
    private static final int REASON_CAP = 300;

    public static final String NOT_JSON = "the value is not JSON: ";
    public static final String TOMBSTONE = "the record has no value (a tombstone)";
    public static final String IS_NULL = "the key field is null";
    public static final String IS_DICT = "the key field is a JSON dict, not a string or number";
    public static final String IS_LIST = "the key field is a JSON list, not a string or number";
    public static final String LONE_SURROGATE = "the key field is not valid Unicode (it holds a lone surrogate)";
    public static final String TOO_DEEP = NOT_JSON + "nested too deeply";

    private static final Result TOMBSTONE_RESULT = new Result(null, TOMBSTONE);
    private static final Result NULL_RESULT = new Result(null, IS_NULL);
    private static final Result DICT_RESULT = new Result(null, IS_DICT);
    private static final Result LIST_RESULT = new Result(null, IS_LIST);
    private static final Result LONE_SURROGATE_RESULT = new Result(null, LONE_SURROGATE);
    private static final Result TOO_DEEP_RESULT = new Result(null, TOO_DEEP);

    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final byte[] TRUE = {'t', 'r', 'u', 'e'};
    private static final byte[] FALSE = {'f', 'a', 'l', 's', 'e'};
    private static final byte[] NULL = {'n', 'u', 'l', 'l'};
    private static final byte[] NAN = {'N', 'a', 'N'};
    private static final byte[] INFINITY = {'I', 'n', 'f', 'i', 'n', 'i', 't', 'y'};

    /** Per step: the field name, or null for an index step. */
    private final String[] names;
    /** Per name step: the name in UTF-8 (a lone surrogate in its 3-byte form), to compare raw names with. */
    private final byte[][] nameBytes;
    /** Per name step: its code points, to compare names spelled with escapes with. */
    private final int[][] nameCodePoints;
    /** Per step: the array index (Long.MAX_VALUE when beyond any array), or -1 for a name step. */
    private final long[] indices;
    /** Per step: the result when the node the step applies to lacks it. */
    private final Result[] missing;
    private final boolean hasIndexStep;
    private final String ruleText;

    /** A key (and no reason) or a reason (and no key). */
    public static final class Result implements Serializable {
        private static final long serialVersionUID = 1L;
        public final byte[] key;
        public final String reason;

        Result(byte[] key, String reason) {
            this.key = key;
            this.reason = reason;
        }

        @Override
        public String toString() {
            return key != null ? "key " + new String(key, StandardCharsets.UTF_8) : "reason " + reason;
        }
    }

    private JsonKey(String[] names, long[] indices, String[] indexTexts, String ruleText) {
        int n = names.length;
        this.names = names;
        this.indices = indices;
        this.ruleText = ruleText;
        this.nameBytes = new byte[n][];
        this.nameCodePoints = new int[n][];
        this.missing = new Result[n];
        boolean anyIndex = false;
        for (int i = 0; i < n; i++) {
            if (names[i] == null) {
                anyIndex = true;
                missing[i] = new Result(null, "no element [" + indexTexts[i] + "] on the path of " + ruleText);
            } else {
                int[] cps = names[i].codePoints().toArray();
                byte[] utf8 = new byte[cps.length * 4];
                int len = 0;
                for (int cp : cps) {
                    len = putUtf8(utf8, len, cp);
                }
                nameCodePoints[i] = cps;
                nameBytes[i] = Arrays.copyOf(utf8, len);
                missing[i] = new Result(null, "no field " + pythonStrRepr(names[i]) + " on the path of " + ruleText);
            }
        }
        this.hasIndexStep = anyIndex;
    }

    /**
     * The extractor of a key rule. {@code steps}: a String is an object field, an Integer (or another
     * integral Number) an array index, as Python's {@code KeyRule.steps}; {@code ruleText} is
     * {@code KeyRule.text}, quoted in reasons.
     */
    public static JsonKey of(List<Object> steps, String ruleText) {
        if (steps == null || steps.isEmpty()) {
            throw new IllegalArgumentException("JsonKey: a key rule without steps (record_key) does not read the value");
        }
        if (ruleText == null) {
            throw new IllegalArgumentException("JsonKey: the rule text is null");
        }
        int n = steps.size();
        String[] names = new String[n];
        long[] indices = new long[n];
        String[] indexTexts = new String[n];
        for (int i = 0; i < n; i++) {
            Object step = steps.get(i);
            if (step instanceof String) {
                names[i] = (String) step;
                indices[i] = -1;
            } else if (step instanceof Integer || step instanceof Long || step instanceof Short
                    || step instanceof Byte || step instanceof BigInteger) {
                BigInteger index = step instanceof BigInteger ? (BigInteger) step
                        : BigInteger.valueOf(((Number) step).longValue());
                if (index.signum() < 0) {
                    throw new IllegalArgumentException("JsonKey: array index " + index + " is negative");
                }
                indices[i] = index.bitLength() < 63 ? index.longValue() : Long.MAX_VALUE;
                indexTexts[i] = index.toString();
            } else {
                throw new IllegalArgumentException("JsonKey: step " + i + " is " + step
                        + "; a step is a field name (String) or an array index (Integer)");
            }
        }
        return new JsonKey(names, indices, indexTexts, ruleText);
    }

    /** The rule text this extractor was made with. */
    public String ruleText() {
        return ruleText;
    }

    /** For py4j tests: {@code new Object[]{key, reason}}. */
    public static Object[] extractForPython(byte[] value, List<Object> steps, String ruleText) {
        Result r = of(steps, ruleText).extract(value);
        return new Object[]{r.key, r.reason};
    }

    /**
     * For py4j tests, many values in one call. {@code packed}: per value a big-endian int32 length
     * (-1: null) and the bytes. Returns per value: int32 key length (-1: none) and the key, int32
     * reason length (-1: none) and the reason in UTF-8.
     */
    public static byte[] extractManyForPython(byte[] packed, List<Object> steps, String ruleText) {
        JsonKey rule = of(steps, ruleText);
        ByteBuffer in = ByteBuffer.wrap(packed);
        ByteArrayOutputStream out = new ByteArrayOutputStream(packed.length + 64);
        DataOutputStream data = new DataOutputStream(out);
        try {
            while (in.hasRemaining()) {
                int len = in.getInt();
                byte[] value = null;
                if (len >= 0) {
                    value = new byte[len];
                    in.get(value);
                }
                Result r = rule.extract(value);
                writeChunk(data, r.key);
                writeChunk(data, r.reason == null ? null : r.reason.getBytes(StandardCharsets.UTF_8));
            }
            data.flush();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out.toByteArray();
    }

    private static void writeChunk(DataOutputStream data, byte[] chunk) throws IOException {
        if (chunk == null) {
            data.writeInt(-1);
        } else {
            data.writeInt(chunk.length);
            data.write(chunk);
        }
    }

    // -- extraction -----------------------------------------------------------------------------------

    /** The key of a record whose value is {@code value} (null: a tombstone), or the reason it has none. */
    public Result extract(byte[] value) {
        if (value == null) {
            return TOMBSTONE_RESULT;
        }
        byte[] buf = value;
        int start = 0;
        int encoding = detectEncoding(value);
        if (encoding == UTF8_SIG) {
            start = 3;
        } else if (encoding != UTF8) {
            buf = transcode(value, encoding);
            if (buf == null) {
                return notJson("'" + ENCODING_NAMES[encoding] + "' codec can't decode the value");
            }
        }
        try {
            return new Scan(buf, start).run();
        } catch (NotJson e) {
            return notJson(e.getMessage());
        }
    }

    private static Result notJson(String message) {
        String reason = NOT_JSON + message;
        if (reason.length() > REASON_CAP) {  // Python cuts at 300 code points
            int cut = reason.codePointCount(0, reason.length()) > REASON_CAP ? reason.offsetByCodePoints(0, REASON_CAP)
                    : reason.length();
            reason = reason.substring(0, cut);
        }
        return new Result(null, reason);
    }

    /** {@code what} at byte {@code at} (kept out of the scanning methods, so they stay small enough to inline). */
    private static NotJson fail(String what, int at) {
        return new NotJson(what + " at byte " + at);
    }

    private static NotJson tooManyDigits(int digits) {
        return new NotJson("Exceeds the limit (" + MAX_INT_DIGITS + " digits) for integer string conversion: value has "
                + digits + " digits");
    }

    /** Why a value is not JSON (no stack trace: thrown per bad record). */
    private static final class NotJson extends Exception {
        private static final long serialVersionUID = 1L;

        NotJson(String message) {
            super(message, null, false, false);
        }
    }

    /**
     * One pass over one value. The path containers (the node after 0, 1, ... steps, when it is an
     * object for a name step or an array for an index step) are the open containers at depths
     * 1..onPath; a value directly inside the innermost one is selected when it follows the step's
     * name (each occurrence in turn, so the last wins) or sits at the step's index. A selected value
     * sets the result: the key (or why not) after the last step, else "no field/element" for the
     * next step until a value inside it is selected in turn.
     */
    private final class Scan {
        private final byte[] b;
        private final int end;
        private int pos;
        /** Set by {@link #skipString}: the string had an escape / a UTF-8-encoded surrogate. */
        private boolean escaped;
        private boolean rawSurrogate;
        /** Bit d-1: the container at depth d (1..64) is an object; deeper ones in {@link #deepKinds}. */
        private long kinds;
        private long[] deepKinds;

        Scan(byte[] b, int start) {
            this.b = b;
            this.end = b.length;
            this.pos = start;
        }

        Result run() throws NotJson {
            final int n = names.length;
            final long[] counters = hasIndexStep ? new long[n] : null;
            int depth = 0;
            int onPath = 0;
            boolean nameMatched = false;
            Result result = missing[0];
            skipWs();
            while (true) {
                // at the start of a value
                int selected = -1;
                if (depth == 0) {
                    selected = 0;
                } else if (depth == onPath) {
                    int level = depth - 1;
                    if (names[level] == null) {
                        if (counters[level]++ == indices[level]) {
                            selected = depth;
                        }
                    } else if (nameMatched) {
                        selected = depth;
                    }
                }
                nameMatched = false;
                int c = pos < end ? b[pos] : -1;
                boolean closed = false;  // an empty container was opened and closed
                switch (c) {
                    case '{':
                    case '[': {
                        boolean isObject = c == '{';
                        pos++;
                        if (++depth > MAX_DEPTH) {
                            return TOO_DEEP_RESULT;
                        }
                        setKind(depth, isObject);
                        if (selected >= 0) {
                            if (selected == n) {
                                result = isObject ? DICT_RESULT : LIST_RESULT;
                            } else {
                                result = missing[selected];
                                if (isObject == (names[selected] != null)) {
                                    onPath = depth;
                                    if (!isObject) {
                                        counters[selected] = 0;
                                    }
                                }
                            }
                        }
                        skipWs();
                        if (pos < end && b[pos] == (isObject ? '}' : ']')) {
                            pos++;
                            closed = true;
                        } else if (isObject) {
                            nameMatched = name(depth == onPath ? depth - 1 : -1);
                            continue;
                        } else {
                            continue;
                        }
                        break;
                    }
                    case '"': {
                        int from = pos + 1;
                        skipString();
                        if (selected >= 0) {
                            result = selected == n ? stringKey(from, pos - 1) : missing[selected];
                        }
                        break;
                    }
                    case 't':
                        literal(TRUE);
                        if (selected >= 0) {
                            result = selected == n ? new Result(TRUE.clone(), null) : missing[selected];
                        }
                        break;
                    case 'f':
                        literal(FALSE);
                        if (selected >= 0) {
                            result = selected == n ? new Result(FALSE.clone(), null) : missing[selected];
                        }
                        break;
                    case 'n':
                        literal(NULL);
                        if (selected >= 0) {
                            result = selected == n ? NULL_RESULT : missing[selected];
                        }
                        break;
                    case 'N':
                    case 'I': {
                        int from = pos;
                        literal(c == 'N' ? NAN : INFINITY);
                        if (selected >= 0) {
                            result = selected == n ? new Result(Arrays.copyOfRange(b, from, pos), null) : missing[selected];
                        }
                        break;
                    }
                    default: {
                        if (c != '-' && (c < '0' || c > '9')) {
                            throw fail("Expecting value", pos);
                        }
                        int from = pos;
                        boolean isFloat = number();
                        if (selected >= 0) {
                            result = selected == n ? numberKey(from, pos, isFloat) : missing[selected];
                        }
                    }
                }
                if (closed) {
                    if (depth == onPath) {
                        onPath--;
                    }
                    depth--;
                }
                // after a value: close containers until the next value starts
                while (true) {
                    skipWs();
                    if (depth == 0) {
                        if (pos != end) {
                            throw fail("Extra data", pos);
                        }
                        return result;
                    }
                    boolean isObject = kind(depth);
                    int d = pos < end ? b[pos] : -1;
                    if (d == ',') {
                        pos++;
                        skipWs();
                        if (isObject) {
                            nameMatched = name(depth == onPath ? depth - 1 : -1);
                        }
                        break;
                    }
                    if (d != (isObject ? '}' : ']')) {
                        throw fail("Expecting ',' delimiter", pos);
                    }
                    pos++;
                    if (depth == onPath) {
                        onPath--;
                    }
                    depth--;
                }
            }
        }

        private void setKind(int depth, boolean isObject) {
            if (depth <= 64) {
                long bit = 1L << (depth - 1);
                kinds = isObject ? kinds | bit : kinds & ~bit;
            } else {
                if (deepKinds == null) {
                    deepKinds = new long[(MAX_DEPTH + 63) / 64];
                }
                int i = depth - 65;
                long bit = 1L << (i & 63);
                deepKinds[i >>> 6] = isObject ? deepKinds[i >>> 6] | bit : deepKinds[i >>> 6] & ~bit;
            }
        }

        private boolean kind(int depth) {
            if (depth <= 64) {
                return (kinds & (1L << (depth - 1))) != 0;
            }
            int i = depth - 65;
            return (deepKinds[i >>> 6] & (1L << (i & 63))) != 0;
        }

        private void skipWs() {
            int i = pos;
            while (i < end && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) {
                i++;
            }
            pos = i;
        }

        /**
         * A member name, the colon and the whitespace after it (pos at the name's quote). Whether the
         * name is that of step {@code level} (-1: not on the path, no comparison).
         */
        private boolean name(int level) throws NotJson {
            if (pos >= end || b[pos] != '"') {
                throw fail("Expecting property name enclosed in double quotes", pos);
            }
            int from = pos + 1;
            skipString();
            boolean matched = false;
            if (level >= 0) {
                int to = pos - 1;
                matched = escaped ? Arrays.equals(pythonCodePoints(from, to), nameCodePoints[level])
                        : Arrays.equals(b, from, to, nameBytes[level], 0, nameBytes[level].length);
            }
            skipWs();
            if (pos >= end || b[pos] != ':') {
                throw fail("Expecting ':' delimiter", pos);
            }
            pos++;
            skipWs();
            return matched;
        }

        private void literal(byte[] word) throws NotJson {
            int n = word.length;
            if (pos + n > end || !Arrays.equals(b, pos, pos + n, word, 0, n)) {
                throw fail("Expecting value", pos);
            }
            pos += n;
        }

        /** A number ({@code -?(0|[1-9]\\d*)(\\.\\d+)?([eE][-+]?\\d+)?}) or -Infinity; whether it is a float. */
        private boolean number() throws NotJson {
            final byte[] b = this.b;
            final int end = this.end;
            final int from = pos;
            int i = from;
            if (b[i] == '-') {
                i++;
                if (i < end && b[i] == 'I') {
                    pos = i;
                    literal(INFINITY);
                    return true;
                }
            }
            int first = i;
            if (i >= end || b[i] < '0' || b[i] > '9') {
                throw fail("Expecting value", from);
            }
            if (b[i++] != '0') {
                while (i < end && b[i] >= '0' && b[i] <= '9') {
                    i++;
                }
            }
            int digits = i - first;
            boolean isFloat = false;
            if (i < end && b[i] == '.') {
                i = digitsAfter(i + 1);
                isFloat = true;
            }
            if (i < end && (b[i] | 0x20) == 'e') {
                i++;
                if (i < end && (b[i] == '+' || b[i] == '-')) {
                    i++;
                }
                i = digitsAfter(i);
                isFloat = true;
            }
            pos = i;
            if (digits > MAX_INT_DIGITS && !isFloat) {
                throw tooManyDigits(digits);
            }
            return isFloat;
        }

        /** Past one or more digits from {@code i} (a fraction or an exponent). */
        private int digitsAfter(int i) throws NotJson {
            if (i >= end || b[i] < '0' || b[i] > '9') {
                throw fail("Extra data (a number without digits after '.' or 'e')", i);
            }
            while (i < end && b[i] >= '0' && b[i] <= '9') {
                i++;
            }
            return i;
        }

        private Result numberKey(int from, int to, boolean isFloat) {
            String text = new String(b, from, to - from, StandardCharsets.ISO_8859_1);
            if (!isFloat) {
                return new Result(("-0".equals(text) ? "0" : text).getBytes(StandardCharsets.ISO_8859_1), null);
            }
            if (text.equals("-Infinity")) {
                return new Result(text.getBytes(StandardCharsets.ISO_8859_1), null);
            }
            return new Result(pythonFloatRepr(Double.parseDouble(text)).getBytes(StandardCharsets.ISO_8859_1), null);
        }

        /**
         * Past a string (pos at its opening quote, then after its closing one), checking escapes,
         * UTF-8 and control characters; sets {@link #escaped} and {@link #rawSurrogate}.
         */
        private void skipString() throws NotJson {
            int start = pos;
            int i = pos + 1;
            escaped = false;
            rawSurrogate = false;
            // short strings (names, ids) byte by byte; then 8 bytes at a time
            int quick = Math.min(end, i + 16);
            while (i < quick && PLAIN[b[i] & 0xFF]) {
                i++;
            }
            while (true) {
                while (i + 8 <= end && special((long) LONGS.get(b, i)) == 0) {
                    i += 8;
                }
                while (i < end && PLAIN[b[i] & 0xFF]) {
                    i++;
                }
                if (i >= end) {
                    throw fail("Unterminated string starting", start);
                }
                int c = b[i] & 0xFF;
                if (c == '"') {
                    pos = i + 1;
                    return;
                }
                if (c == '\\') {
                    escaped = true;
                    i = escapeEnd(i, start);
                } else if (c >= 0x80) {
                    i = utf8End(i);
                } else if (c < 0x20) {
                    throw fail("Invalid control character", i);
                } else {
                    i++;
                }
            }
        }

        private int escapeEnd(int i, int start) throws NotJson {
            if (i + 1 >= end) {
                throw fail("Unterminated string starting", start);
            }
            switch (b[i + 1]) {
                case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                    return i + 2;
                case 'u':
                    if (i + 6 > end || hex(b[i + 2]) < 0 || hex(b[i + 3]) < 0 || hex(b[i + 4]) < 0 || hex(b[i + 5]) < 0) {
                        throw fail("Invalid \\uXXXX escape", i);
                    }
                    return i + 6;
                default:
                    throw fail("Invalid \\escape", i);
            }
        }

        /** Past one multi-byte UTF-8 character at {@code i}, as CPython's decoder with surrogatepass takes it. */
        private int utf8End(int i) throws NotJson {
            int c = b[i] & 0xFF;
            int need = c < 0xC2 ? -1 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : c <= 0xF4 ? 3 : -1;
            if (need < 0 || i + need >= end) {
                throw badUtf8(i);
            }
            for (int k = 1; k <= need; k++) {
                if ((b[i + k] & 0xC0) != 0x80) {
                    throw badUtf8(i);
                }
            }
            int c1 = b[i + 1] & 0xFF;
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) {
                throw badUtf8(i);  // overlong, or above U+10FFFF
            }
            if (c == 0xED && c1 >= 0xA0) {
                rawSurrogate = true;
            }
            return i + need + 1;
        }

        private NotJson badUtf8(int i) {
            return new NotJson("'utf-8' codec can't decode byte 0x" + Integer.toHexString(b[i] & 0xFF) + " in position " + i);
        }

        /** The key from the string between {@code from} and {@code to} (its quotes excluded). */
        private Result stringKey(int from, int to) {
            if (!escaped && !rawSurrogate) {
                return new Result(Arrays.copyOfRange(b, from, to), null);
            }
            int[] cps = pythonCodePoints(from, to);
            byte[] out = new byte[cps.length * 4];
            int len = 0;
            for (int cp : cps) {
                if (cp >= 0xD800 && cp <= 0xDFFF) {
                    return LONE_SURROGATE_RESULT;
                }
                len = putUtf8(out, len, cp);
            }
            return new Result(Arrays.copyOf(out, len), null);
        }

        /**
         * The code points of Python's string for the (checked) string between {@code from} and
         * {@code to}: escapes decoded, {@code &#92;uD8xx&#92;uDCxx} joined, UTF-8-encoded surrogates kept alone.
         */
        private int[] pythonCodePoints(int from, int to) {
            int[] out = new int[to - from];
            int n = 0;
            int i = from;
            while (i < to) {
                int c = b[i] & 0xFF;
                if (c == '\\') {
                    int e = b[i + 1];
                    if (e != 'u') {
                        out[n++] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
                        i += 2;
                        continue;
                    }
                    int u = hex4(i + 2);
                    i += 6;
                    if (u >= 0xD800 && u <= 0xDBFF && i + 1 < to && b[i] == '\\' && b[i + 1] == 'u') {
                        int u2 = hex4(i + 2);
                        if (u2 >= 0xDC00 && u2 <= 0xDFFF) {
                            u = 0x10000 + ((u - 0xD800) << 10) + (u2 - 0xDC00);
                            i += 6;
                        }
                    }
                    out[n++] = u;
                } else if (c < 0x80) {
                    out[n++] = c;
                    i++;
                } else if (c < 0xE0) {
                    out[n++] = ((c & 0x1F) << 6) | (b[i + 1] & 0x3F);
                    i += 2;
                } else if (c < 0xF0) {
                    out[n++] = ((c & 0x0F) << 12) | ((b[i + 1] & 0x3F) << 6) | (b[i + 2] & 0x3F);
                    i += 3;
                } else {
                    out[n++] = ((c & 0x07) << 18) | ((b[i + 1] & 0x3F) << 12) | ((b[i + 2] & 0x3F) << 6) | (b[i + 3] & 0x3F);
                    i += 4;
                }
            }
            return Arrays.copyOf(out, n);
        }

        private int hex4(int at) {
            return (hex(b[at]) << 12) | (hex(b[at + 1]) << 8) | (hex(b[at + 2]) << 4) | hex(b[at + 3]);
        }
    }

    private static int hex(byte c) {
        if (c >= '0' && c <= '9') {
            return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
            return c - 'a' + 10;
        }
        if (c >= 'A' && c <= 'F') {
            return c - 'A' + 10;
        }
        return -1;
    }

    /** The bytes a string holds as they are: not '"', '\\', below 0x20 or above 0x7F. */
    private static final boolean[] PLAIN = new boolean[256];

    static {
        for (int c = 0x20; c < 0x80; c++) {
            PLAIN[c] = c != '"' && c != '\\';
        }
    }

    private static final long ONES = 0x0101010101010101L;
    private static final long HIGHS = 0x8080808080808080L;

    /** Nonzero when one of the 8 bytes is '"', '\\', below 0x20 or above 0x7F. */
    private static long special(long x) {
        long q = x ^ 0x2222222222222222L;
        long s = x ^ 0x5C5C5C5C5C5C5C5CL;
        return (((q - ONES) & ~q) | ((s - ONES) & ~s) | ((x - 0x2020202020202020L) & ~x) | x) & HIGHS;
    }

    // -- encodings (CPython's json.detect_encoding and its codecs with errors='surrogatepass') ----------

    private static final int UTF8 = 0, UTF8_SIG = 1, UTF16 = 2, UTF16_BE = 3, UTF16_LE = 4, UTF32 = 5, UTF32_BE = 6,
            UTF32_LE = 7;
    private static final String[] ENCODING_NAMES = {"utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-16-le", "utf-32",
            "utf-32-be", "utf-32-le"};

    private static int detectEncoding(byte[] b) {
        int n = b.length;
        if (n >= 4 && ((b[0] == 0 && b[1] == 0 && b[2] == (byte) 0xFE && b[3] == (byte) 0xFF)
                || (b[0] == (byte) 0xFF && b[1] == (byte) 0xFE && b[2] == 0 && b[3] == 0))) {
            return UTF32;
        }
        if (n >= 2 && ((b[0] == (byte) 0xFE && b[1] == (byte) 0xFF) || (b[0] == (byte) 0xFF && b[1] == (byte) 0xFE))) {
            return UTF16;
        }
        if (n >= 3 && b[0] == (byte) 0xEF && b[1] == (byte) 0xBB && b[2] == (byte) 0xBF) {
            return UTF8_SIG;
        }
        if (n >= 4) {
            if (b[0] == 0) {
                return b[1] != 0 ? UTF16_BE : UTF32_BE;
            }
            if (b[1] == 0) {
                return b[2] != 0 || b[3] != 0 ? UTF16_LE : UTF32_LE;
            }
        } else if (n == 2) {
            if (b[0] == 0) {
                return UTF16_BE;
            }
            if (b[1] == 0) {
                return UTF16_LE;
            }
        }
        return UTF8;
    }

    /** UTF-16/32 to UTF-8 (a surrogate code point as its 3-byte form), or null where Python's codec fails. */
    private static byte[] transcode(byte[] b, int encoding) {
        int n = b.length;
        int pos = 0;
        boolean big;
        boolean wide = encoding == UTF32 || encoding == UTF32_BE || encoding == UTF32_LE;
        if (encoding == UTF16 || encoding == UTF32) {
            big = b[0] == 0 || b[0] == (byte) 0xFE;
            pos = wide ? 4 : 2;
        } else {
            big = encoding == UTF16_BE || encoding == UTF32_BE;
        }
        int unit = wide ? 4 : 2;
        if ((n - pos) % unit != 0) {
            return null;  // truncated data
        }
        byte[] out = new byte[(n - pos) / unit * 4];
        int o = 0;
        while (pos < n) {
            int cp;
            if (wide) {
                cp = big ? ((b[pos] & 0xFF) << 24) | ((b[pos + 1] & 0xFF) << 16) | ((b[pos + 2] & 0xFF) << 8) | (b[pos + 3] & 0xFF)
                        : ((b[pos + 3] & 0xFF) << 24) | ((b[pos + 2] & 0xFF) << 16) | ((b[pos + 1] & 0xFF) << 8) | (b[pos] & 0xFF);
                if (cp < 0 || cp > 0x10FFFF) {
                    return null;  // code point not in range(0x110000)
                }
                pos += 4;
            } else {
                cp = u16(b, pos, big);
                pos += 2;
                if (cp >= 0xD800 && cp <= 0xDBFF && pos < n) {
                    int low = u16(b, pos, big);
                    if (low >= 0xDC00 && low <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        pos += 2;
                    }
                }
                // any other surrogate unit passes alone (surrogatepass)
            }
            o = putUtf8(out, o, cp);
        }
        return Arrays.copyOf(out, o);
    }

    private static int u16(byte[] b, int at, boolean big) {
        return big ? ((b[at] & 0xFF) << 8) | (b[at + 1] & 0xFF) : ((b[at + 1] & 0xFF) << 8) | (b[at] & 0xFF);
    }

    private static int putUtf8(byte[] out, int o, int cp) {
        if (cp < 0x80) {
            out[o++] = (byte) cp;
        } else if (cp < 0x800) {
            out[o++] = (byte) (0xC0 | (cp >> 6));
            out[o++] = (byte) (0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (byte) (0xE0 | (cp >> 12));
            out[o++] = (byte) (0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (byte) (0x80 | (cp & 0x3F));
        } else {
            out[o++] = (byte) (0xF0 | (cp >> 18));
            out[o++] = (byte) (0x80 | ((cp >> 12) & 0x3F));
            out[o++] = (byte) (0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (byte) (0x80 | (cp & 0x3F));
        }
        return o;
    }

    // -- Python reprs ---------------------------------------------------------------------------------

    /**
     * Python's {@code repr(float)} as {@code json.dumps} prints it: {@code NaN}, {@code Infinity},
     * {@code -Infinity}; otherwise the shortest digits that read back as {@code d} (the closest to
     * {@code d} when several are as short), in fixed notation when the decimal exponent is in
     * (-4, 16] (with {@code .0} on integral values) and as {@code d.ddde±XX} otherwise.
     */
    public static String pythonFloatRepr(double d) {
        if (Double.isNaN(d)) {
            return "NaN";
        }
        if (Double.isInfinite(d)) {
            return d > 0 ? "Infinity" : "-Infinity";
        }
        if (d == 0) {
            return Double.doubleToRawLongBits(d) < 0 ? "-0.0" : "0.0";
        }
        double a = Math.abs(d);
        // Double.toString reads back as the double; its digits, zeros stripped: value = 0.DIGITS x 10^decpt
        String text = Double.toString(a);
        int e = text.indexOf('E');
        String mantissa = e < 0 ? text : text.substring(0, e);
        int dot = mantissa.indexOf('.');
        String digits = mantissa.substring(0, dot) + mantissa.substring(dot + 1);
        int decpt = dot + (e < 0 ? 0 : Integer.parseInt(text.substring(e + 1)));
        int first = 0;
        while (first < digits.length() - 1 && digits.charAt(first) == '0') {
            first++;
        }
        int last = digits.length();
        while (last > first + 1 && digits.charAt(last - 1) == '0') {
            last--;
        }
        digits = digits.substring(first, last);
        decpt -= first;
        if (digits.length() > 15 || a < Double.MIN_NORMAL) {
            // Decimals of up to 15 digits map to distinct normal doubles (DBL_DIG), so 15 or fewer digits
            // here are the only decimal that short, hence Python's. Otherwise (before Java 19 these may
            // even be too many) search: the fewest digits p that read back (if p do, p + 1 do), and
            // among those decimals the closest.
            BigDecimal exact = new BigDecimal(a);
            int lo = 1;
            int hi = digits.length();
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                if (shortestAt(exact, a, mid) != null) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            BigDecimal best = shortestAt(exact, a, lo).stripTrailingZeros();
            digits = best.unscaledValue().toString();
            decpt = digits.length() - best.scale();
        }
        StringBuilder out = new StringBuilder(digits.length() + 8);
        if (d < 0) {
            out.append('-');
        }
        int nd = digits.length();
        if (decpt > -4 && decpt <= 16) {
            if (decpt <= 0) {
                out.append("0.");
                for (int k = 0; k < -decpt; k++) {
                    out.append('0');
                }
                out.append(digits);
            } else if (decpt >= nd) {
                out.append(digits);
                for (int k = nd; k < decpt; k++) {
                    out.append('0');
                }
                out.append(".0");
            } else {
                out.append(digits, 0, decpt).append('.').append(digits, decpt, nd);
            }
        } else {
            int exp = decpt - 1;
            out.append(digits.charAt(0));
            if (nd > 1) {
                out.append('.').append(digits, 1, nd);
            }
            out.append('e').append(exp < 0 ? '-' : '+');
            int abs = Math.abs(exp);
            if (abs < 10) {
                out.append('0');
            }
            out.append(abs);
        }
        return out.toString();
    }

    /** The p-digit decimal closest to {@code exact} that reads back as {@code a} (as David Gay's dtoa picks it), or null. */
    private static BigDecimal shortestAt(BigDecimal exact, double a, int p) {
        BigDecimal down = exact.round(new MathContext(p, RoundingMode.FLOOR));
        BigDecimal up = exact.round(new MathContext(p, RoundingMode.CEILING));
        boolean downOk = Double.parseDouble(down.toString()) == a;
        boolean upOk = up.compareTo(down) != 0 && Double.parseDouble(up.toString()) == a;
        if (downOk && upOk) {  // the closer one; halfway between them (x.75 to .7/.8), the even last digit
            int cmp = exact.subtract(down).compareTo(up.subtract(exact));
            return cmp < 0 || (cmp == 0 && !down.unscaledValue().testBit(0)) ? down : up;
        }
        return downOk ? down : upOk ? up : null;
    }

    /** {@link #pythonFloatRepr} of many doubles (for tests over py4j): big-endian doubles in, reprs joined by '\n'. */
    public static String pythonFloatReprs(byte[] bigEndianDoubles) {
        ByteBuffer in = ByteBuffer.wrap(bigEndianDoubles);
        StringBuilder out = new StringBuilder(bigEndianDoubles.length * 3);
        while (in.remaining() >= 8) {
            if (out.length() > 0) {
                out.append('\n');
            }
            out.append(pythonFloatRepr(in.getDouble()));
        }
        return out.toString();
    }

    /** {@link #pythonFloatRepr} of {@code Double.parseDouble} of each line (for tests over py4j). */
    public static String pythonFloatReprsOfTexts(String lines) {
        StringBuilder out = new StringBuilder(lines.length() + 16);
        for (String line : lines.split("\n", -1)) {
            if (out.length() > 0) {
                out.append('\n');
            }
            out.append(pythonFloatRepr(Double.parseDouble(line)));
        }
        return out.toString();
    }

    /** Python's {@code repr(str)}: single quotes unless the text holds ' and no ", escapes for the rest. */
    static String pythonStrRepr(String s) {
        char quote = s.indexOf('\'') >= 0 && s.indexOf('"') < 0 ? '"' : '\'';
        StringBuilder out = new StringBuilder(s.length() + 2);
        out.append(quote);
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            if (cp == quote || cp == '\\') {
                out.append('\\').appendCodePoint(cp);
            } else if (cp == '\t') {
                out.append("\\t");
            } else if (cp == '\n') {
                out.append("\\n");
            } else if (cp == '\r') {
                out.append("\\r");
            } else if (cp < ' ' || cp == 0x7F) {
                hex(out, "\\x", cp, 2);
            } else if (cp < 0x7F || isPrintable(cp)) {
                out.appendCodePoint(cp);
            } else if (cp <= 0xFF) {
                hex(out, "\\x", cp, 2);
            } else if (cp <= 0xFFFF) {
                hex(out, "\\u", cp, 4);
            } else {
                hex(out, "\\U", cp, 8);
            }
        }
        return out.append(quote).toString();
    }

    private static void hex(StringBuilder out, String prefix, int cp, int width) {
        String h = Integer.toHexString(cp);
        out.append(prefix);
        for (int k = h.length(); k < width; k++) {
            out.append('0');
        }
        out.append(h);
    }

    /** Python's str.isprintable for one code point (not Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other than space). */
    private static boolean isPrintable(int cp) {
        switch (Character.getType(cp)) {
            case Character.CONTROL:
            case Character.FORMAT:
            case Character.SURROGATE:
            case Character.PRIVATE_USE:
            case Character.UNASSIGNED:
            case Character.LINE_SEPARATOR:
            case Character.PARAGRAPH_SEPARATOR:
                return false;
            case Character.SPACE_SEPARATOR:
                return cp == ' ';
            default:
                return true;
        }
    }
}
