"""Uploaded kubeconfigs: what is accepted, what is refused, and that the refusal names the field."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from clusters.kubeconfig import (
    MAX_KUBECONFIG_BYTES,
    MAX_YAML_DEPTH,
    ClusterCredentials,
    KubeconfigError,
    parse_kubeconfig,
)

# --- Key material, made once per test run ------------------------------------------------------

NOT_BEFORE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
NOT_AFTER = dt.datetime(2036, 1, 1, tzinfo=dt.UTC)
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6Z3AifQ.c2lnbmF0dXJl"


def make_cert(subject: str, key, issuer_key=None, issuer: str | None = None, ca: bool = False):
    issuer_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer or subject)])
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key or key, hashes.SHA256())
    )


def pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key, fmt=serialization.PrivateFormat.TraditionalOpenSSL, password: bytes | None = None):
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, fmt, encryption)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


CA_KEY = ec.generate_private_key(ec.SECP256R1())
CA_CERT = make_cert("kubernetes", CA_KEY, ca=True)
CLIENT_KEY = ec.generate_private_key(ec.SECP256R1())
CLIENT_CERT = make_cert("gpupool-portal", CLIENT_KEY, issuer_key=CA_KEY, issuer="kubernetes")
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_CERT = make_cert("gpupool-rsa", RSA_KEY, issuer_key=CA_KEY, issuer="kubernetes")
OTHER_KEY = ec.generate_private_key(ec.SECP256R1())


def a_kubeconfig(**changes: Any) -> dict[str, Any]:
    """A minimal token kubeconfig, as ``kubectl config view --minify --raw`` writes it."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpu-east",
                "cluster": {
                    "server": "https://k8s.gpu-east.example.org:6443",
                    "certificate-authority-data": b64(pem(CA_CERT)),
                },
            }
        ],
        "users": [{"name": "gpupool-portal", "user": {"token": TOKEN}}],
        "contexts": [
            {
                "name": "gpupool@gpu-east",
                "context": {
                    "cluster": "gpu-east",
                    "user": "gpupool-portal",
                    "namespace": "gpupool",
                },
            }
        ],
        "current-context": "gpupool@gpu-east",
        "preferences": {},
    }
    config.update(changes)
    return config


def with_cluster(**fields: Any) -> dict[str, Any]:
    config = a_kubeconfig()
    config["clusters"][0]["cluster"].update(fields)
    return config


def with_user(user: dict[str, Any]) -> dict[str, Any]:
    config = a_kubeconfig()
    config["users"][0]["user"] = user
    return config


def with_context(**fields: Any) -> dict[str, Any]:
    config = a_kubeconfig()
    config["contexts"][0]["context"].update(fields)
    return config


def dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def refused(config: dict[str, Any] | str | bytes) -> KubeconfigError:
    text = config if isinstance(config, str | bytes) else dump(config)
    with pytest.raises(KubeconfigError) as caught:
        parse_kubeconfig(text)
    return caught.value


# --- Accepted ---------------------------------------------------------------------------------


def test_a_token_kubeconfig_is_reduced_to_server_ca_token_and_namespace():
    credentials = parse_kubeconfig(dump(a_kubeconfig()))

    assert credentials.server == "https://k8s.gpu-east.example.org:6443"
    assert credentials.ca_pem == pem(CA_CERT).decode()
    assert credentials.token == TOKEN
    assert credentials.client_cert_pem is None
    assert credentials.client_key_pem is None
    assert credentials.namespace == "gpupool"
    assert credentials.cluster_name == "gpu-east"
    assert credentials.auth_method == "token"


def test_a_client_certificate_kubeconfig_keeps_the_certificate_and_key():
    config = with_user(
        {
            "client-certificate-data": b64(pem(CLIENT_CERT)),
            "client-key-data": b64(key_pem(CLIENT_KEY)),
        }
    )

    credentials = parse_kubeconfig(dump(config))

    assert credentials.token is None
    assert credentials.auth_method == "client-certificate"
    assert credentials.client_cert_pem == pem(CLIENT_CERT).decode()
    loaded = serialization.load_pem_private_key(credentials.client_key_pem.encode(), None)
    assert loaded.private_numbers() == CLIENT_KEY.private_numbers()


