package io.kafkaops.spark;

import java.io.IOException;
import java.io.Serializable;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.exc.StreamConstraintsException;
import com.fasterxml.jackson.core.io.SerializedString;

/**
 * A key rule that computes the new key, as docs/key-rules.md defines it: a value rule ({@code field:NAME}
 * or {@code jsonpath:...}), which reads the record's JSON value, or a Kafka Streams store key rule
 * ({@code window_key}, {@code session_key}), which reads the record's key; the new key, or the reason code
 * of a dead letter. {@code record_key} is not one: the record key is placed in Spark SQL as it is.
 * {@code kafkaops.platform.keyrules} is the independent Python side of the same contract, and both are
 * held to the vectors in {@code src/test/resources/key_rules_vectors.json}.
 *
 * <p>A value rule makes one pass of Jackson's streaming parser over the value.
 *
 * <p>A value rule's reason is decided tier by tier: no value; not UTF-8; not JSON anywhere (grammar, NaN/Infinity,
 * a byte-order mark, trailing data); nested deeper than {@link #MAX_DEPTH}; a number longer than
 * {@link #MAX_NUMBER_LENGTH} digits; then what the path finds. A strict pass enforces the limits with
 * {@link StreamReadConstraints}; only when one trips does an unlimited pass tell a grammar error further
 * on (not JSON) from the limit itself.
 *
 * <p>Instances are immutable and serializable; {@link #extract} is thread-safe.
 */
public final class KeyRule implements Serializable {
    private static final long serialVersionUID = 3L;

    /** Arrays and objects nested deeper than this make {@link #TOO_DEEP}. */
    public static final int MAX_DEPTH = 100;
    /** A number token with more digits than this (integer, fraction and exponent digits) makes {@link #NUMBER_TOO_LONG}. */
    public static final int MAX_NUMBER_LENGTH = 1000;

    /** Kafka Streams' window store changelog key: key bytes, 8-byte window start, 4-byte sequence number. */
    public static final String WINDOW_KEY = "window_key";
    /** Kafka Streams' session store changelog key: key bytes, 8-byte window end, 8-byte window start. */
    public static final String SESSION_KEY = "session_key";

    /**
     * The reason codes of docs/key-rules.md a rule here gives, in the contract's order (record_key's NO_KEY is
     * decided in Spark SQL; window_key's and session_key's here).
     */
    public static final String NO_KEY = "NO_KEY", NOT_A_WINDOWED_KEY = "NOT_A_WINDOWED_KEY", NO_VALUE = "NO_VALUE",
            NOT_UTF8 = "NOT_UTF8", NOT_JSON = "NOT_JSON", TOO_DEEP = "TOO_DEEP", NUMBER_TOO_LONG = "NUMBER_TOO_LONG",
            FIELD_MISSING = "FIELD_MISSING", NULL_VALUE = "NULL_VALUE", NOT_A_SCALAR = "NOT_A_SCALAR",
            LONE_SURROGATE = "LONE_SURROGATE";

    private static final JsonFactory STRICT = factory(MAX_DEPTH, MAX_NUMBER_LENGTH);
    private static final JsonFactory UNLIMITED = factory(Integer.MAX_VALUE, Integer.MAX_VALUE);
    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final byte[] TRUE = {'t', 'r', 'u', 'e'};
    private static final byte[] FALSE = {'f', 'a', 'l', 's', 'e'};

    /** A key (code and detail null) or a dead letter's code and a free-text detail (key null). */
    public static final class Result implements Serializable {
        private static final long serialVersionUID = 1L;
        public final byte[] key;
        public final String code;
        public final String detail;

        Result(byte[] key, String code, String detail) {
            this.key = key;
            this.code = code;
            this.detail = detail;
        }

        @Override
        public String toString() {
            return key != null ? "key " + new String(key, StandardCharsets.UTF_8) : code + ": " + detail;
        }
    }

    private final String text;
    /** A store key rule: the bytes of the window suffix it takes off the key (12 or 16); 0 for a value rule. */
    private final int suffix;
    /** Per step: a field name (String) or an array index (Integer). */
    private final Object[] steps;
    private final SerializedString[] names;
    private final Result[] missing;

