"""The ground floor: the rules every app applies, written once, in plain Python.

Nothing here imports Django, Celery, the Kubernetes client or any of the project's apps (an
import-linter contract says so), and everything is typed under strict mypy. Any app may import
it; it imports none of them, so a rule that lives here never has to be restated higher up.

``jobspec``
    The job request's rules: its field list, the env-name and readiness-path rules, the
    requirement match (which GPU models meet a job's constraints).
``capacity``
    The one free-GPU rule (per node, per pool, per shared device) and a pool's capacity.
``volcano``
    The Volcano manifest builders: a portal job, a team's queue, an inference job's Service and
    Ingress as plain Kubernetes objects.
"""
