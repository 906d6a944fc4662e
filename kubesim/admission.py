"""Volcano's admission webhooks: the defaults and rules that live outside the CRD schema.

The real cluster runs ``mutatejob.volcano.sh`` / ``validatejob.volcano.sh`` and the queue
equivalents; a manifest can pass the schema and still be refused there (see
``../shared/k8s-reference/README.md``, "Admission rules"). A denial reaches the client as
400 BadRequest with ``admission webhook "<name>" denied the request: <message>``, which is
exactly what these functions raise.
"""

from __future__ import annotations

from typing import Any

from kubesim.errors import ApiError, bad_request
from kubesim.validation import is_dns_label

KNOWN_PLUGINS = frozenset({"env", "svc", "ssh", "pytorch", "tensorflow", "mpi", "ray", "hcclrank"})
USER_EVENTS = frozenset(
    {
        "*",
        "PodFailed",
        "PodEvicted",
        "PodPending",
        "Unknown",
        "TaskCompleted",
        "TaskFailed",
        "JobUpdated",
    }
)
USER_ACTIONS = frozenset(
    {
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "RestartPartition",
        "TerminateJob",
        "CompleteJob",
        "ResumeJob",
    }
)


def deny(webhook: str, message: str) -> ApiError:
    """The error an admission webhook denial becomes."""
    return bad_request(f'admission webhook "{webhook}" denied the request: {message}')


def mutate_job(job: dict[str, Any]) -> None:
    """``mutatejob.volcano.sh``: queue, schedulerName, maxRetry, task names, minAvailable."""
    spec = job.setdefault("spec", {})
    spec.setdefault("queue", "default")
    spec.setdefault("schedulerName", "volcano")
    spec.setdefault("maxRetry", 3)
    total_min = 0
    for index, task in enumerate(spec.get("tasks") or []):
        if not task.get("name"):
            task["name"] = f"default{index}"
        replicas = int(task.get("replicas", 0))
        task.setdefault("minAvailable", replicas)
        total_min += int(task["minAvailable"])
        task.setdefault("maxRetry", spec["maxRetry"])
    spec.setdefault("minAvailable", total_min)
    plugins = spec.get("plugins")
    if isinstance(plugins, dict):
        if any(k in plugins for k in ("pytorch", "tensorflow", "mpi", "ray")):
            plugins.setdefault("svc", [])
        if "mpi" in plugins:
            plugins.setdefault("ssh", [])


def _policy_messages(policies: list[dict[str, Any]], where: str) -> list[str]:
    messages = []
    seen_events: set[str] = set()
    seen_codes: set[int] = set()
    for policy in policies:
        events = ([policy["event"]] if policy.get("event") else []) + list(
            policy.get("events") or []
        )
        code = policy.get("exitCode")
        if events and code is not None:
            messages.append(f"must not specify event and exitCode simultaneously{where}")
        if not events and code is None:
            messages.append(f"either event and exitCode should be specified{where}")
        if code == 0:
            messages.append(f"0 is not a valid error code{where}")
        if code is not None:
            if code in seen_codes:
                messages.append(f"duplicate exitCode {code}{where}")
            seen_codes.add(code)
        for event in events:
            if event not in USER_EVENTS:
                messages.append(f"invalid policy event {event}{where}")
            if event in seen_events:
                messages.append(f"duplicate event {event} across different policy{where}")
            seen_events.add(event)
        if "*" in events and len(seen_events) > 1:
            messages.append(f"if there's * here, no other policy should be here{where}")
        action = policy.get("action")
        if action not in USER_ACTIONS:
            messages.append(f"invalid policy action {action}{where}")
    return messages


