"""Real identity servers for the tests: OpenLDAP's slapd (Debian's package) and a real OpenID
provider (panva/oidc-provider under Node, ``idp/server.mjs``), each a process of its own on a
free port with its own temporary configuration, stopped when the fixture ends.

Both are needed by CI (``.ci/run`` installs slapd, and npm installs the provider): a missing
one fails the test on CI and skips it elsewhere, saying what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

IDP_DIR = Path(__file__).parent / "idp"
SLAPD = shutil.which("slapd") or "/usr/sbin/slapd"
LDAP_SUFFIX = "dc=gpupool,dc=test"
LDAP_ADMIN = f"cn=admin,{LDAP_SUFFIX}"
LDAP_ADMIN_PASSWORD = "admin-pw-for-tests"


def missing(what: str, how: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing; {how}")
    pytest.skip(f"{what} is missing ({how})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not listen on {port} in {timeout} s: {log.read_text()[-2000:]}")


@contextmanager
def process(args: list[str], port: int, log: Path, cwd: Path | None = None) -> Iterator[None]:
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        wait_for_port(port, proc, log)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------
# OpenID provider
# ---------------------------------------------------------------------------------------------
class OidcIdp:
    """The running provider: its issuer, one confidential client, and its users file, which
    it reads at every sign-in (so a test changes groups or removes a user between two)."""

    client_id = "gpupool-tests"
    client_secret = "client-secret-for-tests-0123456789"

    def __init__(self, issuer: str, users_file: Path) -> None:
        self.issuer = issuer
        self.users_file = users_file
        self.users: dict[str, dict[str, Any]] = {}
        self._save()

    def _save(self) -> None:
        self.users_file.write_text(json.dumps(self.users))

    def set_user(
        self,
        login: str,
        *,
        groups: list[str],
        password: str = "idp-pw",
        email: str | None = None,
        name: str | None = None,
    ) -> None:
        """A user as the provider will vouch for them; ``email`` and ``name`` are the claims,
        whatever they hold (a provider's claims are anyone's words)."""
        self.users[login] = {
            "password": password,
            "email": f"{login}@example.org" if email is None else email,
            "name": f"{login.title()} Example" if name is None else name,
            "groups": groups,
        }
        self._save()

    def disable_user(self, login: str) -> None:
        """Switched off at the provider: sign-in and refresh refused, the entry kept."""
        self.users[login]["disabled"] = True
        self._save()

    def remove_user(self, login: str) -> None:
        self.users.pop(login, None)
        self._save()

    def settings_entry(self, name: str = "testidp") -> dict[str, Any]:
        """The provider as ``GPUPOOL_OIDC_PROVIDERS`` holds it (what the env would give)."""
        return {
            "name": name,
            "label": "Test IdP",
            "issuer": self.issuer,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "scopes": "openid email profile groups",
            "groups_claim": "groups",
            "username_claim": "preferred_username",
            "offline_access": True,
        }


@contextmanager
def oidc_idp_running(
    tmp: Path, redirect_bases: list[str], *, id_token_ttl: int = 3600
) -> Iterator[OidcIdp]:
    """Start ``idp/server.mjs`` with a client whose redirect and post-logout URIs are under
    each of ``redirect_bases`` (the test client's and the live server's)."""
    node = shutil.which("node")
    if node is None:
        missing("node", "apt-get install nodejs")
    if not (IDP_DIR / "node_modules" / "oidc-provider").is_dir():
        missing("oidc-provider", f"npm ci --prefix {IDP_DIR}")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    idp = OidcIdp(issuer, tmp / "users.json")
    config = {
        "issuer": issuer,
        "port": port,
        "users_file": str(idp.users_file),
        "id_token_ttl": id_token_ttl,
        "clients": [
            {
                "client_id": idp.client_id,
                "client_secret": idp.client_secret,
                "redirect_uris": [
                    f"{b}/sso/{n}/callback/"
                    for b in redirect_bases
                    for n in ("testidp", "shortidp")
                ],
                "post_logout_redirect_uris": [f"{b}/login/" for b in redirect_bases],
            }
        ],
    }
    (tmp / "idp.json").write_text(json.dumps(config))
    with process(
        [str(node), str(IDP_DIR / "server.mjs"), str(tmp / "idp.json")],
        port,
        tmp / "idp.log",
        cwd=IDP_DIR,
    ):
        yield idp


# ---------------------------------------------------------------------------------------------
# OpenLDAP
# ---------------------------------------------------------------------------------------------
SLAPD_CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
pidfile {tmp}/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 10485760
suffix "{suffix}"
rootdn "{admin}"
rootpw {password}
directory {tmp}/data
"""

