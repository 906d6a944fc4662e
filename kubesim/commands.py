"""Volcano ``bus.volcano.sh/v1alpha1`` Commands: the resource, its rules and its controllers.

A Command is how a user (``vcctl job suspend``, ``vcctl queue operate``) or the portal asks
Volcano's controllers to act on a Job or a Queue. It has no ``spec``: top-level ``action``,
``target`` (an OwnerReference) and optional ``reason``/``message``. Two controllers consume
them, each filtering on the target (Volcano v1.15 ``pkg/controllers``):

* the **job controller** takes Commands whose target is a ``batch.volcano.sh/v1alpha1`` Job,
  deletes the Command, records ``CommandIssued`` on the Job and runs the action through the
  job state machine (``pkg/controllers/job/state``): AbortJob, RestartJob, TerminateJob and
  CompleteJob act on a Pending or Running job, ResumeJob on an Aborting or Aborted one;
  anything else is a no-op;
* the **queue controller** takes Commands whose target is a ``scheduling.volcano.sh/v1beta1``
  Queue (cluster-scoped; the Command lives in any namespace), deletes the Command and moves
  ``status.state`` (``pkg/controllers/queue/state``): CloseQueue makes an Open queue
  ``Closed`` when no PodGroup of the queue exists and ``Closing`` otherwise; a Closing queue
  becomes Closed when its last PodGroup is deleted; OpenQueue makes it ``Open`` again.

The real CRD types ``action`` as a free string, so a cluster stores a Command with a typo'd
action and the controllers silently drop it. kubesim is stricter on purpose and answers 422
naming the field, as it does for an action that cannot apply to the target's kind.
"""

from __future__ import annotations

import json
from typing import Any

from kubesim.schema import CRD

GROUP = "bus.volcano.sh"
VERSION = "v1alpha1"
JOB_TARGET = ("batch.volcano.sh/v1alpha1", "Job")
QUEUE_TARGET = ("scheduling.volcano.sh/v1beta1", "Queue")

QUEUE_ACTIONS = ("OpenQueue", "CloseQueue")
# The job actions a Command may carry (``vcctl job suspend/resume/...``); the internal ones
# (SyncJob, EnqueueJob, SyncQueue) and the task-level RestartTask/RestartPod need more than a
# Command says.
JOB_ACTIONS = ("AbortJob", "RestartJob", "TerminateJob", "CompleteJob", "ResumeJob")
ACTIONS = (*JOB_ACTIONS, *QUEUE_ACTIONS)

_STRING = {"type": "string"}

# The v1alpha1 schema of Volcano's ``commands.bus.volcano.sh`` CRD (Helm chart
# ``crd/bases/bus.volcano.sh_commands.yaml``), descriptions left out. It is not vendored as a
# file because ``kubesim/crds/`` mirrors ``../shared/k8s-reference`` byte for byte, and that
# holds only the three CRDs the portal writes.
COMMAND_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"commands.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {
            "kind": "Command",
            "listKind": "CommandList",
            "plural": "commands",
            "singular": "command",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "action": _STRING,
                            "apiVersion": _STRING,
                            "kind": _STRING,
                            "message": _STRING,
                            "metadata": {"type": "object"},
                            "reason": _STRING,
                            "target": {
                                "type": "object",
                                "properties": {
                                    "apiVersion": _STRING,
                                    "blockOwnerDeletion": {"type": "boolean"},
                                    "controller": {"type": "boolean"},
                                    "kind": _STRING,
                                    "name": _STRING,
                                    "uid": _STRING,
                                },
                                "required": ["apiVersion", "kind", "name", "uid"],
                            },
                        },
                    }
                },
            }
        ],
    },
}


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> dict[str, str]:
    values = ", ".join(json.dumps(v) for v in supported)
    return {
        "reason": "FieldValueNotSupported",
        "field": field,
        "message": f"{field}: Unsupported value: {json.dumps(value)}: supported values: {values}",
    }


def command_causes(body: dict[str, Any]) -> list[dict[str, str]]:
    """What the schema lets through but no controller would act on, as StatusCauses."""
    causes = []
    action = body.get("action")
    target = body.get("target")
    if not action:
        causes.append(
            {"reason": "FieldValueRequired", "field": "action", "message": "action: Required value"}
        )
    elif action not in ACTIONS:
        causes.append(_unsupported("action", action, ACTIONS))
    if not isinstance(target, dict):
        causes.append(
            {"reason": "FieldValueRequired", "field": "target", "message": "target: Required value"}
        )
        return causes
    ref = (target.get("apiVersion"), target.get("kind"))
    if ref not in (JOB_TARGET, QUEUE_TARGET):
        kinds = {JOB_TARGET[1]: JOB_TARGET[0], QUEUE_TARGET[1]: QUEUE_TARGET[0]}
        if ref[1] in kinds:
            causes.append(_unsupported("target.apiVersion", ref[0], (kinds[ref[1]],)))
        else:
            causes.append(_unsupported("target.kind", ref[1], (JOB_TARGET[1], QUEUE_TARGET[1])))
        return causes
    if action in ACTIONS:
        wanted = QUEUE_TARGET if action in QUEUE_ACTIONS else JOB_TARGET
        if ref != wanted:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": "action",
                    "message": f"action: Invalid value: {json.dumps(action)}: {action} applies "
                    f"to a target of kind {wanted[1]} ({wanted[0]}), not {ref[1]}",
                }
            )
    return causes