    /**
     * The rule of {@code text} (quoted in details) with the steps Python's {@code KeyRule.steps} parsed
     * from it: a String is a field name, an Integer an array index. A store key rule ({@link #WINDOW_KEY},
     * {@link #SESSION_KEY}) has no steps.
     */
    public KeyRule(List<Object> steps, String text) {
        this.text = text;
        this.suffix = WINDOW_KEY.equals(text) ? 12 : SESSION_KEY.equals(text) ? 16 : 0;
        if (suffix > 0) {
            if (steps != null && !steps.isEmpty()) {
                throw new IllegalArgumentException("key rule " + text + " reads the record key: it has no steps, not " + steps);
            }
            this.steps = new Object[0];
            this.names = new SerializedString[0];
            this.missing = new Result[0];
            return;
        }
        if (steps == null || steps.isEmpty()) {
            throw new IllegalArgumentException("key rule " + text + " has no steps: only window_key and session_key "
                    + "read the record key here (record_key is placed in Spark SQL)");
        }
        this.steps = steps.toArray();
        this.names = new SerializedString[this.steps.length];
        this.missing = new Result[this.steps.length];
        for (int i = 0; i < this.steps.length; i++) {
            Object step = this.steps[i];
            if (step instanceof String) {
                names[i] = new SerializedString((String) step);
                missing[i] = dead(FIELD_MISSING, "no field \"" + step + "\" on the path of " + text);
            } else if (step instanceof Integer && (Integer) step >= 0) {
                missing[i] = dead(FIELD_MISSING, "no element [" + step + "] on the path of " + text);
            } else {
                throw new IllegalArgumentException("key rule " + text + ": step " + i + " is " + step
                        + "; a step is a field name (String) or an array index (Integer, 0 or more)");
            }
        }
    }

    /** True for {@code window_key} and {@code session_key}: {@link #extract} is given the record key, not its value. */
    public boolean readsKey() {
        return suffix > 0;
    }

    /**
     * The new key of a record, or why it has none. A value rule is given the record value ({@code null}: a
     * tombstone); a store key rule ({@link #readsKey}) the record key ({@code null}: none).
     */
    public Result extract(byte[] input) {
        return suffix > 0 ? storeKey(input) : fromValue(input);
    }

    /**
     * The record key without Kafka Streams' window suffix, or {@link #NOT_A_WINDOWED_KEY} when it is too short
     * for one or holds no window Streams writes ({@code Window}: start 0 or more, end not before start; a
     * sequence number 0 or more). The key before the suffix may be empty.
     */
    private Result storeKey(byte[] key) {
        if (key == null) {
            return dead(NO_KEY, "the record has no key");
        }
        int base = key.length - suffix;
        if (base < 0) {
            return dead(NOT_A_WINDOWED_KEY, "key of " + key.length + " byte(s): " + text + " needs at least " + suffix);
        }
        ByteBuffer suffixBytes = ByteBuffer.wrap(key);  // big-endian, as Streams writes it
        if (suffix == 12) {
            long start = suffixBytes.getLong(base);
            int seq = suffixBytes.getInt(base + 8);
            if (start < 0 || seq < 0) {
                return dead(NOT_A_WINDOWED_KEY, "window start " + start + ", sequence number " + seq + ": a negative one");
            }
        } else {
            long end = suffixBytes.getLong(base);
            long start = suffixBytes.getLong(base + 8);
            if (start < 0 || end < start) {
                return dead(NOT_A_WINDOWED_KEY, "session window start " + start + ", end " + end
                        + ": not a window (start 0 or more, end not before it)");
            }
        }
        return new Result(Arrays.copyOf(key, base), null, null);
    }

    private Result fromValue(byte[] value) {
        if (value == null) {
            return dead(NO_VALUE, "the record has no value (a tombstone)");
        }
        int bad = invalidUtf8(value);
        if (bad >= 0) {
            return dead(NOT_UTF8, "the value is not UTF-8: byte " + bad + " (0x" + Integer.toHexString(value[bad] & 0xFF) + ")");
        }
        try (JsonParser p = STRICT.createParser(value)) {
            Result found = walk(p);
            finish(p);
            return found;
        } catch (StreamConstraintsException e) {
            return classify(value);
        } catch (IOException e) {
            return notJson(e);
        }
    }

