package io.kafkaops.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * The writer's resume logic against Kafka's MockProducer, whose transactions keep sends and offsets
 * apart until a commit: a second attempt fences the first, resumes after its committed chunks, and
 * the committed records are every row once, in order. (Real brokers: tests/integration/rekey.)
 */
class SliceWriterTest {
    private static final String GROUP = "kafkaops-backfill-orders.v2-1a2b";
    private static final TopicPartition MARKER = new TopicPartition("orders", 0);
    private static final SliceWriter.Columns COLUMNS = new SliceWriter.Columns(0, 1, 2, 3, 4, 5, 6);

    /** Transactional producers sharing what they committed, the newest of an id fencing the one before. */
    private static final class Broker implements SliceWriter.Clients {
        final Map<String, MockProducer<byte[], byte[]>> current = new HashMap<>();
        final List<MockProducer<byte[], byte[]>> all = new ArrayList<>();

        @Override
        public Producer<byte[], byte[]> producer(String transactionalId) {
            MockProducer<byte[], byte[]> older = current.get(transactionalId);
            if (older != null && !older.closed()) {
                older.fenceProducer();  // as initTransactions() with the same transactional id does
            }
            MockProducer<byte[], byte[]> p = new MockProducer<>(true, new ByteArraySerializer(),
                    new ByteArraySerializer());
            current.put(transactionalId, p);
            all.add(p);
            return p;
        }

        @Override
        public long committed(TopicPartition marker) {
            long rows = 0;
            for (MockProducer<byte[], byte[]> p : all) {
                for (Map<String, Map<TopicPartition, OffsetAndMetadata>> commit : p.consumerGroupOffsetsHistory()) {
                    OffsetAndMetadata o = commit.getOrDefault(GROUP, Map.of()).get(marker);
                    if (o != null) {
                        rows = o.offset();
                    }
                }
            }
            return rows;
        }

        List<String> committedValues() {
            List<String> out = new ArrayList<>();
            for (MockProducer<byte[], byte[]> p : all) {
                for (ProducerRecord<byte[], byte[]> r : p.history()) {
                    out.add(new String(r.value(), StandardCharsets.UTF_8));
                    assertArrayEquals(("orders/0/" + out.get(out.size() - 1)).getBytes(StandardCharsets.UTF_8),
                            r.headers().lastHeader("kafkaops.lineage").value());
                }
            }
            return out;
        }
    }

    private static SliceWriter writer(Broker broker) {
        return new SliceWriter(config(), COLUMNS, broker);
    }

    private static SliceConfig config() {
        Map<String, String> options = new HashMap<>();
        options.put("kafka.bootstrap.servers", "127.0.0.1:9092");
        options.put(SliceConfig.TRANSACTIONAL_ID_PREFIX, GROUP);
        options.put(SliceConfig.MARKER_GROUP, GROUP);
        options.put(SliceConfig.CHUNK_ROWS, "1000");
        return SliceConfig.of(options);
    }

    private static InternalRow row(int i, int slicePartition) {
        GenericArrayData headers = new GenericArrayData(new Object[] {new GenericInternalRow(new Object[] {
            UTF8String.fromString("kafkaops.lineage"), ("orders/0/" + i).getBytes(StandardCharsets.UTF_8)})});
        return new GenericInternalRow(new Object[] {UTF8String.fromString("orders.v2"), i % 6,
            ("k" + i % 40).getBytes(StandardCharsets.UTF_8), Integer.toString(i).getBytes(StandardCharsets.UTF_8),
            headers, UTF8String.fromString("orders"), slicePartition});
    }

