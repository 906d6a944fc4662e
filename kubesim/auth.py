"""Bearer-token and client-certificate authentication, and a small RBAC-like authorizer.

Each token maps to a :class:`Principal` with a user name and a list of :class:`Rule` (verbs x
API groups x resources x namespaces), mirroring a Role/ClusterRole binding. The main token of a
server is ``cluster-admin``; tests add narrower tokens to exercise 403 handling::

    KubeSim(config, roles={"viewer-token": "view",
                           "bob-token": {"user": "bob", "rules": [
                               {"verbs": ["get", "list"], "resources": ["pods"],
                                "namespaces": ["team-a"]}]}})
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from kubesim.errors import unauthorized


@dataclass(frozen=True)
class Rule:
    """Allows ``verbs`` on ``resources`` of ``api_groups`` in ``namespaces`` (None = any)."""

    verbs: tuple[str, ...] = ("*",)
    api_groups: tuple[str, ...] = ("*",)
    resources: tuple[str, ...] = ("*",)
    namespaces: tuple[str, ...] | None = None

    def allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        """Whether this rule grants the request (``resource`` may be ``pods/log``)."""
        if "*" not in self.verbs and verb not in self.verbs:
            return False
        if "*" not in self.api_groups and group not in self.api_groups:
            return False
        base = resource.split("/")[0]
        if (
            "*" not in self.resources
            and resource not in self.resources
            and ("/" in resource or base not in self.resources)
        ):
            return False
        return self.namespaces is None or (namespace is not None and namespace in self.namespaces)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Rule:
        """Build from RBAC-style keys: verbs, apiGroups, resources, namespaces."""
        namespaces = raw.get("namespaces")
        return cls(
            verbs=tuple(raw.get("verbs") or ("*",)),
            api_groups=tuple(raw.get("apiGroups") or ("*",)),
            resources=tuple(raw.get("resources") or ("*",)),
            namespaces=tuple(namespaces) if namespaces is not None else None,
        )


ROLES: dict[str, tuple[Rule, ...]] = {
    "cluster-admin": (Rule(),),
    "view": (Rule(verbs=("get", "list", "watch")),),
    "edit": (
        Rule(verbs=("get", "list", "watch")),
        Rule(
            resources=("jobs", "pods", "events"),
            verbs=("create", "update", "patch", "delete", "deletecollection"),
        ),
    ),
}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    user: str
    rules: tuple[Rule, ...]

    @property
    def admin(self) -> bool:
        """Cluster-admin (may also use the kubesim control endpoints)."""
        return any(r == Rule() for r in self.rules)

    def allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        """Whether any rule grants the request."""
        return any(rule.allows(verb, group, resource, namespace) for rule in self.rules)


class Authenticator:
    """Token -> Principal table, compared in constant time; certificate users by name."""

    def __init__(self) -> None:
        self._tokens: dict[str, Principal] = {}
        self._users: dict[str, Principal] = {}

    def add_user(self, user: str, spec: str | dict[str, Any] | list[Any] = "cluster-admin") -> None:
        """Grant a role or rules to ``user``, as a client certificate with that CN names it."""
        self._users[user] = _principal(spec, user)

    def add(
        self,
        token: str,
        spec: str | dict[str, Any] | list[Any] = "cluster-admin",
        user: str | None = None,
    ) -> Principal:
        """Register a token with a role name, a rule list, or ``{"user", "role"|"rules"}``."""
        principal = _principal(spec, user)
        self._tokens[token] = principal
        return principal

    def authenticate(self, header: str | None, cert_user: str | None = None) -> Principal | None:
        """None for an anonymous request; 401 for a malformed or unknown token.

        ``cert_user`` is the CN of a client certificate the TLS handshake verified: that user
        is authenticated, with the rules granted to it (none, so every request is a 403, for
        a user nobody granted anything), exactly as RBAC treats an unbound user. As in the
        API server's chain of authenticators, the certificate is tried before the token.
        """
        if cert_user is not None:
            return self._users.get(cert_user) or Principal(cert_user, ())
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized()
        token = token.strip()
        for known, principal in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return principal
        raise unauthorized()


def _principal(spec: str | dict[str, Any] | list[Any], user: str | None) -> Principal:
    """A role name, a rule list, or ``{"user", "role"|"rules"}`` as a Principal."""
    rules: tuple[Rule, ...]
    if isinstance(spec, str):
        if spec not in ROLES:
            raise ValueError(f"unknown role {spec!r}; known: {', '.join(ROLES)}")
        rules = ROLES[spec]
        user = user or f"kubesim:{spec}"
    elif isinstance(spec, list):
        rules = tuple(r if isinstance(r, Rule) else Rule.from_dict(r) for r in spec)
    else:
        user = spec.get("user", user)
        if "role" in spec:
            rules = ROLES[spec["role"]]
        else:
            rules = tuple(
                r if isinstance(r, Rule) else Rule.from_dict(r) for r in spec.get("rules", [])
            )
    return Principal(user or "kubesim:user", rules)
