package io.kafkaops.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.utils.Utils;
import org.apache.spark.util.CollectionAccumulator;

/**
 * Whether any new key of a direct copy has records in more than one source partition: each task of
 * {@link NewKey} gathers its keys in a {@link Collector}, which adds a {@link Seen} per source partition (the
 * 64-bit hashes of its distinct keys) to
 * a Spark {@code CollectionAccumulator}; {@link #spanning} reads them on the driver. A hash collision
 * can only report a key as spanning that is not (the safe side: the caller then merges).
 */
public final class KeySpread {
    /** Distinct keys one task tracks before it gives up (memory bound). */
    public static final int SPREAD_CAP = 1 << 21;

    private KeySpread() {
    }

    /** 64 bits of a key: murmur2 and {@code Arrays.hashCode}, two independent 32-bit hashes. */
    private static long keyHash(byte[] key) {
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

    /** One task's distinct key hashes per source partition, bounded by {@link #SPREAD_CAP}; reported once, when the task completes. */
    static final class Collector {
        private final Map<Integer, Set<Long>> seen = new HashMap<>();
        private int tracked;
        private boolean overflow;

        void add(int partition, byte[] key) {
            if (overflow) {
                return;
            }
            if (seen.computeIfAbsent(partition, p -> new HashSet<>()).add(keyHash(key)) && ++tracked > SPREAD_CAP) {
                overflow = true;
                seen.clear();
            }
        }

        void report(CollectionAccumulator<Object> spread) {
            if (overflow) {
                spread.add(Seen.overflowed());
                return;
            }
            for (Map.Entry<Integer, Set<Long>> e : seen.entrySet()) {
                long[] hashes = new long[e.getValue().size()];
                int i = 0;
                for (long h : e.getValue()) {
                    hashes[i++] = h;
                }
                spread.add(new Seen(e.getKey(), hashes));
            }
        }
    }
}
