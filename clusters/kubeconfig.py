"""Reduce an uploaded kubeconfig to the few things the portal keeps: server, CA, credentials.

A kubeconfig is untrusted input. Read naively it can make the reader run programs
(``exec``, ``auth-provider``), read files (``tokenFile``, ``client-key``,
``certificate-authority``), skip TLS verification or route through a proxy. This parser
accepts only a kubeconfig that is fully self-contained:

* exactly one cluster, one user and one context, the context naming both;
* an ``https`` server (syntax only; :func:`clusters.urlcheck.check_api_url` judges the
  address later, with the operator's settings and DNS);
* the CA inline as ``certificate-authority-data``;
* a bearer ``token``, or an inline client certificate and key
  (``client-certificate-data`` + ``client-key-data``), not both;
* optionally a namespace in the context and a ``tls-server-name``.

Anything else is refused with a :class:`KubeconfigError` naming the field
(``users[0].user.exec: …``). Unknown fields are refused too, since a field this parser does
not know is a field whose effect nobody checked. ``extensions`` and ``preferences`` are
ignored, and ``insecure-skip-tls-verify: false`` is accepted.

The YAML is parsed with the safe loader, with aliases (the "billion laughs" expansion),
merge keys and duplicate keys refused, and the input capped in size. Base64 is decoded
strictly and every PEM is parsed with ``cryptography``; the credentials returned hold
re-serialized PEM, so nothing but certificates (or the one key) survives. Nothing touches
disk, and no error message ever quotes a value from the file.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from clusters.urlcheck import UnsafeUrlError, normalize_api_url

__all__ = [
    "MAX_KUBECONFIG_BYTES",
    "MAX_YAML_DEPTH",
    "ClusterCredentials",
    "KubeconfigError",
    "parse_kubeconfig",
]

MAX_KUBECONFIG_BYTES = 512 * 1024
MAX_TOKEN_LENGTH = 16 * 1024
MAX_YAML_DEPTH = 32  # a kubeconfig is 5 deep; extensions may nest a little more

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
)
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, nothing a header could be split on


class KubeconfigError(ValueError):
    """The kubeconfig cannot be accepted. ``path`` names the field, e.g. ``users[0].user.exec``."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


@dataclass(frozen=True)
class ClusterCredentials:
    """What the portal keeps from a kubeconfig. Secrets are left out of ``repr``.

    Exactly one of ``token`` or (``client_cert_pem``, ``client_key_pem``) is set.
    """

    server: str
    ca_pem: str
    token: str | None = field(default=None, repr=False)
    client_cert_pem: str | None = field(default=None, repr=False)
    client_key_pem: str | None = field(default=None, repr=False)
    namespace: str | None = None
    tls_server_name: str | None = None
    cluster_name: str = ""

    def __post_init__(self) -> None:
        has_cert = self.client_cert_pem is not None or self.client_key_pem is not None
        if (self.token is not None) == has_cert:
            raise ValueError("credentials need either a token or a client certificate, not both")
        if has_cert and (self.client_cert_pem is None or self.client_key_pem is None):
            raise ValueError("a client certificate needs its key, and a key its certificate")

    @property
    def auth_method(self) -> Literal["token", "client-certificate"]:
        return "token" if self.token is not None else "client-certificate"


# --- YAML, read defensively -------------------------------------------------------------------


