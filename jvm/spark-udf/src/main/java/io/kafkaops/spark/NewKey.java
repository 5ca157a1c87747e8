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
 * {@code kafkaops_new_key(input BINARY, source_partition INT) -> STRUCT<key, code, detail, partition>}:
 * the new key of a record under a rule that computes it ({@link KeyRule}, the contract of docs/key-rules.md)
 * and its partition in the target ({@code Utils.toPositive(Utils.murmur2(key)) % partitions}, Kafka's Java
 * producer), or a null key, the dead letter's reason code and a free-text detail. {@code input} is what the
 * rule reads ({@link KeyRule#readsKey}): the record value for a value rule, the record key for
 * {@code window_key} and {@code session_key}. A Spark SQL function, so the direct copy by such a rule
 * stays one projection over the Kafka source, and the key-skew job reads a candidate key field with the
 * same rules.
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
            .add("code", DataTypes.StringType, true)
            .add("detail", DataTypes.StringType, true)
            .add("partition", DataTypes.IntegerType, true);

    private final KeyRule rule;
    private final int partitions;
    private final CollectionAccumulator<Object> spread;
    private final PerTask<KeySpread.Collector> tasks = new PerTask<>();

    public NewKey(List<Object> steps, String ruleText, int partitions, CollectionAccumulator<Object> spread) {
        requirePartitions("kafkaops_new_key", partitions);
        this.rule = new KeyRule(steps, ruleText);
        this.partitions = partitions;
        this.spread = spread;
    }

    @Override
    public Row call(byte[] input, Integer sourcePartition) {
        KeyRule.Result found = rule.extract(input);
        if (found.key == null) {
            return RowFactory.create(null, found.code, found.detail, null);
        }
        if (spread != null) {
            track(found.key, sourcePartition == null ? -1 : sourcePartition);
        }
        return RowFactory.create(found.key, null, null, partitionOf(Utils.murmur2(found.key), partitions));
    }

    /** The partition Kafka's Java producer gives a key of this {@code Utils.murmur2} in a topic of {@code partitions}. */
    static int partitionOf(int murmur2, int partitions) {
        return Utils.toPositive(murmur2) % partitions;
    }

    /** Refuses a target partition count below 1, naming the function. */
    static void requirePartitions(String function, int partitions) {
        if (partitions < 1) {
            throw new IllegalArgumentException(function + ": target partition count " + partitions + " is below 1");
        }
    }

    private void track(byte[] key, int sourcePartition) {
        tasks.get(KeySpread.Collector::new, done -> done.report(spread)).add(sourcePartition, key);
    }
}
