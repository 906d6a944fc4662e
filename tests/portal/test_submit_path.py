"""The submit path's economies keep its rules: who may submit, what is stored, what is cached.

A submit is the API's hot path (see ``bench/submit_bench.py``), so it reads the catalog from a
per-process copy, finds the team and the caller's role in one query, and writes the job and
its first event in one statement. These tests pin what those shortcuts must not change.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from portal.jobs.services import job_submit
from portal.jobs.spec import SpecError
from portal.models import Job, JobEvent, JobState
from scheduling import catalog as catalog_module
from scheduling.catalog import catalog_entries
from scheduling.models import GpuModel
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def test_a_submit_costs_a_fixed_handful_of_queries(api_as, bob, catalog):
    client = api_as(bob)
    client.post(URL, job_body(name="warm-up"), format="json")
    with CaptureQueriesContext(connection) as queries:
        response = client.post(URL, job_body(), format="json")
    assert response.status_code == 201
    assert response.json()["owner"] == "bob"
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    # catalog and largest node (read fresh inside the test's transaction), team + role, the
    # quota view (teams, policies, quotas, cohort quotas, models: fresh inside a transaction,
    # once per process every 10 s outside one), then in a savepoint one query string: the
    # team's queue lock, then the count of both queued jobs limits with the job and its event
    # inserted where they fit; no look-up of the owner.
    assert statements == [*["SELECT"] * 8, "SAVEPOINT", "SELECT", "RELEASE"]
    assert queries.captured_queries[9]["sql"].startswith("SELECT pg_advisory_xact_lock(")


def test_the_job_and_its_submitted_event_are_stored_together(bob, catalog):
    result = job_submit(user=bob, data=job_body(env={"EPOCHS": "3"}), idempotency_key="k-1")
    job = Job.objects.get(pk=result.job.pk)
    assert (job.public_id, job.owner_id, job.env, job.idempotency_key) == (
        result.job.public_id,
        bob.pk,
        {"EPOCHS": "3"},
        "k-1",
    )
    assert job.request_fingerprint == result.job.request_fingerprint
    event = JobEvent.objects.get(job=job)
    assert (event.from_state, event.to_state, event.reason, event.actor_id) == (
        "",
        JobState.QUEUED,
        "Submitted",
        bob.pk,
    )
    assert event.message == "Submitted by bob: 2 × 4 GPU."


def test_a_replayed_key_inside_a_transaction_leaves_it_usable(bob, catalog):
    first = job_submit(user=bob, data=job_body(), idempotency_key="again")
    with transaction.atomic():
        replay = job_submit(user=bob, data=job_body(), idempotency_key="again")
        assert Job.objects.count() == 1  # the lost INSERT rolled back to its savepoint only
    assert (replay.created, replay.job.pk) == (False, first.job.pk)
    assert JobEvent.objects.count() == 1


def test_a_platform_admin_outside_the_team_cannot_submit_to_it(api_as, root, bob, catalog):
    response = api_as(root).post(URL, job_body(), format="json")
    assert response.status_code == 403
    assert "none" in response.json()["message"]


def test_an_unknown_team_and_a_foreign_team_read_the_same(api_as, bob, charlie, catalog):
    unknown = api_as(bob).post(URL, job_body(team="nope"), format="json")
    foreign = api_as(bob).post(URL, job_body(team="language"), format="json")
    assert (unknown.status_code, foreign.status_code) == (404, 404)
    assert unknown.json()["extra"]["fields"]["team"][0].startswith("You are not a member")


@pytest.mark.django_db(transaction=True)
def test_the_catalog_is_read_once_per_process_until_it_changes(catalog):
    catalog_module.catalog_forget()
    with CaptureQueriesContext(connection) as queries:
        first = catalog_entries()
        second = catalog_entries()
    assert first == second and "t4" in first
    assert len(queries.captured_queries) == 1

    t4 = GpuModel.objects.get(key="t4")
    t4.active = False
    t4.save()  # an admin edit in this process: seen at once
    assert "t4" not in catalog_entries()


@pytest.mark.django_db(transaction=True)
def test_another_process_edit_is_seen_within_the_cache_lifetime(catalog):
    catalog_module.catalog_forget()
    assert "t4" in catalog_entries()
    GpuModel.objects.filter(key="t4").update(active=False)  # no signal, as from elsewhere
    assert "t4" in catalog_entries()
    read_at, entries = catalog_module._cached
    catalog_module._cached = (read_at - catalog_module.CATALOG_CACHE_SECONDS - 1, entries)
    assert "t4" not in catalog_entries()


def test_inside_a_transaction_the_catalog_is_read_fresh(catalog):
    GpuModel.objects.filter(key="t4").update(active=False)
    assert "t4" not in catalog_entries()  # the test's own transaction sees its own edit


def _stored(job: Job) -> dict[str, object]:
    row = Job.objects.filter(pk=job.pk).values().get()
    return {k: v for k, v in row.items() if k not in {"id", "public_id", "idempotency_key"}}


def test_a_batch_stores_jobs_exactly_as_a_single_submit_does(bob, catalog):
    from django.utils import timezone

    from portal.jobs.services import job_submit_batch

    now = timezone.now()
    body = job_body(env={"EPOCHS": "3"}, gpu_models=["l4", "t4"], min_gpu_memory_gib=None)
    single = job_submit(user=bob, data=body, now=now).job
    jobs, created = job_submit_batch(user=bob, items=[body, job_body()], now=now)
    assert created and [j.pk for j in jobs] == sorted(j.pk for j in jobs)
    assert _stored(jobs[0]) == _stored(single)
    events = JobEvent.objects.filter(job__in=jobs).order_by("job_id")
    assert [(e.job_id, e.reason, e.message) for e in events] == [
        (jobs[0].pk, "Submitted", "Submitted by bob: 2 × 4 GPU."),
        (jobs[1].pk, "Submitted", "Submitted by bob: 2 × 4 GPU."),
    ]


def test_a_batch_losing_the_key_race_raises_an_integrity_error(bob, catalog):
    from django.db import IntegrityError
    from django.utils import timezone

    from portal.jobs import services
    from portal.jobs.services import job_submit_batch
    from portal.jobs.spec import parse_job_spec

    job_submit_batch(user=bob, items=[job_body()], idempotency_key="k")  # stored as k#0
    spec = parse_job_spec(job_body(), catalog=catalog_entries(), limits=services.submit_limits())
    now = timezone.now()
    team = Job.objects.get().team
    duplicate = services._new_job(spec=spec, team=team, user=bob, key="k#0", now=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        services._insert_jobs_with_events(
            [duplicate], [services._submitted_event(duplicate, bob, now)]
        )
    assert Job.objects.count() == JobEvent.objects.count() == 1


def test_the_fingerprint_is_the_json_of_the_spec_as_before(catalog):
    import dataclasses
    import hashlib
    import json

    from portal.jobs import services
    from portal.jobs.spec import parse_job_spec

    body = job_body(env={"B": "2", "A": "1"}, args=["--lr", "0.1"], kind="inference", port=8080)
    spec = parse_job_spec(body, catalog=catalog_entries(), limits=services.submit_limits())
    asked = dataclasses.asdict(spec)
    # Fields added later are left out while empty: jobs stored before them keep their digest.
    assert asked.pop("env_from_secrets") == {}
    assert asked.pop("gpu_memory_gib") is None and asked.pop("gpu_cores_percent") is None
    canonical = json.dumps(asked, sort_keys=True, default=str)
    assert services._fingerprint(spec) == hashlib.sha256(canonical.encode()).hexdigest()
    refs = {"HF_TOKEN": {"secret": "hf", "key": "token"}}
    with_secret = parse_job_spec(
        {**body, "env_from_secrets": refs},
        catalog=catalog_entries(),
        limits=services.submit_limits(),
    )
    asked = dataclasses.asdict(with_secret)
    del asked["gpu_memory_gib"], asked["gpu_cores_percent"]  # still empty: left out
    canonical = json.dumps(asked, sort_keys=True, default=str)
    assert services._fingerprint(with_secret) == hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_a_bigger_node_registered_here_raises_the_submit_bound_at_once(bob, catalog):
    """Outside a transaction the largest node is kept per process for a few seconds; a node
    saved in this process drops it, so the next submit is bounded by the new inventory (and a
    test that follows another does not inherit its pool)."""
    from tests.builders import gpu_nodes

    gpu_nodes("east", "a100-80gb", 1, 4)
    too_big = job_body(replicas=1, gpus_per_replica=8, gpu_models=["a100-80gb"])
    too_big["min_gpu_memory_gib"] = None
    with pytest.raises(SpecError) as refused:
        job_submit(user=bob, data=too_big)
    assert refused.value.fields["gpus_per_replica"] == ["Must be at most 4."]
    gpu_nodes("west", "a100-80gb", 1, 8)
    assert job_submit(user=bob, data=too_big).created
