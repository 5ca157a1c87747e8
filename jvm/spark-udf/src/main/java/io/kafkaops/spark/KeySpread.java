package io.kafkaops.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.utils.Utils;

/**
 * Whether any new key of a direct copy has records in more than one source partition: each task of
 * {@link NewKey} adds a {@link Seen} (its source partition and the 64-bit hashes of its distinct keys) to
 * a Spark {@code CollectionAccumulator}; {@link #spanning} reads them on the driver. A hash collision
 * can only report a key as spanning that is not (the safe side: the caller then merges).
 */
public final class KeySpread {
    /** Distinct keys one task tracks before it gives up (memory bound). */
    public static final int SPREAD_CAP = 1 << 21;

    private KeySpread() {
    }

    /** 64 bits of a key: murmur2 and {@code Arrays.hashCode}, two independent 32-bit hashes. */
    static long keyHash(byte[] key) {
        return ((long) Utils.murmur2(key) << 32) | (Arrays.hashCode(key) & 0xffffffffL);
    }

    /** One task's keys; {@code overflowed} when it saw more than {@link #SPREAD_CAP} distinct keys. */
    public static final class Seen implements Serializable {
        private static final long serialVersionUID = 1L;
        final int partition;
        final long[] hashes;
        final boolean overflowed;

        Seen(int partition, long[] hashes) {
            this(partition, hashes, false);
        }

        private Seen(int partition, long[] hashes, boolean overflowed) {
            this.partition = partition;
            this.hashes = hashes;
            this.overflowed = overflowed;
        }

        static Seen overflowed() {
            return new Seen(-1, new long[0], true);
        }
    }

    /** The number of keys seen in two or more source partitions; -1 when a task gave up counting. */
    public static long spanning(List<Object> seen) {
        Map<Long, Integer> home = new HashMap<>();
        long spanning = 0;
        for (Object o : seen) {
            Seen s = (Seen) o;
            if (s.overflowed) {
                return -1;
            }
            for (long h : s.hashes) {
                Integer was = home.putIfAbsent(h, s.partition);
                if (was != null && was >= 0 && was != s.partition) {
                    home.put(h, -1);
                    spanning++;
                }
            }
        }
        return spanning;
    }
}