class _UntrustedLoader(yaml.SafeLoader):
    """The safe loader, without aliases, merge keys or duplicate keys, and at most
    ``MAX_YAML_DEPTH`` levels deep.

    PyYAML's scanner and parser keep their state in lists, but its composer and constructor
    recurse once per level: 10,000 nested ``[`` ran them out of stack (a ``RecursionError``,
    a 500 at registration). The depth is counted as nodes are composed, before anything is
    built, so a deep document is refused after reading ``MAX_YAML_DEPTH`` levels of it.
    """

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise KubeconfigError("", f"YAML aliases are not accepted (line {mark.line + 1})")
        if self._depth >= MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise KubeconfigError(
                "",
                f"the kubeconfig nests more than {MAX_YAML_DEPTH} levels deep "
                f"(line {mark.line + 1}, column {mark.column + 1})",
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise KubeconfigError("", f"YAML merge keys are not accepted (line {line})")
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise KubeconfigError("", f"mapping keys must be strings (line {line})")
            if key in seen:
                raise KubeconfigError("", f"duplicate key {key!r} (line {line})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        if len(text) > MAX_KUBECONFIG_BYTES:
            raise KubeconfigError("", f"the kubeconfig is larger than {MAX_KUBECONFIG_BYTES} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise KubeconfigError("", "the kubeconfig is not UTF-8 text") from None
    if len(text.encode("utf-8")) > MAX_KUBECONFIG_BYTES:
        raise KubeconfigError("", f"the kubeconfig is larger than {MAX_KUBECONFIG_BYTES} bytes")
    try:
        # Our own loader: SafeLoader plus the refusals above.
        return yaml.load(text, Loader=_UntrustedLoader)  # noqa: S506
    except yaml.MarkedYAMLError as exc:
        # Only the position: the YAML library's message may quote the file, secrets included.
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise KubeconfigError("", f"the kubeconfig is not valid YAML{where}") from None
    except yaml.YAMLError:
        raise KubeconfigError("", "the kubeconfig is not valid YAML") from None


# --- Field rules ------------------------------------------------------------------------------

_FILE_PATH = "is a file path; use the inline -data field with the file's contents in base64"
_REFUSED_CLUSTER_FIELDS = {
    "certificate-authority": _FILE_PATH,
    "proxy-url": "proxies are not supported; the portal connects to the API server directly",
}
_REFUSED_USER_FIELDS = {
    "exec": "runs a local program to get credentials; the portal never runs programs from a "
    "kubeconfig (use a service-account token)",
    "auth-provider": "uses an auth-provider plugin; use a service-account token instead",
    "tokenFile": "reads the token from a file; put the token inline as token",
    "client-certificate": _FILE_PATH,
    "client-key": _FILE_PATH,
    "username": "basic authentication is not supported",
    "password": "basic authentication is not supported",
    "as": "impersonation is not supported",
    "as-uid": "impersonation is not supported",
    "as-groups": "impersonation is not supported",
    "as-user-extra": "impersonation is not supported",
}
_TOP_LEVEL = {
    "apiVersion",
    "kind",
    "clusters",
    "users",
    "contexts",
    "current-context",
    "preferences",
    "extensions",
}
_CLUSTER_FIELDS = {
    "server",
    "certificate-authority-data",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "disable-compression",
    "extensions",
}
_USER_FIELDS = {"token", "client-certificate-data", "client-key-data", "extensions"}
_CONTEXT_FIELDS = {"cluster", "user", "namespace", "extensions"}


def _mapping(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise KubeconfigError(path, "must be a mapping")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise KubeconfigError(path, "must be a non-empty string")
    return value


def _only_fields(
    section: dict[str, Any], path: str, allowed: set[str], refused: dict[str, str]
) -> None:
    for key in section:
        if key in refused:
            raise KubeconfigError(f"{path}.{key}", refused[key])
        if key not in allowed:
            raise KubeconfigError(f"{path}.{key}", "is not a field the portal accepts")


def _the_one(document: dict[str, Any], key: str, inner: str) -> tuple[str, dict[str, Any]]:
    """The single named entry of ``clusters``, ``users`` or ``contexts``: (name, body)."""
    entries = document.get(key)
    if not isinstance(entries, list):
        raise KubeconfigError(key, "must be a list with exactly one entry")
    if len(entries) != 1:
        raise KubeconfigError(
            key, f"must have exactly one entry, found {len(entries)} (export a minimal kubeconfig)"
        )
    entry = _mapping(entries[0], f"{key}[0]")
    for field_name in entry:
        if field_name not in ("name", inner):
            raise KubeconfigError(f"{key}[0].{field_name}", "is not a field the portal accepts")
    name = _string(entry.get("name"), f"{key}[0].name")
    body = _mapping(entry.get(inner), f"{key}[0].{inner}")
    return name, body


def _base64(value: Any, path: str) -> bytes:
    text = _string(value, path)
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(path, "is not valid base64") from None


def _certificates(value: Any, path: str) -> list[x509.Certificate]:
    data = _base64(value, path)
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise KubeconfigError(path, "does not contain a valid PEM certificate") from None
    return certificates


def _pem(certificates: list[x509.Certificate]) -> str:
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certificates)


def _public_key_der(key: Any) -> bytes:
    der: bytes = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der


def _client_certificate(user: dict[str, Any], path: str) -> tuple[str, str]:
    cert_path, key_path = f"{path}.client-certificate-data", f"{path}.client-key-data"
    if "client-key-data" not in user:
        raise KubeconfigError(key_path, "is required with client-certificate-data")
    if "client-certificate-data" not in user:
        raise KubeconfigError(cert_path, "is required with client-key-data")
    chain = _certificates(user["client-certificate-data"], cert_path)
    key_data = _base64(user["client-key-data"], key_path)
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        raise KubeconfigError(
            key_path, "is encrypted; the portal needs an unencrypted key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise KubeconfigError(key_path, "does not contain a valid PEM private key") from None
    if _public_key_der(key.public_key()) != _public_key_der(chain[0].public_key()):
        raise KubeconfigError(key_path, "does not match the client certificate")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    return _pem(chain), key_pem


def _token(value: Any, path: str) -> str:
    token = _string(value, path).strip()
    if len(token) > MAX_TOKEN_LENGTH:
        raise KubeconfigError(path, f"is longer than {MAX_TOKEN_LENGTH} characters")
    if not _TOKEN.fullmatch(token):
        raise KubeconfigError(path, "must be printable ASCII without spaces")
    return token


def _cluster(body: dict[str, Any]) -> tuple[str, str, str | None]:
    path = "clusters[0].cluster"
    _only_fields(body, path, _CLUSTER_FIELDS, _REFUSED_CLUSTER_FIELDS)
    skip = body.get("insecure-skip-tls-verify", False)
    if skip is not False:
        raise KubeconfigError(
            f"{path}.insecure-skip-tls-verify", "turns off TLS verification; the portal never does"
        )
    server_path = f"{path}.server"
    try:
        server = normalize_api_url(_string(body.get("server"), server_path))
    except UnsafeUrlError as exc:
        raise KubeconfigError(server_path, str(exc)) from None
    ca_path = f"{path}.certificate-authority-data"
    if "certificate-authority-data" not in body:
        raise KubeconfigError(ca_path, "is required: the portal verifies the API server against it")
    ca_pem = _pem(_certificates(body["certificate-authority-data"], ca_path))
    tls_server_name = None
    if "tls-server-name" in body:
        tls_path = f"{path}.tls-server-name"
        tls_server_name = _string(body["tls-server-name"], tls_path)
        if not _HOST_NAME.fullmatch(tls_server_name):
            raise KubeconfigError(tls_path, "must be a host name")
    if not isinstance(body.get("disable-compression", False), bool):
        raise KubeconfigError(f"{path}.disable-compression", "must be true or false")
    return server, ca_pem, tls_server_name


def _user(body: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    path = "users[0].user"
    _only_fields(body, path, _USER_FIELDS, _REFUSED_USER_FIELDS)
    has_token = "token" in body
    has_cert = "client-certificate-data" in body or "client-key-data" in body
    if has_token and has_cert:
        raise KubeconfigError(path, "has both a token and a client certificate; keep one")
    if has_token:
        return _token(body["token"], f"{path}.token"), None, None
    if has_cert:
        cert_pem, key_pem = _client_certificate(body, path)
        return None, cert_pem, key_pem
    raise KubeconfigError(path, "needs a token or client-certificate-data and client-key-data")


def _context(body: dict[str, Any], cluster_name: str, user_name: str) -> str | None:
    path = "contexts[0].context"
    _only_fields(body, path, _CONTEXT_FIELDS, {})
    if _string(body.get("cluster"), f"{path}.cluster") != cluster_name:
        raise KubeconfigError(f"{path}.cluster", "does not name the kubeconfig's cluster")
    if _string(body.get("user"), f"{path}.user") != user_name:
        raise KubeconfigError(f"{path}.user", "does not name the kubeconfig's user")
    if "namespace" not in body:
        return None
    namespace = _string(body["namespace"], f"{path}.namespace")
    if len(namespace) > 63 or not _DNS1123_LABEL.fullmatch(namespace):
        raise KubeconfigError(f"{path}.namespace", "must be a DNS-1123 label")
    return namespace


def parse_kubeconfig(text: str | bytes) -> ClusterCredentials:
    """The server, CA and credentials of a self-contained kubeconfig; KubeconfigError otherwise."""
    document = _load_yaml(text)
    if not isinstance(document, dict):
        raise KubeconfigError("", "the kubeconfig must be a YAML mapping")
    for key in document:
        if key not in _TOP_LEVEL:
            raise KubeconfigError(key, "is not a field the portal accepts")
    if document.get("apiVersion", "v1") != "v1":
        raise KubeconfigError("apiVersion", "must be v1")
    if document.get("kind", "Config") != "Config":
        raise KubeconfigError("kind", "must be Config")
    if "preferences" in document and not isinstance(document["preferences"], dict | None):
        raise KubeconfigError("preferences", "must be a mapping")

    cluster_name, cluster = _the_one(document, "clusters", "cluster")
    user_name, user = _the_one(document, "users", "user")
    context_name, context = _the_one(document, "contexts", "context")
    current = document.get("current-context") or ""
    if not isinstance(current, str):
        raise KubeconfigError("current-context", "must be a string")
    if current and current != context_name:
        raise KubeconfigError("current-context", "does not name the kubeconfig's context")

    server, ca_pem, tls_server_name = _cluster(cluster)
    token, cert_pem, key_pem = _user(user)
    namespace = _context(context, cluster_name, user_name)
    return ClusterCredentials(
        server=server,
        ca_pem=ca_pem,
        token=token,
        client_cert_pem=cert_pem,
        client_key_pem=key_pem,
        namespace=namespace,
        tls_server_name=tls_server_name,
        cluster_name=cluster_name,
    )
