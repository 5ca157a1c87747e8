package io.kafkaops.spark;

import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An exactly-once Kafka sink for Spark batch writes ({@code df.write.format(<this class>).mode("append")}):
 * rows {@code topic, partition, key, value, headers} as Spark's Kafka sink takes them, an optional
 * {@code timestamp} (epoch milliseconds: a copy's source timestamp), the lineage columns from which it appends
 * the copy's own headers after {@code headers} ({@link SliceWriter.Columns}), plus
 * {@code slice_topic, slice_partition}, the slice the row belongs to. One Spark task writes one slice
 * (and a slice is written by one task), in an order that every attempt and every run repeats.
 *
 * <p>Each task attempt ({@link SliceWriter}) opens a producer with the slice's own
 * {@code transactional.id}: {@code initTransactions()} fences every older attempt of the slice, in
 * this job or a killed one, and aborts its open transaction. It then reads the slice's commit marker:
 * the offset of {@code slice_topic-slice_partition} committed by the marker group, written inside the
 * same transactions as the rows ({@code sendOffsetsToTransaction}), so it counts exactly the slice's
 * rows that read_committed consumers see. The attempt skips that many rows and writes the rest in
 * transactions of at most {@code kafkaops.chunk.rows} rows and {@code kafkaops.chunk.ms}, each
 * committing the new count with it. A lost executor, a retried or duplicated attempt or a re-run of
 * the whole job therefore never leaves a row twice or a gap for a read_committed consumer.
 *
 * <p>The static methods are the driver's: the markers of a group, fencing slices, forgetting markers.
 */
public final class TransactionalKafkaSink implements TableProvider {
    private static final Logger LOG = LoggerFactory.getLogger(TransactionalKafkaSink.class);
    private static final AtomicReference<long[]> LAST = new AtomicReference<>(new long[3]);

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return new StructType();  // a sink: it takes the written frame's schema (ACCEPT_ANY_SCHEMA)
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new SinkTable();
    }

    /**
     * What the last write committed in this JVM's driver: {@code [slices, rows written, rows skipped
     * because their slice's marker already held them]}.
     */
    public static long[] lastWrite() {
        return LAST.get().clone();
    }

    // -- the driver's calls (through py4j) ------------------------------------------------------------------

    /** The commit markers of the options' group: {@code "topic/partition" -> rows committed}, require-stable. */
    public static Map<String, Long> committed(Map<String, String> options) throws Exception {
        SliceConfig config = SliceConfig.of(options);
        try (Admin admin = Admin.create(config.admin())) {
            return markers(admin, config.group);
        }
    }

    /** What a run finds before it writes: whether the output topics hold no record, and the markers. */
    public static final class OutputState {
        private final boolean empty;
        private final Map<String, Long> markers;

        OutputState(boolean empty, Map<String, Long> markers) {
            this.empty = empty;
            this.markers = markers;
        }

        /** True when every partition of the output topics has its end offset at its start (no record). */
        public boolean isEmpty() {
            return empty;
        }

        /** {@link #committed}'s markers. */
        public Map<String, Long> markers() {
            return markers;
        }
    }

    /**
     * Whether {@code topics} hold no record (their start and end offsets; a topic created a moment ago
     * and not yet known to the broker answering is asked again for up to 10 s) and the group's markers:
     * one Admin client, a few round trips, before any Spark job.
     */
    public static OutputState outputState(Map<String, String> options, List<String> topics) throws Exception {
        SliceConfig config = SliceConfig.of(options);
        try (Admin admin = Admin.create(config.admin())) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (true) {
                try {
                    return new OutputState(holdsNoRecord(admin, topics), markers(admin, config.group));
                } catch (ExecutionException err) {
                    if (!(err.getCause() instanceof UnknownTopicOrPartitionException) || System.nanoTime() > deadline) {
                        throw err;
                    }
                    Thread.sleep(100);
                }
            }
        }
    }

    private static boolean holdsNoRecord(Admin admin, List<String> topics) throws Exception {
        Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (TopicDescription topic : admin.describeTopics(topics).allTopicNames().get(60, TimeUnit.SECONDS).values()) {
            for (TopicPartitionInfo p : topic.partitions()) {
                TopicPartition tp = new TopicPartition(topic.name(), p.partition());
                earliest.put(tp, OffsetSpec.earliest());
                latest.put(tp, OffsetSpec.latest());
            }
        }
        var starts = admin.listOffsets(earliest).all();
        var ends = admin.listOffsets(latest).all();
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> first = starts.get(60, TimeUnit.SECONDS);
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> end : ends.get(60, TimeUnit.SECONDS)
                .entrySet()) {
            if (end.getValue().offset() != first.get(end.getKey()).offset()) {
                return false;
            }
        }
        return true;
    }

    private static Map<String, Long> markers(Admin admin, String group) throws Exception {
        Map<String, Long> out = new HashMap<>();
        Map<TopicPartition, OffsetAndMetadata> offsets;
        try {
            offsets = admin.listConsumerGroupOffsets(group, new ListConsumerGroupOffsetsOptions().requireStable(true))
                    .partitionsToOffsetAndMetadata().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException err) {
            if (err.getCause() instanceof GroupIdNotFoundException) {
                return out;
            }
            throw err;
        }
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            if (e.getValue() != null) {
                out.put(e.getKey().topic() + "/" + e.getKey().partition(), e.getValue().offset());
            }
        }
        return out;
    }

    /**
     * Fences every attempt of the given slices that may still run or hold a transaction open (a killed
     * job's): a producer with each slice's transactional id calls {@code initTransactions()}, which
     * aborts the open transaction, so read_committed readers see past it at once.
     */
    public static void fence(Map<String, String> options, List<String> topics, List<Integer> partitions)
            throws Exception {
        SliceConfig config = SliceConfig.of(options);
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(8, topics.size())));
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int i = 0; i < topics.size(); i++) {
                String id = config.transactionalId(topics.get(i), partitions.get(i));
                done.add(pool.submit(() -> {
                    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config.producer(id))) {
                        producer.initTransactions();
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get(120, TimeUnit.SECONDS);
            }
        } catch (TimeoutException err) {
            throw new IllegalStateException("fencing the slices of " + config.prefix + " took over 120 s", err);
        } finally {
            pool.shutdownNow();
        }
    }

    /** Deletes the marker group (nothing to do when it does not exist): every slice starts from row 0. */
    public static void forget(Map<String, String> options) throws Exception {
        SliceConfig config = SliceConfig.of(options);
        try (Admin admin = Admin.create(config.admin())) {
            admin.deleteConsumerGroups(List.of(config.group)).all().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException err) {
            if (err.getCause() instanceof GroupNotEmptyException) {
                throw new IllegalStateException("consumer group " + config.group + " has members: a backfill "
                        + "writes no member; stop whatever joined it and run again", err.getCause());
            }
            if (!(err.getCause() instanceof GroupIdNotFoundException)) {
                throw err;
            }
        }
    }

    // -- the write -------------------------------------------------------------------------------------------

    private static final class SinkTable implements SupportsWrite {
        @Override
        public String name() {
            return "kafkaops-transactional-kafka";
        }

        @Override
        public StructType schema() {
            return new StructType();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            SliceConfig config = SliceConfig.of(info.options().asCaseSensitiveMap());
            SliceWriter.Columns columns = SliceWriter.Columns.of(info.schema());
            if (columns.lineagePartition() >= 0 && config.headers == null) {
                throw new IllegalArgumentException("TransactionalKafkaSink: the frame has lineage columns but the "
                        + "options name no " + SliceConfig.LINEAGE_TOPIC + " (and header names)");
            }
            return new WriteBuilder() {
                @Override
                public Write build() {
                    return new Write() {
                        @Override
                        public String description() {
                            return "kafkaops transactional Kafka sink (" + config.prefix + ")";
                        }

                        @Override
                        public BatchWrite toBatch() {
                            return new SliceBatch(config, columns);
                        }
                    };
                }
            };
        }
    }

    private record SliceBatch(SliceConfig config, SliceWriter.Columns columns) implements BatchWrite {
        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return new Factory(config, columns);
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            long slices = 0;
            long written = 0;
            long skipped = 0;
            for (WriterCommitMessage m : messages) {
                if (m instanceof SliceWriter.Done done && done.slice() != null) {
                    slices++;
                    written += done.written();
                    skipped += done.skipped();
                }
            }
            LAST.set(new long[] {slices, written, skipped});
            LOG.info("{}: {} slice(s) committed, {} row(s) written, {} skipped as committed before", config.prefix,
                    slices, written, skipped);
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            // Each slice's transactions committed or aborted on their own; the markers say how far each got.
            LOG.warn("{}: the write failed; every slice's committed rows stand and its marker counts them",
                    config.prefix);
        }
    }

    private record Factory(SliceConfig config, SliceWriter.Columns columns) implements DataWriterFactory {
        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            return new SliceWriter(config, columns);
        }
    }

    /** How long the driver's and writers' blocking Kafka calls may take. */
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(60);
}
