"""Volcano Jobs, Queues and PodGroups through CustomObjectsApi: CRUD, schema, admission."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import GROUP, SCHED, VERSION, create_job, get_job, queue, vcjob
from tests.kubesim.conftest import raw

JOBS = f"/apis/{GROUP}/{VERSION}/namespaces/team-a/jobs"


def _error(excinfo: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(excinfo.value.body)


def test_create_returns_the_defaulted_job_with_server_metadata(custom):
    created = create_job(custom, vcjob("train-1", replicas=2))
    meta, spec = created["metadata"], created["spec"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 0
    assert spec["maxRetry"] == 3
    assert spec["minAvailable"] == 2
    assert spec["tasks"][0]["minAvailable"] == 2
    assert "status" not in created or created["status"] == {}
    assert meta["managedFields"][0]["operation"] == "Update"


def test_get_list_and_cluster_wide_list(sim, custom):
    create_job(custom, vcjob("train-1", labels={"gpupool.dev/team": "a"}))
    create_job(custom, vcjob("train-2", namespace="team-b", queue="team-b"))
    assert get_job(custom, "train-1")["metadata"]["name"] == "train-1"
    mine = custom.list_namespaced_custom_object(GROUP, VERSION, "team-a", "jobs")
    assert [j["metadata"]["name"] for j in mine["items"]] == ["train-1"]
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, "jobs")
    assert {j["metadata"]["name"] for j in everywhere["items"]} == {"train-1", "train-2"}
    selected = custom.list_cluster_custom_object(
        GROUP, VERSION, "jobs", label_selector="gpupool.dev/team=a"
    )
    assert [j["metadata"]["name"] for j in selected["items"]] == ["train-1"]
    assert everywhere["kind"] == "JobList" and everywhere["metadata"]["resourceVersion"]


def test_duplicate_name_is_409_already_exists(custom):
    create_job(custom, vcjob("train-1"))
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("train-1"))
    body = _error(excinfo)
    assert (excinfo.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'jobs.batch.volcano.sh "train-1" already exists'
    assert body["details"] == {"name": "train-1", "group": "batch.volcano.sh", "kind": "jobs"}


def test_dry_run_validates_without_storing(sim, custom):
    result = create_job(custom, vcjob("train-1"), dry_run="All")
    assert result["spec"]["maxRetry"] == 3 and result["metadata"]["uid"]
    sim.settle()
    with pytest.raises(ApiException) as excinfo:
        get_job(custom, "train-1")
    assert excinfo.value.status == 404
    assert sim.list("pods", "team-a") == []
    bad = vcjob("train-1", gpus="1 GPU")
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, bad, dry_run="All")
    assert excinfo.value.status == 422


def test_schema_violation_is_422_naming_the_field(custom):
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("train-1", gpus="1 GPU"))
    body = _error(excinfo)
    field = "spec.tasks[0].template.spec.containers[0].resources.limits.nvidia.com/gpu"
    assert (excinfo.value.status, body["reason"], body["code"]) == (422, "Invalid", 422)
    assert body["message"].startswith(
        f'Job.batch.volcano.sh "train-1" is invalid: {field}: Invalid value: "1 GPU": '
    )
    assert "in body should match" in body["message"]
    assert body["details"]["causes"][0]["field"] == field
    assert body["details"]["kind"] == "Job" and body["details"]["group"] == GROUP


@pytest.mark.parametrize(
    ("mutate", "field", "text"),
    [
        (
            lambda j: j["spec"]["tasks"][0]["template"]["spec"]["containers"][0].pop("name"),
            "spec.tasks[0].template.spec.containers[0].name",
            "Required value",
        ),
        (
            lambda j: j["spec"]["tasks"][0].update(name="Worker"),
            "spec.tasks[0].name",
            "should match",
        ),
        (
            lambda j: j["spec"].update(minAvailable=-1),
            "spec.minAvailable",
            "should be greater than or equal to 0",
        ),
        (lambda j: j["spec"].update(maxRetry="three"), "spec.maxRetry", "must be of type integer"),
        (lambda j: j["spec"].update(tasks=[]), "spec.tasks", "should have at least 1 items"),
        (
            lambda j: j["spec"]["policies"].append({"event": "Boom", "action": "RestartJob"}),
            "spec.policies[1].event",
            "Unsupported value",
        ),
        (lambda j: j["metadata"].update(name="Train_1"), "metadata.name", "RFC 1123 subdomain"),
    ],
    ids=[
        "missing container name",
        "task name pattern",
        "negative minAvailable",
        "wrong type",
        "no tasks",
        "unknown policy event",
        "invalid object name",
    ],
)
def test_invalid_manifests_are_rejected_with_the_schema_message(custom, mutate, field, text):
    manifest = vcjob("train-1", policies=[{"event": "PodEvicted", "action": "RestartJob"}])
    mutate(manifest)
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, manifest)
    body = _error(excinfo)
    assert excinfo.value.status == 422, body
    cause = next(c for c in body["details"]["causes"] if c["field"] == field)
    assert text in cause["message"]
    assert field in body["message"]


def test_strict_field_validation_rejects_unknown_fields(custom):
    manifest = vcjob("train-1")
    manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["gpus"] = 2
    manifest["spec"]["color"] = "blue"
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, manifest, field_validation="Strict")
    body = _error(excinfo)
    # As on a real apiserver: 400 BadRequest from the strict decoder, naming every field.
    assert (excinfo.value.status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'Job in version "v1alpha1" cannot be handled as a Job: strict decoding error: '
        'unknown field "spec.color", '
        'unknown field "spec.tasks[0].template.spec.containers[0].gpus"'
    )


def test_default_field_validation_prunes_with_a_warning_header(sim):
    manifest = vcjob("train-1")
    manifest["spec"]["color"] = "blue"
    status, headers, body = raw(sim, "POST", JOBS, manifest)
    assert status == 201
    assert "color" not in body["spec"]
    assert headers["warning"] == '299 - "unknown field \\"spec.color\\""'
    status, headers, body = raw(
        sim, "POST", JOBS + "?fieldValidation=Ignore", {**vcjob("train-2"), "extra": 1}
    )
    assert status == 201 and "warning" not in headers and "extra" not in body


@pytest.mark.parametrize(
    ("manifest", "text"),
    [
        (
            vcjob("train-1", queue="nope"),
            'unable to find job queue: queue.scheduling.volcano.sh "nope" not found',
        ),
        (vcjob("train-1", queue="root"), "can not submit job to root queue"),
        (
            vcjob("train-1", replicas=2, min_available=3),
            "job 'minAvailable' should not be greater than total replicas in tasks",
        ),
        (vcjob("a-very-long-job-name-that-leaves-no-room-for-the-task-name-x"), "create pod name"),
        (
            {**vcjob("train-1"), "spec": {**vcjob("train-1")["spec"], "plugins": {"magic": []}}},
            "unable to find job plugin: magic",
        ),
        (
            vcjob("train-1", policies=[{"event": "PodFailed", "action": "SyncJob"}]),
            "invalid policy action SyncJob",
        ),
    ],
    ids=[
        "missing queue",
        "root queue",
        "minAvailable above replicas",
        "pod name too long",
        "unknown plugin",
        "internal action",
    ],
)
def test_volcano_admission_denials_are_400(custom, manifest, text):
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, manifest)
    body = _error(excinfo)
    assert (excinfo.value.status, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith(
        'admission webhook "validatejob.volcano.sh" denied the request: '
    )
    assert text in body["message"]


def test_closed_queue_refuses_new_jobs(sim, custom):
    sim.close_queue("team-b")
    with pytest.raises(ApiException) as excinfo:
        create_job(custom, vcjob("train-1", namespace="team-b", queue="team-b"))
    assert (
        "can only submit job to queue with state `Open`, queue `team-b` status is "
        "`Closed`" in _error(excinfo)["message"]
    )


def test_only_min_available_and_replicas_may_change(sim, custom):
    create_job(custom, vcjob("train-1", replicas=2))
    patched = custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "team-a",
        "jobs",
        "train-1",
        [
            {"op": "replace", "path": "/spec/minAvailable", "value": 1},
            {"op": "replace", "path": "/spec/tasks/0/replicas", "value": 3},
            {"op": "replace", "path": "/spec/tasks/0/minAvailable", "value": 1},
        ],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["minAvailable"] == 1
    assert patched["spec"]["tasks"][0]["replicas"] == 3
    assert patched["metadata"]["generation"] == 2
    sim.settle()
    assert len(sim.job_pods("team-a", "train-1")) == 3
    with pytest.raises(ApiException) as excinfo:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "team-a", "jobs", "train-1", {"spec": {"queue": "team-b"}}
        )
    assert excinfo.value.status == 400
    assert (
        "job updates may not change fields other than `minAvailable`" in _error(excinfo)["message"]
    )


def test_update_with_a_stale_resource_version_is_409(custom):
    created = create_job(custom, vcjob("train-1"))
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", "train-1", {"metadata": {"labels": {"a": "b"}}}
    )
    created["metadata"]["labels"] = {"c": "d"}
    with pytest.raises(ApiException) as excinfo:
        custom.replace_namespaced_custom_object(
            GROUP, VERSION, "team-a", "jobs", "train-1", created
        )
    body = _error(excinfo)
    assert (excinfo.value.status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]


def test_json_patch_and_strategic_merge_rules(sim, custom):
    create_job(custom, vcjob("train-1"))
    patched = custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "team-a",
        "jobs",
        "train-1",
        [{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}],
        _content_type="application/json-patch+json",
    )
    assert patched["metadata"]["labels"] == {"x": "1"}
    status, _, body = raw(
        sim,
        "PATCH",
        JOBS + "/train-1",
        {"metadata": {}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


def test_delete_background_removes_job_then_pods(sim, custom):
    create_job(custom, vcjob("train-1", replicas=2, duration=1000))
    sim.settle()
    sim.advance(3)
    deleted = custom.delete_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", "train-1", propagation_policy="Background"
    )
    assert deleted["metadata"]["name"] == "train-1"
    with pytest.raises(ApiException):
        get_job(custom, "train-1")
    sim.settle()
    pods = sim.job_pods("team-a", "train-1")
    assert len(pods) == 2 and all(p["metadata"].get("deletionTimestamp") for p in pods)
    assert sim.list("podgroups", "team-a") == []
    sim.advance(2)
    assert sim.job_pods("team-a", "train-1") == []


def test_delete_foreground_keeps_the_job_until_pods_are_gone(sim, custom):
    create_job(custom, vcjob("train-1", duration=1000))
    sim.settle()
    sim.advance(3)
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", "train-1", propagation_policy="Foreground"
    )
    sim.settle()
    job = get_job(custom, "train-1")
    assert job["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in job["metadata"]["finalizers"]
    sim.advance(2)
    with pytest.raises(ApiException) as excinfo:
        get_job(custom, "train-1")
    assert excinfo.value.status == 404


def test_delete_orphan_leaves_pods_running(sim, custom):
    create_job(custom, vcjob("train-1", duration=1000))
    sim.settle()
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", "train-1", propagation_policy="Orphan"
    )
    sim.advance(10)
    pods = sim.job_pods("team-a", "train-1")
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running"
    assert pods[0]["metadata"]["ownerReferences"] == []


def test_delete_collection_by_label(sim, custom):
    create_job(custom, vcjob("a", labels={"batch": "1"}))
    create_job(custom, vcjob("b", labels={"batch": "1"}))
    create_job(custom, vcjob("c"))
    result = custom.delete_collection_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", label_selector="batch=1"
    )
    assert {j["metadata"]["name"] for j in result["items"]} == {"a", "b"}
    names = [
        j["metadata"]["name"]
        for j in custom.list_namespaced_custom_object(GROUP, VERSION, "team-a", "jobs")["items"]
    ]
    assert names == ["c"]


def test_queue_crud_and_controller_status(sim, custom):
    created = custom.create_cluster_custom_object(
        SCHED, "v1beta1", "queues", queue("team-c", capability={"nvidia.com/gpu": 4})
    )
    assert created["spec"]["reclaimable"] is True
    sim.settle()
    got = custom.get_cluster_custom_object(SCHED, "v1beta1", "queues", "team-c")
    assert got["status"]["state"] == "Open"
    names = {
        q["metadata"]["name"]
        for q in custom.list_cluster_custom_object(SCHED, "v1beta1", "queues")["items"]
    }
    assert {"default", "root", "team-a", "team-b", "team-c"} <= names
    custom.delete_cluster_custom_object(SCHED, "v1beta1", "queues", "team-c")
    with pytest.raises(ApiException) as excinfo:
        custom.get_cluster_custom_object(SCHED, "v1beta1", "queues", "team-c")
    assert excinfo.value.status == 404
    with pytest.raises(ApiException) as excinfo:
        custom.delete_cluster_custom_object(SCHED, "v1beta1", "queues", "default")
    assert "`default` queue can not be deleted" in _error(excinfo)["message"]


def test_server_side_apply_creates_and_updates_a_queue(sim, custom):
    def apply(body: dict, manager: str = "gpupool", force: bool = True) -> dict:
        return custom.patch_cluster_custom_object(
            SCHED,
            "v1beta1",
            "queues",
            body["metadata"]["name"],
            body,
            field_manager=manager,
            force=force,
            _content_type="application/apply-patch+yaml",
        )

    # An apply that creates answers 201, which this client's patch methods do not decode
    # (their response map has only 200) -- the same as against a real apiserver.
    assert apply(queue("team-c", weight=2, capability={"nvidia.com/gpu": 4})) is None
    first = custom.get_cluster_custom_object(SCHED, "v1beta1", "queues", "team-c")
    assert first["spec"]["weight"] == 2
    assert first["metadata"]["managedFields"][0]["manager"] == "gpupool"
    assert first["metadata"]["managedFields"][0]["operation"] == "Apply"
    second = apply(queue("team-c", weight=3))  # capability no longer applied: removed
    assert second["spec"]["weight"] == 3
    assert "capability" not in second["spec"]
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    # another manager changing the same field conflicts unless forced
    with pytest.raises(ApiException) as excinfo:
        apply(queue("team-c", weight=5), manager="someone-else", force=False)
    body = _error(excinfo)
    assert (excinfo.value.status, body["reason"]) == (409, "Conflict")
    assert 'conflict with "gpupool": .spec.weight' in body["message"]
    forced = apply(queue("team-c", weight=5), manager="someone-else", force=True)
    assert forced["spec"]["weight"] == 5
    merged = custom.patch_cluster_custom_object(
        SCHED, "v1beta1", "queues", "team-c", {"spec": {"weight": 7}}
    )
    assert merged["spec"]["weight"] == 7
    status, _, body = raw(
        sim,
        "PATCH",
        f"/apis/{SCHED}/v1beta1/queues/team-c",
        queue("team-c"),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert status == 400 and "fieldManager is required" in body["message"]


def test_queue_status_subresource_closes_a_queue(sim, custom):
    custom.patch_cluster_custom_object_status(
        SCHED, "v1beta1", "queues", "team-b", {"status": {"state": "Closed"}}
    )
    sim.settle()
    assert sim.get("queues", "team-b")["status"]["state"] == "Closed"
    with pytest.raises(ApiException):
        create_job(custom, vcjob("train-1", namespace="team-b", queue="team-b"))


def test_podgroups_are_read_only_and_mirror_the_job(sim, custom):
    create_job(custom, vcjob("train-1", replicas=2, labels={"gpupool.dev/job": "j1"}))
    sim.settle()
    groups = custom.list_namespaced_custom_object(SCHED, "v1beta1", "team-a", "podgroups")
    assert len(groups["items"]) == 1
    group = groups["items"][0]
    uid = get_job(custom, "train-1")["metadata"]["uid"]
    assert group["metadata"]["name"] == f"train-1-{uid}"
    assert group["spec"]["minMember"] == 2 and group["spec"]["queue"] == "team-a"
    assert group["spec"]["minResources"] == {"nvidia.com/gpu": "2"}
    assert group["metadata"]["labels"] == {"gpupool.dev/job": "j1"}
    assert group["status"]["phase"] in ("Inqueue", "Running")
    got = custom.get_namespaced_custom_object(
        SCHED, "v1beta1", "team-a", "podgroups", group["metadata"]["name"]
    )
    assert got["metadata"]["uid"] == group["metadata"]["uid"]
    with pytest.raises(ApiException) as excinfo:
        custom.delete_namespaced_custom_object(
            SCHED, "v1beta1", "team-a", "podgroups", group["metadata"]["name"]
        )
    assert excinfo.value.status == 405


def test_generate_name_and_kind_mismatch(sim):
    manifest = vcjob("x")
    del manifest["metadata"]["name"]
    manifest["metadata"]["generateName"] = "train-"
    status, _, body = raw(sim, "POST", JOBS, manifest)
    assert status == 201 and body["metadata"]["name"].startswith("train-")
    assert len(body["metadata"]["name"]) == len("train-") + 5
    status, _, body = raw(sim, "POST", JOBS, {**vcjob("y"), "kind": "Queue"})
    assert status == 400 and "does not match the expected kind" in body["message"]
    status, _, body = raw(sim, "POST", JOBS, {**vcjob("z", namespace="team-b")})
    assert status == 400 and "does not match the namespace" in body["message"]


def test_replace_with_the_current_version_succeeds(sim, custom):
    create_job(custom, vcjob("train-1"))
    sim.settle()  # the controller writes status right after the create, bumping the version
    created = get_job(custom, "train-1")
    created["metadata"]["labels"] = {"stage": "two"}
    replaced = custom.replace_namespaced_custom_object(
        GROUP, VERSION, "team-a", "jobs", "train-1", created
    )
    assert replaced["metadata"]["labels"] == {"stage": "two"}
    assert int(replaced["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )
    assert replaced["metadata"]["generation"] == 1  # metadata changes keep the generation


def test_podgroups_and_namespaces_can_be_watched(sim, custom, core):
    from kubernetes import watch

    create_job(custom, vcjob("train-1"))
    sim.settle()
    groups = []
    for event in watch.Watch().stream(
        custom.list_namespaced_custom_object,
        SCHED,
        "v1beta1",
        "team-a",
        "podgroups",
        timeout_seconds=5,
    ):
        groups.append(event["raw_object"]["metadata"]["name"])
        break
    assert groups and groups[0].startswith("train-1-")
    names = []
    for event in watch.Watch().stream(core.list_namespace, timeout_seconds=5):
        names.append(event["object"].metadata.name)
        if len(names) == 6:
            break
    assert {"default", "kube-system", "team-a", "team-b"} <= set(names)