@pytest.mark.parametrize(
    "fmt",
    [serialization.PrivateFormat.TraditionalOpenSSL, serialization.PrivateFormat.PKCS8],
    ids=["PKCS#1", "PKCS#8"],
)
def test_rsa_client_keys_in_either_format_are_accepted(fmt):
    config = with_user(
        {
            "client-certificate-data": b64(pem(RSA_CERT)),
            "client-key-data": b64(key_pem(RSA_KEY, fmt)),
        }
    )

    assert parse_kubeconfig(dump(config)).client_key_pem.startswith("-----BEGIN PRIVATE KEY-----")


def test_a_client_certificate_chain_is_kept_leaf_first():
    chain = pem(CLIENT_CERT) + pem(CA_CERT)
    config = with_user(
        {"client-certificate-data": b64(chain), "client-key-data": b64(key_pem(CLIENT_KEY))}
    )

    assert parse_kubeconfig(dump(config)).client_cert_pem == chain.decode()


def test_a_ca_bundle_keeps_every_certificate_and_nothing_else():
    other_ca = make_cert("old-ca", OTHER_KEY, ca=True)
    junk = key_pem(OTHER_KEY)  # a private key pasted into the CA field by mistake
    config = with_cluster(
        **{"certificate-authority-data": b64(pem(CA_CERT) + junk + pem(other_ca))}
    )

    ca_pem = parse_kubeconfig(dump(config)).ca_pem

    assert ca_pem == (pem(CA_CERT) + pem(other_ca)).decode()
    assert "PRIVATE KEY" not in ca_pem


def test_optional_fields_may_be_absent_or_harmless():
    config = a_kubeconfig()
    del config["current-context"], config["preferences"], config["apiVersion"], config["kind"]
    del config["contexts"][0]["context"]["namespace"]
    config["clusters"][0]["cluster"].update(
        {
            "insecure-skip-tls-verify": False,
            "tls-server-name": "kubernetes.default.svc",
            "disable-compression": True,
            "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {}}],
        }
    )
    config["extensions"] = []

    credentials = parse_kubeconfig(dump(config))

    assert credentials.namespace is None
    assert credentials.tls_server_name == "kubernetes.default.svc"


def test_base64_wrapped_over_lines_and_bytes_input_are_accepted():
    config = a_kubeconfig()
    encoded = config["clusters"][0]["cluster"]["certificate-authority-data"]
    config["clusters"][0]["cluster"]["certificate-authority-data"] = "\n".join(
        encoded[i : i + 64] for i in range(0, len(encoded), 64)
    )

    assert parse_kubeconfig(dump(config).encode()).ca_pem == pem(CA_CERT).decode()


def test_a_json_kubeconfig_is_accepted():
    import json

    assert parse_kubeconfig(json.dumps(a_kubeconfig())).token == TOKEN


def test_the_server_url_is_normalized():
    config = with_cluster(server="HTTPS://K8S.Example.ORG:443/")

    assert parse_kubeconfig(dump(config)).server == "https://k8s.example.org"


# --- Secrets stay out of repr ----------------------------------------------------------------


def test_credentials_repr_never_shows_the_token_or_key():
    config = with_user(
        {
            "client-certificate-data": b64(pem(CLIENT_CERT)),
            "client-key-data": b64(key_pem(CLIENT_KEY)),
        }
    )
    for credentials in (parse_kubeconfig(dump(a_kubeconfig())), parse_kubeconfig(dump(config))):
        shown = repr(credentials) + str(credentials)
        assert TOKEN not in shown
        assert "PRIVATE KEY" not in shown
        assert "k8s.gpu-east.example.org" in shown


def test_error_messages_never_quote_the_secrets():
    broken = dump(a_kubeconfig()).replace("users:", "users: [", 1)
    error = refused(broken)

    assert TOKEN not in str(error)
    assert "line" in str(error)