BASE_LDIF = """\
dn: {suffix}
objectClass: dcObject
objectClass: organization
o: gpupool tests
dc: gpupool

dn: ou=people,{suffix}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{suffix}
objectClass: organizationalUnit
ou: groups
"""


class Slapd:
    """The running directory: its URI, and ldapadd/ldapmodify/ldapdelete as its admin."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def _tool(self, tool: str, ldif: str = "", *args: str) -> None:
        done = subprocess.run(
            [tool, "-x", "-H", self.uri, "-D", LDAP_ADMIN, "-w", LDAP_ADMIN_PASSWORD, *args],
            input=ldif,
            text=True,
            capture_output=True,
        )
        assert done.returncode == 0, f"{tool} failed: {done.stderr}"

    def add(self, ldif: str) -> None:
        self._tool("ldapadd", ldif)

    def modify(self, ldif: str) -> None:
        self._tool("ldapmodify", ldif)

    def delete(self, dn: str) -> None:
        self._tool("ldapdelete", "", dn)

    def add_user(self, uid: str, password: str, *, mail: str | None = None) -> str:
        dn = f"uid={uid},ou=people,{LDAP_SUFFIX}"
        mail = f"{uid}@ldap.example.org" if mail is None else mail
        self.add(
            f"dn: {dn}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}\n"
            f"sn: Example\ngivenName: {uid.title()}\nmail: {mail}\n"
            f"userPassword: {password}\n"
        )
        return dn

    def rename(self, uid: str, new_uid: str) -> None:
        """A new name for the same entry (its entryUUID stays)."""
        self.modify(
            f"dn: uid={uid},ou=people,{LDAP_SUFFIX}\nchangetype: modrdn\n"
            f"newrdn: uid={new_uid}\ndeleteoldrdn: 1\n"
        )

    def add_group(self, cn: str, members: list[str]) -> None:
        # groupOfNames must have a member: the admin stands in for an empty group.
        lines = f"member: {LDAP_ADMIN}\n" + "".join(
            f"member: uid={m},ou=people,{LDAP_SUFFIX}\n" for m in members
        )
        self.add(
            f"dn: cn={cn},ou=groups,{LDAP_SUFFIX}\nobjectClass: groupOfNames\ncn: {cn}\n{lines}"
        )

    def group_member(self, cn: str, uid: str, *, present: bool) -> None:
        op = "add" if present else "delete"
        self.modify(
            f"dn: cn={cn},ou=groups,{LDAP_SUFFIX}\nchangetype: modify\n{op}: member\n"
            f"member: uid={uid},ou=people,{LDAP_SUFFIX}\n"
        )

    def settings(self) -> dict[str, Any]:
        """The django-auth-ldap settings the portal's GPUPOOL_LDAP_* variables produce."""
        import ldap
        from django_auth_ldap.config import GroupOfNamesType, LDAPSearch

        return {
            "AUTH_LDAP_SERVER_URI": self.uri,
            "AUTH_LDAP_BIND_DN": LDAP_ADMIN,
            "AUTH_LDAP_BIND_PASSWORD": LDAP_ADMIN_PASSWORD,
            "AUTH_LDAP_USER_SEARCH": LDAPSearch(
                f"ou=people,{LDAP_SUFFIX}",
                ldap.SCOPE_SUBTREE,
                "(uid=%(user)s)",
                attrlist=["*", "entryUUID"],
            ),
            "AUTH_LDAP_GROUP_SEARCH": LDAPSearch(
                f"ou=groups,{LDAP_SUFFIX}", ldap.SCOPE_SUBTREE, "(objectClass=groupOfNames)"
            ),
            "AUTH_LDAP_GROUP_TYPE": GroupOfNamesType(),
            "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn"},
        }


@contextmanager
def slapd_running(tmp: Path) -> Iterator[Slapd]:
    if not os.path.exists(SLAPD) or shutil.which("ldapadd") is None:
        missing("slapd / ldap-utils", "apt-get install slapd ldap-utils (.ci/run does)")
    (tmp / "data").mkdir()
    conf = tmp / "slapd.conf"
    conf.write_text(
        SLAPD_CONF.format(
            tmp=tmp, suffix=LDAP_SUFFIX, admin=LDAP_ADMIN, password=LDAP_ADMIN_PASSWORD
        )
    )
    port = free_port()
    uri = f"ldap://127.0.0.1:{port}"
    # -d 0: stay in the foreground (the fixture owns the process), no debug output.
    with process([SLAPD, "-f", str(conf), "-h", uri + "/", "-d", "0"], port, tmp / "slapd.log"):
        directory = Slapd(uri)
        directory.add(BASE_LDIF.format(suffix=LDAP_SUFFIX))
        yield directory
