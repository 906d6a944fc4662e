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


def configmap_causes(obj: dict[str, Any]) -> list[dict]:
    """A ConfigMap's ``data`` (strings) and ``binaryData`` (base64) keys and values."""
    causes: list[dict] = []
    seen: set[str] = set()
    for part in ("data", "binaryData"):
        values = obj.get(part) or {}
        if not isinstance(values, dict):
            causes.append(_invalid(part, str(values), "must be a map of strings"))
            continue
        for key, value in values.items():
            causes.extend(_secret_key_causes(f"{part}[{key}]", key))
            if key in seen:
                causes.append(_invalid(part, str(key), "duplicate of key present in data"))
            seen.add(key)
            if not isinstance(value, str):
                causes.append(_invalid(f"{part}[{key}]", str(value), "must be a string"))
            elif part == "binaryData":
                try:
                    base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    causes.append(
                        _invalid(f"binaryData[{key}]", "<value>", "must be base64-encoded")
                    )
    immutable = obj.get("immutable")
    if immutable is not None and not isinstance(immutable, bool):
        causes.append(_invalid("immutable", str(immutable), "must be a boolean"))
    return causes


def configmap_update_causes(current: dict[str, Any], new: dict[str, Any]) -> list[dict]:
    """An immutable ConfigMap keeps its data and stays immutable (ValidateConfigMapUpdate)."""
    if not current.get("immutable"):
        return []
    causes = []
    if not new.get("immutable"):
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "field": "immutable",
                "message": "immutable: Forbidden: field is immutable when `immutable` is set",
            }
        )
    for part in ("data", "binaryData"):
        if (current.get(part) or {}) != (new.get(part) or {}):
            causes.append(
                {
                    "reason": "FieldValueForbidden",
                    "field": part,
                    "message": f"{part}: Forbidden: field is immutable when `immutable` is set",
                }
            )
    return causes


# --- Services and Ingresses (pkg/apis/core/validation, pkg/apis/networking/validation) --------

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_IANA_SVC_NAME = re.compile(r"^[-a-z0-9]+$")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
PROTOCOLS = ("TCP", "UDP", "SCTP")
PATH_TYPES = ("Exact", "Prefix", "ImplementationSpecific")
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def _required(field: str) -> dict[str, str]:
    return {"reason": "FieldValueRequired", "field": field, "message": f"{field}: Required value"}


def _unsupported(field: str, value: Any, allowed: tuple[str, ...]) -> dict[str, str]:
    quoted = ", ".join(f'"{a}"' for a in allowed)
    return {
        "reason": "FieldValueNotSupported",
        "field": field,
        "message": f'{field}: Unsupported value: "{value}": supported values: {quoted}',
    }


def _port_number_causes(field: str, value: Any) -> list[dict]:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        return [_invalid(field, str(value), "must be between 1 and 65535, inclusive")]
    return []


def _port_name_causes(field: str, value: str) -> list[dict]:
    """IANA_SVC_NAME: at most 15 characters, lower-case alphanumerics and '-', one letter."""
    if (
        len(value) > 15
        or not _IANA_SVC_NAME.match(value)
        or value.startswith("-")
        or value.endswith("-")
        or "--" in value
        or not re.search("[a-z]", value)
    ):
        return [_invalid(field, value, "must be a valid port name (IANA_SVC_NAME)")]
    return []


def _int_or_name_causes(field: str, value: Any) -> list[dict]:
    if isinstance(value, str):
        return _port_name_causes(field, value)
    return _port_number_causes(field, value)


def service_name_causes(meta: dict[str, Any]) -> list[dict]:
    """A Service's name is a DNS-1035 label (it becomes a DNS name and env variable prefix)."""
    name = meta.get("name")
    if isinstance(name, str) and name and (len(name) > 63 or not _DNS1035.match(name)):
        return [_invalid("metadata.name", name, DNS1035_MSG)]
    return []


