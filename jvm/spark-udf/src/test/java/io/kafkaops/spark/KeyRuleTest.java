package io.kafkaops.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** {@link KeyRule} against the shared vectors of docs/key-rules.md and a few JVM-only properties. */
class KeyRuleTest {
    private static final String RESOURCE = "/key_rules_vectors.json";

    private static JsonNode vectors() throws IOException {
        try (InputStream in = KeyRuleTest.class.getResourceAsStream(RESOURCE)) {
            return new ObjectMapper().readTree(in);
        }
    }

    /** A value or key of the vectors file: null, text (its UTF-8), {"hex"} or {"parts", "tail_hex"}. */
    static byte[] bytes(JsonNode spec) {
        if (spec == null || spec.isNull()) {
            return null;
        }
        if (spec.isTextual()) {
            return spec.asText().getBytes(StandardCharsets.UTF_8);
        }
        if (spec.has("hex")) {
            return HexFormat.of().parseHex(spec.get("hex").asText());
        }
        StringBuilder text = new StringBuilder();
        for (JsonNode part : spec.get("parts")) {
            text.append(part.get(0).asText().repeat(part.get(1).asInt()));
        }
        byte[] head = text.toString().getBytes(StandardCharsets.UTF_8);
        byte[] tail = HexFormat.of().parseHex(spec.has("tail_hex") ? spec.get("tail_hex").asText() : "");
        return ByteBuffer.allocate(head.length + tail.length).put(head).put(tail).array();
    }

    static KeyRule rule(JsonNode vector) {
        List<Object> steps = new ArrayList<>();
        for (JsonNode step : vector.get("steps")) {
            steps.add(step.isInt() ? (Object) step.asInt() : step.asText());
        }
        return new KeyRule(steps, vector.get("rule").asText());
    }

