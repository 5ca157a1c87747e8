package io.kafkaops.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;

import org.junit.jupiter.api.Test;

class SliceConfigTest {
    private static Map<String, String> options() {
        Map<String, String> o = new HashMap<>();
        o.put("kafka.bootstrap.servers", "127.0.0.1:9092");
        o.put("kafka.security.protocol", "SASL_SSL");
        o.put("kafka.sasl.jaas.config", "ScramLoginModule required username=\"u\" password=\"canary-secret\";");
        o.put("kafka.acks", "1");
        o.put("kafka.enable.idempotence", "false");
        o.put("kafka.linger.ms", "20");
        o.put("kafka.isolation.level", "read_uncommitted");
        o.put("kafka.some.plugin.setting", "x");
        o.put("kafkaops.transactional.id.prefix", "kafkaops-backfill-orders.v2-1a2b");
        o.put("kafkaops.marker.group", "kafkaops-backfill-orders.v2-1a2b");
        o.put("unrelated", "y");
        return o;
    }

    @Test
    void theProducerIsTransactionalIdempotentAndAcksAllWhateverTheOptionsSay() {
        Map<String, Object> p = SliceConfig.of(options()).producer("id-1");
        assertEquals("id-1", p.get("transactional.id"));
        assertEquals("true", p.get("enable.idempotence"));
        assertEquals("all", p.get("acks"));
        assertEquals("20", p.get("linger.ms"));
        assertEquals("60000", p.get("transaction.timeout.ms"));
        assertEquals("SASL_SSL", p.get("security.protocol"));
        assertTrue(p.containsKey("sasl.jaas.config"));
        assertEquals("x", p.get("some.plugin.setting"));   // unknown to every client: kept
        assertFalse(p.containsKey("isolation.level"));      // a consumer's setting only
        assertFalse(p.containsKey("unrelated"));            // not kafka.-prefixed
    }

    @Test
    void theMarkerConsumerReadsCommittedInTheMarkerGroup() {
        Map<String, Object> c = SliceConfig.of(options()).markerConsumer();
        assertEquals("read_committed", c.get("isolation.level"));
        assertEquals("kafkaops-backfill-orders.v2-1a2b", c.get("group.id"));
        assertEquals("false", c.get("enable.auto.commit"));
        assertFalse(c.containsKey("acks"));
        assertFalse(c.containsKey("linger.ms"));
        assertTrue(c.containsKey("sasl.jaas.config"));
        Map<String, Object> a = SliceConfig.of(options()).admin();
        assertFalse(a.containsKey("acks"));
        assertEquals("127.0.0.1:9092", a.get("bootstrap.servers"));
    }

    @Test
    void aSliceHasItsOwnTransactionalId() {
        SliceConfig config = SliceConfig.of(options());
        assertEquals("kafkaops-backfill-orders.v2-1a2b/orders-3", config.transactionalId("orders", 3));
        assertFalse(config.transactionalId("orders", 1).equals(config.transactionalId("orders", 11)));
    }

    @Test
    void aChunkCommitsAtItsRowsOrItsTime() {
        Map<String, String> o = options();
        o.put("kafkaops.chunk.rows", "1000");
        o.put("kafkaops.chunk.ms", "50");
        SliceConfig config = SliceConfig.of(o);
        assertFalse(config.chunkFull(999, 49_000_000L));
        assertTrue(config.chunkFull(1000, 0));
        assertTrue(config.chunkFull(1, 50_000_000L));
        SliceConfig defaults = SliceConfig.of(options());
        assertEquals(SliceConfig.DEFAULT_CHUNK_ROWS, defaults.chunkRows);
        assertEquals(-1L, defaults.failAfterRows);
    }

    @Test
    void missingOrMalformedOptionsAreNamed() {
        Map<String, String> o = options();
        o.remove("kafkaops.marker.group");
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SliceConfig.of(o)).getMessage()
                .contains("kafkaops.marker.group"));
        Map<String, String> n = options();
        n.put("kafkaops.chunk.rows", "many");
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SliceConfig.of(n)).getMessage()
                .contains("'many'"));
        Map<String, String> b = options();
        b.remove("kafka.bootstrap.servers");
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SliceConfig.of(b)).getMessage()
                .contains("kafka.bootstrap.servers"));
    }

    @Test
    void itsTextNamesNoSetting() {
        String text = SliceConfig.of(options()).toString();
        assertFalse(text.contains("canary-secret"), text);
        assertFalse(text.contains("jaas"), text);
        assertTrue(text.contains("kafkaops-backfill-orders.v2-1a2b"), text);
    }
}
