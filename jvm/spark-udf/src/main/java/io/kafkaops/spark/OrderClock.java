package io.kafkaops.spark;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;

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

    private static final class State {
        final Map<Integer, Long> lastOffset = new HashMap<>();
        final Map<Integer, Map<ByteBuffer, Long>> latest = new HashMap<>();
    }

    @Override
    public Long call(byte[] key, Integer partition, Long offset, Long ts) {
        State state = tasks.get(State::new, done -> { });
        Long last = state.lastOffset.put(partition, offset);
        if (last != null && offset <= last) {
            throw new IllegalStateException("source partition " + partition + ": offset " + offset + " came after "
                    + last + "; records must arrive in offset order per partition (do not set minPartitions or "
                    + "maxRecordsPerPartition on the Kafka source)");
        }
        if (key == null) {
            return ts;
        }
        return state.latest.computeIfAbsent(partition, p -> new HashMap<>()).merge(ByteBuffer.wrap(key), ts, Math::max);
    }
}