    @TestFactory
    Stream<DynamicTest> everyVectorGivesItsKeyOrCode() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonNode v : vectors().get("vectors")) {
            if (v.get("rule").asText().equals("record_key")) {
                continue;  // decided in Spark SQL, not by KeyRule
            }
            tests.add(DynamicTest.dynamicTest(v.get("note").asText(), () -> {
                KeyRule rule = rule(v);
                KeyRule.Result got = rule.extract(bytes(v.get(rule.readsKey() ? "record_key" : "value")));
                String want = v.has("code") ? v.get("code").asText() : null;
                assertEquals(want, got.code, () -> "code of " + v.get("note") + ": " + got);
                assertArrayEquals(bytes(v.get("key")), got.key, () -> "key of " + v.get("note") + ": " + got);
                assertTrue((got.key == null) == (got.detail != null), () -> "a detail exactly with a code: " + got);
            }));
        }
        assertTrue(tests.size() > 200, "vectors read: " + tests.size());
        return tests.stream();
    }

    @Test
    void theVectorsCoverEveryCodeAndTheLimitsTheyAssume() throws IOException {
        JsonNode all = vectors();
        assertEquals(KeyRule.MAX_DEPTH, all.get("max_depth").asInt());
        assertEquals(KeyRule.MAX_NUMBER_LENGTH, all.get("max_number_length").asInt());
        Set<String> codes = new TreeSet<>();
        for (JsonNode v : all.get("vectors")) {
            if (v.has("code")) {
                codes.add(v.get("code").asText());
            }
        }
        assertEquals(new TreeSet<>(List.of(KeyRule.NO_KEY, KeyRule.NOT_A_WINDOWED_KEY, KeyRule.NO_VALUE, KeyRule.NOT_UTF8, KeyRule.NOT_JSON,
                KeyRule.TOO_DEEP, KeyRule.NUMBER_TOO_LONG, KeyRule.FIELD_MISSING, KeyRule.NULL_VALUE,
                KeyRule.NOT_A_SCALAR, KeyRule.LONE_SURROGATE)), codes);
    }

    private static KeyRule.Result key(String value) {
        return new KeyRule(List.of("key"), "field:key").extract(value.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void numbersAreTheirTokenTextAndLimitsCountDigitsOnly() {
        for (String n : List.of("1.50", "1e3", "-0", "1E+05", "-12.5e-3", "1e400")) {
            assertArrayEquals(n.getBytes(StandardCharsets.US_ASCII), key("{\"key\": " + n + "}").key, n);
        }
        String digits = "-" + "1".repeat(500) + "." + "2".repeat(250) + "E+" + "3".repeat(250);
        assertArrayEquals(digits.getBytes(StandardCharsets.US_ASCII), key("{\"key\": " + digits + "}").key);
        assertEquals(KeyRule.NUMBER_TOO_LONG, key("{\"key\": " + digits + "4}").code);
    }

    @Test
    void depthIsCountedFromTheRootAndTheGrammarOutranksIt() {
        String deep = "[".repeat(99) + "]".repeat(99);
        assertArrayEquals("k".getBytes(StandardCharsets.US_ASCII), key("{\"key\": \"k\", \"x\": " + deep + "}").key);
        assertEquals(KeyRule.TOO_DEEP, key("{\"key\": \"k\", \"x\": [" + deep + "]}").code);
        assertEquals(KeyRule.NOT_JSON, key("{\"key\": \"k\", \"x\": [" + deep + "]]").code);
        assertEquals(KeyRule.TOO_DEEP, key("{\"key\": \"k\", \"x\": " + "[".repeat(200_000) + "]".repeat(200_000) + "}").code);
    }

    /**
     * The UTF-8 check against the JDK's strict decoder: every 1- and 2-byte input, and each 3- and 4-byte
     * one led by E0..F4 with a third byte at a class boundary.
     */
    @Test
    void utf8IsCheckedExactlyAsTheJdkDecoderChecksIt() {
        int checked = 0;
        for (int a = 0; a < 256; a++) {
            checked += agree(new byte[]{(byte) a});
            for (int b = 0; b < 256; b++) {
                checked += agree(new byte[]{(byte) a, (byte) b});
                if (a >= 0xE0 && a <= 0xF4) {
                    for (int c : new int[]{0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xE0, 0xFF}) {
                        checked += agree(new byte[]{(byte) a, (byte) b, (byte) c});
                        checked += agree(new byte[]{(byte) a, (byte) b, (byte) c, (byte) 0x80});
                    }
                }
            }
        }
        assertTrue(checked > 150_000, "inputs checked: " + checked);
    }

    private static int agree(byte[] b) {
        boolean jdk;
        try {
            StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(b));
            jdk = true;
        } catch (CharacterCodingException e) {
            jdk = false;
        }
        assertEquals(jdk, KeyRule.invalidUtf8(b) < 0, () -> HexFormat.of().formatHex(b));
        return 1;
    }

    @Test
    void aRuleSurvivesJavaSerializationAsSparkShipsIt() throws Exception {
        KeyRule rule = new KeyRule(List.of("a", 1, "b"), "jsonpath:$.a[1].b");
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (ObjectOutputStream o = new ObjectOutputStream(out)) {
            o.writeObject(rule);
        }
        KeyRule back;
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(out.toByteArray()))) {
            back = (KeyRule) in.readObject();
        }
        KeyRule.Result got = back.extract("{\"a\": [0, {\"b\": \"x\"}]}".getBytes(StandardCharsets.UTF_8));
        assertArrayEquals("x".getBytes(StandardCharsets.UTF_8), got.key);
        assertNull(got.code);
        assertEquals("FIELD_MISSING: no element [1] on the path of jsonpath:$.a[1].b",
                back.extract("{\"a\": [0]}".getBytes(StandardCharsets.UTF_8)).toString());
    }

    @Test
    void storeKeyRulesReadTheKeyAndSurviveSerialization() throws Exception {
        KeyRule window = new KeyRule(List.of(), "window_key");
        KeyRule session = new KeyRule(null, "session_key");
        assertTrue(window.readsKey() && session.readsKey());
        assertTrue(!new KeyRule(List.of("a"), "field:a").readsKey());
        byte[] windowed = ByteBuffer.allocate(14).put((byte) 'k').put((byte) 'y').putLong(1_700_000_000_000L).putInt(3).array();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (ObjectOutputStream o = new ObjectOutputStream(out)) {
            o.writeObject(window);
        }
        KeyRule back;
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(out.toByteArray()))) {
            back = (KeyRule) in.readObject();
        }
        assertArrayEquals("ky".getBytes(StandardCharsets.US_ASCII), back.extract(windowed).key);
        assertEquals(KeyRule.NOT_A_WINDOWED_KEY, session.extract(windowed).code);  // 14 bytes: no 16-byte suffix
        assertEquals(KeyRule.NO_KEY, back.extract(null).code);
    }

    @Test
    void aRuleWithoutStepsOrWithABadStepIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> new KeyRule(List.of(), "record_key"));
        assertThrows(IllegalArgumentException.class, () -> new KeyRule(List.of("a"), "window_key"));
        assertThrows(IllegalArgumentException.class, () -> new KeyRule(List.of(), "Window_key"));
        assertThrows(IllegalArgumentException.class, () -> new KeyRule(List.of(-1), "jsonpath:$[-1]"));
        assertThrows(IllegalArgumentException.class, () -> new KeyRule(List.of(1.5), "jsonpath:$[1.5]"));
    }
}
