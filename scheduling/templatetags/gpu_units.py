"""An amount of a GPU model in its own unit: "8 × a100-80gb" for whole GPUs and MIG slices,
"30 GiB of a100-80gb-shared" for a shared pool, whose capacity, quota and jobs count GiB of
GPU memory (issue 32: a share never reads as thirty cards)."""

from __future__ import annotations

from typing import Any

from django import template

from scheduling.catalog import catalog_entries

register = template.Library()


def is_shared_model(key: str) -> bool:
    """Whether ``key`` is a shared pool (the catalog's copy, no query on most calls)."""
    entry = catalog_entries().get(str(key))
    return bool(entry is not None and entry.shared)


@register.filter
def of_model(amount: Any, key: Any) -> str:
    """``{{ 30|of_model:"a100-80gb-shared" }}`` → "30 GiB of a100-80gb-shared";
    ``{{ 8|of_model:"a100-80gb" }}`` → "8 × a100-80gb"."""
    if is_shared_model(str(key)):
        return f"{amount} GiB of {key}"
    return f"{amount} \u00d7 {key}"
