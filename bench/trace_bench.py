"""Replay the Alibaba GPU-sharing trace (ATC '23, "Beware of Fragmentation") under a policy.

    .venv/bin/python bench/trace_bench.py --policy fgd --seed 42 [--tune 1.3] [--json]
        [--nodes FILE] [--pods FILE] [--no-shuffle] [--ties order|random]
    .venv/bin/python bench/trace_bench.py --compare [--policies random,bestfit,fgd]
        [--seeds 42,43] [--pods FILE ...] [--paper CSV] [--json]
    .venv/bin/python bench/trace_bench.py --quick      # one short compare (make bench --quick)

The experiment is the paper's (its public simulator, ``hkust-adsl/kubernetes-scheduler-simulator``,
read for the rules below; no code of it is copied). The cluster is the node list (1,213 GPU
nodes, 6,212 GPUs); each node keeps its CPU and memory left and, per GPU device, the
thousandths (milli) of the device left. The tasks are the pod list, shuffled (seeded), then
tuned to ``tune`` x the cluster's GPUs: while the list asks less, tasks drawn at random from it
(seeded, with replacement) are appended until the next draw's per-device GPU milli would pass
the target; while it asks more (multigpu50), random tasks are dropped until it does not. Each
task is placed on arrival or fails; nothing departs. After every task the harness records the
GPU milli that has arrived and the GPU milli allocated; ``alloc_pct[x]`` is the mean allocation
(% of the cluster's GPU milli) over the tasks after which the arrived GPU requests round to
``x`` % of the cluster's GPUs (as the paper's analysis does).

A node is feasible when its CPU and memory left cover the request, its GPU model is in the
task's ``gpu_spec`` (if any), and its devices fit the GPU request: a share (``gpu_milli`` < 1000)
on one device with that much left, ``num_gpu`` whole GPUs on fully free devices. The policy
scores every feasible node (an integer, higher is better); among equal best scores the first
in a seeded random order of the nodes wins, as in the paper's simulator (``--ties random``
draws one instead, which costs GPU clustering, GPU packing and FGD 3 to 6 points):

* ``random``: every feasible node alike; a share goes to a random device that fits.
* ``dotprod``: Tetris: 1 - (cpu_left/128 cores . cpu_req/128 + gpu_left/8 . gpu_req/8) / 2.
* ``clustering``: GPU clustering: nodes already holding tasks of the same GPU kind (share,
  1-GPU, 2-GPU ...) first, nodes holding only that kind best, then empty nodes, then the rest;
  fuller nodes first within each band.
* ``packing``: GPU packing: a partly used device first, then free devices of a used node, then
  an empty node (fewest GPUs first).
* ``bestfit``: least CPU and GPU left after placing (equal weights, normalised by 128 cores and
  8 GPUs).
* ``fgd``: fragmentation gradient descent. A node's fragmentation is measured against the
  *typical* tasks (the most common task shapes covering 95 % of the list, with their
  frequencies): for each typical task that the node could not host (not enough CPU, no device
  or not enough devices with enough milli, wrong model) all its idle GPU milli counts as
  fragment (so always for a CPU-only one); for one it could host, the milli on devices too
  small for it counts. The task goes where (and, for a share, to the device where) the
  expected fragmentation grows least.

Shares use best fit on devices (the fullest device that fits) except under ``random`` and
``fgd``; whole GPUs take the first fully free devices.

``random.Random(seed)`` replaces Go's ``math/rand`` (shuffle, tuning draws, node order), so a
seed here does not replay the paper's seed of the same number: compare means over seeds.

Another placement engine plugs in with ``register_policy(name, factory)``: the factory gets the
typical tasks and returns a ``Policy``; override ``Policy.evaluate`` (score one node for one
task) or, for a global decision, ``Policy.choose(task, nodes, rng)``. ``engine`` is gpupool's
own: the real ``engine.decide`` per task (see :class:`EnginePolicy`).

The trace and the cluster's bookkeeping live in ``trace_model.py``, the policies in
``trace_policies.py``: sibling modules of this script, found through ``sys.path``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

# Sibling modules, found through sys.path: the trace and the cluster, then the policies.
from trace_model import (  # noqa: E402
    MILLI,
    Node,
    NodeSpec,
    Task,
    Typical,
    arrival_order,
    read_nodes,
    read_tasks,
    typical_tasks,
    workload_name,
)
from trace_policies import (  # noqa: E402
    PAPER_NAMES,
    POLICIES,
    FgdPolicy,
    RandomPolicy,
    policy_name,
)

# Re-exported: another engine plugs in through ``register_policy`` and ``Policy`` (see above),
# and the tests subclass ``EnginePolicy``.
from trace_policies import EnginePolicy as EnginePolicy  # noqa: E402
from trace_policies import Policy as Policy  # noqa: E402
from trace_policies import register_policy as register_policy  # noqa: E402

TRACE_DIR = Path("/work/shared/traces/alibaba-gpu-2023")
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACE_DIR / "openb_pod_list_default.csv"
DEFAULT_PAPER = TRACE_DIR / "paper-results" / "allocation_by_arrived_workload.csv"
X_MAX = 130  # alloc_pct covers arrived GPU requests 0..130 % of the cluster's GPUs


# ---------------------------------------------------------------------------------------------
# The replay


@dataclass
class Replay:
    policy: str
    seed: int
    workload: str
    tune: float
    total_gpus: int
    tasks: int = 0
    placed: int = 0
    failed: int = 0
    failed_gpu_milli: int = 0
    seconds: float = 0.0
    frag_pct: float = 0.0  # the final cluster's FGD fragmentation, % of its GPUs
    alloc_pct: list[float | None] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list, repr=False)
    placements: list[tuple[Task, Node, list[int]]] = field(default_factory=list, repr=False)

    def at(self, x: int) -> float | None:
        return self.alloc_pct[x] if x < len(self.alloc_pct) else None

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "workload": self.workload,
            "tune": self.tune,
            "total_gpus": self.total_gpus,
            "tasks": self.tasks,
            "placed": self.placed,
            "failed": self.failed,
            "seconds": round(self.seconds, 2),
            "frag_pct": self.frag_pct,
            "alloc_pct": self.alloc_pct,
        }


def allocation_curve(
    samples: Iterable[tuple[int, int]], total_gpus: int, x_max: int = X_MAX
) -> list[float | None]:
    """``samples``: (arrived GPU milli, allocated GPU milli) after each task. For each whole %
    x of arrived GPU requests, the mean allocation (% of the cluster's GPU milli) over the
    samples whose arrival rounds to x (those within x +- 1 when none does; None when still
    none), as the paper's analysis computes it."""
    by_x: dict[int, list[float]] = defaultdict(list)
    for arrived, used in samples:
        by_x[round(arrived / total_gpus / 10)].append(round(used / total_gpus / 10, 2))
    curve: list[float | None] = []
    for x in range(x_max + 1):
        values = by_x.get(x) or [v for y in (x - 1, x, x + 1) for v in by_x.get(y, ())]
        curve.append(round(statistics.fmean(values), 2) if values else None)
    return curve


def fragmentation_pct(cluster: Sequence[Node], typical: Sequence[Typical]) -> float:
    """The cluster's fragmentation as the FGD paper measures it (the idle GPU milli that the
    typical tasks, by frequency, could not use where it lies), as % of the cluster's GPUs:
    the same yardstick for every policy."""
    measure = FgdPolicy(typical)
    frag = sum(measure.fragmentation(n.model, n.cpu_left, n.devices) for n in cluster if n.ngpu)
    gpus = sum(n.ngpu for n in cluster) * MILLI
    return round(100 * frag / gpus, 2) if gpus else 0.0


def perturb(
    nodes: Sequence[NodeSpec], tasks: Sequence[Task], seed: int
) -> tuple[list[NodeSpec], list[Task]]:
    """A cluster and a list that are not the files given, for checking that a policy is not
    fitted to them: as many nodes, drawn from the list with replacement; as many tasks,
    drawn with replacement; and every task shape (CPU, memory, GPUs, model list) moved
    apart: its CPU and memory scaled by a factor in 0.7..1.3, a share's thousandths by one
    in 0.8..1.2 (to the nearest 10, within 10..990), one draw per shape so the list keeps
    as many shapes as it had. All seeded by ``seed``."""
    rng = random.Random(f"perturb-{seed}")
    picked = [nodes[rng.randrange(len(nodes))] for _ in nodes]
    new_nodes = [
        NodeSpec(f"p{seed}-{i:05d}", n.cpu, n.mem, n.gpus, n.model) for i, n in enumerate(picked)
    ]
    moved: dict[tuple[int, int, int, int, frozenset[str] | None], tuple[int, int, int]] = {}
    for t in sorted(tasks, key=lambda t: t.name):
        key = (t.cpu, t.mem, t.num_gpu, t.milli, t.spec)
        if key not in moved:
            scale = rng.uniform(0.7, 1.3)
            milli = t.milli
            if t.is_share:
                milli = min(990, max(10, round(milli * rng.uniform(0.8, 1.2) / 10) * 10))
            moved[key] = (
                max(100, round(t.cpu * scale / 100) * 100),
                max(1, round(t.mem * scale)),
                milli,
            )
    new_tasks = []
    for i in range(len(tasks)):
        t = tasks[rng.randrange(len(tasks))]
        cpu, mem, milli = moved[(t.cpu, t.mem, t.num_gpu, t.milli, t.spec)]
        new_tasks.append(Task(f"p{seed}-{i:06d}", cpu, mem, t.num_gpu, milli, t.spec))
    return new_nodes, new_tasks


def replay(
    nodes: Sequence[NodeSpec],
    tasks: Sequence[Task],
    policy: str,
    seed: int,
    tune: float = 1.3,
    workload: str = "",
    shuffle: bool = True,
    keep: bool = False,
    ties: str = "order",
) -> Replay:
    """Place the tuned, ordered tasks one by one; ``keep`` keeps the nodes and placements.

    ``ties="order"``: among equally scored nodes the first in a seeded random order of the
    nodes wins (the paper's simulator prefixes node names with a random permutation and its
    scheduler keeps the first best); ``ties="random"``: a uniform draw among them."""
    began = time.process_time()
    rng = random.Random(seed)
    cluster = [Node(n) for n in sorted(nodes, key=lambda n: n.name)]
    total_gpus = sum(n.ngpu for n in cluster)
    typical = typical_tasks(tasks)
    chooser = POLICIES[policy_name(policy)](typical)
    if not isinstance(chooser, RandomPolicy):
        chooser.ties = ties
    order = arrival_order(tasks, total_gpus * MILLI, tune, rng, shuffle)
    rng.shuffle(cluster)  # the node order that breaks ties
    result = Replay(policy_name(policy), seed, workload, tune, total_gpus, tasks=len(order))
    arrived = used = 0
    samples = []
    for task in order:
        arrived += task.gpu_total
        choice = chooser.choose(task, cluster, rng)
        if choice is None:
            result.failed += 1
            result.failed_gpu_milli += task.gpu_total
        else:
            node, devices = choice
            node.place(task, devices)
            used += task.gpu_total
            result.placed += 1
            if keep:
                result.placements.append((task, node, devices))
        samples.append((arrived, used))
    result.alloc_pct = allocation_curve(samples, total_gpus)
    result.seconds = time.process_time() - began
    result.frag_pct = fragmentation_pct(cluster, typical)
    if keep:
        result.nodes = cluster
    return result


# ---------------------------------------------------------------------------------------------
# The paper's figures


def read_paper(path: Path | str = DEFAULT_PAPER) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(workload, our policy name) -> {seed: [alloc at 0..130 %]} from the paper's CSV."""
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(dict)
    labels = {label: name for name, label in PAPER_NAMES.items()}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            name = labels.get(row["sc_policy"])
            if name is None:
                continue
            values = [float(row[str(x)]) if row.get(str(x)) else math.nan for x in range(X_MAX + 1)]
            out[(row["workload"], name)][int(float(row["seed"]))] = values
    return dict(out)


def paper_mean(
    paper: dict[tuple[str, str], dict[int, list[float]]], workload: str, policy: str, x: int
) -> float | None:
    runs = paper.get((workload, policy))
    if not runs:
        return None
    values = [v[x] for v in runs.values() if not math.isnan(v[x])]
    return statistics.fmean(values) if values else None


def _fmt(v: float | None, width: int = 7, sign: bool = False) -> str:
    if v is None:
        return "-".rjust(width)
    return f"{v:+{width}.2f}" if sign else f"{v:{width}.2f}"


def compare(
    nodes_path: Path,
    pods_paths: Sequence[Path],
    policies: Sequence[str],
    seeds: Sequence[int],
    tune: float,
    paper_path: Path,
    as_json: bool,
    shuffle: bool = True,
    ties: str = "order",
    perturbed: int | None = None,
    markdown: bool = False,
) -> int:
    """Policies x lists x seeds: allocation at 100 % and 130 % of arrivals, what is left
    unallocated at 130 %, the final fragmentation, beside the paper's figures (none for a
    perturbed list: it is not the paper's)."""
    base_nodes = read_nodes(nodes_path)
    paper = read_paper(paper_path) if paper_path.exists() and perturbed is None else {}
    rows = []
    if markdown:
        print(
            "| list | policy | ours @100 | paper @100 | ours @130 | paper @130 |"
            " ours unalloc | paper unalloc | ours frag |"
        )
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    elif not as_json:
        print(
            f"{len(base_nodes)} nodes, {sum(n.gpus for n in base_nodes)} GPUs;"
            f" seeds {','.join(map(str, seeds))}; tune {tune}; ties by {ties};"
            + (f" perturbed with seed {perturbed};" if perturbed is not None else "")
            + " paper = mean of its 10 seeds; unalloc = 100 - alloc@130;"
            " frag = FGD's measure of the final cluster, % of its GPUs"
        )
        print(
            f"{'list':<13} {'policy':<11} {'ours@100':>8} {'paper':>7} {'diff':>6}"
            f" {'ours@130':>8} {'paper':>7} {'diff':>6} {'unalloc':>7} {'paper':>7}"
            f" {'frag':>6} {'sd@130':>6} {'s/run':>6}"
        )
    for pods_path in pods_paths:
        nodes, tasks = base_nodes, read_tasks(pods_path)
        if perturbed is not None:
            nodes, tasks = perturb(base_nodes, tasks, perturbed)
        workload = workload_name(pods_path)
        short = workload.removeprefix("openb_pod_list_")
        for policy in policies:
            name = policy_name(policy)
            runs = [
                replay(nodes, tasks, name, s, tune, workload, shuffle, ties=ties) for s in seeds
            ]
            row: dict[str, Any] = {"workload": workload, "policy": name, "seeds": list(seeds)}
            if perturbed is not None:
                row["perturbed"] = perturbed
            for x in (100, 130):
                ours = [r.at(x) for r in runs if r.at(x) is not None]
                mine = statistics.fmean(ours) if ours else None
                theirs = paper_mean(paper, workload, name, x)
                row[f"ours_{x}"] = None if mine is None else round(mine, 2)
                row[f"paper_{x}"] = None if theirs is None else round(theirs, 2)
                row[f"diff_{x}"] = (
                    None if mine is None or theirs is None else round(mine - theirs, 2)
                )
            row["unalloc"] = None if row["ours_130"] is None else round(100 - row["ours_130"], 2)
            row["paper_unalloc"] = (
                None if row["paper_130"] is None else round(100 - row["paper_130"], 2)
            )
            row["frag"] = round(statistics.fmean(r.frag_pct for r in runs), 2)
            at130 = [r.at(130) for r in runs if r.at(130) is not None]
            row["sd_130"] = round(statistics.pstdev(at130), 2) if len(at130) > 1 else None
            row["seconds_per_run"] = round(statistics.fmean(r.seconds for r in runs), 1)
            rows.append(row)
            if as_json:
                continue
            if markdown:
                label = PAPER_NAMES.get(name, name).split("-", 1)[-1]
                cells = [
                    _fmt(row[k], 0).strip()
                    for k in (
                        "ours_100",
                        "paper_100",
                        "ours_130",
                        "paper_130",
                        "unalloc",
                        "paper_unalloc",
                        "frag",
                    )
                ]
                print(f"| {short} | {label} | " + " | ".join(cells) + " |", flush=True)
                continue
            print(
                f"{short:<13} {name:<11} {_fmt(row['ours_100'], 8)} {_fmt(row['paper_100'])}"
                f" {_fmt(row['diff_100'], 6, True)} {_fmt(row['ours_130'], 8)}"
                f" {_fmt(row['paper_130'])} {_fmt(row['diff_130'], 6, True)}"
                f" {_fmt(row['unalloc'])} {_fmt(row['paper_unalloc'])} {_fmt(row['frag'], 6)}"
                f" {_fmt(row['sd_130'], 6)} {row['seconds_per_run']:6.1f}",
                flush=True,
            )
    if as_json:
        print(json.dumps(rows))
    return 0


def print_table(result: Replay) -> None:
    print(
        f"{result.workload} under {result.policy}, seed {result.seed}, tune {result.tune}:"
        f" {result.tasks} tasks, {result.placed} placed, {result.failed} failed"
        f" ({result.failed_gpu_milli / MILLI:.1f} GPUs asked by failed tasks);"
        f" {result.seconds:.1f} s CPU"
    )
    print("arrived % of GPUs -> allocated % of GPUs")
    for x in range(0, X_MAX + 1, 10):
        print(f"  {x:4d} {_fmt(result.at(x))}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--pods", type=Path, nargs="+", default=[DEFAULT_PODS])
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument(
        "--json", action="store_true", help="one JSON object (a list with --compare)"
    )
    parser.add_argument("--no-shuffle", action="store_true", help="place the list in its own order")
    parser.add_argument(
        "--compare", action="store_true", help="policies x seeds x lists vs the paper"
    )
    parser.add_argument("--policies", default=",".join(PAPER_NAMES))
    parser.add_argument("--seeds", default="42,43")
    parser.add_argument("--paper", type=Path, default=DEFAULT_PAPER)
    parser.add_argument("--quick", action="store_true", help="compare bestfit and fgd, one seed")
    parser.add_argument(
        "--ties",
        choices=("order", "random"),
        default="order",
        help="equal scores: first in a seeded node order (the paper's), or a uniform draw",
    )
    parser.add_argument(
        "--perturb",
        type=int,
        default=None,
        metavar="N",
        help="replay a resampled node list and a resampled, jittered pod list (seed N)",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="--compare as a Markdown table (docs)"
    )
    args = parser.parse_args(argv)
    if not args.nodes.exists():
        print(f"no node list at {args.nodes} (see /work/shared/traces/README.md)", file=sys.stderr)
        return 2
    shuffle = not args.no_shuffle
    if args.quick or args.compare:
        policies = ["bestfit", "fgd"] if args.quick else args.policies.split(",")
        seeds = [42] if args.quick else [int(s) for s in args.seeds.split(",") if s.strip()]
        return compare(
            args.nodes,
            args.pods,
            [p for p in policies if p.strip()],
            seeds,
            args.tune,
            args.paper,
            args.json,
            shuffle=shuffle,
            ties=args.ties,
            perturbed=args.perturb,
            markdown=args.markdown,
        )
    pods = args.pods[0]
    nodes, tasks = read_nodes(args.nodes), read_tasks(pods)
    if args.perturb is not None:
        nodes, tasks = perturb(nodes, tasks, args.perturb)
    result = replay(
        nodes,
        tasks,
        args.policy,
        args.seed,
        args.tune,
        workload_name(pods),
        shuffle=shuffle,
        ties=args.ties,
    )
    if args.json:
        print(json.dumps(result.as_json()))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