    /** Follows the steps from the root; the parser is left somewhere inside the value. */
    private Result walk(JsonParser p) throws IOException {
        JsonToken t = first(p);
        for (int i = 0; i < steps.length; i++) {
            if (names[i] == null) {
                if (t != JsonToken.START_ARRAY) {
                    return missing[i];
                }
                int want = (Integer) steps[i];
                for (int at = 0; (t = p.nextToken()) != JsonToken.END_ARRAY && at < want; at++) {
                    p.skipChildren();
                }
                if (t == JsonToken.END_ARRAY) {
                    return missing[i];
                }
            } else {
                if (t != JsonToken.START_OBJECT) {
                    return missing[i];
                }
                while (!p.nextFieldName(names[i])) {  // the first member of that name counts
                    if (p.currentToken() == JsonToken.END_OBJECT) {
                        return missing[i];
                    }
                    p.nextToken();
                    p.skipChildren();
                }
                t = p.nextToken();
            }
        }
        switch (t) {
            case VALUE_STRING:
                String s = p.getText();
                return hasLoneSurrogate(s) ? dead(LONE_SURROGATE, "the string at " + text + " holds a lone surrogate")
                        : new Result(s.getBytes(StandardCharsets.UTF_8), null, null);
            case VALUE_NUMBER_INT:
            case VALUE_NUMBER_FLOAT:
                return new Result(p.getText().getBytes(StandardCharsets.US_ASCII), null, null);  // the token as written
            case VALUE_TRUE:
                return new Result(TRUE.clone(), null, null);
            case VALUE_FALSE:
                return new Result(FALSE.clone(), null, null);
            case VALUE_NULL:
                return dead(NULL_VALUE, "the value at " + text + " is null");
            default:
                return dead(NOT_A_SCALAR, "the value at " + text + " is an object or an array");
        }
    }

    private static JsonToken first(JsonParser p) throws IOException {
        JsonToken t = p.nextToken();
        if (t == null) {
            throw new JsonParseException(p, "no JSON value, only white space");
        }
        return t;
    }

    /** Reads to the end of the root value, then requires the end of the input. */
    private static void finish(JsonParser p) throws IOException {
        while (!p.getParsingContext().inRoot()) {
            p.nextToken();
        }
        if (p.nextToken() != null) {
            throw new JsonParseException(p, "more than one JSON value (" + p.currentToken() + " after the first)");
        }
    }

    /** After a limit tripped: not JSON if the grammar breaks anywhere, else the deepest-ranked limit. */
    private static Result classify(byte[] value) {
        boolean deep = false;
        try (JsonParser p = UNLIMITED.createParser(value)) {
            for (JsonToken t = first(p); !p.getParsingContext().inRoot(); t = p.nextToken()) {
                deep |= t.isStructStart() && p.getParsingContext().getNestingDepth() > MAX_DEPTH;
            }
            finish(p);
        } catch (IOException e) {
            return notJson(e);
        }
        return deep ? dead(TOO_DEEP, "the value nests arrays and objects deeper than " + MAX_DEPTH)
                : dead(NUMBER_TOO_LONG, "the value holds a number of more than " + MAX_NUMBER_LENGTH + " digits");
    }

    private static Result notJson(IOException e) {
        String why = String.valueOf(e.getMessage()).lines().findFirst().orElse("");  // without Jackson's location
        return dead(NOT_JSON, "the value is not JSON: " + why.substring(0, Math.min(200, why.length())));
    }

    private static Result dead(String code, String detail) {
        return new Result(null, code, detail);
    }

    private static boolean hasLoneSurrogate(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                return true;
            }
        }
        return false;
    }

    /** The index of the first byte that is not well-formed UTF-8 (Unicode table 3-7), or -1. */
    static int invalidUtf8(byte[] b) {
        int i = 0;
        while (i < b.length) {
            if (i + 8 <= b.length && ((long) LONGS.get(b, i) & 0x8080808080808080L) == 0) {
                i += 8;  // eight ASCII bytes
                continue;
            }
            int c = b[i];
            if (c >= 0) {
                i++;
                continue;
            }
            c &= 0xFF;
            int more = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
            if (more == 0 || i + more >= b.length) {
                return i;
            }
            int second = b[i + 1] & 0xFF;
            int low = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
            int high = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (second < low || second > high) {
                return i;
            }
            for (int k = 2; k <= more; k++) {
                if ((b[i + k] & 0xC0) != 0x80) {
                    return i;
                }
            }
            i += more + 1;
        }
        return -1;
    }

    private static JsonFactory factory(int depth, int numberLength) {
        return JsonFactory.builder()
                .streamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(depth)
                        .maxNumberLength(numberLength).maxStringLength(Integer.MAX_VALUE)
                        .maxNameLength(Integer.MAX_VALUE).build())
                .disable(JsonFactory.Feature.INTERN_FIELD_NAMES)
                .disable(JsonFactory.Feature.CHARSET_DETECTION)  // UTF-8 only: no UTF-16/32 sniffing, no BOM skipping
                .build();
    }
}
