package io.kafkaops.spark;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.common.utils.Utils;
import org.apache.spark.sql.api.java.UDF4;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * {@code kafkaops_order_ts(new_key BINARY, source_partition INT, offset BIGINT, ts BIGINT) -> BIGINT}:
 * the order timestamp of the merged copy, as the Python {@code kafkaops.backfill.OrderClock} computes
 * it: the largest timestamp of the key in its source partition up to and including this record (a
 * running maximum, so records of one partition never swap); a key-less record keeps its own
 * timestamp. Records must come in offset order per source partition, as one Spark task reads one
 * Kafka partition; an offset that goes backwards is refused.
 *
 * <p>It keeps state per Spark task, so it must be registered as non-deterministic (evaluated once
 * per row, in row order, never reordered or repeated by the optimizer).
 */
public final class OrderClock implements UDF4<byte[], Integer, Long, Long, Long> {
    private static final long serialVersionUID = 1L;

    private final PerTask<State> tasks = new PerTask<>();

    /**
     * A fresh clock as a non-deterministic {@code UserDefinedFunction}. Built here, where javac picks
     * the typed Java overload {@code udf(UDF4, DataType)}: through py4j, {@code functions.udf} also
     * matches the untyped Scala {@code udf(Object, DataType)}, which Spark refuses, and which one py4j
     * picks changes from one JVM to the next.
     */
    public static UserDefinedFunction function() {
        return functions.udf(new OrderClock(), DataTypes.LongType).asNondeterministic();
    }

    /** One task's clock: per source partition the last offset and each key's largest timestamp so far. */
    static final class State {
        private final Map<Integer, Partition> partitions = new HashMap<>();
        private int current;
        private Partition at;  // the partition of the last record: a task reads one, so nearly always this

        /** The order timestamp of the record at {@code offset} of {@code partition} with {@code key} and {@code ts}. */
        long next(byte[] key, int partition, long offset, long ts) {
            return next(key, key == null ? 0 : Utils.murmur2(key), partition, offset, ts);
        }

        /** {@link #next(byte[], int, long, long)} with the key's {@code Utils.murmur2} already computed. */
        long next(byte[] key, int murmur2, int partition, long offset, long ts) {
            if (at == null || partition != current) {
                at = partitions.computeIfAbsent(partition, p -> new Partition());
                current = partition;
            }
            if (at.seen && offset <= at.lastOffset) {
                throw new IllegalStateException("source partition " + partition + ": offset " + offset + " came after "
                        + at.lastOffset + "; records must arrive in offset order per partition (do not set "
                        + "minPartitions or maxRecordsPerPartition on the Kafka source)");
            }
            at.seen = true;
            at.lastOffset = offset;
            if (key == null) {
                return ts;
            }
            Key k = new Key(key, murmur2);
            long[] latest = at.latest.get(k);
            if (latest == null) {
                at.latest.put(k, new long[] {ts});
                return ts;
            }
            if (ts > latest[0]) {
                latest[0] = ts;
            }
            return latest[0];
        }
    }

    private static final class Partition {
        boolean seen;
        long lastOffset;
        final Map<Key, long[]> latest = new HashMap<>();  // mutable maxima: no boxing per record
    }

    /** A key in the clock's map, hashed by murmur2 (short numeric keys collide under {@code ByteBuffer}'s hash). */
    private static final class Key {
        final byte[] bytes;
        final int hash;

        Key(byte[] bytes, int murmur2) {
            this.bytes = bytes;
            this.hash = murmur2;
        }

        @Override
        public int hashCode() {
            return hash;
        }

        @Override
        public boolean equals(Object other) {
            return other instanceof Key k && k.hash == hash && Arrays.equals(k.bytes, bytes);
        }
    }

    @Override
    public Long call(byte[] key, Integer partition, Long offset, Long ts) {
        return tasks.get(State::new, done -> { }).next(key, partition, offset, ts);
    }
}
