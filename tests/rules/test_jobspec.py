"""The job request's rules live once (``rules.jobspec``): every place that lists the request's
fields, checks a readiness path or matches a requirement reads them from there."""

from __future__ import annotations

import itertools

import pytest

from portal.api.serializers import JobInputSerializer, JobSerializer
from portal.jobs import spec as portal_spec
from portal.web.forms import JobSubmitForm
from rules import engine, jobspec, volcano
from scheduling import matching


def test_every_face_of_a_job_request_names_the_same_fields():
    fields = set(jobspec.REQUEST_FIELDS)
    assert len(fields) == len(jobspec.REQUEST_FIELDS)
    assert fields == portal_spec.FIELDS
    # The API documents the same body (plus the job it starts from, for a resubmit) and shows
    # it back, in the rule's order.
    assert set(JobInputSerializer().fields) == {*fields, "from_job"}
    shown = [f for f in JobSerializer.Meta.fields if f in fields]
    assert shown == list(jobspec.REQUEST_FIELDS)
    # The form has an input for each (and two of its own: the way to choose, the picked order).
    assert set(JobSubmitForm.base_fields) == {*fields, "requirement", "gpu_models_order"}
    assert set(jobspec.CONSTRAINT_FIELDS) <= fields
    assert set(jobspec.REQUIREMENT_FIELDS) <= fields
    assert matching.REQUIREMENT_FIELDS is jobspec.REQUIREMENT_FIELDS


@pytest.mark.parametrize(
    "path", ["/health", "/v1/models?ready=1", "/", "/a%20b", "/" + "x" * 1023], ids=repr
)
def test_a_readiness_path_a_kubelet_can_send_passes_both_checks(path):
    assert jobspec.readiness_path_refusal(path) is None
    assert volcano.readiness_path_check(path) == path


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("health", "Must be an absolute path such as /health, without spaces or #."),
        ("/with space", "Must be an absolute path such as /health, without spaces or #."),
        ("/frag#ment", "Must be an absolute path such as /health, without spaces or #."),
        ("/" + "x" * 1024, "Must be at most 1024 characters."),
        (8080, "Must be a string."),
    ],
    ids=repr,
)
def test_a_readiness_path_refused_says_why_and_the_builder_refuses_it_too(path, refusal):
    assert jobspec.readiness_path_refusal(path) == refusal
    with pytest.raises(volcano.ManifestError, match=r"^readiness_path: "):
        volcano.readiness_path_check(path)


MODELS = [
    engine.GpuModel(key=f"m{i}", memory_gib=mem, tflops_fp16=tf, bf16=bf, fp8=f8)
    for i, (mem, tf, bf, f8) in enumerate(
        itertools.product((16, 40, 80), (65.0, 312.0, 990.0), (False, True), (False, True))
    )
]
REQUIREMENTS = list(
    itertools.product((None, 0, 40, 80), (None, 0.0, 312.0, 1000.0), (False, True), (False, True))
)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.key)
def test_submit_and_the_engine_match_a_model_alike(model):
    """Submit's "some model meets these constraints" and the engine's candidates are one match."""
    entry = portal_spec.CatalogEntry(
        key=model.key,
        memory_gib=int(model.memory_gib),
        fp16_tflops=model.tflops_fp16,
        bf16=model.bf16,
        fp8=model.fp8,
    )
    for memory, tflops, bf16, fp8 in REQUIREMENTS:
        req = {
            "min_gpu_memory_gib": memory,
            "min_fp16_tflops": tflops,
            "requires_bf16": bf16,
            "requires_fp8": fp8,
        }
        requirement = engine.Requirement(
            min_memory_gib=float(memory or 0), min_tflops_fp16=tflops or 0.0, bf16=bf16, fp8=fp8
        )
        failures = engine.requirement_failures(model, requirement)
        assert portal_spec._meets(entry, req) is (not failures), (req, failures)


def test_the_engine_words_each_shortfall():
    model = engine.GpuModel(key="t4", memory_gib=16, tflops_fp16=65, bf16=False, fp8=False)
    requirement = engine.Requirement(min_memory_gib=40, min_tflops_fp16=312.5, bf16=True, fp8=True)
    assert engine.requirement_failures(model, requirement) == [
        "16 GiB < 40 GiB",
        "65 TFLOPS < 312.5 TFLOPS",
        "no bf16",
        "no fp8",
    ]