def validate_job_create(job: dict[str, Any], queues: dict[str, dict[str, Any]]) -> None:
    """``validatejob.volcano.sh`` on create; ``queues`` maps name -> Queue object."""
    spec = job.get("spec") or {}
    name = job["metadata"]["name"]
    messages: list[str] = []
    tasks = spec.get("tasks") or []
    if not tasks:
        messages.append("No task specified in job spec")
    if int(spec.get("minAvailable", 0)) < 0:
        messages.append("job 'minAvailable' must be >= 0.")
    if int(spec.get("maxRetry", 0)) < 0:
        messages.append("'maxRetry' cannot be less than zero.")
    if spec.get("ttlSecondsAfterFinished") is not None and int(spec["ttlSecondsAfterFinished"]) < 0:
        messages.append("'ttlSecondsAfterFinished' cannot be less than zero.")
    names: set[str] = set()
    total = 0
    for task in tasks:
        task_name = str(task.get("name", ""))
        replicas = int(task.get("replicas", 0))
        total += replicas
        if replicas < 0:
            messages.append(f"'replicas' < 0 in task: {task_name}, job: {name}")
        if int(task.get("minAvailable", replicas)) > replicas:
            messages.append(
                f"'minAvailable' is greater than 'replicas' in task: {task_name}, job: {name}"
            )
        if task_name in names:
            messages.append(f"duplicated task name {task_name}")
        names.add(task_name)
        pod_name = f"{name}-{task_name}-{max(replicas - 1, 0)}"
        if not is_dns_label(pod_name):
            messages.append(
                f"create pod name {pod_name} of task {task_name} is invalid: a lowercase RFC 1123 "
                "label must consist of lower case alphanumeric characters or '-', must start "
                "and end with an alphanumeric character, and be no more than 63 characters"
            )
        containers = ((task.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            messages.append(f"spec.task[{task_name}].template.spec.containers: Required value")
        messages += _policy_messages(list(task.get("policies") or []), f" in task {task_name}")
    if int(spec.get("minAvailable", 0)) > total:
        messages.append("job 'minAvailable' should not be greater than total replicas in tasks")
    messages += _policy_messages(list(spec.get("policies") or []), "")
    for plugin in spec.get("plugins") or {}:
        if plugin not in KNOWN_PLUGINS:
            messages.append(f"unable to find job plugin: {plugin}")
    queue_name = spec.get("queue", "default")
    queue = queues.get(queue_name)
    if queue is None:
        messages.append(
            f'unable to find job queue: queue.scheduling.volcano.sh "{queue_name}" not found'
        )
    else:
        state = (queue.get("status") or {}).get("state") or "Open"
        if state != "Open":
            messages.append(
                f"can only submit job to queue with state `Open`, queue `{queue_name}` status "
                f"is `{state}`"
            )
        if queue_name == "root":
            messages.append("can not submit job to root queue")
        elif any((q.get("spec") or {}).get("parent") == queue_name for q in queues.values()):
            messages.append(
                f"can only submit job to leaf queue, queue `{queue_name}` has child queues"
            )
    if messages:
        raise deny("validatejob.volcano.sh", "; ".join(messages) + ";")


def _mask_mutable(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k not in ("minAvailable", "priorityClassName")}
    out["tasks"] = [
        {k: v for k, v in task.items() if k not in ("replicas", "minAvailable")}
        for task in spec.get("tasks") or []
    ]
    return out


def validate_job_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Only ``minAvailable``, task ``replicas``/``minAvailable`` and priorityClassName change."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    messages = []
    total = 0
    for task in new_spec.get("tasks") or []:
        replicas = int(task.get("replicas", 0))
        if replicas < 0:
            messages.append(f"'replicas' must be >= 0 in task: {task.get('name')}")
        total += replicas
    if int(new_spec.get("minAvailable", 0)) > total:
        messages.append("'minAvailable' must not be greater than total replicas")
    if len(old_spec.get("tasks") or []) != len(new_spec.get("tasks") or []):
        messages.append("job updates may not add or remove tasks")
    elif _mask_mutable(old_spec) != _mask_mutable(new_spec):
        messages.append(
            "job updates may not change fields other than `minAvailable`, "
            "`tasks[*].replicas under spec`"
        )
    if messages:
        raise deny("validatejob.volcano.sh", "; ".join(messages))


def mutate_queue(queue: dict[str, Any]) -> None:
    """``mutatequeue.volcano.sh``: weight 1 and reclaimable true by default."""
    spec = queue.setdefault("spec", {})
    spec.setdefault("weight", 1)
    spec.setdefault("reclaimable", True)


def validate_queue(queue: dict[str, Any], queues: dict[str, dict[str, Any]]) -> None:
    """``validatequeue.volcano.sh`` on create/update: weight range and the parent."""
    spec = queue.get("spec") or {}
    messages = []
    weight = spec.get("weight", 1)
    if not isinstance(weight, int) or not 1 <= weight <= 65535:
        messages.append(
            f"queue weight must be a positive integer between 1 and 65535, got {weight}"
        )
    parent = spec.get("parent")
    name = queue["metadata"]["name"]
    if parent and parent != "root" and parent not in queues:
        messages.append(f"parent queue {parent} of queue {name} does not exist")
    if parent == name:
        messages.append("a queue cannot be its own parent")
    if messages:
        raise deny("validatequeue.volcano.sh", "; ".join(messages))


def validate_queue_delete(name: str, queues: dict[str, dict[str, Any]]) -> None:
    """Built-in queues and queues with children cannot be deleted."""
    if name in ("default", "root"):
        raise deny("validatequeue.volcano.sh", f"`{name}` queue can not be deleted")
    children = sorted(
        q["metadata"]["name"]
        for q in queues.values()
        if (q.get("spec") or {}).get("parent") == name
    )
    if children:
        raise deny(
            "validatequeue.volcano.sh",
            f"queue {name} has child queues {', '.join(children)}, can not be deleted",
        )
