package io.kafkaops.streams;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The topology through TopologyTestDriver (no broker): outputs, store names, the windowed changelog's key. */
class StatefulAppTest {

    private static final String APP = "stateful-test";

    @TempDir
    Path stateDir;

    private static Properties settings() {
        Properties p = new Properties();
        p.setProperty(StreamsConfig.APPLICATION_ID_CONFIG, APP);
        p.setProperty(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        p.setProperty(StatefulApp.INPUT, "in");
        p.setProperty(StatefulApp.TABLE, "tab");
        p.setProperty(StatefulApp.OUTPUT_COUNTS, "counts");
        p.setProperty(StatefulApp.OUTPUT_WINDOWED, "windowed");
        p.setProperty(StatefulApp.OUTPUT_JOINED, "joined");
        p.setProperty(StatefulApp.WINDOW_MS, "1000");
        return p;
    }

    private static Map<String, String> last(TestOutputTopic<String, String> topic) {
        Map<String, String> values = new HashMap<>();
        for (KeyValue<String, String> kv : topic.readKeyValuesToList()) {
            values.put(kv.key, kv.value);
        }
        return values;
    }

    @Test
    void countsWindowsAndJoins() {
        Properties p = settings();
        StatefulApp.Settings s = StatefulApp.Settings.of(p);
        Properties config = StatefulApp.streamsConfig(p);
        config.setProperty(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        config.setProperty(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG, "true");  // no WARN
        assertEquals(StreamsConfig.EXACTLY_ONCE_V2, config.getProperty(StreamsConfig.PROCESSING_GUARANTEE_CONFIG));
        assertTrue(config.stringPropertyNames().stream().noneMatch(k -> k.startsWith("app.")));
        try (TopologyTestDriver driver = new TopologyTestDriver(StatefulApp.topology(s), config)) {
            StringSerializer ser = new StringSerializer();
            StringDeserializer de = new StringDeserializer();
            TestInputTopic<String, String> in = driver.createInputTopic("in", ser, ser);
            TestInputTopic<String, String> tab = driver.createInputTopic("tab", ser, ser);
            tab.pipeInput(new TestRecord<>("a", "A", Instant.ofEpochMilli(10)));
            in.pipeInput(new TestRecord<>("a", "1", Instant.ofEpochMilli(100)));
            in.pipeInput(new TestRecord<>("b", "2", Instant.ofEpochMilli(200)));   // no table row: not joined
            in.pipeInput(new TestRecord<>("a", "3", Instant.ofEpochMilli(1500)));  // the next window

            assertEquals(Map.of("a", "2", "b", "1"), last(driver.createOutputTopic("counts", de, de)));
            assertEquals(Map.of("a@0", "1", "b@0", "1", "a@1000", "1"),
                    last(driver.createOutputTopic("windowed", de, de)));
            assertEquals(List.of(KeyValue.pair("a", "1|A"), KeyValue.pair("a", "3|A")),
                    driver.createOutputTopic("joined", de, de).readKeyValuesToList());

            assertTrue(driver.producedTopicNames().containsAll(List.of(APP + "-counts-changelog",
                    APP + "-windowed-counts-changelog", APP + "-table-store-changelog")),
                    "changelogs: " + driver.producedTopicNames());
            // a window store's changelog key: the record key, the window start (8 bytes), a sequence number (4 bytes)
            ByteArrayDeserializer raw = new ByteArrayDeserializer();
            List<KeyValue<byte[], byte[]>> changes = driver
                    .createOutputTopic(APP + "-windowed-counts-changelog", raw, raw).readKeyValuesToList();
            KeyValue<byte[], byte[]> lastChange = changes.get(changes.size() - 1);
            byte[] expected = ByteBuffer.allocate(1 + 12).put("a".getBytes(StandardCharsets.UTF_8)).putLong(1000L)
                    .putInt(0).array();
            assertArrayEquals(expected, lastChange.key);
        }
    }

    @Test
    void refusesMissingAndBadSettings() {
        Properties p = settings();
        p.remove(StatefulApp.OUTPUT_JOINED);
        IllegalArgumentException missing = assertThrows(IllegalArgumentException.class,
                () -> StatefulApp.Settings.of(p));
        assertTrue(missing.getMessage().contains(StatefulApp.OUTPUT_JOINED), missing.getMessage());
        Properties q = settings();
        q.setProperty(StatefulApp.WINDOW_MS, "0");
        assertThrows(IllegalArgumentException.class, () -> StatefulApp.Settings.of(q));
    }
}
