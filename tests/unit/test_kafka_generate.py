"""The port of Kafka 4.3's ``--generate`` placement (benchmarks/kafka_generate.py): invariants, an
outcome worked out by hand from the Java source, and the port against the Java class itself."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.kafka_generate import (JavaRandom, Scripted, generate, hashmap_order, java_shuffle,
                                       java_string_hash, place_topic, replica_moves, topic_outcomes)
from kafkaops.errors import SetupError
from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.platform.paths import jar_dir


def brokers_on(racks: str) -> list[Broker]:
    """Brokers 1.. on the given racks, one letter each ('-': no rack)."""
    return [Broker(i + 1, rack=None if r == "-" else r) for i, r in enumerate(racks)]


def test_java_random_and_string_hash_match_the_jdk():
    rand = JavaRandom(42)  # new Random(42): nextInt(10) x5, nextInt(16) x3 (a power of two)
    assert [rand.next_int(10) for _ in range(5)] == [0, 3, 8, 4, 0]
    assert [rand.next_int(16) for _ in range(3)] == [15, 4, 11]
    assert java_string_hash("hello") == 99162322
    assert java_string_hash(None) == 0


def test_hashmap_order_is_by_bucket_then_insertion():
    # "Aa" and "BB" share a hash (2112); "a" (97) sits in bucket 1, 2112 in bucket 0 of 16 buckets.
    assert hashmap_order(["a", "BB", "Aa"]) == ["BB", "Aa", "a"]
    assert hashmap_order(["a", "Aa", "BB"]) == ["Aa", "BB", "a"]


def test_java_shuffle_is_fisher_yates_from_the_end():
    items = [1, 2, 3]
    java_shuffle(items, Scripted((0, 1)))  # swap(2, 0) then swap(1, 1)
    assert items == [3, 2, 1]


def test_an_outcome_worked_out_by_hand():
    """Brokers 1-3 without racks, 4 partitions at RF 2. Draws: the one rack's broker offset 1,
    the rack offset 0 (nextInt(1)); after 3 partitions (one per broker) the shuffle draws
    nextInt(3) = 0, nextInt(2) = 1, turning [1, 2, 3] into [3, 2, 1].

    p0, epoch 0: the list keeps its drawn offset 1 -> leader 2, then 3.
    p1, epoch 1: offset 2 -> 3, 1.   p2, epoch 2: offset 0 -> 1, 2.
    p3: shuffle to [3, 2, 1], epoch 0 again; the list last saw epoch 2, so offset 0 + 1 -> 2, 1."""
    placed = list(place_topic(brokers_on("---"), 4, 2, Scripted((1, 0, 0, 1))))
    assert placed == [(2, 3), (3, 1), (1, 2), (2, 1)]


def test_racks_take_turns_from_the_rack_offset():
    """Racks a (1, 2), b (3), c (4); broker offsets 1 (a), 0 (b), 0 (c) in HashMap order a, b, c;
    rack offset 2 (c). p0: c leads (4), then a (its offset 1: 2), then b (3). p1: offset 3 wraps
    to a: a's list moves to offset 0 (1), then b (3), then c (4)."""
    placed = list(place_topic(brokers_on("aabc"), 2, 3, Scripted((1, 0, 0, 2))))
    assert placed == [(4, 2, 3), (1, 3, 4)]


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="-ab", min_size=1, max_size=5).filter(lambda s: "-" not in s or set(s) == {"-"}),
       st.integers(1, 30), st.integers(1, 5), st.integers(0, 2**48))
def test_every_placement_keeps_the_hard_constraints(racks, partitions, rf, seed):
    brokers = brokers_on(racks)
    rf = min(rf, len(brokers))
    placed = list(place_topic(brokers, partitions, rf, JavaRandom(seed)))
    rack_of = {b.id: b.rack for b in brokers}
    assert len(placed) == partitions
    for replicas in placed:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(rack_of)
        assert len({rack_of[b] for b in replicas}) == min(rf, len(set(rack_of.values())))


def test_too_large_a_replication_factor_is_refused_like_kafka():
    with pytest.raises(ValueError, match="replication factor of 4 cannot be reached because only 3"):
        list(place_topic(brokers_on("abc"), 1, 4, JavaRandom(1)))
    with pytest.raises(ValueError, match="Not all brokers have rack information"):
        list(place_topic(brokers_on("a") + [Broker(9)], 1, 1, JavaRandom(1)))


def test_outcomes_cover_every_draw_and_want_prunes_to_the_same_probability():
    brokers = brokers_on("abcd")
    outcomes = topic_outcomes(brokers, 6, 2)
    # rack offset (4) x one shuffle of the 4 rack names before partition 5 (24); size-1 racks draw 1.
    assert abs(sum(outcomes.values()) - 1) < 1e-9
    assert len(outcomes) <= 4 * 24
    some = max(outcomes, key=lambda o: (outcomes[o], o))
    assert topic_outcomes(brokers, 6, 2, want=some) == pytest.approx({some: outcomes[some]})
    impossible = ((1, 1),) + some[1:]
    assert topic_outcomes(brokers, 6, 2, want=impossible) == {}
    sampled = tuple(place_topic(brokers, 6, 2, JavaRandom(7)))
    assert sampled in outcomes


def test_generate_places_every_partition_and_counts_moves():
    brokers = brokers_on("abc")
    parts = tuple(PartitionAssignment(t, p, (1, 2)) for t in ("x", "y") for p in range(4))
    cluster = Cluster(tuple(brokers), parts)
    proposal = generate(cluster, brokers + [Broker(4, rack="a")], JavaRandom(3))
    assert set(proposal) == {p.topic_partition for p in parts}
    assert replica_moves(cluster, proposal) == sum(len(set(r) - {1, 2}) for r in proposal.values())


