"""The API groups, plurals and names the portal uses on a cluster, as calls and RBAC rules
spell them: one place for the strings the client, the connection test and ``deploy/rbac.yaml``
must agree on.
"""

from __future__ import annotations

JOB_GROUP, JOB_VERSION, JOB_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.volcano.sh", "v1beta1", "queues"
PODGROUP_PLURAL = "podgroups"
# The resources as RBAC rules and access probes name them ("<plural>.<group>").
RBAC_JOBS = f"{JOB_PLURAL}.{JOB_GROUP}"
RBAC_PODGROUPS = f"{PODGROUP_PLURAL}.{QUEUE_GROUP}"
RBAC_QUEUES = f"{QUEUE_PLURAL}.{QUEUE_GROUP}"
RBAC_INGRESSES = "ingresses.networking.k8s.io"
PROBE_NAME = "gp-connection-test"  # a name no object has: probes read or dry-run it only
FIELD_MANAGER = "gpupool-portal"  # owns the team queues (server-side apply)
COMMAND_GROUP, COMMAND_VERSION, COMMAND_PLURAL = "bus.volcano.sh", "v1alpha1", "commands"
