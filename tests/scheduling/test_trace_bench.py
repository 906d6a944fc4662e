"""bench/trace_bench.py, the Alibaba GPU-sharing trace replay: pure, no database.

The replays run on a slice of the trace (every 10th node, every 6th task), a second or so each.
The trace lives in /work/shared/traces (not in the repository); those tests skip without it.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trace_bench.py"
_spec = importlib.util.spec_from_file_location("trace_bench", BENCH)
assert _spec and _spec.loader
tb = importlib.util.module_from_spec(_spec)
sys.modules["trace_bench"] = tb  # dataclasses look their module up by name
_spec.loader.exec_module(tb)

TRACE = tb.TRACE_DIR
needs_trace = pytest.mark.skipif(
    not (TRACE / "openb_node_list_gpu_node.csv").exists(), reason="no Alibaba trace here"
)


def _slice(nodes_every: int = 10, tasks_every: int = 6, pods: str = "default"):
    nodes = tb.read_nodes(TRACE / "openb_node_list_gpu_node.csv")[::nodes_every]
    tasks = tb.read_tasks(TRACE / f"openb_pod_list_{pods}.csv")[::tasks_every]
    return nodes, tasks


def _assert_consistent(result) -> None:
    """Nothing overfills a node or a device, and the bookkeeping matches the placements."""
    cpu, mem = defaultdict(int), defaultdict(int)
    milli: dict[tuple[str, int], int] = defaultdict(int)
    for task, node, devices in result.placements:
        assert len(devices) == task.num_gpu == len(set(devices))
        cpu[node.name] += task.cpu
        mem[node.name] += task.mem
        for d in devices:
            milli[(node.name, d)] += task.milli
        if task.spec is not None:
            assert node.model in task.spec, (task, node.model)
    for node in result.nodes:
        assert cpu[node.name] <= node.cpu_cap and node.cpu_left == node.cpu_cap - cpu[node.name]
        assert mem[node.name] <= node.mem_cap
        for d, left in enumerate(node.devices):
            assert milli[(node.name, d)] <= tb.MILLI
            assert left == tb.MILLI - milli[(node.name, d)]
    values = [v for v in result.alloc_pct if v is not None]
    assert len(result.alloc_pct) == tb.X_MAX + 1
    assert values and all(0 <= v <= 100 for v in values)
    assert values == sorted(values)  # nothing departs: allocation never falls


@needs_trace
@pytest.mark.parametrize("policy", list(tb.POLICIES))
def test_every_policy_replays_the_slice_without_overfilling(policy: str) -> None:
    nodes, tasks = _slice()
    result = tb.replay(nodes, tasks, policy, seed=42, keep=True)
    _assert_consistent(result)
    assert result.placed + result.failed == result.tasks
    # tuned to 130 % of the slice's GPUs: the arrivals overshoot the cluster, so some fail
    assert result.failed > 0 and result.at(130) is not None


@needs_trace
def test_gpu_spec_constraints_are_honoured() -> None:
    nodes, tasks = _slice(pods="gpuspec20")
    assert any(t.spec for t in tasks)
    for policy in ("random", "fgd", "engine"):
        result = tb.replay(nodes, tasks, policy, seed=43, keep=True)
        _assert_consistent(result)  # checks every placed task's model against its spec
        assert any(t.spec for t, _, _ in result.placements)


@needs_trace
def test_best_fit_allocates_at_least_as_much_as_random() -> None:
    nodes, tasks = _slice(nodes_every=5, tasks_every=3)
    random_run = tb.replay(nodes, tasks, "random", seed=42)
    best_fit = tb.replay(nodes, tasks, "bestfit", seed=42)
    assert best_fit.at(130) >= random_run.at(130)


@needs_trace
def test_the_harness_reads_the_paper_results() -> None:
    paper = tb.read_paper(tb.DEFAULT_PAPER)
    runs = paper[("openb_pod_list_default", "fgd")]
    assert sorted(runs) == list(range(42, 52)) and all(len(v) == 131 for v in runs.values())
    assert {p for (w, p) in paper if w == "openb_pod_list_default"} == set(tb.PAPER_NAMES)
    # the README's table: FGD 95.39, Random 87.47 at 130 % on the default list
    assert tb.paper_mean(paper, "openb_pod_list_default", "fgd", 130) == pytest.approx(
        95.39, abs=0.01
    )
    assert tb.paper_mean(paper, "openb_pod_list_default", "random", 130) == pytest.approx(
        87.47, abs=0.01
    )


@needs_trace
def test_the_command_prints_one_json_object(tmp_path: Path, capsys) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    for source, target, every in (
        (TRACE / "openb_node_list_gpu_node.csv", nodes, 20),
        (TRACE / "openb_pod_list_default.csv", pods, 10),
    ):
        with open(source, newline="") as f:
            rows = list(csv.reader(f))
        with open(target, "w", newline="") as f:
            csv.writer(f).writerows([rows[0], *rows[1::every]])
    code = tb.main(["--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "fgd" and out["seed"] == 42 and out["workload"] == "pods"
    assert len(out["alloc_pct"]) == 131


# --- pure, no trace needed ---------------------------------------------------------------------


def _node(name: str = "n", gpus: int = 2, cpu: int = 32_000, model: str = "T4"):
    return tb.NodeSpec(name, cpu, 128_000, gpus, model)


def _task(name: str, milli: int, num: int = 1, cpu: int = 1_000, spec=None):
    return tb.Task(name, cpu, 1_000, num if milli else 0, milli, spec)


@pytest.mark.parametrize("policy", list(tb.POLICIES))
def test_a_share_must_fit_on_one_device(policy: str) -> None:
    tasks = [_task("a", 600), _task("b", 600), _task("c", 600), _task("d", 400)]
    result = tb.replay([_node()], tasks, policy, seed=1, tune=0, shuffle=False, keep=True)
    # 600 + 600 take both devices; 600 more fits on neither (400 left on each); 400 does
    assert [t.name for t, _, _ in result.placements] == ["a", "b", "d"]
    assert sorted(result.nodes[0].devices) == [0, 400]


def test_whole_gpus_need_free_devices_and_the_spec_is_a_filter() -> None:
    nodes = [_node("t4", gpus=2, model="T4"), _node("v100", gpus=4, model="V100M32")]
    tasks = [
        _task("share", 300, spec=frozenset({"T4"})),
        _task("two", 1000, num=2, spec=frozenset({"T4"})),  # one T4 device is shared: fails
        _task("four", 1000, num=4),
    ]
    result = tb.replay(nodes, tasks, "bestfit", seed=1, tune=0, shuffle=False, keep=True)
    placed = {t.name: (n.name, d) for t, n, d in result.placements}
    assert placed == {"share": ("t4", [0]), "four": ("v100", [0, 1, 2, 3])}


def test_the_curve_averages_the_samples_at_each_whole_percent() -> None:
    total_gpus = 10  # 10,000 milli; 1 % = 100 milli
    samples = [(0, 0), (100, 100), (100, 100), (300, 200), (1_300, 900)]
    curve = tb.allocation_curve(samples, total_gpus, x_max=13)
    assert curve[0] == 0.0 and curve[1] == 1.0 and curve[3] == 2.0
    assert curve[2] == pytest.approx((1 + 1 + 2) / 3, abs=0.01)  # none at 2 %: x +- 1
    assert curve[6] is None and curve[13] == 9.0


def test_tuning_stops_at_the_target() -> None:
    import random

    tasks = [_task(f"t{i}", 500) for i in range(4)]  # 2 GPUs asked
    order = tb.arrival_order(tasks, 4_000, 1.3, random.Random(3), shuffle=True)
    asked = sum(t.gpu_total for t in order)
    assert 4_700 <= asked <= 5_200 and len(order) == asked // 500
    big = tb.arrival_order(tasks, 1_000, 1.3, random.Random(3), shuffle=True)
    assert sum(t.gpu_total for t in big) <= 1_300  # too much asked: random tasks dropped


@needs_trace
def test_the_engine_fails_a_task_only_when_no_node_could_take_it() -> None:
    # gpupool's engine (``--policy engine``: the real decide, one task at a time) books
    # devices, CPU and memory: it must never turn a task away that some node could hold.
    turned_away: list[str] = []

    class Checked(tb.EnginePolicy):
        def choose(self, task, nodes, rng):
            chosen = super().choose(task, nodes, rng)
            if chosen is None and any(n.mem_left >= task.mem and n.gpu_fits(task) for n in nodes):
                turned_away.append(task.name)
            return chosen

    tb.register_policy("engine-checked", Checked)
    try:
        nodes, tasks = _slice(nodes_every=8, tasks_every=4)
        result = tb.replay(nodes, tasks, "engine-checked", seed=44, keep=True)
    finally:
        del tb.POLICIES["engine-checked"]
    _assert_consistent(result)
    assert result.failed > 0
    assert turned_away == []


@needs_trace
def test_engine_json_has_the_papers_fields(capsys) -> None:
    nodes_path = TRACE / "openb_node_list_gpu_node.csv"
    assert (
        tb.main(
            [
                "--nodes",
                str(nodes_path),
                "--policy",
                "engine",
                "--seed",
                "42",
                "--tune",
                "0.2",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "engine" and out["seed"] == 42
    assert len(out["alloc_pct"]) == tb.X_MAX + 1


def test_a_perturbed_list_is_another_list_with_as_many_shapes() -> None:
    nodes = [_node(f"n{i}", gpus=1 + i % 4, cpu=16_000 * (1 + i % 3)) for i in range(20)]
    tasks = [
        _task(f"t{i}", milli=(100, 470, 810, 1000)[i % 4], cpu=1_000 * (1 + i % 5))
        for i in range(200)
    ]
    new_nodes, new_tasks = tb.perturb(nodes, tasks, 7)
    assert len(new_nodes) == len(nodes) and len(new_tasks) == len(tasks)
    assert {(n.cpu, n.gpus) for n in new_nodes} <= {(n.cpu, n.gpus) for n in nodes}
    shapes = {(t.cpu, t.num_gpu, t.milli) for t in tasks}
    moved = {(t.cpu, t.num_gpu, t.milli) for t in new_tasks}
    assert len(moved) <= len(shapes) and moved != shapes  # moved apart, not multiplied
    assert all(10 <= t.milli <= 990 for t in new_tasks if t.is_share)
    assert tb.perturb(nodes, tasks, 7) == (new_nodes, new_tasks)  # seeded
    assert tb.perturb(nodes, tasks, 8) != (new_nodes, new_tasks)
