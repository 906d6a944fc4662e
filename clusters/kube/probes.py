"""Access probes for the connection test: one harmless request per verb the portal needs,
which only a grant of that verb lets through (a dry run, a read of a name no object has, or a
watch opened and closed unread).
"""

from __future__ import annotations

from typing import Any

from clusters.kube.names import (
    FIELD_MANAGER,
    JOB_GROUP,
    JOB_PLURAL,
    JOB_VERSION,
    PODGROUP_PLURAL,
    PROBE_NAME,
    QUEUE_GROUP,
    QUEUE_PLURAL,
    QUEUE_VERSION,
    RBAC_INGRESSES,
    RBAC_JOBS,
    RBAC_PODGROUPS,
    RBAC_QUEUES,
)

_PROBE_BACKEND = {"service": {"name": PROBE_NAME, "port": {"number": 80}}}


class _Unread:
    """What a watch probe hands back in place of the stream it closed unread."""

    data = b""


class ProbesMixin:
    """Mixed into :class:`clusters.kube.client.KubeClient`, whose ``__init__`` builds the API
    objects these calls use."""

    def access_probe(self, resource: str, verb: str, namespace: str) -> None:
        """One harmless request that only a grant of ``verb`` on ``resource`` lets through.

        ``resource`` is spelled as RBAC names it (``jobs.batch.volcano.sh``, ``pods/log``).
        Authorization answers before anything else on an API server, so only a 403 means
        "not granted": a 404 for a name that does not exist, or an admission error on a dry
        run, proves the verb. Raises KubeError as every call does; ValueError for a pair the
        portal never uses.
        """
        probe = self._probes(namespace).get((resource, verb))
        if probe is None:
            raise ValueError(f"no probe for {verb} {resource}")
        probe()

    def _probes(self, ns: str) -> dict[tuple[str, str], Any]:
        core, custom, name = self.core, self.custom, PROBE_NAME
        every = custom.list_cluster_custom_object
        jobs = (JOB_GROUP, JOB_VERSION, JOB_PLURAL)
        queues = (QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL)
        podgroups = (QUEUE_GROUP, QUEUE_VERSION, PODGROUP_PLURAL)
        job = {
            "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queue": "default", "tasks": []},
        }
        queue = {
            "apiVersion": f"{QUEUE_GROUP}/{QUEUE_VERSION}",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1},
        }
        j, pg, q = RBAC_JOBS, RBAC_PODGROUPS, RBAC_QUEUES
        call, opens = self._call, self._watch_opens
        return {
            (j, "create"): lambda: self.dry_run_create_job(ns, job),
            (j, "get"): lambda: self.get_job(ns, name),
            (j, "list"): lambda: call("listing Volcano Jobs", every, *jobs, limit=1),
            (j, "watch"): lambda: opens("watching Volcano Jobs", every, *jobs),
            (j, "delete"): lambda: self.delete_job(ns, name, dry_run=True),
            ("pods", "get"): lambda: call("reading a pod", core.read_namespaced_pod, name, ns),
            ("pods", "list"): lambda: call(
                "listing pods", core.list_pod_for_all_namespaces, limit=1
            ),
            ("pods", "watch"): lambda: opens("watching pods", core.list_pod_for_all_namespaces),
            ("pods/log", "get"): lambda: self.read_pod_log(ns, name, tail_lines=1),
            ("events", "list"): lambda: call(
                "listing events", core.list_namespaced_event, ns, limit=1
            ),
            (pg, "get"): lambda: call(
                "reading a PodGroup",
                custom.get_namespaced_custom_object,
                QUEUE_GROUP,
                QUEUE_VERSION,
                ns,
                PODGROUP_PLURAL,
                name,
            ),
            (pg, "list"): lambda: call("listing PodGroups", every, *podgroups, limit=1),
            (q, "get"): lambda: self.get_queue(name),
            (q, "list"): lambda: call("listing Volcano Queues", every, *queues, limit=1),
            (q, "create"): lambda: call(
                "creating a Volcano Queue (dry run)",
                custom.create_cluster_custom_object,
                *queues,
                queue,
                dry_run="All",
            ),
            (q, "patch"): lambda: self.apply_queue(
                queue, field_manager=FIELD_MANAGER, dry_run=True
            ),
            ("services", "create"): lambda: call(
                "creating a Service (dry run)",
                core.create_namespaced_service,
                ns,
                {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}},
                dry_run="All",
            ),
            ("services", "delete"): lambda: call(
                "deleting a Service (dry run)",
                core.delete_namespaced_service,
                name,
                ns,
                dry_run="All",
            ),
            (RBAC_INGRESSES, "create"): lambda: call(
                "creating an Ingress (dry run)",
                self.networking.create_namespaced_ingress,
                ns,
                {"metadata": {"name": name}, "spec": {"defaultBackend": _PROBE_BACKEND}},
                dry_run="All",
            ),
            (RBAC_INGRESSES, "delete"): lambda: call(
                "deleting an Ingress (dry run)",
                self.networking.delete_namespaced_ingress,
                name,
                ns,
                dry_run="All",
            ),
            ("nodes", "get"): lambda: call("reading a node", core.read_node, name),
            ("nodes", "list"): lambda: call("listing nodes", core.list_node, limit=1),
            ("nodes", "watch"): lambda: opens("watching nodes", core.list_node),
        }

    def _watch_opens(self, what: str, fn: Any, *args: Any) -> None:
        """Open a watch and close it unread: authorization answers before the stream starts,
        so a 200 proves the verb without waiting for an event (timeoutSeconds=1 frees the
        server)."""

        def open_and_close(*a: Any, **kw: Any) -> Any:
            resp = fn(*a, **kw)
            resp.close()
            resp.release_conn()
            return _Unread()

        self._call(what, open_and_close, *args, watch=True, timeout_seconds=1)
