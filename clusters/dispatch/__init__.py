"""From an admitted job to a Volcano Job on its cluster (``ADMITTED → SUBMITTED``).

The job row is the outbox: each task here loads the row, checks its state, talks to the
cluster, and records the outcome with a compare-and-set, so a duplicated, late or reordered
message does nothing harmful.

Dispatch (``ADMITTED → SUBMITTED``)
    The Volcano Job's name is derived from the job's UUID, so a retried create cannot make a
    twin: it gets ``409 AlreadyExists``. The object then carries a submission UID (derived
    from the job's UUID and the admission time): the same UID means an earlier attempt of
    this very dispatch got through, and the object is adopted; another UID means someone
    else's object (or one left from an earlier admission) and it is never overwritten.
    Overload and network trouble (5xx, 429, timeouts) are retried with exponential backoff
    and full jitter, honouring ``Retry-After``, up to ``GPUPOOL_DISPATCH_MAX_ATTEMPTS``;
    what retrying cannot fix (400/422 validation, 403) fails the job with the API server's
    own words. A missing team queue or job namespace (a queue sync that has not run yet, a
    cluster whose API server restarted empty) is repaired once per admission: the team's
    namespace is made again and the cluster's queues synced, then the create is tried again;
    if it is still refused, the job fails saying why. If the job left ADMITTED while the
    create was in flight (cancelled, preempted), the object just created is deleted again.
    One attempt at a time: an attempt claims the job on its row (its worker and a lease), and
    a duplicate hand-off that finds a live claim ends without sending anything. Nothing else
    shortens or takes over a live claim: a wake when the cluster answers again, a deferral
    for a busy cluster and the reconcile leave it alone, and a batch claims only free rows.
    A claim also waits out the cluster's Retry-After as the row holds it when the claim is
    written, not as the hand-off loaded the job (one that loaded it while another attempt's
    create was in flight, and claims it just after that create was refused 429, would
    otherwise send its create at once).
    An attempt that dies on the database (PostgreSQL restarting, a lost connection) gives its
    claim back itself, on a fresh connection, so the job is sent again within seconds rather
    than at the end of the lease; a create it may have sent is adopted on its 409.

The manifest comes from ``clusters.manifests``, taking a job off its cluster (cancel,
eviction) is ``clusters.teardown``.

The package: :mod:`~clusters.dispatch.attempt` (one job's dispatch),
:mod:`~clusters.dispatch.batch` (the cycle's admissions, many at once),
:mod:`~clusters.dispatch.claims` (who holds a job's dispatch, and giving it back) and
:mod:`~clusters.dispatch.outcomes` (what a create led to, written on the job).
"""

from clusters.dispatch.attempt import job_dispatch
from clusters.dispatch.batch import job_dispatch_batch
from clusters.dispatch.claims import unclaimed

__all__ = ["job_dispatch", "job_dispatch_batch", "unclaimed"]