def test_credentials_need_exactly_one_kind_of_secret():
    with pytest.raises(ValueError, match="either a token or a client certificate"):
        ClusterCredentials(
            server="https://x", ca_pem="", token="t", client_cert_pem="c", client_key_pem="k"
        )
    with pytest.raises(ValueError, match="either a token or a client certificate"):
        ClusterCredentials(server="https://x", ca_pem="")
    with pytest.raises(ValueError, match="needs its key"):
        ClusterCredentials(server="https://x", ca_pem="", client_cert_pem="c")


# --- Refused: what a kubeconfig may make a reader do ------------------------------------------

USER_REFUSALS = [
    (
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "aws",
                "args": ["eks"],
            }
        },
        "users[0].user.exec",
        "runs a local program",
    ),
    (
        {"auth-provider": {"name": "gcp", "config": {}}},
        "users[0].user.auth-provider",
        "auth-provider",
    ),
    ({"tokenFile": "/var/run/secrets/token"}, "users[0].user.tokenFile", "file"),
    (
        {"client-certificate": "/home/u/.minikube/client.crt", "client-key-data": "eA=="},
        "users[0].user.client-certificate",
        "file path",
    ),
    ({"client-key": "/home/u/client.key"}, "users[0].user.client-key", "file path"),
    ({"username": "admin", "password": "admin"}, "users[0].user.username", "basic authentication"),
    ({"password": "admin"}, "users[0].user.password", "basic authentication"),
    ({"token": TOKEN, "as": "system:admin"}, "users[0].user.as", "impersonation"),
    ({"token": TOKEN, "as-groups": ["system:masters"]}, "users[0].user.as-groups", "impersonation"),
    ({"token": TOKEN, "as-uid": "0"}, "users[0].user.as-uid", "impersonation"),
    (
        {"token": TOKEN, "as-user-extra": {"a": ["b"]}},
        "users[0].user.as-user-extra",
        "impersonation",
    ),
    ({"token": TOKEN, "colour": "blue"}, "users[0].user.colour", "not a field"),
    ({}, "users[0].user", "needs a token"),
    (
        {"token": TOKEN, "client-certificate-data": "eA==", "client-key-data": "eA=="},
        "users[0].user",
        "both a token and a client certificate",
    ),
]


@pytest.mark.parametrize(
    ("user", "path", "message"),
    USER_REFUSALS,
    ids=[path.rsplit(".", 1)[-1] + f"-{i}" for i, (_, path, _) in enumerate(USER_REFUSALS)],
)
def test_user_fields_that_run_read_or_impersonate_are_refused(user, path, message):
    error = refused(with_user(user))

    assert error.path == path
    assert message in str(error)
    assert str(error).startswith(f"{path}: ")


CLUSTER_REFUSALS = [
    (
        {"insecure-skip-tls-verify": True},
        "clusters[0].cluster.insecure-skip-tls-verify",
        "TLS verification",
    ),
    (
        {"insecure-skip-tls-verify": "false"},
        "clusters[0].cluster.insecure-skip-tls-verify",
        "TLS verification",
    ),
    (
        {"certificate-authority": "/etc/kubernetes/ca.crt"},
        "clusters[0].cluster.certificate-authority",
        "file path",
    ),
    ({"proxy-url": "socks5://proxy:1080"}, "clusters[0].cluster.proxy-url", "proxies"),
    ({"server": "http://k8s.example.org"}, "clusters[0].cluster.server", "https"),
    ({"server": "https://user:pw@k8s.example.org"}, "clusters[0].cluster.server", "user name"),
    ({"server": "https://0x7f.1"}, "clusters[0].cluster.server", "canonical IPv4"),
    ({"server": ""}, "clusters[0].cluster.server", "non-empty string"),
    ({"server": ["https://a"]}, "clusters[0].cluster.server", "non-empty string"),
    (
        {"certificate-authority-data": "not base64!"},
        "clusters[0].cluster.certificate-authority-data",
        "base64",
    ),
    (
        {"certificate-authority-data": b64(b"hello")},
        "clusters[0].cluster.certificate-authority-data",
        "PEM certificate",
    ),
    (
        {"certificate-authority-data": b64(CA_CERT.public_bytes(serialization.Encoding.DER))},
        "clusters[0].cluster.certificate-authority-data",
        "PEM certificate",
    ),
    ({"tls-server-name": "not a host"}, "clusters[0].cluster.tls-server-name", "host name"),
    (
        {"disable-compression": "yes please"},
        "clusters[0].cluster.disable-compression",
        "true or false",
    ),
    ({"cluster-colour": "x"}, "clusters[0].cluster.cluster-colour", "not a field"),
]


