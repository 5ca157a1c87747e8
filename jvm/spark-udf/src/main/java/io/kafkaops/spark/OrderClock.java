package io.kafkaops.spark;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.api.java.UDF4;

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
