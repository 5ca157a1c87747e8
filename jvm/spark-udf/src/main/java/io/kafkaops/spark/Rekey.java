package io.kafkaops.spark;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;

import org.apache.kafka.common.utils.Utils;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

/**
 * The rekey step of the backfill on the JVM, for {@code Dataset.mapPartitions}: source rows
 * {@code (partition INT, offset BIGINT, ts BIGINT, key BINARY, value BINARY)}, read by one Spark task
 * per Kafka partition in offset order, become rows of {@link #OUTPUT}: the new key (the record key, or
 * the value's field or JSON path through {@link JsonKey}, result-identical to the Python
 * {@code kafkaops.backfill.extract_key_or_reason}), the output topic and partition
 * ({@code Utils.toPositive(Utils.murmur2(key)) % partitions} of Kafka's Java client; dead letters go to
 * partition 0 of the dead-letter topic with the reason) and the order timestamp of
 * {@code kafkaops.backfill.OrderClock}: the running maximum of the timestamps of the key in its source
 * partition (a key-less record keeps its own timestamp). Source partition, offset and value pass
 * through.
 *
 * <p>In a {@code direct} copy (no shuffle: each key's records must come from one source partition) the
 * order timestamp is 0 (offset order is the order) and, when a {@code spread} accumulator is given,
 * each task adds the 64-bit hashes of the new keys it saw (a {@link KeySpread.Seen}), from which
 * {@link KeySpread#spanning} tells whether that precondition held.
 */
public final class Rekey implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;

    /** What the step returns per source record. */
    public static final StructType OUTPUT = new StructType()
            .add("out_topic", DataTypes.StringType, false)
            .add("out_partition", DataTypes.IntegerType, false)
            .add("order_ts", DataTypes.LongType, false)
            .add("src_partition", DataTypes.IntegerType, false)
            .add("src_offset", DataTypes.LongType, false)
            .add("key", DataTypes.BinaryType, true)
            .add("value", DataTypes.BinaryType, true)
            .add("reason", DataTypes.StringType, true);

    /** Python's {@code kafkaops.backfill.NO_KEY}. */
    public static final String NO_KEY = "the record has no key";

    /** Distinct keys one task tracks for {@link KeySpread} before it gives up (memory bound). */
    public static final int SPREAD_CAP = 1 << 21;

    private final JsonKey rule;
    private final String targetTopic;
    private final String deadLetterTopic;
    private final int partitions;
    private final boolean direct;
    private final CollectionAccumulator<Object> spread;

    /**
     * @param steps  the key rule's steps (Python {@code KeyRule.steps}); empty for {@code record_key}
     * @param spread null, or (direct copies) the accumulator that collects each task's key hashes
     */
    public Rekey(List<Object> steps, String ruleText, String targetTopic, String deadLetterTopic, int partitions,
                 boolean direct, CollectionAccumulator<Object> spread) {
        if (partitions < 1) {
            throw new IllegalArgumentException("rekey: target partition count " + partitions + " is below 1");
        }
        this.rule = steps.isEmpty() ? null : JsonKey.of(steps, ruleText);
        this.targetTopic = targetTopic;
        this.deadLetterTopic = deadLetterTopic;
        this.partitions = partitions;
        this.direct = direct;
        this.spread = spread;
    }

    /** 64 bits of a key for {@link KeySpread}: murmur2 and {@code Arrays.hashCode}, two independent 32-bit hashes. */
    static long keyHash(byte[] key) {
        return ((long) Utils.murmur2(key) << 32) | (java.util.Arrays.hashCode(key) & 0xffffffffL);
    }

    @Override
    public Iterator<Row> call(Iterator<Row> rows) {
        return new Step(rows);
    }

    private final class Step implements Iterator<Row> {
        private final Iterator<Row> rows;
        private final Map<Integer, Long> lastOffset = new HashMap<>();
        private final Map<Integer, Map<ByteBuffer, Long>> latest = new HashMap<>();
        private final Map<Integer, Set<Long>> seen = new HashMap<>();
        private int tracked;
        private boolean overflow;
        private boolean reported;

        Step(Iterator<Row> rows) {
            this.rows = rows;
        }

        @Override
        public boolean hasNext() {
            boolean more = rows.hasNext();
            if (!more && !reported) {
                reported = true;
                report();
            }
            return more;
        }

        private void report() {
            if (spread == null) {
                return;
            }
            if (overflow) {
                spread.add(KeySpread.Seen.overflowed());
                return;
            }
            for (Map.Entry<Integer, Set<Long>> e : seen.entrySet()) {
                long[] hashes = new long[e.getValue().size()];
                int i = 0;
                for (long h : e.getValue()) {
                    hashes[i++] = h;
                }
                spread.add(new KeySpread.Seen(e.getKey(), hashes));
            }
        }

        @Override
        public Row next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            Row row = rows.next();
            int partition = row.getInt(0);
            long offset = row.getLong(1);
            long ts = row.getLong(2);
            byte[] recordKey = (byte[]) row.get(3);
            byte[] value = (byte[]) row.get(4);
            Long last = lastOffset.put(partition, offset);
            if (last != null && offset <= last) {
                throw new IllegalStateException("source partition " + partition + ": offset " + offset + " came after "
                        + last + "; records must arrive in offset order per partition (do not set minPartitions or "
                        + "maxRecordsPerPartition on the Kafka source)");
            }
            byte[] key;
            String reason;
            if (rule == null) {
                key = recordKey;
                reason = recordKey == null ? NO_KEY : null;
            } else {
                JsonKey.Result found = rule.extract(value);
                key = found.key;
                reason = found.reason;
            }
            if (key == null) {
                return RowFactory.create(deadLetterTopic, 0, direct ? 0L : ts, partition, offset, null, value, reason);
            }
            if (spread != null && !overflow) {
                if (seen.computeIfAbsent(partition, p -> new HashSet<>()).add(keyHash(key)) && ++tracked > SPREAD_CAP) {
                    overflow = true;
                    seen.clear();
                }
            }
            long order = 0L;
            if (!direct) {
                Map<ByteBuffer, Long> slot = latest.computeIfAbsent(partition, p -> new HashMap<>());
                order = slot.merge(ByteBuffer.wrap(key), ts, Math::max);
            }
            int target = Utils.toPositive(Utils.murmur2(key)) % partitions;
            return RowFactory.create(targetTopic, target, order, partition, offset, key, value, null);
        }
    }
}
