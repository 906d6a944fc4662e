"""The GPU model catalog: seeding it from the reference CSV and reading it for validation."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models.signals import post_delete, post_migrate, post_save

from portal.jobs.spec import CatalogEntry
from scheduling.models import GpuModel

# The reference card for cost factors: an A100-80GB GPU-hour costs 1.0.
REFERENCE_MODEL_KEY = "a100-80gb"

# How long a process trusts its copy of the catalog for submit validation (seconds). Saves
# in this process clear it at once; another process's copy may lag an edit by this much.
CATALOG_CACHE_SECONDS = 10.0

# MIG slices worth offering out of the box (mixed strategy: one resource per profile).
# (parent key, profile, memory GiB, fraction of the parent's compute)
MIG_SLICES = (
    ("a100-80gb", "1g.10gb", 10, 1 / 7),
    ("a100-80gb", "3g.40gb", 40, 3 / 7),
    ("h100-sxm", "1g.10gb", 10, 1 / 7),
)


MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def mig_whole_gpu(key: str, resource_name: str) -> str:
    """For a MIG slice (its pods ask for an ``nvidia.com/mig-<profile>`` resource), the key of
    the card it is cut from (``a100-80gb-mig-1g.10gb`` → ``a100-80gb``); else empty."""
    if not resource_name.startswith(MIG_RESOURCE_PREFIX):
        return ""
    whole, sep, _profile = key.partition("-mig-")
    return whole if sep else key


def _truthy(value: str) -> bool:
    return value.strip().lower() == "true"


def _product_labels(row: dict[str, str]) -> list[str]:
    """GFD label values that mean this model, incl. the older form without the vendor prefix."""
    label = row["gfd_product_label"].strip()
    if not label:
        return []
    labels = [label]
    if label.startswith("NVIDIA-"):
        labels.append(label.removeprefix("NVIDIA-"))
    return labels


def read_catalog_csv(path: str | Path) -> list[dict[str, Any]]:
    """Rows of ``gpu-models.csv`` as GpuModel field dicts, MIG slices appended."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    prices = {r["key"]: float(r["typical_cloud_usd_per_hour"]) for r in rows}
    reference = prices.get(REFERENCE_MODEL_KEY) or max(prices.values())
    models: list[dict[str, Any]] = []
    for r in rows:
        resource = "amd.com/gpu" if r["vendor"] == "AMD" else "nvidia.com/gpu"
        models.append(
            {
                "key": r["key"],
                "vendor": r["vendor"],
                "display_name": r["product_name"],
                "product_labels": _product_labels(r),
                "architecture": r["architecture"],
                "memory_gib": int(float(r["memory_gib"])),
                "fp16_tflops": float(r["fp16_tflops_dense"]),
                "bf16": _truthy(r["bf16_supported"]),
                "fp8": _truthy(r["fp8_supported"]),
                "mig_capable": _truthy(r["mig_capable"]),
                "resource_name": resource,
                "cost_factor": round(prices[r["key"]] / reference, 3),
                "price_per_hour_usd": prices[r["key"]],
            }
        )
    by_key = {m["key"]: m for m in models}
    for parent_key, profile, memory, fraction in MIG_SLICES:
        parent = by_key.get(parent_key)
        if parent is None:
            continue
        labels = [f"{label}-MIG-{profile}" for label in parent["product_labels"]]
        models.append(
            {
                **parent,
                "key": f"{parent_key}-mig-{profile}",
                "display_name": f"{parent['display_name']} MIG {profile}",
                "product_labels": labels,
                "memory_gib": memory,
                "fp16_tflops": round(float(parent["fp16_tflops"]) * fraction, 1),
                "mig_capable": False,
                "resource_name": f"nvidia.com/mig-{profile}",
                "cost_factor": round(float(parent["cost_factor"]) * fraction, 3),
                "price_per_hour_usd": round(float(parent["price_per_hour_usd"]) * fraction, 2),
            }
        )
    return models


