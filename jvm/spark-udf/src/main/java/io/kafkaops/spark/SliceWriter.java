package io.kafkaops.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task attempt of {@link TransactionalKafkaSink}: the rows of one slice, in the slice's order.
 * The producer is made at the first row, which names the slice: fence, read the marker, skip the
 * rows it counts, write the rest in chunked transactions, each committing the slice's new row count
 * as the marker. No flush per row: the producer batches, a commit waits for the chunk's sends.
 *
 * <p>Opening the slice (a producer, {@code initTransactions}, the marker read, the target's metadata:
 * a few round trips to the coordinators) runs on a thread of its own while the task goes on reading
 * its rows: they wait in memory, copied, up to {@link #MAX_WAITING_BYTES}, and are sent (or skipped,
 * as the marker says) once the slice is open. Nothing is sent before the fence and the marker read.
 */
final class SliceWriter implements DataWriter<InternalRow> {
    private static final Logger LOG = LoggerFactory.getLogger(SliceWriter.class);
    /** Rows a task keeps while its slice opens, at most (estimated record sizes); then it waits for the open. */
    static final long MAX_WAITING_BYTES = 16L << 20;
    /** Opens each slice on a daemon thread of its own. */
    private static final Executor OWN_THREAD = command -> {
        Thread thread = new Thread(command, "kafkaops-slice-open");
        thread.setDaemon(true);
        thread.start();
    };

    /** What an attempt did, for the driver's summary. */
    record Done(String slice, long rows, long written, long skipped) implements WriterCommitMessage {
    }

    private final SliceConfig config;
    private final Columns columns;
    private final Clients clients;
    private final Executor opener;
    private final Callback failures = (metadata, err) -> {
        if (err != null) {
            noteFailure(err);
        }
    };

    private UTF8String sliceTopic;
    private int slicePartition;
    private String slice;
    private TopicPartition marker;
    private Producer<byte[], byte[]> producer;
    private volatile Exception sendFailure;
    private long committed;      // rows of the slice the marker held when this attempt began
    private long position;       // rows of the slice seen so far (some may still wait for the open)
    private long handled;        // rows of the slice sent or skipped so far: what a commit marker counts
    private long written;        // rows this attempt sent
    private long inChunk;        // rows of the open transaction
    private long chunkStarted;
    private boolean inTransaction;
    private boolean crashed;
    private UTF8String lastTopic;
    private String lastTopicName;
    private final byte[] lineagePrefix;  // "<source topic>/" of lineage headers built here
    private CompletableFuture<Opened> opening;  // until the slice is open: its producer and marker, coming
    private final ArrayDeque<ProducerRecord<byte[], byte[]>> waiting = new ArrayDeque<>();  // rows taken meanwhile
    private long waitingBytes;

    /** An open slice: its producer, its transactions initialised (older attempts fenced), and its marker's rows. */
    private record Opened(Producer<byte[], byte[]> producer, long committed) {
    }

    /** The Kafka clients of a writer: Kafka's own ({@link #kafka}), or test doubles. */
    interface Clients {
        /** A producer with {@code transactionalId}, its transactions not yet initialised. */
        Producer<byte[], byte[]> producer(String transactionalId);

        /** Rows of the slice that {@code marker} counts in the marker group (require-stable), 0 when none. */
        long committed(TopicPartition marker);