def command_crd() -> CRD:
    """The Command CRD with :func:`command_causes` as its extra validation."""
    return CRD(COMMAND_CRD, rules=command_causes)


class CommandController:
    """The Command handling of Volcano's job and queue controllers, as a mixin.

    A mixin of :class:`kubesim.sim.Simulation`: it relies on the simulation's store, types,
    jobs, queues and job-controller helpers, and is split out to keep each concern readable.
    """

    def _on_command_added(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.pending_commands[(meta["namespace"], meta["name"])] = None

    def _run_commands(self) -> None:
        """Consume every new Command: delete it, then act (each runs at most once)."""
        keys, self.pending_commands = list(self.pending_commands), {}
        for namespace, name in keys:
            obj = self.store.get(self.types.commands, namespace, name)
            if obj is None:
                continue
            # Both controllers delete the Command before acting, "to make sure executed not
            # more than once" (Volcano's words); a failed action is not retried.
            self.store.delete(self.types.commands, namespace, name)
            target = obj.get("target") or {}
            action = str(obj.get("action") or "")
            ref = (target.get("apiVersion"), target.get("kind"))
            if ref == QUEUE_TARGET:
                self.queue_action(str(target.get("name") or ""), action)
            elif ref == JOB_TARGET:
                self._job_command(namespace, str(target.get("name") or ""), action)

    # -- queues ----------------------------------------------------------------------------
    def _queue_podgroups(self, name: str) -> int:
        """PodGroups of the queue, in any phase (Volcano's queue controller counts them all)."""
        return sum(
            1
            for pg in self.store.select(self.types.podgroups)
            if (pg.get("spec") or {}).get("queue") == name
        )

    def queue_action(self, name: str, action: str) -> None:
        """OpenQueue, CloseQueue or SyncQueue on one queue (a missing queue is ignored)."""
        obj = self.store.get(self.types.queues, "", name)
        if obj is None:
            return
        current = (obj.get("status") or {}).get("state") or "Open"
        if action == "OpenQueue":
            new = "Open"
        elif action == "CloseQueue" or (action == "SyncQueue" and current == "Closing"):
            new = "Closed" if self._queue_podgroups(name) == 0 else "Closing"
        else:
            return
        if new == current:
            return
        self.store.replace(
            self.types.queues,
            {
                **obj,
                "metadata": dict(obj["metadata"]),
                "status": {**(obj.get("status") or {}), "state": new},
            },
        )
        self.dirty_queues.add(name)
        if action == "OpenQueue":
            self.record_event(obj, "Normal", "OpenQueue", "Open queue succeed")
        elif current == "Open":
            self.record_event(obj, "Normal", "CloseQueue", "Close queue succeed")

    def _on_podgroup_deleted(self, obj: dict[str, Any]) -> None:
        queue = (obj.get("spec") or {}).get("queue") or ""
        state = self.queues.get(queue)
        if state is not None and state.state == "Closing":
            self.closing_queues.add(queue)

    def _sync_closing_queues(self) -> None:
        names, self.closing_queues = self.closing_queues, set()
        for name in sorted(names):
            self.queue_action(name, "SyncQueue")

    # -- jobs ------------------------------------------------------------------------------
    def _job_command(self, namespace: str, name: str, action: str) -> None:
        """The job state machine for a Command's action (a missing job is ignored)."""
        job = self.jobs.get((namespace, name))
        obj = self._job_obj(job) if job is not None else None
        if job is None or obj is None:
            return
        self.record_event(
            obj,
            "Normal",
            "CommandIssued",
            f"Start to execute command {action}, and clean it up to make sure executed not "
            "more than once.",
        )
        phase = job.phase
        if phase in ("Pending", "Running"):
            if action == "RestartJob":
                self._kill(job, retain_terminal=False)
                job.retry_count += 1
                self._set_phase(job, "Restarting")
            elif action in ("AbortJob", "TerminateJob", "CompleteJob"):
                self._kill(job, retain_terminal=True)
                self._set_phase(
                    job,
                    {
                        "AbortJob": "Aborting",
                        "TerminateJob": "Terminating",
                        "CompleteJob": "Completing",
                    }[action],
                )
        elif phase in ("Aborting", "Aborted") and action == "ResumeJob":
            # Volcano keeps finished pods here and Restarting then removes every pod; kubesim's
            # Restarting waits for the pods to be gone, so they go now.
            self._kill(job, retain_terminal=False)
            job.retry_count += 1
            self._set_phase(job, "Restarting")
        self.dirty_jobs[job.key] = None
