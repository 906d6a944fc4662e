"""Node bookkeeping and gang placement for the simulated Volcano scheduler.

The rules follow what Volcano's ``allocate`` action does with the ``gang``, ``predicates`` and
``nodeorder`` plugins, reduced to what the portal can observe:

* A gang (a PodGroup's pending pods) is placed **all or nothing**: at least ``need`` pods must
  fit at once, otherwise nothing is bound and the first pod that did not fit explains why.
* Static predicates, in the order of the kube-scheduler plugins Volcano reuses: unschedulable
  (cordon), taints vs tolerations, nodeSelector and required node affinity. They depend only on
  the node and the pod template, so the set of statically feasible nodes is cached per template
  *signature* and rebuilt only when a node's labels, taints or readiness change.
* Resource fit compares requests with allocatable minus what bound pods use, per resource
  (``nvidia.com/gpu``, ``nvidia.com/mig-*``, cpu, memory, pods). Free resources are kept per
  node and updated on bind/release, never recomputed from the pod list.
* Placement is next-fit over the feasible list with a cursor per signature: filling a cluster
  of 2,000 nodes costs O(1) per pod instead of a scan, and full nodes are not rescanned.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubesim.devices import DEVICE_ONLY, NO_PICK, DevicePick, SharedDevices
from kubesim.quantity import resource_list_to_milli
from kubesim.selectors import node_selector_term_matches, tolerates

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


@dataclass(frozen=True)
class PodConstraints:
    """The scheduling-relevant part of a pod template, with a cache key."""

    node_selector: dict[str, str]
    affinity_terms: tuple[dict[str, Any], ...]
    tolerations: tuple[dict[str, Any], ...]
    signature: str
    devices: DevicePick = NO_PICK
    """Which shared devices the pod may take, and how (its template's annotations): checked
    by the device-level fit, not the static predicates."""

    @classmethod
    def from_spec(
        cls, spec: dict[str, Any], annotations: dict[str, Any] | None = None
    ) -> PodConstraints:
        """Extract nodeSelector, required node affinity and tolerations from a PodSpec, and
        the device pins and policy from the pod template's ``annotations``."""
        selector = dict(spec.get("nodeSelector") or {})
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = tuple(required.get("nodeSelectorTerms") or [])
        tolerations = tuple(spec.get("tolerations") or [])
        devices = DevicePick.from_annotations(annotations)
        signature = json.dumps([selector, terms, tolerations], sort_keys=True)
        if devices.key:
            signature += f"<devices {devices.key}>"
        return cls(selector, terms, tolerations, signature, devices)


class NodeState:
    """What the scheduler knows about one node; ``used`` is updated on bind and release."""

    __slots__ = (
        "allocatable",
        "devices",
        "labels",
        "name",
        "pods",
        "ready",
        "taints",
        "unschedulable",
        "used",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.labels: dict[str, str] = {}
        self.taints: list[dict[str, Any]] = []
        self.unschedulable = False
        self.ready = True
        self.allocatable: dict[str, int] = {}
        self.used: dict[str, int] = {}
        self.pods: set[tuple[str, str]] = set()
        self.devices: SharedDevices | None = None

    def fits(self, req: dict[str, int], pick: DevicePick = NO_PICK) -> bool:
        """Whether every requested resource is free on the node (a shared GPU: on one device
        the pod may use)."""
        alloc, used = self.allocatable, self.used
        for name, value in req.items():
            if value and name not in DEVICE_ONLY and alloc.get(name, 0) - used.get(name, 0) < value:
                return False
        if self.devices is None:
            # Only a node whose device plugin registered its devices takes a share.
            return not any(req.get(name) for name in DEVICE_ONLY)
        return self.devices.fits(req, pick)

    def insufficient(self, req: dict[str, int], pick: DevicePick = NO_PICK) -> list[str]:
        """Resources the node lacks for ``req`` ("Too many pods" for the pods resource)."""
        out = []
        for name, value in sorted(req.items()):
            if name in DEVICE_ONLY:
                continue
            if value and self.allocatable.get(name, 0) - self.used.get(name, 0) < value:
                out.append("Too many pods" if name == "pods" else f"Insufficient {name}")
        if not out and self.devices is not None:
            out.extend(self.devices.why(req, pick))
        elif not out and any(req.get(name) for name in DEVICE_ONLY):
            out.append("NodeUnfitPod")  # no shared devices registered here
        return out

    def add(
        self, req: dict[str, int], key: tuple[str, str] | None = None, pick: DevicePick = NO_PICK
    ) -> None:
        """Reserve ``req`` on the node (and a shared GPU's devices, held under ``key``)."""
        for name, value in req.items():
            self.used[name] = self.used.get(name, 0) + value
        if self.devices is not None and key is not None:
            self.devices.take(key, req, pick)

    def subtract(self, req: dict[str, int], key: tuple[str, str] | None = None) -> None:
        """Release ``req`` from the node (and the devices ``key`` held)."""
        for name, value in req.items():
            self.used[name] = self.used.get(name, 0) - value
        if self.devices is not None and key is not None:
            self.devices.give_back(key)


def static_reason(node: NodeState, pod: PodConstraints) -> str | None:
    """The first failing static predicate for the node, in kube-scheduler's words, or None."""
    if node.unschedulable and not any(
        tolerates(pod.tolerations, t) for t in node.taints if t.get("key") == UNSCHEDULABLE_TAINT
    ):
        return "node(s) were unschedulable"
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
            pod.tolerations, taint
        ):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    if pod.affinity_terms and not any(
        node_selector_term_matches(term, node.labels, node.name) for term in pod.affinity_terms
    ):
        return "node(s) didn't match Pod's node affinity/selector"
    return None


@dataclass
class FeasibleSet:
    """Statically feasible nodes for one template signature, with the next-fit cursor."""

    nodes: list[NodeState]
    cursor: int = 0


@dataclass
class GangPod:
    """One pending pod handed to :meth:`Scheduler.place_gang`."""

    key: tuple[str, str]
    req: dict[str, int]
    constraints: PodConstraints
    shape: Any = None


@dataclass
class Placement:
    """Result of a gang attempt: bindings (empty on failure) and the reason when it failed."""

    bound: list[tuple[GangPod, NodeState]] = field(default_factory=list)
    unplaced: int = 0
    fit_error: str | None = None


class Scheduler:
    """Node states, the feasibility cache and the gang placement algorithm."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self._order: list[NodeState] = []
        self._feasible: dict[str, FeasibleSet] = {}
        self.total: dict[str, int] = {}
        self.used: dict[str, int] = {}
        self.version = 0  # bumps when nodes change or resources are released
        self.binds = 0
        self._fit_errors: dict[Any, str] = {}

    # -- nodes ---------------------------------------------------------------------------
    def upsert_node(self, node: dict[str, Any]) -> NodeState:
        """Refresh a node's static facts from its object; invalidates the feasibility cache."""
        name = node["metadata"]["name"]
        state = self.nodes.get(name)
        if state is None:
            state = NodeState(name)
            self.nodes[name] = state
            self._order.append(state)
        else:
            for res, value in state.allocatable.items():
                self.total[res] = self.total.get(res, 0) - value
        spec, status = node.get("spec") or {}, node.get("status") or {}
        state.labels = dict(node["metadata"].get("labels") or {})
        state.taints = list(spec.get("taints") or [])
        state.unschedulable = bool(spec.get("unschedulable"))
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        state.ready = conditions.get("Ready", "True") == "True"
        state.allocatable = resource_list_to_milli(status.get("allocatable"))
        devices = SharedDevices.from_node(node)
        if devices is None or state.devices is None or not state.devices.same_layout(devices):
            state.devices = devices  # a new layout starts empty; an unchanged one keeps its books
        for res, value in state.allocatable.items():
            self.total[res] = self.total.get(res, 0) + value
        self._feasible.clear()
        self.version += 1
        return state

    def remove_node(self, name: str) -> None:
        """Forget a node (its pods must have been released by the caller)."""
        state = self.nodes.pop(name, None)
        if state is not None:
            self._order.remove(state)
            for res, value in state.allocatable.items():
                self.total[res] = self.total.get(res, 0) - value
            self._feasible.clear()
            self.version += 1

    def bind(self, node: NodeState, key: tuple[str, str], req: dict[str, int]) -> None:
        """Account a pod on a node (after a successful placement, or on restore)."""
        node.pods.add(key)
        self.binds += 1
        for name, value in req.items():
            self.used[name] = self.used.get(name, 0) + value

    def release(self, node_name: str, key: tuple[str, str], req: dict[str, int]) -> None:
        """Give a pod's resources back to its node."""
        node = self.nodes.get(node_name)
        if node is not None and key in node.pods:
            node.pods.discard(key)
            node.subtract(req, key)
            self.version += 1
            for name, value in req.items():
                self.used[name] = self.used.get(name, 0) - value

    # -- feasibility ---------------------------------------------------------------------
    def feasible(self, pod: PodConstraints) -> FeasibleSet:
        """Nodes passing the static predicates for this template (cached by signature)."""
        fs = self._feasible.get(pod.signature)
        if fs is None:
            fs = FeasibleSet([n for n in self._order if static_reason(n, pod) is None])
            self._feasible[pod.signature] = fs
        return fs

    def fit_error(self, pod: GangPod) -> str:
        """Volcano's FitErrors text for a pod that fits nowhere right now.

        Counting reasons means visiting every node, so the text is memoised per pod shape
        until nodes change, resources are released or another 500 pods have been bound; it
        is an explanation for humans, not an input to any decision.
        """
        key = None
        if pod.shape is not None:
            key = (pod.shape, self.version, self.binds // 500)
            cached = self._fit_errors.get(key)
            if cached is not None:
                return cached
        message = self._fit_error(pod)
        if key is not None:
            if len(self._fit_errors) > 256:
                self._fit_errors.clear()
            self._fit_errors[key] = message
        return message

    def _fit_error(self, pod: GangPod) -> str:
        reasons: Counter[str] = Counter()
        for node in self._order:
            reason = static_reason(node, pod.constraints)
            if reason is not None:
                reasons[reason] += 1
                continue
            for item in node.insufficient(pod.req, pod.constraints.devices):
                reasons[item] += 1
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        return f"0/{len(self._order)} nodes are unavailable: {parts}."

    # -- placement -----------------------------------------------------------------------
    def place_gang(self, pods: Iterable[GangPod], need: int, *, spread: bool = False) -> Placement:
        """Bind at least ``need`` of ``pods`` at once, or none of them.

        Pods are tried in order; each takes the next node (from the signature's cursor) with
        room for it, and its request is deducted immediately so the next pod of the gang sees
        it. If fewer than ``need`` pods found a node, every tentative deduction is undone and
        the first pod that failed is explained against the state *including* its gang-mates,
        which is why a gang of four 8-GPU pods on three free nodes reports "Insufficient".

        ``spread`` (Volcano without the binpack plugin) picks, instead of the next node that
        fits, the fitting node with the most of the pod's main resource free: a full scan.
        """
        members = list(pods)
        # Fail fast when the cluster as a whole lacks the free resources for ``need`` pods:
        # a full cluster then costs one comparison per resource instead of a node scan.
        total_need: dict[str, int] = {}
        for pod in members[:need]:
            for name, value in pod.req.items():
                total_need[name] = total_need.get(name, 0) + value
        for name, value in total_need.items():
            if name in DEVICE_ONLY:
                continue
            if value and self.total.get(name, 0) - self.used.get(name, 0) < value:
                return Placement(unplaced=len(members), fit_error=self.fit_error(members[0]))
        placed: list[tuple[GangPod, NodeState]] = []
        first_failed: GangPod | None = None
        unplaced = 0
        for pod in members:
            fs = self.feasible(pod.constraints)
            nodes, count = fs.nodes, len(fs.nodes)
            chosen = None
            if spread:
                chosen = _least_requested(nodes, pod.req, pod.constraints.devices)
                count = 0  # the scan above replaced next-fit
            for step in range(count):
                node = nodes[(fs.cursor + step) % count]
                if node.fits(pod.req, pod.constraints.devices):
                    chosen = node
                    fs.cursor = (fs.cursor + step) % count
                    break
            if chosen is None:
                unplaced += 1
                if first_failed is None:
                    first_failed = pod
                if len(members) - unplaced < need:
                    break  # the gang can no longer reach ``need``: stop scanning nodes
                continue
            chosen.add(pod.req, pod.key, pod.constraints.devices)
            placed.append((pod, chosen))
        if len(placed) >= need and placed:
            for pod, node in placed:
                self.bind(node, pod.key, pod.req)
            return Placement(bound=placed, unplaced=unplaced)
        error = self.fit_error(first_failed) if first_failed is not None else None
        for pod, node in placed:
            node.subtract(pod.req, pod.key)
        return Placement(bound=[], unplaced=unplaced, fit_error=error)


def _least_requested(
    nodes: list[NodeState], req: dict[str, int], pick: DevicePick = NO_PICK
) -> NodeState | None:
    """The node that fits ``req`` with the most free GPUs (else CPU) left: nodeorder's spread."""
    main = "nvidia.com/gpu" if req.get("nvidia.com/gpu") else "cpu"
    best, best_free = None, -1
    for node in nodes:
        free = node.allocatable.get(main, 0) - node.used.get(main, 0)
        if free > best_free and node.fits(req, pick):
            best, best_free = node, free
    return best