    private static List<String> numbers(int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(Integer.toString(i));
        }
        return out;
    }

    @Test
    void aNewAttemptFencesTheOldOneAndResumesAfterItsCommittedChunks() {
        Broker broker = new Broker();
        SliceWriter lost = writer(broker);
        for (int i = 0; i < 1500; i++) {
            lost.write(row(i, 0));  // a chunk of 1000 committed, 500 rows in a transaction left open
        }
        assertEquals(1000, broker.committed(MARKER));
        assertEquals(numbers(1000), broker.committedValues());

        SliceWriter retry = writer(broker);
        for (int i = 0; i < 2500; i++) {
            retry.write(row(i, 0));
        }
        assertEquals(new SliceWriter.Done("orders-0", 2500, 1500, 1000), retry.commit());
        retry.close();
        // the lost attempt can neither send nor commit any more
        assertThrows(KafkaException.class, () -> lost.write(row(1500, 0)));
        lost.abort();
        lost.close();
        assertEquals(numbers(2500), broker.committedValues());  // every row once, in order
        assertEquals(2500, broker.committed(MARKER));
        assertEquals(List.of(2000L, 2500L), broker.all.get(1).consumerGroupOffsetsHistory().stream()
                .map(c -> c.get(GROUP).get(MARKER).offset()).toList());  // a chunk, then the rest at commit()

        SliceWriter rerun = writer(broker);
        for (int i = 0; i < 2500; i++) {
            rerun.write(row(i, 0));
        }
        assertEquals(new SliceWriter.Done("orders-0", 2500, 0, 2500), rerun.commit());
        rerun.close();
        assertEquals(2500, broker.committedValues().size());
        assertTrue(broker.all.get(2).consumerGroupOffsetsHistory().isEmpty());  // not one transaction
    }

    @Test
    void aTaskHoldsOneSlice() {
        SliceWriter writer = writer(new Broker());
        writer.write(row(0, 0));
        String message = assertThrows(IllegalStateException.class, () -> writer.write(row(1, 1))).getMessage();
        assertTrue(message.contains("slice orders-0 and of slice orders-1"), message);
        writer.abort();
        writer.close();
    }

    @Test
    void aMarkerCountingMoreRowsThanTheSliceHasIsRefused() {
        Broker broker = new Broker();
        SliceWriter first = writer(broker);
        for (int i = 0; i < 1200; i++) {
            first.write(row(i, 0));
        }
        first.commit();
        first.close();
        SliceWriter shorter = writer(broker);
        for (int i = 0; i < 900; i++) {
            shorter.write(row(i, 0));
        }
        String message = assertThrows(IllegalStateException.class, shorter::commit).getMessage();
        assertTrue(message.contains("counts 1200 row(s) but the slice has 900"), message);
    }

    @Test
    void rowsTakenWhileTheSliceOpensWaitAndAreThenSentOrSkippedAsTheMarkerSays() throws Exception {
        Broker broker = new Broker();
        SliceWriter lost = writer(broker);
        for (int i = 0; i < 1200; i++) {
            lost.write(row(i, 0));  // a chunk of 1000 committed, 200 rows in a transaction left open
        }
        CountDownLatch release = new CountDownLatch(1);
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            SliceWriter retry = new SliceWriter(config(), COLUMNS, broker, command -> pool.execute(() -> {
                try {
                    release.await();
                } catch (InterruptedException err) {
                    throw new IllegalStateException(err);
                }
                command.run();
            }));
            for (int i = 0; i < 2500; i++) {
                retry.write(row(i, 0));  // the slice is not open: every row waits, none is sent, nothing fenced
            }
            assertEquals(1, broker.all.size());
            assertEquals(numbers(1000), broker.committedValues());
            release.countDown();
            for (int i = 2500; i < 3000; i++) {
                retry.write(row(i, 0));
            }
            assertEquals(new SliceWriter.Done("orders-0", 3000, 2000, 1000), retry.commit());
            retry.close();
        } finally {
            pool.shutdownNow();
        }
        assertThrows(KafkaException.class, () -> lost.write(row(1200, 0)));  // fenced by the retry's open
        assertEquals(numbers(3000), broker.committedValues());  // the 1000 committed before, then the rest once
        assertEquals(3000, broker.committed(MARKER));
        // a chunk committed while the waiting rows were sent counts the rows sent by then, not those taken
        assertEquals(List.of(2000L, 3000L), broker.all.get(1).consumerGroupOffsetsHistory().stream()
                .map(c -> c.get(GROUP).get(MARKER).offset()).toList());
    }

    @Test
    void lineageColumnsBecomeTheLineageHeaderAndADeadLetterCarriesItsCodeAndDetail() {
        Map<String, String> options = new HashMap<>();
        options.put("kafka.bootstrap.servers", "127.0.0.1:9092");
        options.put(SliceConfig.TRANSACTIONAL_ID_PREFIX, GROUP);
        options.put(SliceConfig.MARKER_GROUP, GROUP);
        options.put(SliceConfig.LINEAGE_TOPIC, "orders");
        options.put(SliceConfig.LINEAGE_HEADER, "kafkaops.lineage");
        options.put(SliceConfig.CODE_HEADER, "kafkaops.dead_letter_code");
        options.put(SliceConfig.REASON_HEADER, "kafkaops.dead_letter_reason");
        // topic, partition, key, value, slice_topic, slice_partition, lineage_partition, lineage_offset, code, detail
        SliceWriter.Columns columns = new SliceWriter.Columns(0, 1, 2, 3, -1, 4, 5, 6, 7, 8, 9);
        Broker broker = new Broker();
        SliceWriter writer = new SliceWriter(SliceConfig.of(options), columns, broker);
        writer.write(new GenericInternalRow(new Object[] {UTF8String.fromString("orders.v2"), 4,
            "k".getBytes(StandardCharsets.UTF_8), "{}".getBytes(StandardCharsets.UTF_8), UTF8String.fromString("orders"),
            2, 2, 1234567890123L, null, null}));
        writer.write(new GenericInternalRow(new Object[] {UTF8String.fromString("orders.v2.dlq"), 0, null,
            "x".getBytes(StandardCharsets.UTF_8), UTF8String.fromString("orders"), 2, 2, 1234567890124L,
            UTF8String.fromString("NOT_JSON"), UTF8String.fromString("not JSON at byte 0")}));
        assertEquals(new SliceWriter.Done("orders-2", 2, 2, 0), writer.commit());
        writer.close();
        List<ProducerRecord<byte[], byte[]>> sent = broker.all.get(0).history();
        assertEquals(2, sent.size());
        assertEquals(1, sent.get(0).headers().toArray().length);
        assertArrayEquals("orders/2/1234567890123".getBytes(StandardCharsets.US_ASCII),
                sent.get(0).headers().lastHeader("kafkaops.lineage").value());
        assertArrayEquals("orders/2/1234567890124".getBytes(StandardCharsets.US_ASCII),
                sent.get(1).headers().lastHeader("kafkaops.lineage").value());
        assertArrayEquals("NOT_JSON".getBytes(StandardCharsets.UTF_8),
                sent.get(1).headers().lastHeader("kafkaops.dead_letter_code").value());
        assertArrayEquals("not JSON at byte 0".getBytes(StandardCharsets.UTF_8),
                sent.get(1).headers().lastHeader("kafkaops.dead_letter_reason").value());
        Map<String, String> noTopic = new HashMap<>(options);
        noTopic.remove(SliceConfig.LINEAGE_TOPIC);
        assertThrows(IllegalArgumentException.class, () -> new SliceWriter(SliceConfig.of(noTopic), columns, broker));
    }

    @Test
    void aCopyKeepsTheSourceHeadersInOrderWithItsOwnAfterThemAndTheSourceTimestamp() {
        Map<String, String> options = new HashMap<>();
        options.put("kafka.bootstrap.servers", "127.0.0.1:9092");
        options.put(SliceConfig.TRANSACTIONAL_ID_PREFIX, GROUP);
        options.put(SliceConfig.MARKER_GROUP, GROUP);
        options.put(SliceConfig.LINEAGE_TOPIC, "orders");
        options.put(SliceConfig.LINEAGE_HEADER, "kafkaops.lineage");
        options.put(SliceConfig.CODE_HEADER, "kafkaops.dead_letter_code");
        options.put(SliceConfig.REASON_HEADER, "kafkaops.dead_letter_reason");
        // topic, partition, key, value, timestamp, headers, lineage_partition, lineage_offset, code, detail,
        // slice_topic, slice_partition: the frame's headers and lineage columns together
        SliceWriter.Columns columns = new SliceWriter.Columns(0, 1, 2, 3, 5, 10, 11, 6, 7, 8, 9, 4);
        Broker broker = new Broker();
        SliceWriter writer = new SliceWriter(SliceConfig.of(options), columns, broker);
        // a source record copied before (its lineage header first), with a duplicate header name and a null value
        GenericArrayData source = new GenericArrayData(new Object[] {
            new GenericInternalRow(new Object[] {UTF8String.fromString("trace"), "t1".getBytes(StandardCharsets.UTF_8)}),
            new GenericInternalRow(new Object[] {UTF8String.fromString("kafkaops.lineage"),
                "older/1/5".getBytes(StandardCharsets.UTF_8)}),
            new GenericInternalRow(new Object[] {UTF8String.fromString("trace"), null})});
        writer.write(new GenericInternalRow(new Object[] {UTF8String.fromString("orders.v2"), 4,
            "k".getBytes(StandardCharsets.UTF_8), "{}".getBytes(StandardCharsets.UTF_8), 1_700_000_000_123L, source,
            2, 7L, null, null, UTF8String.fromString("orders"), 2}));
        writer.write(new GenericInternalRow(new Object[] {UTF8String.fromString("orders.v2.dlq"), 0, null,
            "x".getBytes(StandardCharsets.UTF_8), 1_600_000_000_000L, source, 2, 8L, UTF8String.fromString("NO_KEY"),
            UTF8String.fromString("no key"), UTF8String.fromString("orders"), 2}));
        writer.write(new GenericInternalRow(new Object[] {UTF8String.fromString("orders.v2"), 1,
            "j".getBytes(StandardCharsets.UTF_8), null, null, null, 2, 9L, null, null, UTF8String.fromString("orders"),
            2}));
        assertEquals(new SliceWriter.Done("orders-2", 3, 3, 0), writer.commit());
        writer.close();
        List<ProducerRecord<byte[], byte[]>> sent = broker.all.get(0).history();
        assertEquals(List.of("trace", "kafkaops.lineage", "trace", "kafkaops.lineage"),
                names(sent.get(0)));
        assertArrayEquals("older/1/5".getBytes(StandardCharsets.UTF_8), sent.get(0).headers().toArray()[1].value());
        assertEquals(null, sent.get(0).headers().toArray()[2].value());
        assertArrayEquals("orders/2/7".getBytes(StandardCharsets.US_ASCII),
                sent.get(0).headers().lastHeader("kafkaops.lineage").value());
        assertEquals(1_700_000_000_123L, sent.get(0).timestamp());
        assertEquals(List.of("trace", "kafkaops.lineage", "trace", "kafkaops.lineage", "kafkaops.dead_letter_code",
                "kafkaops.dead_letter_reason"), names(sent.get(1)));
        assertEquals(1_600_000_000_000L, sent.get(1).timestamp());
        assertEquals(List.of("kafkaops.lineage"), names(sent.get(2)));  // no source headers, no timestamp given
        assertEquals(null, sent.get(2).timestamp());
    }

    private static List<String> names(ProducerRecord<byte[], byte[]> record) {
        List<String> out = new ArrayList<>();
        for (org.apache.kafka.common.header.Header h : record.headers()) {
            out.add(h.key());
        }
        return out;
    }
}
