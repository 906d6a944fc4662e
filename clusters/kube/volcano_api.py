"""Volcano calls: Jobs (created strictly, adopted after a retried create, deleted with a
propagation policy), PodGroups, team Queues (server-side apply) and queue Commands.
"""

from __future__ import annotations

from typing import Any

from clusters.kube.names import (
    COMMAND_GROUP,
    COMMAND_PLURAL,
    COMMAND_VERSION,
    JOB_GROUP,
    JOB_PLURAL,
    JOB_VERSION,
    PODGROUP_PLURAL,
    QUEUE_GROUP,
    QUEUE_PLURAL,
    QUEUE_VERSION,
)


class VolcanoMixin:
    """Mixed into :class:`clusters.kube.client.KubeClient`, whose ``__init__`` builds the API
    objects these calls use."""

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a Volcano Job (strict field validation: an unknown field is an error)."""
        with self._creates:
            return dict(
                self._call(
                    f"creating Volcano Job {manifest['metadata']['name']}",
                    self.custom.create_namespaced_custom_object,
                    JOB_GROUP,
                    JOB_VERSION,
                    namespace,
                    JOB_PLURAL,
                    manifest,
                    field_validation="Strict",
                )
            )

    def dry_run_create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self._call(
                "creating a Volcano Job (dry run)",
                self.custom.create_namespaced_custom_object,
                JOB_GROUP,
                JOB_VERSION,
                namespace,
                JOB_PLURAL,
                manifest,
                dry_run="All",
            )
        )

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"reading Volcano Job {name}",
                self.custom.get_namespaced_custom_object,
                JOB_GROUP,
                JOB_VERSION,
                namespace,
                JOB_PLURAL,
                name,
            )
        )

    def delete_job(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        dry_run: bool = False,
        wait_for_pods: bool = False,
    ) -> None:
        """Delete with background propagation (the Job goes now, its pods follow), or with
        ``wait_for_pods`` in the foreground: the Job stays, marked for deletion, until its
        pods are gone, so that while it can still be read its GPUs are still taken.

        With ``uid`` the API server deletes only that incarnation of the name (a precondition),
        so a late cleanup can never remove a newer object that reused the name.
        """
        kwargs: dict[str, Any] = {
            "propagation_policy": "Foreground" if wait_for_pods else "Background"
        }
        if uid:
            kwargs["body"] = {"preconditions": {"uid": uid}}
        if dry_run:
            kwargs["dry_run"] = "All"
        self._call(
            f"deleting Volcano Job {name}",
            self.custom.delete_namespaced_custom_object,
            JOB_GROUP,
            JOB_VERSION,
            namespace,
            JOB_PLURAL,
            name,
            **kwargs,
        )

    def list_jobs_with_version(self, *, label_selector: str) -> tuple[list[dict[str, Any]], str]:
        return self._list_rv(
            "listing Volcano Jobs",
            self.custom.list_cluster_custom_object,
            JOB_GROUP,
            JOB_VERSION,
            JOB_PLURAL,
            label_selector=label_selector,
        )

    def list_jobs_in(self, namespace: str, *, limit: int = 1) -> list[dict[str, Any]]:
        data = self._call(
            f"listing Volcano Jobs in {namespace}",
            self.custom.list_namespaced_custom_object,
            JOB_GROUP,
            JOB_VERSION,
            namespace,
            JOB_PLURAL,
            limit=limit,
        )
        return list(data.get("items") or [])

    def list_podgroups(self, *, label_selector: str) -> list[dict[str, Any]]:
        return self._list(
            "listing PodGroups",
            self.custom.list_cluster_custom_object,
            QUEUE_GROUP,
            QUEUE_VERSION,
            PODGROUP_PLURAL,
            label_selector=label_selector,
        )

    def apply_queue(
        self, manifest: dict[str, Any], *, field_manager: str, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply of a Queue under ``field_manager`` (force: the portal owns them)."""
        name = manifest["metadata"]["name"]
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(
            self._call(
                f"applying Volcano Queue {name}",
                self.custom.patch_cluster_custom_object,
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                name,
                manifest,
                field_manager=field_manager,
                force=True,
                _content_type="application/apply-patch+yaml",
                **extra,
            )
        )

    def get_queue(self, name: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"reading Volcano Queue {name}",
                self.custom.get_cluster_custom_object,
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                name,
            )
        )

    def list_queues(self, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self._list(
            "listing Volcano Queues",
            self.custom.list_cluster_custom_object,
            QUEUE_GROUP,
            QUEUE_VERSION,
            QUEUE_PLURAL,
            **kwargs,
        )

    def create_command(
        self, namespace: str, manifest: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(
            self._call(
                f"creating Volcano Command {manifest['metadata']['name']}",
                self.custom.create_namespaced_custom_object,
                COMMAND_GROUP,
                COMMAND_VERSION,
                namespace,
                COMMAND_PLURAL,
                manifest,
                **extra,
            )
        )
