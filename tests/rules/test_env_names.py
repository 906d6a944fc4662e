"""One env-name rule (``rules.jobspec``): what submit refuses, the manifest builder refuses.

The two had drifted: submit reserved six names and five prefixes, the builder four and three,
so the builder, the last check before the cluster, let through names submit refuses
(``CUDA_VISIBLE_DEVICES``, ``HOSTNAME``, ``NVIDIA_*``, ``KUBERNETES_*``, a lower-case ``rank``).
Each reserved name is refused at submit with the field error a user reads, nothing stored, and
the builder refuses the same names in the same words.
"""

from __future__ import annotations

import pytest

from portal.models import Job, JobEvent
from rules import jobspec, volcano
from tests.clusters.test_volcano_manifest import a_spec
from tests.conftest import job_body

URL = "/api/v1/jobs/"

RESERVED = sorted(
    [
        *jobspec.RESERVED_ENV_NAMES,
        *(prefix + "X" for prefix in jobspec.RESERVED_ENV_PREFIXES),
        "rank",  # compared upper-cased
        "Nvidia_Visible_Devices",
    ]
)


def test_the_rule_reserves_what_the_platform_sets():
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES"):
        assert name in jobspec.RESERVED_ENV_NAMES
    assert "HOSTNAME" in jobspec.RESERVED_ENV_NAMES
    for prefix in ("GPUPOOL_", "VC_", "VK_", "KUBERNETES_", "NVIDIA_"):
        assert prefix in jobspec.RESERVED_ENV_PREFIXES
    # What the builder itself sets is covered.
    for name in (volcano.PORTAL_ENV_JOB_ID, volcano.PORTAL_ENV_ATTEMPT):
        assert jobspec.env_name_refusal(name) is not None


@pytest.mark.parametrize("name", RESERVED)
@pytest.mark.parametrize("field", ["env", "env_from_secrets"])
def test_submit_refuses_a_reserved_name_naming_the_field(api_as, bob, catalog, name, field):
    value = "x" if field == "env" else {"secret": "s", "key": "k"}
    response = api_as(bob).post(URL, job_body(**{field: {name: value}}), format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["extra"]["fields"] == {
        field: [f"{name} is set by the platform and cannot be overridden."]
    }
    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


@pytest.mark.parametrize("name", RESERVED)
def test_the_builder_refuses_the_same_names_in_the_same_words(name):
    message = f"env: {name} is set by the platform and cannot be overridden."
    with pytest.raises(volcano.ManifestError) as refused:
        a_spec(env={name: "x"})
    assert str(refused.value) == message

    with pytest.raises(volcano.ManifestError) as refused:
        a_spec(env_from_secrets={name: volcano.SecretKeyRef(secret="s", key="k")})
    assert str(refused.value) == "env_from_secrets" + message.removeprefix("env")


@pytest.mark.parametrize("name", ["EPOCHS", "HF_HOME", "NCCL_DEBUG", "PYTORCH_CUDA_ALLOC_CONF"])
def test_an_ordinary_name_passes_both(name):
    assert jobspec.env_name_refusal(name) is None
    assert a_spec(env={name: "1"}).env == {name: "1"}