# -- the port against the Java class -----------------------------------------------------------------
HARNESS = """
import java.util.*;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.metadata.placement.*;

public class PlacerHarness {
    /** A Random whose nextInt answers come from a script (what the port's Scripted does). */
    static class ScriptedRandom extends Random {
        final Deque<Integer> draws = new ArrayDeque<>();
        ScriptedRandom(String csv) { for (String d : csv.split("/")) draws.add(Integer.parseInt(d)); }
        @Override public int nextInt(int bound) { return draws.removeFirst(); }
    }

    public static void main(String[] args) {
        // per case: "SEED|script:D/D/.." "ID[:RACK],.." "TOPIC:PARTITIONS:RF,.." (topics inserted in this order)
        for (int c = 0; c + 2 < args.length; c += 3) {
            Random random = args[c].startsWith("script:") ? new ScriptedRandom(args[c].substring(7))
                                                          : new Random(Long.parseLong(args[c]));
            List<UsableBroker> brokers = new ArrayList<>();
            for (String b : args[c + 1].split(",")) {
                String[] f = b.split(":");
                brokers.add(new UsableBroker(Integer.parseInt(f[0]),
                    f.length > 1 ? Optional.of(f[1]) : Optional.empty(), false));
            }
            Map<String, int[]> topics = new HashMap<>();
            for (String t : args[c + 2].split(",")) {
                String[] f = t.split(":");
                topics.put(f[0], new int[] {Integer.parseInt(f[1]), Integer.parseInt(f[2])});
            }
            StripedReplicaPlacer placer = new StripedReplicaPlacer(random);
            ClusterDescriber describer = new ClusterDescriber() {
                public Iterator<UsableBroker> usableBrokers() { return brokers.iterator(); }
                public Uuid defaultDir(int id) { return Uuid.ZERO_UUID; }
            };
            StringBuilder out = new StringBuilder("{");
            topics.forEach((name, spec) -> {
                TopicAssignment a = placer.place(new PlacementSpec(0, spec[0], (short) spec[1]), describer);
                if (out.length() > 1) out.append(",");
                out.append('"').append(name).append("\\":[");
                for (int p = 0; p < a.assignments().size(); p++)
                    out.append(p > 0 ? "," : "").append(a.assignments().get(p).replicas());
                out.append("]");
            });
            System.out.println(out.append("}"));
        }
    }
}
"""

LIVE_TOPICS = {"orders": (12, 3), "payments": (8, 2), "events": (6, 3), "audit": (3, 2)}
MANY_TOPICS = {f"t{i:02d}": (3 + i % 7, 1 + i % 3) for i in range(15)}  # > 12: the HashMap resizes
CASES = [  # (seed, brokers, topics)
    ("script:1/0/0/1", brokers_on("---"), {"only": (4, 2)}),
    ("script:1/0/0/2", brokers_on("aabc"), {"only": (2, 3)}),
    (11, brokers_on("abcd"), LIVE_TOPICS),
    (12, brokers_on("----"), LIVE_TOPICS),
    (13, [Broker(i, rack="rack-" + "abcd"[i % 4]) for i in range(1, 11)], LIVE_TOPICS),
    (14, [Broker(i, rack="xyz"[i % 3]) for i in range(1, 8)], MANY_TOPICS),
    (15, [Broker(i) for i in (5, 9, 2, 7, 3)], {"orders": (40, 3)}),
]


def _java_classpath() -> str:
    try:
        return f"{jar_dir('broker')}/*"
    except SetupError as err:
        pytest.skip(str(err))


@pytest.mark.slow
def test_the_port_reproduces_kafkas_striped_replica_placer(tmp_path):
    """Run Kafka 4.3.1's own StripedReplicaPlacer (seeded and scripted Randoms) next to the port:
    the same placements, partition for partition, topics drawn in the same HashMap order."""
    if shutil.which("java") is None:
        pytest.skip("no java on PATH")
    source = tmp_path / "PlacerHarness.java"
    source.write_text(HARNESS)
    args = []
    for seed, brokers, topics in CASES:
        args += [str(seed), ",".join(f"{b.id}:{b.rack}" if b.rack else str(b.id) for b in brokers),
                 ",".join(f"{t}:{n}:{rf}" for t, (n, rf) in sorted(topics.items()))]
    done = subprocess.run(["java", "-cp", _java_classpath(), str(source), *args], capture_output=True,
                          text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == len(CASES)
    for (seed, brokers, topics), line in zip(CASES, lines):
        java = {t: [tuple(r) for r in reps] for t, reps in json.loads(line).items()}
        if isinstance(seed, str):
            draws = tuple(int(d) for d in seed.removeprefix("script:").split("/"))
            (topic, (n, rf)), = topics.items()
            assert java[topic] == list(place_topic(brokers, n, rf, Scripted(draws))), seed
            continue
        parts = tuple(PartitionAssignment(t, p, tuple(b.id for b in brokers[:rf]))
                      for t, (n, rf) in topics.items() for p in range(n))
        proposal = generate(Cluster(tuple(brokers), parts), brokers, JavaRandom(seed),
                            rack_aware=any(b.rack for b in brokers))
        ours = {t: [proposal[(t, p)] for p in range(n)] for t, (n, _) in topics.items()}
        assert ours == java, seed