def service_causes(obj: dict[str, Any]) -> list[dict]:
    """A Service's spec: type, ports (required unless ExternalName), selector labels."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    causes: list[dict] = []
    kind = spec.get("type", "ClusterIP")
    if kind not in SERVICE_TYPES:
        causes.append(_unsupported("spec.type", kind, SERVICE_TYPES))
    ports = spec.get("ports") or []
    if not isinstance(ports, list):
        return [*causes, _invalid("spec.ports", str(ports), "must be a list")]
    if not ports and kind != "ExternalName":
        causes.append(_required("spec.ports"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        where = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            causes.append(_invalid(where, str(port), "must be an object"))
            continue
        name = port.get("name")
        if len(ports) > 1 and not name:
            causes.append(_required(f"{where}.name"))
        if name:
            if not is_dns_label(str(name)):
                causes.append(_invalid(f"{where}.name", str(name), LABEL_MSG))
            if name in names:
                causes.append(
                    {
                        "reason": "FieldValueDuplicate",
                        "field": f"{where}.name",
                        "message": f'{where}.name: Duplicate value: "{name}"',
                    }
                )
            names.add(str(name))
        if "port" not in port:
            causes.append(_required(f"{where}.port"))
        else:
            causes.extend(_port_number_causes(f"{where}.port", port["port"]))
        protocol = port.get("protocol", "TCP")
        if protocol not in PROTOCOLS:
            causes.append(_unsupported(f"{where}.protocol", protocol, PROTOCOLS))
        if "targetPort" in port:
            causes.extend(_int_or_name_causes(f"{where}.targetPort", port["targetPort"]))
    selector = spec.get("selector") or {}
    if not isinstance(selector, dict):
        causes.append(_invalid("spec.selector", str(selector), "must be a map of strings"))
        selector = {}
    for key, value in selector.items():
        causes.extend(label_key_causes(key, "spec.selector"))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(_invalid("spec.selector", str(value), LABEL_VALUE_MSG))
    return causes


def service_admitted(obj: dict[str, Any], cluster_ip: str) -> dict[str, Any]:
    """The Service as stored: the defaults the API server fills in and a ClusterIP."""
    spec = obj["spec"]
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec["type"] != "ExternalName" and spec.get("clusterIP") != "None":
        spec["clusterIP"] = cluster_ip
        spec["clusterIPs"] = [cluster_ip]
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    obj["status"] = {"loadBalancer": {}}
    return obj


def _backend_causes(field: str, backend: Any) -> list[dict]:
    if not isinstance(backend, dict):
        return [_required(field)]
    service = backend.get("service")
    if not isinstance(service, dict):
        if backend.get("resource"):
            return []
        return [_required(f"{field}.service")]
    causes: list[dict] = []
    name = service.get("name")
    if not name:
        causes.append(_required(f"{field}.service.name"))
    elif not _DNS1035.match(str(name)) or len(str(name)) > 63:
        causes.append(_invalid(f"{field}.service.name", str(name), DNS1035_MSG))
    port = service.get("port")
    if not isinstance(port, dict) or ("name" in port) == ("number" in port):
        causes.append(
            _invalid(f"{field}.service.port", str(port), "cannot set both port name & port number")
            if isinstance(port, dict) and "name" in port
            else _required(f"{field}.service.port")
        )
    elif "name" in port:
        causes.extend(_port_name_causes(f"{field}.service.port.name", str(port["name"])))
    else:
        causes.extend(_port_number_causes(f"{field}.service.port.number", port["number"]))
    return causes


def ingress_causes(obj: dict[str, Any]) -> list[dict]:
    """An Ingress's spec: rules or a default backend, hosts, paths, path types, backends."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    causes: list[dict] = []
    rules = spec.get("rules") or []
    if not rules and not spec.get("defaultBackend"):
        causes.append(
            _invalid("spec.rules", "[]", "either `defaultBackend` or `rules` must be specified")
        )
    if spec.get("defaultBackend"):
        causes.extend(_backend_causes("spec.defaultBackend", spec["defaultBackend"]))
    class_name = spec.get("ingressClassName")
    if class_name is not None and not is_dns_subdomain(str(class_name)):
        causes.append(_invalid("spec.ingressClassName", str(class_name), SUBDOMAIN_MSG))
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        where = f"spec.rules[{i}]"
        host = (rule or {}).get("host")
        if host:
            plain = host[2:] if host.startswith("*.") else host
            if not is_dns_subdomain(plain):
                causes.append(_invalid(f"{where}.host", host, SUBDOMAIN_MSG))
        http = (rule or {}).get("http")
        if http is None:
            continue
        paths = http.get("paths") or []
        if not paths:
            causes.append(_required(f"{where}.http.paths"))
        for j, path in enumerate(paths):
            at = f"{where}.http.paths[{j}]"
            if "pathType" not in path:
                causes.append(_required(f"{at}.pathType"))
            elif path["pathType"] not in PATH_TYPES:
                causes.append(_unsupported(f"{at}.pathType", path["pathType"], PATH_TYPES))
            value = path.get("path", "")
            if path.get("pathType") in ("Exact", "Prefix") and not str(value).startswith("/"):
                causes.append(_invalid(f"{at}.path", str(value), "must be an absolute path"))
            causes.extend(_backend_causes(f"{at}.backend", path.get("backend")))
    return causes