        static Clients kafka(SliceConfig config) {
            return new Clients() {
                @Override
                public Producer<byte[], byte[]> producer(String transactionalId) {
                    return new KafkaProducer<>(config.producer(transactionalId));
                }

                @Override
                public long committed(TopicPartition marker) {
                    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config.markerConsumer())) {
                        // read_committed: committed offsets are read require-stable, none pending in a transaction
                        OffsetAndMetadata done = consumer.committed(Set.of(marker), TransactionalKafkaSink.CALL_TIMEOUT)
                                .get(marker);
                        return done == null ? 0L : done.offset();
                    }
                }
            };
        }
    }

    SliceWriter(SliceConfig config, Columns columns) {
        this(config, columns, Clients.kafka(config), OWN_THREAD);
    }

    /** With {@code clients}, opening the slice in the calling thread (before the first row is taken). */
    SliceWriter(SliceConfig config, Columns columns, Clients clients) {
        this(config, columns, clients, Runnable::run);
    }

    /** With {@code clients}, opening the slice on {@code opener}. */
    SliceWriter(SliceConfig config, Columns columns, Clients clients, Executor opener) {
        this.config = config;
        this.columns = columns;
        this.clients = clients;
        this.opener = opener;
        if (columns.lineagePartition >= 0 && config.headers == null) {
            throw new IllegalArgumentException("TransactionalKafkaSink: the frame has lineage columns but the options "
                    + "name no " + SliceConfig.LINEAGE_TOPIC);
        }
        this.lineagePrefix = config.headers == null ? null
                : (config.headers.lineageTopic() + "/").getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public void write(InternalRow row) {
        if (slice == null) {
            open(row.getUTF8String(columns.sliceTopic).copy(), row.getInt(columns.slicePartition),
                    row.isNullAt(columns.topic) ? null : row.getUTF8String(columns.topic).toString());
        } else if (row.getInt(columns.slicePartition) != slicePartition
                || !row.getUTF8String(columns.sliceTopic).equals(sliceTopic)) {
            throw new IllegalStateException("TransactionalKafkaSink: one Spark task holds rows of slice " + slice
                    + " and of slice " + row.getUTF8String(columns.sliceTopic) + "-" + row.getInt(columns.slicePartition)
                    + "; each slice must be the rows of one task (repartition by slice)");
        }
        position++;
        if (opening != null) {
            ProducerRecord<byte[], byte[]> record = record(row);  // a copy: Spark reuses the row
            waiting.add(record);
            waitingBytes += 64 + length(record.key()) + length(record.value()) + headerBytes(record);
            if (opening.isDone() || waitingBytes >= MAX_WAITING_BYTES) {
                opened();
            }
            return;
        }
        if (position <= committed) {
            handled = position;
            return;
        }
        send(record(row), position);
    }

    /**
     * Sends row {@code at} of the slice (the next after those handled) in the open transaction, opening
     * one if none is; a chunk that is full then commits, its marker counting the rows up to {@code at}.
     */
    private void send(ProducerRecord<byte[], byte[]> record, long at) {
        if (sendFailure != null) {
            throw failed();
        }
        if (!inTransaction) {
            producer.beginTransaction();
            inTransaction = true;
            inChunk = 0;
            chunkStarted = System.nanoTime();
        }
        producer.send(record, failures);
        handled = at;
        written++;
        inChunk++;
        if (written == config.failAfterRows && attempt() == 0) {
            producer.flush();  // the rows of the open transaction are in the log, as a dying executor leaves them
            crashed = true;
            throw new IllegalStateException("TransactionalKafkaSink: " + SliceConfig.FAIL_AFTER_ROWS + "="
                    + config.failAfterRows + " stops the first attempt of slice " + slice + " here, its transaction "
                    + "open (as a lost executor leaves it)");
        }
        if ((inChunk & 255) == 0 || inChunk >= config.chunkRows) {
            if (config.chunkFull(inChunk, System.nanoTime() - chunkStarted)) {
                commitChunk();
            }
        }
    }

    private void open(UTF8String topic, int partition, String target) {
        sliceTopic = topic;
        slicePartition = partition;
        slice = topic + "-" + partition;
        marker = new TopicPartition(topic.toString(), partition);
        String transactionalId = config.transactionalId(marker.topic(), partition);
        CompletableFuture<Opened> future = new CompletableFuture<>();
        opening = future;
        opener.execute(() -> {
            Producer<byte[], byte[]> made = null;
            try {
                made = clients.producer(transactionalId);
                made.initTransactions();  // fences every older attempt of this slice and aborts its open transaction
                long rows = clients.committed(marker);  // after the fence: no older attempt commits any more
                if (target != null) {
                    made.partitionsFor(target);  // the target's metadata now, not at the first send
                }
                future.complete(new Opened(made, rows));
            } catch (Throwable err) {
                if (made != null) {
                    made.close(Duration.ZERO);
                }
                future.completeExceptionally(err);
            }
        });
        if (opening.isDone()) {  // opened in this thread
            opened();
        }
    }

    /** Waits until the slice is open, then sends the rows that waited, skipping those its marker counts. */
    private void opened() {
        Opened open = awaitOpen();
        producer = open.producer();
        committed = open.committed();
        if (committed > 0) {
            LOG.info("slice {} (attempt {}): {} row(s) committed before; writing from row {}", slice, attempt(),
                    committed, committed + 1);
        }
        long at = position - waiting.size();  // the position of the row before the first that waited
        waitingBytes = 0;
        for (ProducerRecord<byte[], byte[]> record; (record = waiting.poll()) != null; ) {
            if (++at > committed) {
                send(record, at);
            } else {
                handled = at;
            }
        }
    }

    private Opened awaitOpen() {
        CompletableFuture<Opened> future = opening;
        opening = null;
        try {
            return future.get();
        } catch (ExecutionException err) {
            waiting.clear();
            Throwable cause = err.getCause();
            if (cause instanceof RuntimeException runtime) {
                throw runtime;  // KafkaException (fenced, unauthorized, ...) as the producer threw it
            }
            throw new IllegalStateException("TransactionalKafkaSink: opening slice " + slice + " failed: " + cause,
                    cause);
        } catch (InterruptedException err) {  // the task was killed while its slice opened
            Thread.currentThread().interrupt();
            waiting.clear();
            future.thenAccept(open -> open.producer().close(Duration.ZERO));
            throw new IllegalStateException("TransactionalKafkaSink: interrupted while slice " + slice + " opened",
                    err);
        }
    }

    private static int length(byte[] bytes) {
        return bytes == null ? 0 : bytes.length;
    }

    private static int headerBytes(ProducerRecord<byte[], byte[]> record) {
        int bytes = 0;
        for (Header header : record.headers()) {
            bytes += 16 + header.key().length() + length(header.value());
        }
        return bytes;
    }

    private void commitChunk() {
        if (sendFailure != null) {
            throw failed();
        }
        String meta = "kafkaops backfill slice " + slice + ": " + handled + " row(s)";
        producer.sendOffsetsToTransaction(Map.of(marker, new OffsetAndMetadata(handled, meta)),
                new ConsumerGroupMetadata(config.group));
        producer.commitTransaction();  // waits for the chunk's sends; throws if one failed
        inTransaction = false;
        inChunk = 0;
    }

    @Override
    public WriterCommitMessage commit() {
        if (slice == null) {
            return new Done(null, 0, 0, 0);
        }
        if (opening != null) {
            opened();
        }
        if (committed > position) {
            throw new IllegalStateException("TransactionalKafkaSink: the marker of slice " + slice + " in group "
                    + config.group + " counts " + committed + " row(s) but the slice has " + position + ": the marker "
                    + "is another plan's; delete the group and the target topics, then run again");
        }
        if (inTransaction) {
            if (handled != position) {  // every row waiting was sent by opened(): nothing may be left behind
                throw new IllegalStateException("TransactionalKafkaSink: slice " + slice + " handled " + handled
                        + " of its " + position + " row(s) at its commit");
            }
            commitChunk();
        }
        return new Done(slice, position, written, Math.min(committed, position));
    }

    @Override
    public void abort() {
        if (opening != null) {  // let the open finish, so its producer is closed below (its fence stands)
            try {
                producer = awaitOpen().producer();
            } catch (RuntimeException err) {
                LOG.warn("slice {}: its open failed too ({})", slice, err.toString());
            }
            waiting.clear();
        }
        if (producer == null) {
            return;
        }
        if (crashed) {  // as a killed executor: the transaction stays open until the next attempt fences it
            producer.close(Duration.ZERO);
            producer = null;
            return;
        }
        if (inTransaction) {
            try {
                producer.abortTransaction();
            } catch (KafkaException err) {  // fenced by a newer attempt, which aborted it already
                LOG.warn("slice {}: aborting its transaction failed ({}); a newer attempt fenced it",
                        slice, err.toString());
            }
            inTransaction = false;
        }
    }

    @Override
    public void close() {
        if (producer != null) {
            producer.close(TransactionalKafkaSink.CALL_TIMEOUT);
            producer = null;
        }
    }

    private void noteFailure(Exception err) {
        if (sendFailure == null) {
            sendFailure = err;
        }
    }

    private IllegalStateException failed() {
        return new IllegalStateException("TransactionalKafkaSink: sending a row of slice " + slice + " failed ("
                + sendFailure + "); its open transaction is aborted, the committed rows stand", sendFailure);
    }

    private static int attempt() {
        TaskContext context = TaskContext.get();
        return context == null ? 0 : context.attemptNumber();
    }

    private ProducerRecord<byte[], byte[]> record(InternalRow row) {
        if (row.isNullAt(columns.topic)) {
            throw new IllegalStateException("TransactionalKafkaSink: a row of slice " + slice + " has no topic");
        }
        UTF8String topic = row.getUTF8String(columns.topic);
        if (!topic.equals(lastTopic)) {
            lastTopic = topic.copy();
            lastTopicName = topic.toString();
        }
        Integer partition = columns.partition < 0 || row.isNullAt(columns.partition) ? null
                : row.getInt(columns.partition);
        byte[] key = row.isNullAt(columns.key) ? null : row.getBinary(columns.key);
        byte[] value = row.isNullAt(columns.value) ? null : row.getBinary(columns.value);
        Long timestamp = columns.timestamp < 0 || row.isNullAt(columns.timestamp) ? null
                : row.getLong(columns.timestamp);
        List<Header> headers = null;
        if (columns.headers >= 0 && !row.isNullAt(columns.headers)) {  // the given headers (a source's), in order
            ArrayData array = row.getArray(columns.headers);
            headers = new ArrayList<>(array.numElements() + 3);
            for (int i = 0; i < array.numElements(); i++) {
                InternalRow h = array.getStruct(i, 2);
                headers.add(new RecordHeader(h.getUTF8String(0).toString(), h.isNullAt(1) ? null : h.getBinary(1)));
            }
        }
        if (columns.lineagePartition >= 0) {  // built here, after them: the lineage, a dead letter's code and detail
            if (headers == null) {
                headers = new ArrayList<>(3);
            }
            headers.add(new RecordHeader(config.headers.lineage(),
                    lineage(row.getInt(columns.lineagePartition), row.getLong(columns.lineageOffset))));
            if (columns.code >= 0 && !row.isNullAt(columns.code)) {
                headers.add(new RecordHeader(config.headers.code(), row.getUTF8String(columns.code).getBytes()));
                headers.add(new RecordHeader(config.headers.reason(), columns.detail < 0 || row.isNullAt(columns.detail)
                        ? null : row.getUTF8String(columns.detail).getBytes()));
            }
        }
        return new ProducerRecord<>(lastTopicName, partition, timestamp, key, value,
                headers == null ? null : new RecordHeaders(headers));
    }

    /** {@code <source topic>/<partition>/<offset>} in ASCII (topic names are ASCII), digits written in place. */
    private byte[] lineage(int partition, long offset) {
        int p = digits(partition);
        int o = digits(offset);
        byte[] out = Arrays.copyOf(lineagePrefix, lineagePrefix.length + p + 1 + o);
        putDigits(out, lineagePrefix.length + p, partition);
        out[lineagePrefix.length + p] = '/';
        putDigits(out, out.length, offset);
        return out;
    }

    /** Decimal digits of {@code n} (0 or more; a partition and an offset are never negative). */
    static int digits(long n) {
        int d = 1;
        for (long v = n; v >= 10; v /= 10) {
            d++;
        }
        return d;
    }

    /** Writes {@code n} in decimal ending just before {@code end}. */
    private static void putDigits(byte[] out, int end, long n) {
        long v = n;
        int at = end;
        do {
            out[--at] = (byte) ('0' + v % 10);
            v /= 10;
        } while (v > 0);
    }

    /**
     * Where the columns are in the written frame; checked on the driver before any task starts. The
     * record headers are those of {@code headers} (an array of key/value structs: a copy's source headers),
     * in order, then the ones built here from {@code lineage_partition}, {@code lineage_offset} and, for
     * dead letters, {@code code} and {@code detail} (the options name the topic and the header names:
     * {@link SliceConfig.Headers}): the copy's own headers come last. {@code timestamp} (epoch
     * milliseconds, optional) is each record's timestamp, a copy's source timestamp; null or absent, the
     * producer's clock (a topic of {@code message.timestamp.type=LogAppendTime} takes the broker's anyway).
     */
    record Columns(int topic, int partition, int key, int value, int headers, int sliceTopic, int slicePartition,
                   int lineagePartition, int lineageOffset, int code, int detail, int timestamp)
            implements Serializable {
        /** Columns without lineage ones or a timestamp: headers come from {@code headers}, if any. */
        Columns(int topic, int partition, int key, int value, int headers, int sliceTopic, int slicePartition) {
            this(topic, partition, key, value, headers, sliceTopic, slicePartition, -1, -1, -1, -1, -1);
        }

        /** Columns without a timestamp. */
        Columns(int topic, int partition, int key, int value, int headers, int sliceTopic, int slicePartition,
                int lineagePartition, int lineageOffset, int code, int detail) {
            this(topic, partition, key, value, headers, sliceTopic, slicePartition, lineagePartition, lineageOffset,
                    code, detail, -1);
        }

        static Columns of(StructType schema) {
            List<String> problems = new ArrayList<>();
            int topic = find(schema, "topic", DataTypes.StringType, true, problems);
            int partition = find(schema, "partition", DataTypes.IntegerType, false, problems);
            int key = find(schema, "key", DataTypes.BinaryType, true, problems);
            int value = find(schema, "value", DataTypes.BinaryType, true, problems);
            int headers = find(schema, "headers", DataTypes.createArrayType(DataTypes.createStructType(new StructField[] {
                DataTypes.createStructField("key", DataTypes.StringType, true),
                DataTypes.createStructField("value", DataTypes.BinaryType, true)})), false, problems);
            int sliceTopic = find(schema, "slice_topic", DataTypes.StringType, true, problems);
            int slicePartition = find(schema, "slice_partition", DataTypes.IntegerType, true, problems);
            int lineagePartition = find(schema, "lineage_partition", DataTypes.IntegerType, false, problems);
            int lineageOffset = find(schema, "lineage_offset", DataTypes.LongType, lineagePartition >= 0, problems);
            int code = find(schema, "code", DataTypes.StringType, false, problems);
            int detail = find(schema, "detail", DataTypes.StringType, false, problems);
            int timestamp = find(schema, "timestamp", DataTypes.LongType, false, problems);
            if (!problems.isEmpty()) {
                throw new IllegalArgumentException("TransactionalKafkaSink: the frame " + schema.simpleString()
                        + " does not fit: " + String.join("; ", problems));
            }
            return new Columns(topic, partition, key, value, headers, sliceTopic, slicePartition, lineagePartition,
                    lineageOffset, code, detail, timestamp);
        }

        private static int find(StructType schema, String name, DataType type, boolean required,
                                List<String> problems) {
            for (int i = 0; i < schema.fields().length; i++) {
                StructField field = schema.fields()[i];
                if (field.name().equals(name)) {
                    if (!sameType(field.dataType(), type)) {
                        problems.add("column " + name + " is " + field.dataType().simpleString() + ", not "
                                + type.simpleString());
                    }
                    return i;
                }
            }
            if (required) {
                problems.add("column " + name + " (" + type.simpleString() + ") is missing");
            }
            return -1;
        }

        private static boolean sameType(DataType got, DataType want) {
            if (got instanceof ArrayType a && want instanceof ArrayType b) {
                return a.elementType() instanceof StructType s && b.elementType() instanceof StructType t
                        && s.fields().length == t.fields().length
                        && s.fields()[0].dataType().equals(t.fields()[0].dataType())
                        && s.fields()[1].dataType().equals(t.fields()[1].dataType());
            }
            return got.equals(want);
        }
    }
}
