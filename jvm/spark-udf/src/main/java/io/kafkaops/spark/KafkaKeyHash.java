package io.kafkaops.spark;

import org.apache.kafka.common.utils.Utils;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.util.LongAccumulator;

/**
 * {@code kafka_key_hash(key BINARY, source_partition INT) -> INT}: {@code Utils.toPositive(Utils.murmur2(key))},
 * the hash Kafka's Java producer takes modulo the partition count to place a keyed record
 * ({@code BuiltInPartitioner.partitionForKey}), so {@code kafka_key_hash(key, p) % n} is the
 * key's partition in a topic of {@code n}. A null key is not hashed by the producer: null.
 *
 * <p>While it runs it counts, in a Spark accumulator, the keyed records that sit off their key's
 * home partition in the source topic ({@code hash % sourcePartitions != source_partition}). Zero
 * proves that every key's records are in one source partition.
 */
public final class KafkaKeyHash implements UDF2<byte[], Integer, Integer> {
    private static final long serialVersionUID = 1L;

    private final LongAccumulator awayFromHome;
    private final int sourcePartitions;

    public KafkaKeyHash(LongAccumulator awayFromHome, int sourcePartitions) {
        if (sourcePartitions < 1) {
            throw new IllegalArgumentException("kafka_key_hash: source partition count " + sourcePartitions
                    + " is below 1");
        }
        this.awayFromHome = awayFromHome;
        this.sourcePartitions = sourcePartitions;
    }

    @Override
    public Integer call(byte[] key, Integer sourcePartition) {
        if (key == null) {
            return null;
        }
        int hash = Utils.toPositive(Utils.murmur2(key));
        if (sourcePartition == null || hash % sourcePartitions != sourcePartition) {
            awayFromHome.add(1L);
        }
        return hash;
    }
}
