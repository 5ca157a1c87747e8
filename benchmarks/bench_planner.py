"""Benchmark of the kafkaops planner: speed at scale, and replica moves against the lower bound
and against Kafka's own ``--generate`` assignment.

    .venv/bin/python -m benchmarks.bench_planner [--quick] [--no-results]

(a) plans a scale-out of 100,000 partitions at RF 3 on 100 brokers by 10 and times it (target
<= 5 s); (b) plans scale-outs over generated clusters (3..50 brokers, +1..10, RF 2..3, 1..3 racks,
skewed sizes) and prints moves / lower bound for kafkaops and for Kafka's generator. Appends a
dated section to benchmarks/RESULTS.md unless --no-results.

The reference, for moves and for time, is Kafka 4.3's own ``--generate`` computation on the same
clusters in the same run: ``ReassignPartitionsCommand.calculateAssignment`` from the tools jar
(:func:`benchmarks.kafka_generate.run_tool`; its time is the call's in a cold JVM, as the tool's one
call is; its placer's ``Random`` is unseeded, so its moves vary from run to run). The clusters are
laid out the way Kafka 4 creates topics, by the seeded port of its placer. The jars come from
``make setup`` (``KAFKAOPS_CACHE=.cache``, as ``make bench`` sets it).
"""
from __future__ import annotations

import argparse
import random
import sys
import time

from benchmarks.kafka_generate import JavaRandom, place_topic, replica_moves, run_tool
from benchmarks.results import publish
from kafkaops.model import Broker, Cluster, PartitionAssignment
from kafkaops.reassign.planner import lower_bound_moves, plan_scale_out

SEED = 20240611


def rack_name(i: int, racks: int) -> str | None:
    return None if racks <= 1 else "abc"[i % racks]


def make_cluster(brokers: int, topics: int, partitions: int, rf: int, racks: int, rand: random.Random) -> Cluster:
    """A cluster laid out the way Kafka 4 creates topics (its StripedReplicaPlacer, seeded from
    ``rand``), with Pareto-skewed partition sizes."""
    members = tuple(Broker(i, rack=rack_name(i, racks)) for i in range(1, brokers + 1))
    parts = []
    for t in range(topics):
        topic = f"topic-{t:04d}"
        scale = rand.paretovariate(1.2) * 1_000_000
        for pid, reps in enumerate(place_topic(members, partitions, rf, JavaRandom(rand.getrandbits(48)))):
            parts.append(PartitionAssignment(topic, pid, tuple(reps), size_bytes=int(scale * rand.paretovariate(1.5))))
    return Cluster(members, tuple(parts))


def new_brokers(cluster: Cluster, k: int, racks: int) -> list[Broker]:
    first = max(cluster.broker_ids) + 1
    return [Broker(b, rack=rack_name(b, racks)) for b in range(first, first + k)]


def bench_speed(racks: int) -> tuple[float, dict]:
    rand = random.Random(SEED)
    cluster = make_cluster(100, 200, 500, 3, racks, rand)
    added = new_brokers(cluster, 10, racks)
    start = time.perf_counter()
    plan = plan_scale_out(cluster, added)
    seconds = time.perf_counter() - start
    [(proposal, reference_s)] = run_tool([(cluster, list(cluster.brokers) + added)])  # same cluster, same run
    after = plan.stats_after
    facts = {"racks": racks, "reference_s": reference_s, "reference_moves": replica_moves(cluster, proposal),
             "partitions": len(cluster.partitions), "moves": plan.replica_moves,
             "lower_bound": plan.lower_bound, "replica_spread": after.replica_spread,
             "leader_spread": after.leader_spread, "topic_spread": after.max_topic_spread,
             "byte_spread_pct": 100 * after.byte_spread / max(1, max(after.bytes.values()))}
    return seconds, facts


def cases(quick: bool) -> list[tuple[int, int, int, int]]:
    """(brokers, added, rf, racks) combinations, fixed by the seed."""
    rand = random.Random(SEED)
    grid = []
    for brokers in (3, 4, 5, 6, 8, 10, 12, 16, 20, 25, 30, 40, 50):
        for rf in (2, 3):
            for racks in (1, 2, 3):
                if rf > brokers:
                    continue
                grid.append((brokers, rand.randint(1, 10), rf, racks))
    return grid[::4] if quick else grid


def bench_moves(quick: bool) -> list[dict]:
    rows, runs = [], []
    for brokers, k, rf, racks in cases(quick):
        rand = random.Random(hash((brokers, k, rf, racks)) & 0xFFFF ^ SEED)
        cluster = make_cluster(brokers, 6, rand.randint(brokers, 4 * brokers), rf, racks, rand)
        added = new_brokers(cluster, k, racks)
        lb = lower_bound_moves(cluster, added)
        start = time.perf_counter()
        plan = plan_scale_out(cluster, added)
        seconds = time.perf_counter() - start
        runs.append((cluster, list(cluster.brokers) + added))
        rows.append({"case": f"B={brokers} +{k} RF={rf} racks={racks}", "replicas": sum(
            p.replication_factor for p in cluster.partitions), "lb": lb, "ours": plan.replica_moves,
            "spread": plan.stats_after.replica_spread,
            "leaders": plan.stats_after.leader_spread, "topic": plan.stats_after.max_topic_spread,
            "ms": seconds * 1000})
    for row, (cluster, _), (proposal, _) in zip(rows, runs, run_tool(runs)):  # the reference: one JVM for all
        row["kafka"] = replica_moves(cluster, proposal)
    return rows


def ratio(moves: int, lb: int) -> float:
    return moves / lb if lb else (1.0 if moves == 0 else float("inf"))


def report(speed: list[tuple[float, dict]], rows: list[dict]) -> list[str]:
    lines = [f"speed: {f['partitions']} partitions RF 3, 100 brokers + 10 on {f['racks']} rack(s): {seconds:.2f} s "
             f"(target <= 5 s; Kafka's --generate on the same cluster, this run: {f['reference_s']:.2f} s in a cold JVM, "
             f"ratio {seconds / f['reference_s']:.2f}, {f['reference_moves']} moves); {f['moves']} moves, lower bound "
             f"{f['lower_bound']}; spreads after: replicas "
             f"{f['replica_spread']}, leaders {f['leader_spread']}, per topic {f['topic_spread']}, bytes "
             f"{f['byte_spread_pct']:.1f}% of the largest broker" for seconds, f in speed]
    lines += ["", "| case | replicas | lower bound | kafkaops moves | kafkaops / LB | kafka --generate moves | "
              "kafka / LB | replica spread | leader spread | topic spread | ms |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['replicas']} | {r['lb']} | {r['ours']} | {ratio(r['ours'], r['lb']):.3f} | "
                     f"{r['kafka']} | {ratio(r['kafka'], r['lb']):.2f} | {r['spread']} | {r['leaders']} | "
                     f"{r['topic']} | {r['ms']:.0f} |")
    worst = max(ratio(r["ours"], r["lb"]) for r in rows)
    kafka_mean = sum(ratio(r["kafka"], r["lb"]) for r in rows) / len(rows)
    balanced = sum(r["spread"] <= 1 for r in rows)
    lines += ["", f"worst kafkaops / LB: {worst:.3f} (target <= 1.01); mean kafka --generate / LB: {kafka_mean:.2f}; "
              f"replica spread <= 1 in {balanced} of {len(rows)} cases"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the cases")
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args(argv)
    speed = [bench_speed(racks) for racks in (1, 3)]
    rows = bench_moves(args.quick)
    lines = report(speed, rows)
    publish("planner", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
