package io.kafkaops.spark;

import java.util.List;

import org.apache.kafka.common.utils.Utils;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

/**
 * {@code kafkaops_new_key(value BINARY, source_partition INT) -> STRUCT<key, reason, partition>}: the
 * new key of a record under a value rule ({@link JsonKey}, result-identical to the Python
 * {@code kafkaops.backfill.extract_key_or_reason}) and its partition in the target
 * ({@code Utils.toPositive(Utils.murmur2(key)) % partitions}, Kafka's Java producer), or a null key and
 * the dead-letter reason. A Spark SQL function, so the direct copy by a value rule stays one
 * projection over the Kafka source, as fast as a plain copy.
 *
 * <p>With a {@code spread} accumulator it also collects, per Spark task, the 64-bit hashes of the keys
 * it saw by source partition, and adds them as a {@link KeySpread.Seen} when the task completes; on the
 * driver {@link KeySpread#spanning} then tells whether any key came from two source partitions.
 */
public final class NewKey implements UDF2<byte[], Integer, Row> {
    private static final long serialVersionUID = 1L;

    /** The function's result type. */
    public static final StructType RESULT = new StructType()
            .add("key", DataTypes.BinaryType, true)
            .add("reason", DataTypes.StringType, true)
            .add("partition", DataTypes.IntegerType, true);

    private final JsonKey rule;
    private final int partitions;
    private final CollectionAccumulator<Object> spread;
    private final PerTask<KeySpread.Collector> tasks = new PerTask<>();

    public NewKey(List<Object> steps, String ruleText, int partitions, CollectionAccumulator<Object> spread) {
        if (steps.isEmpty()) {
            throw new IllegalArgumentException("kafkaops_new_key: rule " + ruleText + " does not read the value");
        }
        if (partitions < 1) {
            throw new IllegalArgumentException("kafkaops_new_key: target partition count " + partitions + " is below 1");
        }
        this.rule = JsonKey.of(steps, ruleText);
        this.partitions = partitions;
        this.spread = spread;
    }

    @Override
    public Row call(byte[] value, Integer sourcePartition) {
        JsonKey.Result found = rule.extract(value);
        if (found.key == null) {
            return RowFactory.create(null, found.reason, null);
        }
        if (spread != null) {
            track(found.key, sourcePartition == null ? -1 : sourcePartition);
        }
        return RowFactory.create(found.key, null, Utils.toPositive(Utils.murmur2(found.key)) % partitions);
    }

    private void track(byte[] key, int sourcePartition) {
        tasks.get(KeySpread.Collector::new, done -> done.report(spread)).add(sourcePartition, key);
    }
}
