"""Kubernetes resource quantities ("500m", "16Gi", 8) as exact integers.

The scheduler compares requests with node allocatable many thousand times per cycle, so every
quantity is parsed once into an integer count of milli-units (``"1"`` -> 1000, ``"500m"`` ->
500, ``"1Ki"`` -> 1_024_000). Integers keep the sums exact, which matters for the gang rule:
a float rounding error must never let a pod onto a full node.
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity (for example ``"1 GPU"``)."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Return the exact value of a quantity in base units (cores, bytes, devices)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must be numbers or strings, not {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise QuantityError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise QuantityError(str(exc)) from exc
    suffix = match.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def to_milli(value: str | int | float) -> int:
    """Parse a quantity into integer milli-units, rounding up like the apiserver does."""
    if isinstance(value, str):
        return _to_milli_text(value)
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


@functools.lru_cache(maxsize=4096)
def _to_milli_text(value: str) -> int:
    # Quantities repeat endlessly ("1", "8", "64Gi"); Decimal parsing is the slow part.
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def format_milli(milli: int, resource: str = "") -> str:
    """Render milli-units back into a short quantity string for status fields and messages."""
    if resource == "memory" or resource.startswith(("hugepages-", "ephemeral-storage")):
        whole = milli // 1000
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if whole and whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def resource_list_to_milli(resources: dict[str, str | int | float] | None) -> dict[str, int]:
    """Parse a ResourceList (``{"cpu": "8", "nvidia.com/gpu": 1}``) into milli-units."""
    return {name: to_milli(value) for name, value in (resources or {}).items()}


def resource_list_format(milli: dict[str, int]) -> dict[str, str]:
    """Render a milli-unit map as a ResourceList, skipping zero entries."""
    return {name: format_milli(value, name) for name, value in sorted(milli.items()) if value}
