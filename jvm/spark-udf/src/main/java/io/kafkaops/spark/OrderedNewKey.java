package io.kafkaops.spark;

import java.util.List;

import org.apache.kafka.common.utils.Utils;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF4;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * {@code kafkaops_new_key_ordered(input BINARY, source_partition INT, offset BIGINT, ts BIGINT) ->
 * STRUCT<key, code, detail, partition, order_ts>}: {@link NewKey}'s result ({@code input} as there: the
 * value, or the key for {@code window_key} and {@code session_key}) and the merged copy's order timestamp
 * of the new key ({@link OrderClock}) in one call, so the merged copy by such a rule reads each record
 * once, copies it once and keeps one clock. Stateful per task like {@link OrderClock}:
 * build it with {@link #function}, which marks it non-deterministic (evaluated once per row, in row order).
 */
public final class OrderedNewKey implements UDF4<byte[], Integer, Long, Long, Row> {
    private static final long serialVersionUID = 1L;

    /** The function's result type: {@link NewKey#RESULT} and {@code order_ts}. */
    public static final StructType RESULT = NewKey.RESULT.add("order_ts", DataTypes.LongType, false);

    private final KeyRule rule;
    private final int partitions;
    private final PerTask<OrderClock.State> tasks = new PerTask<>();

    OrderedNewKey(List<Object> steps, String ruleText, int partitions) {
        NewKey.requirePartitions("kafkaops_new_key_ordered", partitions);
        this.rule = new KeyRule(steps, ruleText);
        this.partitions = partitions;
    }

    /** The function for the rule of {@code steps} (Python's {@code KeyRule.steps}) into {@code partitions}. */
    public static UserDefinedFunction function(List<Object> steps, String ruleText, int partitions) {
        return functions.udf(new OrderedNewKey(steps, ruleText, partitions), RESULT).asNondeterministic();
    }

    @Override
    public Row call(byte[] input, Integer sourcePartition, Long offset, Long ts) {
        KeyRule.Result found = rule.extract(input);
        OrderClock.State clock = tasks.get(OrderClock.State::new, done -> { });
        if (found.key == null) {
            return RowFactory.create(null, found.code, found.detail, null, clock.next(null, sourcePartition, offset, ts));
        }
        int hash = Utils.murmur2(found.key);  // once: the partition and the clock's map both use it
        return RowFactory.create(found.key, null, null, NewKey.partitionOf(hash, partitions),
                clock.next(found.key, hash, sourcePartition, offset, ts));
    }
}
