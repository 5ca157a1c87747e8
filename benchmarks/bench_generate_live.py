"""Scale-out moves of Kafka's real ``kafka-reassign-partitions --generate`` on a live cluster,
against kafkaops' plan and the count-balance lower bound; and the port in kafka_generate.py
checked against the real tool.

    .venv/bin/python -m benchmarks.bench_generate_live [--runs 4] [--no-results]

Starts 4 brokers through the kafka_broker role (racks a, b, c, d), creates topics laid out the way
Kafka 4 creates them on brokers 1-3 (the port's StripedReplicaPlacer, seeded; broker 4 holds
nothing: the new broker of a scale-out), then runs the real tool (``ReassignPartitionsCommand``
from the tools jar) ``--runs`` times rack-aware and ``--runs`` times with ``--disable-rack-aware``,
counting the replicas each proposal places on a broker that did not hold them. The reference is
``planner.lower_bound_moves`` on the same snapshot.

Port check: the tool's placer draws from an unseeded ``java.util.Random``, so a real proposal is
checked against every sequence of draws the port can make (``topic_outcomes``): is each real
per-topic proposal one of the port's possible outcomes? Then the real move counts against the
port's exact move distribution (every draw uniform; topics independent, which holds for the
move count because each topic's outcome set does not depend on the draws before it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path


from confluent_kafka.admin import NewTopic
from benchmarks.kafka_generate import JavaRandom, place_topic, replica_moves, topic_outcomes
from benchmarks.results import publish

from kafkaops.errors import UnknownTopic
from kafkaops.platform.kafka import connection, metadata

from kafkaops.platform import provision
from kafkaops.testing import clusters
from kafkaops.model import Broker, Cluster
from kafkaops.platform.paths import jar_dir
from kafkaops.reassign.planner import lower_bound_moves, plan_scale_out

TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
PROPOSED = "Proposed partition reassignment configuration"
TOPICS = {"orders": (12, 3), "payments": (8, 2), "events": (6, 3), "audit": (3, 2)}  # partitions, RF
Proposal = dict[tuple[str, int], tuple[int, ...]]


def outcomes(brokers: Sequence[Broker], partitions: int, rf: int, rack_aware: bool) -> dict[tuple, float]:
    """Every placement the port can give a topic, with its probability."""
    return topic_outcomes(brokers, partitions, rf, rack_aware=rack_aware)


def run_tool(bootstrap: str, topics_file: Path, broker_list: str, rack_aware: bool) -> Proposal:
    """One real ``--generate``: its proposal, parsed from the tool's output."""
    cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jar_dir('tools')}/*", TOOL,
           "--bootstrap-server", bootstrap, "--topics-to-move-json-file", str(topics_file),
           "--broker-list", broker_list, "--generate"] + ([] if rack_aware else ["--disable-rack-aware"])
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(PROPOSED))
    data = json.loads(next(line for line in lines[at + 1:] if line.strip()))
    return {(p["topic"], p["partition"]): tuple(p["replicas"]) for p in data["partitions"]}


def moves_distribution(cluster: Cluster, per_topic: Mapping[str, Mapping[tuple, float]]) -> dict[int, float]:
    """Exact distribution of the port's replica moves: each topic's outcomes with their
    probabilities, topics independent."""
    total: Counter = Counter({0: 1.0})
    for topic, options in per_topic.items():
        parts = cluster.partitions_of(topic)
        counts: Counter = Counter()
        for outcome, weight in options.items():
            counts[sum(len(set(outcome[p.partition]) - set(p.replicas)) for p in parts)] += weight
        step: Counter = Counter()
        for a, pa in total.items():
            for b, pb in counts.items():
                step[a + b] += pa * pb
        total = step
    return dict(total)


def compare(cluster: Cluster, brokers: Sequence[Broker], proposals: list[Proposal], rack_aware: bool) -> dict:
    """How the real proposals sit among the port's outcomes."""
    per_topic = {t: outcomes(brokers, len(cluster.partitions_of(t)), cluster.partitions_of(t)[0].replication_factor,
                             rack_aware) for t in cluster.topics}
    matched = sum(tuple(prop[(t, p.partition)] for p in cluster.partitions_of(t)) in per_topic[t]
                  for prop in proposals for t in per_topic)
    dist = moves_distribution(cluster, per_topic)
    mean = sum(k * w for k, w in dist.items())
    sd = math.sqrt(sum((k - mean) ** 2 * w for k, w in dist.items()))
    real = [replica_moves(cluster, prop) for prop in proposals]
    real_mean = sum(real) / len(real)
    z = (real_mean - mean) / (sd / math.sqrt(len(real))) if sd else 0.0
    return {"matched": matched, "checked": len(proposals) * len(per_topic), "real": real, "real_mean": real_mean,
            "outcomes": sum(len(o) for o in per_topic.values()),
            "port_mean": mean, "port_sd": sd, "port_min": min(dist), "port_max": max(dist), "z": z,
            "in_support": all(dist.get(m, 0) > 0 for m in real)}


def create_topics(conn: connection.KafkaConnection, old: Sequence[Broker]) -> None:
    """Topics placed the way Kafka 4 creates them on the ``old`` brokers (the placer, seeded)."""
    new = []
    for i, (name, (partitions, rf)) in enumerate(TOPICS.items()):
        assigned = place_topic(old, partitions, rf, JavaRandom(i))
        new.append(NewTopic(name, partitions, replica_assignment=[list(r) for r in assigned]))
    for future in conn.admin.create_topics(new, request_timeout=30).values():
        future.result(60)


def measure(args: argparse.Namespace) -> list[str]:
    base = Path(tempfile.mkdtemp(prefix="kafkaops-bench-gen-"))
    spec = provision.local_cluster_spec(base, brokers=4, controllers=1, racks=("rack-a", "rack-b", "rack-c", "rack-d"))
    try:
        started = time.monotonic()
        provision.cluster_up(spec)
        up_s = time.monotonic() - started
        with connection.connect(spec.bootstrap, timeout_s=30) as conn:
            registered = sorted(metadata.describe_cluster(conn)[2])
            create_topics(conn, [b for b in registered if b.id != 4])
            deadline = time.monotonic() + 60
            while True:  # new topics reach every broker's metadata a moment later
                try:
                    cluster = metadata.snapshot(conn, topics=list(TOPICS), offsets=False, groups=False)
                except UnknownTopic:  # not in the metadata this broker answered with yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
                    continue
                if len(cluster.partitions) == sum(p for p, _ in TOPICS.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        assert not cluster.replicas_per_broker().get(4), "broker 4 should hold nothing before the scale-out"
        lb = lower_bound_moves(cluster, [4])
        plan = plan_scale_out(cluster, [4])
        topics_file = base / "topics.json"
        topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": t} for t in TOPICS]}))
        ids = ",".join(str(b.id) for b in registered)
        timings, results = [], {}
        for rack_aware in (True, False):
            proposals = []
            for _ in range(args.runs):
                t0 = time.monotonic()
                proposals.append(run_tool(spec.bootstrap, topics_file, ids, rack_aware))
                timings.append(time.monotonic() - t0)
            results[rack_aware] = compare(cluster, registered, proposals, rack_aware)
    finally:
        provision.cluster_down(spec, purge=True)
        clusters.kill_strays(base)
        shutil.rmtree(base, ignore_errors=True)

    replicas = sum(p.replication_factor for p in cluster.partitions)
    lines = [f"live scale-out 3 -> 4 brokers (racks a,b,c + d), {len(TOPICS)} topics, {len(cluster.partitions)} "
             f"partitions, {replicas} replicas; count-balance lower bound {lb} replica moves "
             f"(cluster up {up_s:.0f} s, tool {sum(timings) / len(timings):.1f} s a run incl. JVM start; load "
             f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
             f"- kafkaops plan_scale_out: {plan.replica_moves} moves = {plan.replica_moves / lb:.2f}x the lower bound "
             f"(replica spread after {plan.stats_after.replica_spread}, leader spread "
             f"{plan.stats_after.leader_spread})"]
    for rack_aware, r in results.items():
        label = "rack-aware" if rack_aware else "--disable-rack-aware"
        lines.append(f"- real kafka-reassign-partitions --generate, {label}, {len(r['real'])} runs: moves {r['real']}, "
                     f"mean {r['real_mean']:.1f} = {r['real_mean'] / lb:.2f}x the lower bound, "
                     f"{r['real_mean'] / plan.replica_moves:.2f}x kafkaops")
        verdict = ("the port reproduces the tool" if r["matched"] == r["checked"] else
                   "the port does NOT reproduce every placement of the tool")
        lines.append(f"  port check: {r['matched']}/{r['checked']} real per-topic proposals "
                     f"({r['matched'] / r['checked']:.0%}) are one of the port's possible outcomes (every sequence "
                     f"of draws of StripedReplicaPlacer, {r['outcomes']} distinct per-topic outcomes): {verdict}; "
                     f"port's exact move distribution mean {r['port_mean']:.1f} sd {r['port_sd']:.1f} range "
                     f"{r['port_min']}..{r['port_max']}, real mean at z = {r['z']:+.2f} "
                     f"({'consistent' if abs(r['z']) < 2 else 'NOT consistent'} at 2 sd), all real counts in "
                     f"the port's range: {r['in_support']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="real tool runs per variant (default 4)")
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args(argv)
    lines = measure(args)
    publish("generate (live)", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
