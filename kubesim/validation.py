"""Kubernetes name and metadata rules (the part of validation no CRD schema carries).

The apiserver checks object names, label keys and values itself, before and independently of
any schema; these functions return ``StatusCause`` dicts in its wording. Secrets, the one core
type with a body kubesim accepts from clients, get their data keys and encoding checked too.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _invalid(field: str, value: str, detail: str) -> dict[str, str]:
    return {
        "reason": "FieldValueInvalid",
        "field": field,
        "message": f'{field}: Invalid value: "{value}": {detail}',
    }


def is_dns_label(value: str) -> bool:
    """RFC 1123 label: namespaces, task names, anything used as a DNS label."""
    return len(value) <= 63 and bool(_LABEL.match(value))


def is_dns_subdomain(value: str) -> bool:
    """RFC 1123 subdomain: the default rule for object names."""
    return len(value) <= 253 and bool(_SUBDOMAIN.match(value))


def name_causes(name: str, *, rule: str = "subdomain", field: str = "metadata.name") -> list[dict]:
    """Causes for an invalid object name under the given rule (``label`` or ``subdomain``)."""
    causes = []
    limit = 63 if rule == "label" else 253
    if len(name) > limit:
        causes.append(_invalid(field, name, f"must be no more than {limit} characters"))
    pattern, message = (_LABEL, LABEL_MSG) if rule == "label" else (_SUBDOMAIN, SUBDOMAIN_MSG)
    if not pattern.match(name):
        causes.append(_invalid(field, name, message))
    return causes


def label_key_causes(key: str, field: str) -> list[dict]:
    """Causes for a label or annotation key that is not a qualified name."""
    prefix, _, name = key.rpartition("/")
    causes = []
    if prefix and not is_dns_subdomain(prefix):
        causes.append(_invalid(field, key, "prefix part " + SUBDOMAIN_MSG))
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        causes.append(_invalid(field, key, QUALIFIED_MSG))
    return causes


def metadata_causes(meta: dict[str, Any], *, rule: str = "subdomain") -> list[dict]:
    """Validate name, labels and annotations the way ObjectMeta validation does."""
    causes: list[dict] = []
    name = meta.get("name")
    if not name:
        causes.append(
            {
                "reason": "FieldValueRequired",
                "field": "metadata.name",
                "message": "metadata.name: Required value: name or generateName is required",
            }
        )
    elif not isinstance(name, str):
        causes.append(_invalid("metadata.name", str(name), "must be a string"))
    else:
        causes.extend(name_causes(name, rule=rule))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(_invalid("metadata.labels", str(labels), "must be a map of strings"))
        labels = {}
    for key, value in labels.items():
        causes.extend(label_key_causes(key, "metadata.labels"))
        if not isinstance(value, str):
            causes.append(_invalid("metadata.labels", str(value), "label values must be strings"))
        elif len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(_invalid("metadata.labels", value, LABEL_VALUE_MSG))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        causes.append(_invalid("metadata.annotations", str(annotations), "must be a map"))
        annotations = {}
    for key, value in annotations.items():
        causes.extend(label_key_causes(key, "metadata.annotations"))
        if not isinstance(value, str):
            causes.append(
                _invalid("metadata.annotations", str(value), "annotation values must be strings")
            )
    return causes


# A Secret's data key (apimachinery's IsConfigMapKey).
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
SECRET_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)


def _secret_key_causes(field: str, key: Any) -> list[dict]:
    if not isinstance(key, str) or len(key) > 253 or not _SECRET_KEY.match(key):
        return [_invalid(field, str(key), SECRET_KEY_MSG)]
    if key in (".", "..") or key.startswith(".."):
        return [_invalid(field, key, "must not be '.' or '..' or start with '..'")]
    return []


def secret_causes(obj: dict[str, Any]) -> list[dict]:
    """A Secret's ``data`` (base64 strings) and ``stringData`` as the API server checks them."""
    causes: list[dict] = []
    for part in ("data", "stringData"):
        values = obj.get(part) or {}
        if not isinstance(values, dict):
            causes.append(_invalid(part, str(values), "must be a map of strings"))
            continue
        for key, value in values.items():
            causes.extend(_secret_key_causes(f"{part}[{key}]", key))
            if not isinstance(value, str):
                causes.append(_invalid(f"{part}[{key}]", str(value), "must be a string"))
            elif part == "data":
                try:
                    base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    causes.append(_invalid(f"data[{key}]", "<value>", "must be base64-encoded"))
    return causes


def secret_admitted(obj: dict[str, Any]) -> dict[str, Any]:
    """The Secret as stored: ``stringData`` merged into ``data`` (base64), type defaulted."""
    data = dict(obj.get("data") or {})
    for key, value in (obj.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(value.encode()).decode()
    obj["data"] = data
    obj.setdefault("type", "Opaque")
    return obj
