"""Benchmark of the planner at the scale of the largest clusters, on realistic shapes (issue 15).

    .venv/bin/python -m benchmarks.bench_planner_scale [--quick] [--no-results] [--cap SECONDS]
    .venv/bin/python -m benchmarks.bench_planner_scale --case 'scale-out 1000000 300 30 3 3' [--reference]
    .venv/bin/python -m benchmarks.bench_planner_scale --drains | --leaders

Clusters: heavy-tailed topic sizes (most topics 1-12 partitions, some 13-499, a few 500-2,000),
laid out unevenly (topics created on subsets of the brokers that existed then, earlier partial
scale-outs onto later brokers, Pareto-skewed bytes). Every case runs in a fresh subprocess so
peak memory is the process's ``ru_maxrss`` (tracemalloc is too slow at this size): the figure is
the whole process, the cluster read into memory included; ``cluster MiB`` is the RSS before
planning. Time is the planner call alone (``plan_*``); at 1M partitions the benchmark also times
writing and reading Kafka's reassignment JSON (``plan.to_kafka_json`` + ``cli.planfile``) and
the plan gate's dataframe (``reassign.frames.plan_frame``). The reference is the planner before
this work, the live one at the pinned revision :data:`REFERENCE_REVISION`: the run exports that
revision's ``plugins/kafkaops`` from this clone's history (``git archive``) into a temporary folder,
removed when the run ends, and each reference case's subprocess imports ``kafkaops`` from there
(its model included), on the same clusters, under a time cap (``--cap``, 120 s by default, to fit a
session; cases over it are marked). The commit must be in the clone: a shallow one needs
``git fetch --unshallow`` first.

Run from the repository root (the subprocesses run ``-m benchmarks.bench_planner_scale`` there).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.results import publish
from kafkaops.model import Broker, Cluster, PartitionAssignment

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_REVISION = "ab0e95cb53787756385b49d8b8873d1f8616532c"
"""The reference planner's revision: the parent of db130e5, which rewrote the planner's per-topic
evening for issue 15 and brought this benchmark (with a copy of this revision's planner, which issue
30 replaced by this export). plugins/kafkaops/reassign/planner here is the planner before that work."""
REFERENCE_PATHS = ("plugins/kafkaops/__init__.py", "plugins/kafkaops/errors.py", "plugins/kafkaops/model.py",
                   "plugins/kafkaops/reassign/__init__.py", "plugins/kafkaops/reassign/planner")
"""What the reference planner imports at its revision: the planner, the model and the errors."""
SEED = 20251115
RACKS = "abc"


def rack_of(broker: int, racks: int) -> str | None:
    return None if racks <= 1 else RACKS[broker % racks]


def topic_sizes(partitions: int, rand: random.Random) -> list[int]:
    """Partition counts per topic, heavy-tailed, summing to ``partitions``: 85 % of topics with
    1-12 partitions, 12 % with 13-499 (log-uniform), 3 % with 500-2,000."""
    sizes: list[int] = []
    left = partitions
    while left > 0:
        u = rand.random()
        if u < 0.85:
            n = rand.randint(1, 12)
        elif u < 0.97:
            n = int(math.exp(rand.uniform(math.log(13), math.log(500))))
        else:
            n = rand.randint(500, 2000)
        n = min(n, left)
        sizes.append(n)
        left -= n
    return sizes


def make_cluster(partitions: int, brokers: int, rf: int, racks: int, seed: int = SEED) -> Cluster:
    """An uneven cluster of ``partitions`` on brokers 1..``brokers``: it grew in four generations
    (40, 60, 80, 100 % of the brokers); each topic was created on a random subset (30-100 %, large topics all) of the
    brokers of its time, round robin over that subset (racks alternating, so every partition spans
    min(RF, racks) racks); a third of the topics older than the last generation had some partitions
    moved by hand onto a later broker of the same rack."""
    rand = random.Random(seed)
    members = tuple(Broker(b, rack=rack_of(b, racks)) for b in range(1, brokers + 1))
    generations = [max(rf * max(1, racks), brokers * k // 5) for k in (2, 3, 4, 5)]
    parts = []
    for t, count in enumerate(topic_sizes(partitions, rand)):
        gen = rand.choices(range(4), weights=(4, 3, 2, 1))[0]
        alive = generations[gen]
        share = 1.0 if count >= 500 else rand.uniform(0.3, 1.0)  # large topics were spread on creation
        width = min(alive, max(rf * max(1, racks), int(alive * share)))
        subset = sorted(rand.sample(range(1, alive + 1), width))
        by_rack: dict[str | None, list[int]] = {}
        for b in subset:
            by_rack.setdefault(rack_of(b, racks), []).append(b)
        lanes = list(by_rack.values())
        order = [lane[i] for i in range(max(map(len, lanes))) for lane in lanes if i < len(lane)]
        start = rand.randrange(len(order))
        moved_by_hand = gen < 3 and rand.random() < 0.33
        scale = rand.paretovariate(1.2) * 1_000_000
        topic = f"topic-{t:05d}"
        for p in range(count):
            reps = _replicas(order, start + p, rf, racks)
            if moved_by_hand and rand.random() < 0.5:
                slot = rand.randrange(rf)
                later = [b for b in range(alive + 1, brokers + 1) if rack_of(b, racks) == rack_of(reps[slot], racks)]
                if later:
                    pick = later[rand.randrange(len(later))]
                    if pick not in reps:
                        reps[slot] = pick
            parts.append(PartitionAssignment(topic, p, tuple(reps), size_bytes=int(scale * rand.paretovariate(1.5))))
    return Cluster(members, tuple(parts))


def _replicas(order: list[int], first: int, rf: int, racks: int) -> list[int]:
    """``rf`` brokers of ``order`` from ``first`` on, covering min(RF, racks) racks first."""
    need = min(rf, max(1, racks))
    picked: list[int] = []
    seen: set[str | None] = set()
    k = first
    while len(picked) < rf:
        b = order[k % len(order)]
        k += 1
        if b in picked or (len(seen) < need and rack_of(b, racks) in seen):
            continue
        picked.append(b)
        seen.add(rack_of(b, racks))
    return picked


# -- the reference revision --------------------------------------------------------------------------
@contextmanager
def reference_tree(revision: str = REFERENCE_REVISION) -> Iterator[Path]:
    """The ``plugins`` folder of ``revision`` (:data:`REFERENCE_PATHS` only), exported from this
    clone's history into a temporary folder, to put first on a case subprocess's path. The folder
    is removed on exit, on an error too."""
    exported = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", revision, *REFERENCE_PATHS],
                              capture_output=True, timeout=120)
    if exported.returncode:
        raise SystemExit(f"cannot export the reference planner at {revision} from {ROOT}: "
                         f"{exported.stderr.decode().strip()}; nothing was measured. A shallow clone lacks the "
                         "commit: git fetch --unshallow, then run again")
    with tempfile.TemporaryDirectory(prefix="kafkaops-reference-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(exported.stdout)) as tar:
            # the "data" filter where this Python has it (3.11.4 and later): the archive is this clone's own
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        yield Path(tmp) / "plugins"


# -- one case, in its own process --------------------------------------------------------------------
def rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(spec: str, reference: Path | None, extras: bool) -> dict:
    """Build the case's cluster, plan it, and return the figures. ``spec``: kind partitions
    brokers change rf racks (change: brokers added for a scale-out, drained for a drain). With
    ``reference`` (a :func:`reference_tree` folder, which :func:`spawn` put first on this process's
    path, so ``kafkaops`` is the reference revision's, its model included) the planner must come
    from there."""
    kind, partitions, brokers, change, rf, racks = spec.split()[:6]
    flags = spec.split()[6:]
    partitions, brokers, change, rf, racks = map(int, (partitions, brokers, change, rf, racks))
    from kafkaops.reassign import planner

    origin = Path(planner.__file__).resolve()
    if reference is not None and not origin.is_relative_to(reference.resolve()):
        raise SystemExit(f"the reference case {spec!r} imported the planner from {origin}, not from {reference}: "
                         f"put {reference} first on PYTHONPATH")
    cluster = make_cluster(partitions, brokers, rf, racks)
    start_rss = rss_mib()
    added = [Broker(b, rack=rack_of(b, racks)) for b in range(brokers + 1, brokers + 1 + change)]
    goals = planner.Goals(leaders="leaders-off" not in flags, topic_spread="topics-off" not in flags)
    start = time.perf_counter()
    if kind == "scale-out":
        plan = planner.plan_scale_out(cluster, added, goals)
    elif kind == "drain":
        plan = planner.plan_drain(cluster, list(range(1, change + 1)), goals)
    elif kind == "drain-rebalance":  # the drain, then the cluster-wide evening, counted apart
        plan = planner.plan_drain(cluster, list(range(1, change + 1)), goals, rebalance_after=True)
    else:
        plan = planner.plan_rebalance(cluster, goals)
    seconds = time.perf_counter() - start
    after, before = plan.stats_after, plan.stats_before
    final = {p.topic_partition: p.replicas for p in cluster.partitions}
    final.update({m.topic_partition: m.after for m in plan.moves})
    facts = {"spec": spec, "reference": reference is not None, "topics": len(cluster.topics), "seconds": seconds,
             "cluster_mib": start_rss, "peak_mib": rss_mib(), "moves": plan.replica_moves,
             "lower_bound": plan.lower_bound, "replica_spread": after.replica_spread,
             "replica_spread_before": before.replica_spread, "leader_spread": after.leader_spread,
             "topic_spread": after.max_topic_spread,
             "topics_uneven": sum(1 for s in after.topic_spread.values() if s > 1),
             "byte_spread_pct": 100 * after.byte_spread / max(1, max(after.bytes.values())),
             "byte_spread_before_pct": 100 * before.byte_spread / max(1, max(before.bytes.values())),
             "summary": plan.summary(), "parts": [list(part) for part in getattr(plan, "part_moves", ())],
             "leader_changes": plan.leader_changes, "copy_bytes": sum(m.bytes for m in plan.moves),
             "notes": list(plan.notes),
             "leader_only": sum(1 for m in plan.moves if set(m.after) == set(m.before)),
             "chains_left": chains_left(final.values(), after.balanced)}
    if extras:
        facts.update(time_io(plan, cluster))
    return facts


def chains_left(assignment: Iterable[Sequence[int]], brokers: Sequence[int]) -> int:
    """Brokers that could still pass a preferred leadership along a chain of shared partitions to a broker
    leading two or more fewer (0: leaders as even as the replica sets allow). Checked here apart from the
    planner's code: for each broker the fewest leaderships among the brokers it reaches, by reverse
    searches from the brokers in order of their counts."""
    count = dict.fromkeys(brokers, 0)
    givers: dict[int, set[int]] = {b: set() for b in brokers}  # f -> leaders of partitions f also holds
    for reps in assignment:
        if reps[0] in count:
            count[reps[0]] += 1
            for f in reps[1:]:
                if f in count:
                    givers[f].add(reps[0])
    reach: dict[int, int] = {}
    for w in sorted(brokers, key=lambda b: count[b]):
        if w in reach:
            continue
        reach[w] = count[w]
        stack = [w]
        while stack:
            for u in givers[stack.pop()]:
                if u not in reach:
                    reach[u] = count[w]
                    stack.append(u)
    return sum(1 for b in brokers if count[b] - reach[b] >= 2)


def time_io(plan, cluster: Cluster) -> dict:
    """Seconds to write and read the plan as Kafka's reassignment JSON, and to build the plan gate's frames."""
    from kafkaops.cli.planfile import read_assignment, write_plan
    from kafkaops.reassign.frames import plan_frame

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.json"
        start = time.perf_counter()
        write_plan(plan, path)
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        rows = read_assignment(path)
        read_s = time.perf_counter() - start
        size_mib = path.stat().st_size / 2**20
    start = time.perf_counter()
    frames = plan_frame(plan, cluster)
    frame_s = time.perf_counter() - start
    return {"write_json_s": write_s, "read_json_s": read_s, "json_mib": size_mib, "json_rows": len(rows),
            "frame_s": frame_s, "frame_rows": len(frames["partitions"]), "peak_io_mib": rss_mib()}


def spawn(spec: str, reference: Path | None, extras: bool, cap: float) -> dict:
    """One case in a fresh process, from the repository root; with ``reference`` (a
    :func:`reference_tree` folder) that folder first on its PYTHONPATH."""
    cmd = [sys.executable, "-m", "benchmarks.bench_planner_scale", "--case", spec] + \
          (["--reference-tree", str(reference)] if reference else []) + (["--extras"] if extras else [])
    env = dict(os.environ)
    if reference is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(reference), env.get("PYTHONPATH"))))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=cap, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"spec": spec, "reference": reference is not None, "timeout": cap}
    if done.returncode:
        return {"spec": spec, "reference": reference is not None, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the matrix ----------------------------------------------------------------------------------------
SERIES = [f"scale-out {n} 300 30 3 3" for n in (10_000, 100_000, 300_000, 1_000_000)]
"""The growth series: RF 3, 3 racks, 300 brokers + 30 (10 %); the 1M row is the issue's target."""

SHAPES = [
    "scale-out 100000 300 150 2 1",  # +50 %
    "scale-out 100000 300 30 2 2",
    "rebalance 100000 300 0 3 3",
    "drain 100000 300 3 3 3",
    "rebalance 100000 300 0 2 1",
    "scale-out 100000 300 150 3 3",
    "drain 100000 300 30 2 2",
]
"""RF 2 and 3, 1-3 racks, +10 % and +50 %, scale-out, rebalance and drain."""


def describe(spec: str) -> str:
    kind, n, b, change, rf, racks = spec.split()[:6]
    what = {"scale-out": f"+{change}", "drain": f"drain {change}", "drain-rebalance": f"drain {change} + rebalance after",
            "rebalance": "rebalance"}[kind]
    return f"{kind.split('-')[0]} {int(n):,} x RF{rf}, {b} brokers {what}, {racks} rack(s)"


def row(r: dict, cap: float) -> str:
    name = ("reference " if r["reference"] else "") + describe(r["spec"])
    if "timeout" in r:
        return f"| {name} | | | > {cap:.0f} s (cap) | | | | | | |"
    if "error" in r:
        return f"| {name} | | | failed: {r['error']} | | | | | | |"
    ratio = r["moves"] / r["lower_bound"] if r["lower_bound"] else float("nan")
    return (f"| {name} | {r['topics']:,} | {r['replica_spread_before']} | {r['seconds']:.1f} | {r['peak_mib']:,.0f} "
            f"({r['cluster_mib']:,.0f}) | {r['moves']:,} / {r['lower_bound']:,} = {ratio:.3f} | "
            f"{r['replica_spread']} | {r['leader_spread']} | {r['topic_spread']} ({r['topics_uneven']}) | "
            f"{r['byte_spread_before_pct']:.0f} -> {r['byte_spread_pct']:.0f} |")


def exponents(results: list[dict]) -> list[str]:
    done = [r for r in results if "seconds" in r]
    lines = []
    for a, b in zip(done, done[1:]):
        na, nb = int(a["spec"].split()[1]), int(b["spec"].split()[1])
        k = math.log(b["seconds"] / a["seconds"]) / math.log(nb / na)
        m = math.log(b["peak_mib"] / a["peak_mib"]) / math.log(nb / na)
        lines.append(f"{na:,} -> {nb:,}: time x{b['seconds'] / a['seconds']:.1f} (exponent {k:.2f}), "
                     f"peak memory exponent {m:.2f}")
    return lines


DRAINS = ["drain 100000 300 3 3 3", "drain 100000 300 30 2 2", "drain 10000 100 1 3 3"]
"""Drains of realistic uneven clusters: 3 of 300 brokers (RF 3, 3 racks), 30 of 300 (RF 2, 2 racks), 1 of 100."""


def kafka_generate_drain(spec: str) -> dict:
    """Kafka's own ``kafka-reassign-partitions --generate`` (the tools jar's ``calculateAssignment``) on the same
    cluster, asked for the brokers that stay: its moves, leader changes and spreads, and the call's seconds."""
    from benchmarks.kafka_generate import replica_moves, run_tool

    _, partitions, brokers, change, rf, racks = spec.split()[:6]
    partitions, brokers, change, rf, racks = map(int, (partitions, brokers, change, rf, racks))
    cluster = make_cluster(partitions, brokers, rf, racks)
    staying = [b for b in cluster.brokers if b.id > change]
    [(proposal, seconds)] = run_tool([(cluster, staying)])
    ids = [b.id for b in staying]
    held = dict.fromkeys(ids, 0)
    led = dict.fromkeys(ids, 0)
    per_topic: dict[str, dict[int, int]] = {}
    for (topic, _), reps in proposal.items():
        led[reps[0]] += 1
        on = per_topic.setdefault(topic, dict.fromkeys(ids, 0))
        for b in reps:
            held[b] += 1
            on[b] += 1
    topic_spread = {t: max(c.values()) - min(c.values()) for t, c in per_topic.items()}
    return {"held": sum(1 for p in cluster.partitions for b in p.replicas if b <= change),
            "moves": replica_moves(cluster, proposal), "seconds": seconds,
            "leader_changes": sum(1 for p in cluster.partitions if proposal[p.topic_partition][0] != p.replicas[0]),
            "replica_spread": max(held.values()) - min(held.values()),
            "leader_spread": max(led.values()) - min(led.values()),
            "chains_left": chains_left(proposal.values(), ids), "topic_spread": max(topic_spread.values()),
            "topics_uneven": sum(1 for v in topic_spread.values() if v > 1)}


def drains(*, save: bool) -> int:
    """Each drain shape planned twice in fresh processes: the drain alone (only what the drained brokers hold
    moves) and with rebalance_after (the cluster-wide evening every drain used to add); beside them Kafka's
    own ``--generate`` for the brokers that stay, on the same cluster in the same run."""
    lines = ["Drains on uneven clusters (`bench_planner_scale.py --drains`, one fresh process per case): moves "
             "against the replicas the drained brokers hold, the drain alone beside the same drain with "
             "rebalance_after and Kafka's own `kafka-reassign-partitions --generate` (the tools jar's "
             "`calculateAssignment`, one cold JVM call, for the brokers that stay) on the same cluster in the same "
             f"run. Load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.", "",
             "| case | held by the drained brokers | drain moves | moves / held | rebalance-after moves (apart) | "
             "replica spread before -> after | leader spread after | largest topic spread after (topics > 1) | "
             "leader changes (leader-only) | brokers a leader chain could still even | plan s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for spec in DRAINS:
        for kind in ("drain", "drain-rebalance"):
            r = spawn(spec.replace("drain", kind, 1), None, False, 600)
            if "moves" not in r:
                lines.append(f"| {describe(r['spec'])} | failed: {r} | | | | | | | | | |")
                continue
            parts = dict(r.get("parts") or ())
            ratio = r["moves"] / max(1, r["lower_bound"])
            if kind == "drain":
                worst = max(worst, ratio)
            lines.append(f"| {describe(r['spec'])} | {r['lower_bound']:,} | {parts.get('drain', r['moves']):,} | "
                         f"{ratio:.3f} | {parts.get('rebalance after', 0):,} | {r['replica_spread_before']} -> "
                         f"{r['replica_spread']} | {r['leader_spread']} | {r['topic_spread']} ({r['topics_uneven']}) | "
                         f"{r['leader_changes']:,} "
                         f"({r['leader_only']:,}) | {r['chains_left']} | {r['seconds']:.1f} |")
            print(lines[-1], flush=True)
        k = kafka_generate_drain(spec)
        lines.append(f"| kafka --generate: {describe(spec)} | {k['held']:,} | {k['moves']:,} | "
                     f"{k['moves'] / max(1, k['held']):.3f} | | -> {k['replica_spread']} | {k['leader_spread']} | "
                     f"{k['topic_spread']} ({k['topics_uneven']}) | {k['leader_changes']:,} | {k['chains_left']} | "
                     f"{k['seconds']:.1f} |")
        print(lines[-1], flush=True)
    publish("Planner: drains move what the drained brokers hold", lines, save=save)
    return 0 if worst <= 1.01 else 1


LEADER_CASES = ["scale-out 100000 300 30 3 3", "drain 100000 300 3 3 3", "rebalance 100000 300 0 2 1",
                "scale-out 1000000 300 30 3 3"]
"""Where leaders were left uneven: scale-outs and drains of uneven clusters, a rebalance, and the 1M scale-out."""

LEADERS_BEFORE = "0a9c738fb3037b0fd9127b796477428ac094ae20"
"""The planner before leaders were balanced to what the replica sets allow (issue 34 item 2): equal-count
targets and two augmenting passes, which stopped where those targets could not be met."""


def compare(spec: str, tree: Path, off: str) -> tuple[dict, dict, dict] | str:
    """``spec`` three times, each in a fresh process: this planner, the planner exported to ``tree``, and this
    planner with the goal flag ``off``; or what failed."""
    runs = (spawn(spec, None, False, 1800), spawn(spec, tree, False, 1800), spawn(f"{spec} {off}", None, False, 1800))
    failed = [r for r in runs if "moves" not in r]
    return f"failed: {failed}" if failed else runs


def compared(title: str, lines: list[str], cases: Sequence[str], revision: str, off: str,
             row: Callable[[str, tuple[dict, dict, dict]], str], bad: Callable[[tuple[dict, dict, dict]], bool], *,
             save: bool) -> int:
    """Each of ``cases`` through :func:`compare` against the planner at ``revision``, a ``row`` each under
    ``lines``, published as ``title``; 1 when a case failed or its runs are ``bad``."""
    failed = 0
    with reference_tree(revision) as tree:
        for spec in cases:
            runs = compare(spec, tree, off)
            if isinstance(runs, str):
                lines.append(f"| {describe(spec)} | {runs} |")
                failed += 1
                continue
            failed += bad(runs)
            lines.append(row(spec, runs))
            print(lines[-1], flush=True)
    publish(title, lines, save=save)
    return 1 if failed else 0


def leaders(*, save: bool) -> int:
    """Each case three times in fresh processes: this planner, the same with leaders off (the order the moves
    leave), and the planner at :data:`LEADERS_BEFORE` (exported from git), on the same clusters."""
    lines = ["Preferred leaders after a plan (`bench_planner_scale.py --leaders`, one fresh process per case): this "
             f"planner beside the same plan with balance_leaders off and the planner at {LEADERS_BEFORE[:7]} (the "
             "previous leader balancing), in the same run. \"chains\" counts brokers that could still pass a "
             "leadership along partitions they share to a broker leading two or more fewer (0: as even as the "
             "replica sets allow), checked by the benchmark's own search. Load average at start "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.", "",
             "| case | leader spread: this / before / off | chains: this / before / off | leader changes (leader-only):"
             " this / before | replica moves (same in all) | plan s: this / before / off |",
             "|---|---|---|---|---|---|"]

    def row(spec: str, runs: tuple[dict, dict, dict]) -> str:
        this, before, _ = runs
        return (f"| {describe(spec)} | {' / '.join(str(r['leader_spread']) for r in runs)} | "
                f"{' / '.join(str(r['chains_left']) for r in runs)} | {this['leader_changes']:,} "
                f"({this['leader_only']:,}) / {before['leader_changes']:,} ({before['leader_only']:,}) | "
                f"{this['moves']:,} | {' / '.join(format(r['seconds'], '.1f') for r in runs)} |")

    return compared("Planner: preferred leaders as even as the replicas allow", lines, LEADER_CASES, LEADERS_BEFORE,
                    "leaders-off", row, lambda runs: runs[0]["chains_left"] != 0 or runs[0]["moves"] != runs[2]["moves"],
                    save=save)


TOPIC_CASES = ["scale-out 100000 300 30 3 3", "scale-out 100000 300 150 2 1", "drain-rebalance 100000 300 3 3 3",
               "scale-out 1000000 300 30 3 3"]
"""Where topics were left uneven: scale-outs of uneven clusters (RF 3 on 3 racks, RF 2 on one, +10 % and +50 %),
a drain with rebalance_after, and the 1M scale-out."""

TOPICS_BEFORE = "a994e6c042fc765e54d35022f834b888fa140a59"
"""The planner before scale-outs leveled topics onto the new brokers (issue 34 item 3): exchanges of planned
moves only, under a search bound, and no per-topic evening after a drain's rebalance."""


def _reasons(notes: Sequence[str]) -> str:
    """The counts per reason of the plan's per-topic note, shortened for a table cell."""
    note = next((n for n in notes if n.startswith("per-topic spread")), "")
    short = {"a broker at or below": "kept by brokers at/below share", "more of it sits above": "above the level",
             "the new brokers' shares went": "shares spent", "leveled onto the new brokers": "refilled"}
    found = []
    for count, rest in re.findall(r"(\d+) (because [^;)]*|leveled onto the new brokers[^;)]*)", note):
        label = next((v for k, v in short.items() if k in rest), rest[:30])
        found.append(f"{int(count):,} {label}")
    return ", ".join(found) or "-"


def topics(*, save: bool) -> int:
    """Each case three times in fresh processes: this planner, the same with the topic goal off, and the planner
    at :data:`TOPICS_BEFORE` (exported from git), on the same clusters."""
    lines = ["Per-topic spread after a plan (`bench_planner_scale.py --topics`, one fresh process per case): topics "
             "left with a replica spread above one, this planner beside the planner at "
             f"{TOPICS_BEFORE[:7]} (before) and the same plan with topic_spread off, in the same run; \"why\" is "
             "this plan's own note. Load average at start "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.", "",
             "| case | topics | uneven topics: this / before / off | why (this plan's note) | largest topic spread: "
             "this / before / off | replica moves: this / before | GiB to copy: this / before | plan s: this / before / "
             "off | peak MiB (this) |",
             "|---|---|---|---|---|---|---|---|---|"]

    def row(spec: str, runs: tuple[dict, dict, dict]) -> str:
        this, before, _ = runs
        return (f"| {describe(spec)} | {this['topics']:,} | "
                f"{' / '.join(format(r['topics_uneven'], ',') for r in runs)} | {_reasons(this['notes'])} | "
                f"{' / '.join(str(r['topic_spread']) for r in runs)} | {this['moves']:,} / {before['moves']:,} | "
                f"{this['copy_bytes'] / 2**30:,.1f} / {before['copy_bytes'] / 2**30:,.1f} | "
                f"{' / '.join(format(r['seconds'], '.1f') for r in runs)} | {this['peak_mib']:,.0f} |")

    return compared("Planner: topics even where a plan's rules allow", lines, TOPIC_CASES, TOPICS_BEFORE, "topics-off",
                    row, lambda runs: runs[0]["topics_uneven"] > runs[1]["topics_uneven"]
                    or runs[0]["moves"] > runs[1]["moves"], save=save)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help="run one case in this process and print its figures as JSON")
    parser.add_argument("--reference", action="store_true",
                        help=f"with --case: the planner at {REFERENCE_REVISION[:7]}, in a subprocess")
    parser.add_argument("--reference-tree", type=Path, help=argparse.SUPPRESS)  # spawn's: the exported revision
    parser.add_argument("--extras", action="store_true", help="with --case: time the JSON and the gate's frame")
    parser.add_argument("--quick", action="store_true", help="the series up to 100k only, no shapes")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds per reference case (default 120)")
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    parser.add_argument("--drains", action="store_true",
                        help="only the drain shapes: what the drained brokers hold against what moves, beside the "
                             "same drain with rebalance_after in the same run")
    parser.add_argument("--leaders", action="store_true",
                        help="only the leader cases: leader spread and chains left, this planner beside the same plan "
                             f"with leaders off and the planner at {LEADERS_BEFORE[:7]}")
    parser.add_argument("--topics", action="store_true",
                        help="only the topic cases: topics left uneven, this planner beside the same plan with the "
                             f"topic goal off and the planner at {TOPICS_BEFORE[:7]}")
    args = parser.parse_args(argv)
    if args.topics:
        return topics(save=not args.no_results)
    if args.drains:
        return drains(save=not args.no_results)
    if args.leaders:
        return leaders(save=not args.no_results)
    if args.case and args.reference:
        with reference_tree() as tree:
            print(json.dumps(spawn(args.case, tree, args.extras, args.cap)))
        return 0
    if args.case:
        print(json.dumps(run_case(args.case, args.reference_tree, args.extras)))
        return 0
    series = SERIES[:2] if args.quick else SERIES
    results = []
    for spec in series:
        results.append(spawn(spec, None, spec.split()[1] == "1000000", 1800))
        print(row(results[-1], args.cap), flush=True)
    references = []
    with reference_tree() as tree:
        for spec in series:
            references.append(spawn(spec, tree, False, args.cap))
            print(row(references[-1], args.cap), flush=True)
            if "timeout" in references[-1]:
                break
    header = ["| case | topics | replica spread before | plan s | peak MiB (cluster alone) | moves / lower bound | "
              "replica spread | leader spread | largest topic spread (topics > 1) | byte spread % before -> after |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines = [f"Realistic shapes (heavy-tailed topics, uneven layout; `bench_planner_scale.py`), one fresh process per "
             f"case, peak = ru_maxrss of the whole process; reference = the planner at {REFERENCE_REVISION[:7]} (exported "
             f"from git for this run), capped at "
             f"{args.cap:.0f} s per case. Load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
             "", *header, *(row(r, args.cap) for r in results + references), "",
             "Growth (this planner, the series):", *(f"- {line}" for line in exponents(results))]
    big = next((r for r in results if "write_json_s" in r), None)
    if big:
        lines += ["", f"At 1M: writing Kafka's reassignment JSON ({big['json_rows']:,} partitions, "
                      f"{big['json_mib']:.0f} MiB) {big['write_json_s']:.1f} s, reading it back {big['read_json_s']:.1f} s, "
                      f"the plan gate's frames ({big['frame_rows']:,} rows) {big['frame_s']:.1f} s; peak with them "
                      f"{big['peak_io_mib']:,.0f} MiB. Plan summary: {big['summary']}"]
    lines.append(f"Load average at end {os.getloadavg()[0]:.1f}.")
    publish("Planner at scale", lines, save=not args.no_results)
    if args.quick:
        return 0
    shapes = []
    for spec in SHAPES:
        shapes.append(spawn(spec, None, False, 1800))
        print(row(shapes[-1], args.cap), flush=True)
    lines = ["Other shapes (RF 2 and 3, 1-3 racks, +10 % and +50 %, rebalance, drain), same columns as above:", "",
             *header, *(row(r, args.cap) for r in shapes), "", f"Load average at end {os.getloadavg()[0]:.1f}."]
    publish("Planner at scale: shapes", lines, save=not args.no_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