@pytest.mark.parametrize(
    ("fields", "path", "message"),
    CLUSTER_REFUSALS,
    ids=[f"{p.rsplit('.', 1)[-1]}-{i}" for i, (_, p, _) in enumerate(CLUSTER_REFUSALS)],
)
def test_cluster_fields_that_weaken_or_redirect_tls_are_refused(fields, path, message):
    error = refused(with_cluster(**fields))

    assert error.path == path
    assert message in str(error)


def test_the_ca_data_is_required():
    config = a_kubeconfig()
    del config["clusters"][0]["cluster"]["certificate-authority-data"]

    error = refused(config)

    assert error.path == "clusters[0].cluster.certificate-authority-data"
    assert "required" in str(error)


def test_the_server_is_required():
    config = a_kubeconfig()
    del config["clusters"][0]["cluster"]["server"]

    assert refused(config).path == "clusters[0].cluster.server"


# --- Refused: client certificates that do not hold together -----------------------------------


@pytest.mark.parametrize(
    ("user", "path", "message"),
    [
        (
            {"client-certificate-data": b64(pem(CLIENT_CERT))},
            "users[0].user.client-key-data",
            "required",
        ),
        (
            {"client-key-data": b64(key_pem(CLIENT_KEY))},
            "users[0].user.client-certificate-data",
            "required",
        ),
        (
            {
                "client-certificate-data": b64(pem(CLIENT_CERT)),
                "client-key-data": b64(key_pem(OTHER_KEY)),
            },
            "users[0].user.client-key-data",
            "does not match",
        ),
        (
            {
                "client-certificate-data": b64(pem(CLIENT_CERT)),
                "client-key-data": b64(
                    key_pem(CLIENT_KEY, serialization.PrivateFormat.PKCS8, b"pw")
                ),
            },
            "users[0].user.client-key-data",
            "encrypted",
        ),
        (
            {
                "client-certificate-data": b64(pem(CLIENT_CERT)),
                "client-key-data": b64(pem(CA_CERT)),
            },
            "users[0].user.client-key-data",
            "valid PEM private key",
        ),
        (
            {"client-certificate-data": "%%%", "client-key-data": b64(key_pem(CLIENT_KEY))},
            "users[0].user.client-certificate-data",
            "base64",
        ),
        (
            {
                "client-certificate-data": b64(key_pem(CLIENT_KEY)),
                "client-key-data": b64(key_pem(CLIENT_KEY)),
            },
            "users[0].user.client-certificate-data",
            "PEM certificate",
        ),
    ],
    ids=[
        "cert without key",
        "key without cert",
        "mismatched key",
        "encrypted key",
        "cert as key",
        "bad base64",
        "key as cert",
    ],
)
def test_client_certificates_must_be_inline_valid_and_matching(user, path, message):
    error = refused(with_user(user))

    assert error.path == path
    assert message in str(error)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "non-empty string"),
        ("abc def", "printable ASCII"),
        ("abc\r\nX-Injected: 1", "printable ASCII"),
        ("tökén", "printable ASCII"),
        ("x" * 16385, "longer than"),
        (12345, "non-empty string"),
    ],
    ids=["empty", "space", "header injection", "non-ASCII", "too long", "not a string"],
)
def test_tokens_must_be_header_safe(token, message):
    error = refused(with_user({"token": token}))

    assert error.path == "users[0].user.token"
    assert message in str(error)


def test_surrounding_whitespace_on_a_token_is_trimmed():
    assert parse_kubeconfig(dump(with_user({"token": f"  {TOKEN}\n"}))).token == TOKEN


# --- Refused: more or fewer than one of each --------------------------------------------------


def _second(config: dict[str, Any], key: str) -> dict[str, Any]:
    config[key].append(copy.deepcopy(config[key][0]) | {"name": "second"})
    return config


