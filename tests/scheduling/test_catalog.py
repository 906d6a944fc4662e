"""The GPU model catalog, seeded from the reference CSV."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from scheduling.catalog import catalog_seed
from scheduling.models import GpuModel

ROOT = Path(__file__).resolve().parents[2]
SHARED_CSV = ROOT.parent / "shared" / "k8s-reference" / "gpu-models.csv"


def test_the_vendored_csv_is_the_reference_one():
    vendored = Path(settings.GPUPOOL_GPU_CATALOG_CSV)
    assert SHARED_CSV.exists(), "../shared/k8s-reference/gpu-models.csv is missing"
    assert vendored.read_bytes() == SHARED_CSV.read_bytes()


@pytest.mark.django_db
def test_seeding_creates_every_model_with_usable_fields(catalog):
    a100 = GpuModel.objects.get(key="a100-80gb")
    assert (a100.memory_gib, a100.bf16, a100.fp8, a100.mig_capable) == (80, True, False, True)
    assert a100.fp16_tflops == 312
    assert a100.cost_factor == 1.0
    assert "NVIDIA-A100-SXM4-80GB" in a100.product_labels
    t4 = GpuModel.objects.get(key="t4")
    assert t4.product_labels[0] == "Tesla-T4" and t4.cost_factor < 0.5
    assert GpuModel.objects.get(key="mi300x").resource_name == "amd.com/gpu"
    mig = GpuModel.objects.get(key="a100-80gb-mig-1g.10gb")
    assert (mig.memory_gib, mig.resource_name) == (10, "nvidia.com/mig-1g.10gb")
    assert mig.product_labels[0] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"


@pytest.mark.django_db
def test_reseeding_keeps_an_admins_edits(catalog):
    GpuModel.objects.filter(key="t4").update(cost_factor=0.5)
    created, updated = catalog_seed(path=settings.GPUPOOL_GPU_CATALOG_CSV)
    assert (created, updated) == (0, 0)
    assert GpuModel.objects.get(key="t4").cost_factor == 0.5


@pytest.mark.django_db
def test_seed_demo_prints_the_demo_passwords(capsys):
    call_command("seed_demo")
    out = capsys.readouterr().out
    assert "alice" in out and "gpupool-demo" in out
    assert GpuModel.objects.filter(key="a100-80gb").exists()
