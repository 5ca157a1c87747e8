package io.kafkaops.spark;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The options of {@link TransactionalKafkaSink}, read once on the driver and shipped to every task:
 * the Kafka client settings ({@code kafka.}-prefixed, as Spark's own Kafka sink takes them, security
 * included), the transactional id prefix and marker group of the backfill, and how large one
 * transaction (a chunk of a slice) may grow. Everything a writer needs comes from here, nothing from
 * the driver's disk, so executors in JVMs of their own write alike.
 *
 * <p>{@link #toString()} names no client setting: the Kafka settings may hold secrets.
 */
final class SliceConfig implements Serializable {
    private static final long serialVersionUID = 1L;

    static final String KAFKA_PREFIX = "kafka.";
    /** Required: the transactional id of a slice is {@code <prefix>/<slice topic>-<slice partition>}. */
    static final String TRANSACTIONAL_ID_PREFIX = "kafkaops.transactional.id.prefix";
    /** Required: the consumer group whose committed offsets are the slices' commit markers. */
    static final String MARKER_GROUP = "kafkaops.marker.group";
    /** Rows per transaction (default {@value #DEFAULT_CHUNK_ROWS}). */
    static final String CHUNK_ROWS = "kafkaops.chunk.rows";
    /** Milliseconds a transaction may stay open before it commits (default {@value #DEFAULT_CHUNK_MS}). */
    static final String CHUNK_MS = "kafkaops.chunk.ms";
    /**
     * With lineage columns in the frame: the source topic each record's lineage header names
     * ({@code <topic>/<lineage_partition>/<lineage_offset>}), and the names of the lineage, reason-code
     * and reason-detail headers (appended after the record's own headers, if the frame gives some).
     */
    static final String LINEAGE_TOPIC = "kafkaops.lineage.topic";
    static final String LINEAGE_HEADER = "kafkaops.header.lineage";
    static final String CODE_HEADER = "kafkaops.header.code";
    static final String REASON_HEADER = "kafkaops.header.reason";
    /** Tests only: the first attempt of each task dies after sending this many rows, its transaction open. */
    static final String FAIL_AFTER_ROWS = "kafkaops.fail_after_rows";

    static final long DEFAULT_CHUNK_ROWS = 500_000L;
    static final long DEFAULT_CHUNK_MS = 15_000L;
    /** The producer's transaction timeout unless the options set one: four chunks' time. */
    static final long DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000L;

    private final HashMap<String, String> kafka;
    final String prefix;
    final String group;
    final long chunkRows;
    final long chunkMs;
    final long failAfterRows;
    final Headers headers;

    /** The header names and lineage topic of frames with lineage columns; null when the options name none. */
    record Headers(String lineageTopic, String lineage, String code, String reason) implements Serializable {
    }

    private SliceConfig(HashMap<String, String> kafka, String prefix, String group, long chunkRows, long chunkMs,
                        long failAfterRows, Headers headers) {
        this.kafka = kafka;
        this.prefix = prefix;
        this.group = group;
        this.chunkRows = chunkRows;
        this.chunkMs = chunkMs;
        this.failAfterRows = failAfterRows;
        this.headers = headers;
    }

    /** Reads the sink's options (case as given); throws naming what is missing or malformed. */
    static SliceConfig of(Map<String, String> options) {
        HashMap<String, String> kafka = new HashMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            if (e.getKey().startsWith(KAFKA_PREFIX)) {
                kafka.put(e.getKey().substring(KAFKA_PREFIX.length()), e.getValue());
            }
        }
        if (!kafka.containsKey(CommonNames.BOOTSTRAP)) {
            throw new IllegalArgumentException("TransactionalKafkaSink: option kafka.bootstrap.servers is missing");
        }
        String prefix = required(options, TRANSACTIONAL_ID_PREFIX);
        String group = required(options, MARKER_GROUP);
        long chunkRows = number(options, CHUNK_ROWS, DEFAULT_CHUNK_ROWS);
        long chunkMs = number(options, CHUNK_MS, DEFAULT_CHUNK_MS);
        if (chunkRows < 1 || chunkMs < 1) {
            throw new IllegalArgumentException("TransactionalKafkaSink: " + CHUNK_ROWS + " (" + chunkRows + ") and "
                    + CHUNK_MS + " (" + chunkMs + ") must be at least 1");
        }
        Headers headers = null;
        if (options.containsKey(LINEAGE_TOPIC)) {
            headers = new Headers(required(options, LINEAGE_TOPIC), required(options, LINEAGE_HEADER),
                    required(options, CODE_HEADER), required(options, REASON_HEADER));
        }
        return new SliceConfig(kafka, prefix, group, chunkRows, chunkMs, number(options, FAIL_AFTER_ROWS, -1L),
                headers);
    }

    private static String required(Map<String, String> options, String name) {
        String value = options.get(name);
        if (value == null || value.isBlank()) {
            throw new IllegalArgumentException("TransactionalKafkaSink: option " + name + " is missing");
        }
        return value;
    }

    private static long number(Map<String, String> options, String name, long otherwise) {
        String value = options.get(name);
        if (value == null) {
            return otherwise;
        }
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException err) {
            throw new IllegalArgumentException("TransactionalKafkaSink: option " + name + " is '" + value
                    + "', not a whole number", err);
        }
    }

    /** The transactional id of the slice whose commit marker is {@code topic-partition} in the marker group. */
    String transactionalId(String topic, int partition) {
        return prefix + "/" + topic + "-" + partition;
    }

    /** True when a transaction of {@code rows} rows, open for {@code openNanos}, should commit now. */
    boolean chunkFull(long rows, long openNanos) {
        return rows >= chunkRows || openNanos >= chunkMs * 1_000_000L;
    }

    /** The transactional producer of one slice: idempotent, acks=all, whatever else the options tune. */
    Map<String, Object> producer(String transactionalId) {
        Map<String, Object> config = clientConfig(ProducerConfig.configNames());
        config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.putIfAbsent(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Long.toString(DEFAULT_TRANSACTION_TIMEOUT_MS));
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return config;
    }

    /** The consumer that reads a slice's marker: the marker group, read_committed (require-stable offsets). */
    Map<String, Object> markerConsumer() {
        Map<String, Object> config = clientConfig(ConsumerConfig.configNames());
        config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        return config;
    }

    Map<String, Object> admin() {
        return clientConfig(AdminClientConfig.configNames());
    }

    /**
     * The Kafka settings a client of {@code known} takes: its own, and any no Kafka client knows (a
     * plugin's, such as a login callback's); a setting of another kind of client only (the sink's
     * {@code acks} for the consumer, {@code isolation.level} for the producer) is left out rather than
     * logged as unknown.
     */
    Map<String, Object> clientConfig(Set<String> known) {
        Map<String, Object> config = new HashMap<>();
        for (Map.Entry<String, String> e : kafka.entrySet()) {
            if (known.contains(e.getKey()) || !CommonNames.ANY_CLIENT.contains(e.getKey())) {
                config.put(e.getKey(), e.getValue());
            }
        }
        return config;
    }

    @Override
    public String toString() {
        return "SliceConfig(prefix=" + prefix + ", group=" + group + ", chunk=" + chunkRows + " rows/" + chunkMs
                + " ms, kafka settings " + new TreeSet<>(kafka.keySet()).size() + ")";
    }

    private static final class CommonNames {
        static final String BOOTSTRAP = "bootstrap.servers";
        static final Set<String> ANY_CLIENT = new TreeSet<>();

        static {
            ANY_CLIENT.addAll(ProducerConfig.configNames());
            ANY_CLIENT.addAll(ConsumerConfig.configNames());
            ANY_CLIENT.addAll(AdminClientConfig.configNames());
        }
    }
}