@transaction.atomic
def catalog_seed(*, path: str | Path, update_existing: bool = False) -> tuple[int, int]:
    """Create missing catalog entries (and refresh existing ones if asked); (created, updated).

    Existing rows are left alone by default: admins edit cost factors and labels in the admin,
    and a re-seed must not undo that.
    """
    created = updated = 0
    existing = {m.key: m for m in GpuModel.objects.all()}
    for fields in read_catalog_csv(path):
        key = str(fields["key"])
        if key not in existing:
            GpuModel.objects.create(**fields)
            created += 1
        elif update_existing:
            GpuModel.objects.filter(key=key).update(
                **{k: v for k, v in fields.items() if k != "key"}
            )
            updated += 1
    catalog_forget()  # update() sends no post_save
    return created, updated


SHARED_SUFFIX = "-shared"


def shared_pool_create(*, card: GpuModel, cost_factor: float | None = None) -> GpuModel:
    """Offer ``card`` as a shared (fractional) pool: a catalog model whose capacity, quota and
    jobs count GiB of one device's memory (``rules.engine.sharing``).

    Its cost factor is per GiB-hour: the card's cost divided by its memory unless given, so a
    share of a quarter of the memory costs a quarter of the card's hour. Idempotent: the pool
    of a card that has one is returned as it is.
    """
    existing = GpuModel.objects.filter(shares=card).first()
    if existing is not None:
        return existing
    per_gib = card.cost_factor / card.memory_gib if card.memory_gib else card.cost_factor
    return GpuModel.objects.create(
        key=f"{card.key}{SHARED_SUFFIX}"[:64],
        vendor=card.vendor,
        display_name=f"{card.display_name} (shared)",
        product_labels=[],
        architecture=card.architecture,
        memory_gib=card.memory_gib,
        fp16_tflops=card.fp16_tflops,
        bf16=card.bf16,
        fp8=card.fp8,
        resource_name="volcano.sh/vgpu-memory",
        cost_factor=max(0.001, cost_factor if cost_factor is not None else per_gib),
        price_per_hour_usd=None,
        shares=card,
    )


_cached: tuple[float, dict[str, CatalogEntry]] | None = None
_cache_lock = threading.Lock()
_generation = 0  # bumped by every forget: a copy read before a forget is never stored after it


def _read_entries() -> dict[str, CatalogEntry]:
    return {
        key: CatalogEntry(
            key=key, memory_gib=mem, fp16_tflops=tf, bf16=bf16, fp8=fp8, shared=shares is not None
        )
        for key, mem, tf, bf16, fp8, shares in GpuModel.objects.filter(active=True).values_list(
            "key", "memory_gib", "fp16_tflops", "bf16", "fp8", "shares_id"
        )
    }


def catalog_entries() -> dict[str, CatalogEntry]:
    """Active models, as submit validation sees them.

    Every submit validates against the catalog, which admins change a few times a year, so a
    process keeps a copy for ``CATALOG_CACHE_SECONDS`` instead of a query per submit. Inside a
    transaction it reads the table instead: the caller then sees its own uncommitted edits,
    and nothing a rollback undoes (a test's, say) is ever cached.
    """
    global _cached
    if connection.in_atomic_block:
        return _read_entries()
    now = time.monotonic()
    cached = _cached
    if cached is None or now - cached[0] > CATALOG_CACHE_SECONDS:
        with _cache_lock:  # one reader per process refreshes; the others wait for its copy
            cached = _cached
            if cached is None or now - cached[0] > CATALOG_CACHE_SECONDS:
                generation = _generation
                cached = (time.monotonic(), _read_entries())
                if generation == _generation:  # else an edit committed while we read: use, not keep
                    _cached = cached
    return dict(cached[1])


def catalog_forget(**_signal: Any) -> None:
    """Drop this process's copy of the catalog, now and again when the change commits.

    Connected to GpuModel saves and deletes (admin edits), to ``post_migrate`` (which also
    follows a test database flush), and called by ``catalog_seed``, whose ``update()`` sends
    no signal. The second drop, on commit, covers a copy re-read before the change committed.
    """
    _drop_cache()
    if connection.in_atomic_block:
        transaction.on_commit(_drop_cache)


def _drop_cache() -> None:
    global _cached, _generation
    _generation += 1
    _cached = None


post_save.connect(catalog_forget, sender=GpuModel, dispatch_uid="catalog_forget_on_save")
post_delete.connect(catalog_forget, sender=GpuModel, dispatch_uid="catalog_forget_on_delete")
post_migrate.connect(catalog_forget, dispatch_uid="catalog_forget_on_migrate")