@pytest.mark.parametrize("key", ["clusters", "users", "contexts"])
def test_exactly_one_cluster_user_and_context_are_accepted(key):
    two = refused(_second(a_kubeconfig(), key))
    none = refused(a_kubeconfig(**{key: []}))
    missing_config = a_kubeconfig()
    del missing_config[key]
    missing = refused(missing_config)

    assert (two.path, none.path, missing.path) == (key, key, key)
    assert "found 2" in str(two)
    assert "found 0" in str(none)


@pytest.mark.parametrize(
    ("context", "path"),
    [
        ({"cluster": "elsewhere"}, "contexts[0].context.cluster"),
        ({"user": "someone-else"}, "contexts[0].context.user"),
        ({"namespace": "Not_A_Namespace"}, "contexts[0].context.namespace"),
        ({"namespace": "n" * 64}, "contexts[0].context.namespace"),
        ({"colour": "x"}, "contexts[0].context.colour"),
    ],
)
def test_the_context_must_tie_the_cluster_and_user_together(context, path):
    assert refused(with_context(**context)).path == path


def test_current_context_must_name_the_context():
    assert refused(a_kubeconfig(**{"current-context": "prod-admin"})).path == "current-context"


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"apiVersion": "v2"}, "apiVersion"),
        ({"kind": "Pod"}, "kind"),
        ({"clusterz": []}, "clusterz"),
        ({"clusters": {"name": "x"}}, "clusters"),
        ({"clusters": ["just a string"]}, "clusters[0]"),
        ({"preferences": ["x"]}, "preferences"),
    ],
)
def test_the_document_shape_is_checked(changes, path):
    assert refused(a_kubeconfig(**changes)).path == path


def test_an_entry_with_extra_fields_is_refused():
    config = a_kubeconfig()
    config["users"][0]["extra"] = True

    assert refused(config).path == "users[0].extra"


# --- Refused: YAML that attacks the parser ----------------------------------------------------


def test_yaml_aliases_are_refused_so_a_billion_laughs_cannot_expand():
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{previous},*{previous},*{previous},*{previous},*{previous}]\n"

    error = refused(bomb)

    assert "aliases" in str(error)


def test_yaml_merge_keys_are_refused():
    text = dump(a_kubeconfig()) + "x:\n  <<: {a: 1}\n"

    assert "merge keys" in str(refused(text))


def test_duplicate_keys_are_refused():
    text = dump(a_kubeconfig()) + "clusters: []\n"

    assert "duplicate key 'clusters'" in str(refused(text))


def test_python_object_tags_are_refused():
    assert "not valid YAML" in str(refused("!!python/object/apply:os.system ['true']\n"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must be a YAML mapping"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("just text", "must be a YAML mapping"),
        ("a: [\n", "not valid YAML"),
        (b"\xff\xfe", "not UTF-8"),
        ("{1: 2}", "keys must be strings"),
    ],
)
def test_what_is_not_a_kubeconfig_document_is_refused(text, message):
    assert message in str(refused(text))


def test_oversized_input_is_refused_before_parsing():
    padding = "#" * MAX_KUBECONFIG_BYTES
    for text in (dump(a_kubeconfig()) + padding, (dump(a_kubeconfig()) + padding).encode()):
        assert "larger than" in str(refused(text))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 10_000,  # issue 14: PyYAML's recursive composer ran out of stack (a 500)
        "a: " + "[" * 500 + "]" * 500,
        "".join(" " * i + f"k{i}:\n" for i in range(100)) + " " * 100 + "v\n",
    ],
    ids=["10,000 unclosed [", "500 closed [ under a key", "100 block mappings"],
)
def test_yaml_nested_too_deep_is_refused_naming_the_limit(text):
    assert f"more than {MAX_YAML_DEPTH} levels deep" in str(refused(text))


def test_extensions_nested_within_the_limit_are_accepted():
    config = a_kubeconfig()
    extension: dict[str, Any] = {"leaf": True}
    for _ in range(MAX_YAML_DEPTH - 8):  # the extension sits 6 levels down already
        extension = {"x": extension}
    config["clusters"][0]["cluster"]["extensions"] = [{"name": "deep", "extension": extension}]
    assert parse_kubeconfig(dump(config)).server
