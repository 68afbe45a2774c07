"""A local Kubernetes API server double for the EKS side of a HyperPod cluster: HTTPS on 127.0.0.1
with its own CA, EKS-style token authentication, recorded objects served as list responses.

Used by the demo and by tests of the product's Kubernetes client (``aws/k8s.py``). Everything here is
written independently of that client (the SigV4 check below does not use botocore), so a test that
runs the client against this fake checks both.

Usage::

    with FakeKubernetes(cluster_name="hp-eks", objects=demo_objects({...})) as fake:
        eks = EksCluster(..., endpoint=fake.endpoint, certificate_authority=fake.ca_data)
        fake.forbid.add("nodes")  # the next node list answers 403 like RBAC

Authentication follows EKS: ``Authorization: Bearer k8s-aws-v1.<base64url of a presigned URL>``. The
URL must be an STS ``GetCallerIdentity`` presigned with query-string SigV4 and not yet expired, with
``x-k8s-aws-id`` among its signed headers. The cluster name itself is not in the URL: it is covered
by the signature, so the fake recomputes the signature with the known test secret key and the expected
cluster name (EKS instead forwards the URL to STS). A token for another cluster therefore fails with
401 like on EKS. With ``secret_key=None`` the signature is not checked (the cluster name then cannot be).
``secret_key`` may also be a lookup from the token's access key id to its secret (None for a principal the
cluster does not admit: EKS answers 401 to an IAM principal without an access entry); the rehearsal admits
the roles the deployed template gives an access entry.

Resources (keys of ``objects``): ``nodes``, ``namespaces`` (cluster-scoped), ``pods``, ``daemonsets``,
``events``, ``pytorchjobs`` (Kubeflow's ``kubeflow.org/v1`` PyTorchJob) (namespaced; listed per namespace or
across all). A PyTorchJob can also be read by name (``…/namespaces/<ns>/pytorchjobs/<name>``: the object, or a
404 NotFound Status). Lists take a ``fieldSelector`` and an equality ``labelSelector`` (``key=value``,
comma-separated; any other form is answered 400). Only GET exists; any other method is answered 405. Fault
switches (sets of resource names, changeable while running): ``forbid`` (403 RBAC Status), ``fail`` (500),
``malformed`` (200 with a body that is not JSON).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import ipaddress
import json
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qs, parse_qsl, quote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_sim.background import serve_in_background, stop_serving

__all__ = [
    "RESOURCES",
    "FakeKubernetes",
    "RequestRecord",
    "TestCa",
    "demo_objects",
    "make_ca",
    "verify_token",
]

RESOURCES = ("nodes", "namespaces", "pods", "daemonsets", "events", "pytorchjobs")
_LIST_KIND = {
    "nodes": ("v1", "NodeList"),
    "namespaces": ("v1", "NamespaceList"),
    "pods": ("v1", "PodList"),
    "daemonsets": ("apps/v1", "DaemonSetList"),
    "events": ("v1", "EventList"),
    "pytorchjobs": ("kubeflow.org/v1", "PyTorchJobList"),
}
#: the kind of one object of the resources that can be read by name
_KIND = {"pytorchjobs": ("kubeflow.org/v1", "PyTorchJob")}
_API_GROUP = {"daemonsets": "apps", "pytorchjobs": "kubeflow.org"}
_STS_HOST = re.compile(r"^sts(\.[a-z0-9-]+)?\.amazonaws\.com(\.cn)?$")
_MAX_TOKEN_AGE_S = 15 * 60
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

_ROUTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^/api/v1/nodes$"), "nodes"),
    (re.compile(r"^/api/v1/namespaces$"), "namespaces"),
    (re.compile(r"^/api/v1/pods$"), "pods"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/pods$"), "pods"),
    (re.compile(r"^/apis/apps/v1/daemonsets$"), "daemonsets"),
    (re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[a-z0-9-]+)/daemonsets$"), "daemonsets"),
    (re.compile(r"^/api/v1/events$"), "events"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/events$"), "events"),
    (re.compile(r"^/apis/kubeflow\.org/v1/pytorchjobs$"), "pytorchjobs"),
    (re.compile(r"^/apis/kubeflow\.org/v1/namespaces/(?P<ns>[a-z0-9-]+)/pytorchjobs$"), "pytorchjobs"),
    (
        re.compile(r"^/apis/kubeflow\.org/v1/namespaces/(?P<ns>[a-z0-9-]+)/pytorchjobs/(?P<name>[a-z0-9][a-z0-9.-]*)$"),
        "pytorchjobs",
    ),
]
#: one requirement of an equality label selector: ``key=value`` or ``key==value`` (the value may be empty)
_LABEL_EQUALS = re.compile(r"^\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*==?\s*(?P<value>[-A-Za-z0-9_.]*)\s*$")


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True, slots=True)
class TestCa:
    """A CA and a server certificate it signed for 127.0.0.1 / localhost (PEM bytes)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_data(self) -> str:
        """The CA as EKS returns ``certificateAuthority.data``: base64 of the PEM."""
        return base64.b64encode(self.ca_pem).decode("ascii")


def make_ca(common_name: str = "kubernetes") -> TestCa:
    """A fresh CA (EC P-256, one day) and a server certificate for 127.0.0.1 and localhost."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return TestCa(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


# --------------------------------------------------------------------------- token check


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def _enc(text: str) -> str:
    return quote(text, safe="-_.~")


#: The secret key a token must be signed with: one key, or a lookup from the token's access key id (None: an
#: access key the account does not know).
SecretKey = str | Callable[[str], str | None] | None


class _Rejected(Exception):
    """A token refused; its message is the reason :func:`verify_token` returns."""


def _presigned_url(authorization: str | None) -> tuple[SplitResult, dict[str, str]]:
    """The STS URL a bearer token carries, and its query (each parameter once)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise _Rejected("no bearer token")
    token = authorization[len("Bearer ") :].strip()
    if not token.startswith("k8s-aws-v1."):
        raise _Rejected("not a k8s-aws-v1 token")
    body = token[len("k8s-aws-v1.") :]
    try:
        url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise _Rejected("token is not base64url") from None
    parts = urlsplit(url)
    host = parts.hostname or ""
    loopback = host in ("127.0.0.1", "localhost")  # an STS double (e.g. moto) in the demo
    if not ((parts.scheme == "https" and _STS_HOST.match(host)) or (parts.scheme in ("http", "https") and loopback)):
        raise _Rejected(f"not an STS URL: {parts.scheme}://{host}")
    if parts.path not in ("", "/"):
        raise _Rejected("unexpected STS path")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = dict(pairs)
    if len(query) != len(pairs):
        raise _Rejected("repeated query parameter")
    return parts, query


def _signing_scope(query: dict[str, str]) -> tuple[list[str], list[str]]:
    """The signed header names and the credential scope (access key, date, Region, service, terminator) of a
    presigned GetCallerIdentity whose query is ``query``."""
    if query.get("Action") != "GetCallerIdentity" or query.get("Version") != "2011-06-15":
        raise _Rejected("not a GetCallerIdentity request")
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise _Rejected("not SigV4")
    signed = query.get("X-Amz-SignedHeaders", "").split(";")
    if "x-k8s-aws-id" not in signed or "host" not in signed:
        raise _Rejected("x-k8s-aws-id is not a signed header")
    credential = query.get("X-Amz-Credential", "").split("/")
    if len(credential) != 5 or credential[3] != "sts" or credential[4] != "aws4_request":
        raise _Rejected("bad credential scope")
    return signed, credential


def _check_lifetime(query: dict[str, str], credential: list[str], now: float | None) -> None:
    """The token was issued at most five minutes ahead of ``now``, has not expired, and lives at most
    :data:`_MAX_TOKEN_AGE_S`; its credential is dated the day it was issued."""
    try:
        issued = dt.datetime.strptime(query.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
        expires = int(query.get("X-Amz-Expires", ""))
    except ValueError:
        raise _Rejected("bad X-Amz-Date or X-Amz-Expires") from None
    current = time.time() if now is None else now
    if expires <= 0 or expires > _MAX_TOKEN_AGE_S:
        raise _Rejected("X-Amz-Expires out of range")
    if current > issued.timestamp() + expires or issued.timestamp() > current + 300:
        raise _Rejected("token expired or from the future")
    if credential[1] != issued.strftime("%Y%m%d"):
        raise _Rejected("credential date does not match X-Amz-Date")


def _signature_mismatch(
    parts: SplitResult, query: dict[str, str], signed: list[str], credential: list[str], cluster_name: str, secret: str
) -> str | None:
    """None when the URL's SigV4 signature is the one ``secret`` makes over the request with ``cluster_name`` in
    its x-k8s-aws-id header (the payload hash empty or unsigned), else why not."""
    given = query.pop("X-Amz-Signature", "")
    headers = {"host": parts.netloc.lower(), "x-k8s-aws-id": cluster_name}
    if set(signed) - headers.keys():
        return f"unexpected signed headers: {sorted(set(signed) - headers.keys())}"
    canonical_query = "&".join(f"{_enc(k)}={_enc(v)}" for k, v in sorted(query.items()))
    canonical_headers = "".join(f"{name}:{headers[name].strip()}\n" for name in signed)
    scope = "/".join(credential[1:])
    key = _sign(("AWS4" + secret).encode("utf-8"), credential[1])
    for part in credential[2:]:
        key = _sign(key, part)
    for payload in (_EMPTY_SHA256, "UNSIGNED-PAYLOAD"):
        canonical = "\n".join(["GET", "/", canonical_query, canonical_headers, ";".join(signed), payload])
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", query["X-Amz-Date"], scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        expected = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, given):
            return None
    return "signature does not match (wrong cluster name or credentials)"


def verify_token(
    authorization: str | None, cluster_name: str, *, secret_key: SecretKey, now: float | None = None
) -> str | None:
    """None when ``authorization`` holds a valid EKS token for ``cluster_name``, else why not."""
    try:
        parts, query = _presigned_url(authorization)
        signed, credential = _signing_scope(query)
        _check_lifetime(query, credential, now)
    except _Rejected as why:
        return str(why)
    if secret_key is None:
        return None
    if callable(secret_key):
        secret_key = secret_key(credential[0])
        if secret_key is None:
            return f"unknown access key {credential[0]}"
    return _signature_mismatch(parts, query, signed, credential, cluster_name, secret_key)


# --------------------------------------------------------------------------- server


@dataclass(frozen=True, slots=True)
class RequestRecord:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class FakeKubernetes:
    """The fake API server; a context manager. ``endpoint`` and ``ca_data`` are set once started."""

    def __init__(
        self,
        *,
        cluster_name: str = "hyperpod-eks",
        objects: dict[str, Iterable[dict[str, Any]]] | None = None,
        secret_key: SecretKey = "testing",
        username: str = "arn:aws:sts::111122223333:assumed-role/HyperPodTriage/triage",
    ) -> None:
        self.cluster_name = cluster_name
        self.secret_key = secret_key
        self.username = username
        self.objects: dict[str, list[dict[str, Any]]] = {name: [] for name in RESOURCES}
        for name, items in (objects or {}).items():
            if name not in RESOURCES:
                raise ValueError(f"unknown resource {name!r}; expected one of {RESOURCES}")
            self.objects[name] = list(items)
        self.forbid: set[str] = set()
        self.fail: set[str] = set()
        self.malformed: set[str] = set()
        self.requests: list[RequestRecord] = []
        self.ca: TestCa | None = None
        self.endpoint = ""
        self.ca_data = ""
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._resource_version = 1000

    # -- lifecycle

    def start(self) -> FakeKubernetes:
        self.ca = make_ca()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(self.ca.cert_pem)
            key.write_bytes(self.ca.key_pem)
            context.load_cert_chain(cert, key)
        server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        # the TLS handshake then runs in the request's thread, so a stalled client cannot block accept()
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._server = server
        self.endpoint = f"https://127.0.0.1:{server.server_address[1]}"
        self.ca_data = self.ca.ca_data
        self._thread = serve_in_background(server, "fake-k8s")
        return self

    def stop(self) -> None:
        stop_serving(self._server, self._thread)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeKubernetes:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- request handling (called from the handler threads)

    def handle(self, method: str, target: str, authorization: str | None) -> tuple[int, bytes]:
        parts = urlsplit(target)
        query = parse_qs(parts.query, keep_blank_values=True)
        code, body = self._respond(method, parts.path, query, authorization)
        with self._lock:
            self.requests.append(RequestRecord(method, parts.path, query, code))
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        return code, data

    def _respond(
        self, method: str, path: str, query: dict[str, list[str]], authorization: str | None
    ) -> tuple[int, dict[str, Any] | bytes]:
        """The status and body of one request: authentication, then the route, the fault switches, the read."""
        if verify_token(authorization, self.cluster_name, secret_key=self.secret_key) is not None:
            return 401, _status(401, "Unauthorized", "Unauthorized")
        if method != "GET":
            return 405, _status(405, "MethodNotAllowed", f"the server does not allow this method ({method})")
        route = _route(path)
        if route is None:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        resource, namespace, name = route
        if resource in self.forbid:
            return 403, self._forbidden(resource, namespace, name)
        if resource in self.fail:
            verb = "listing" if name is None else "getting"
            return 500, _status(500, "InternalError", f"an error on the server has prevented {verb} {resource}")
        if resource in self.malformed:
            return 200, b"<html><body>502 Bad Gateway</body></html>"
        items = [
            item
            for item in self.objects[resource]
            if namespace is None or item.get("metadata", {}).get("namespace") == namespace
        ]
        if name is not None:
            return _one(resource, name, items)
        return self._list(resource, items, query)

    def _list(
        self, resource: str, items: list[dict[str, Any]], query: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        """A list response: the items the field and label selectors keep, one page of them."""
        fields = (query.get("fieldSelector") or [""])[0]
        labels = (query.get("labelSelector") or [""])[0]
        try:
            if fields:
                items = _field_filter(items, fields)
            if labels:
                items = _label_filter(items, labels)
        except ValueError as exc:
            return 400, _status(400, "BadRequest", str(exc))
        try:
            page, more, remaining = self._page(items, query)
        except ValueError as exc:
            return 410, _status(410, "Expired", str(exc))
        api_version, kind = _LIST_KIND[resource]
        metadata: dict[str, Any] = {"resourceVersion": str(self._resource_version)}
        if more is not None:
            metadata["continue"] = more
            metadata["remainingItemCount"] = remaining
        return 200, {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": page}

    def _forbidden(self, resource: str, namespace: str | None, name: str | None = None) -> dict[str, Any]:
        group = _API_GROUP.get(resource, "")
        qualified = f"{resource}{'.' + group if group else ''}"
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        subject = qualified if name is None else f'{qualified} "{name}"'
        message = (
            f'{subject} is forbidden: User "{self.username}" cannot {"list" if name is None else "get"} resource '
            f'"{resource}" in API group "{group}" {where}'
        )
        details = {"group": group, "kind": resource}
        return _status(403, "Forbidden", message, details if name is None else {"name": name, **details})

    def _page(self, items: list[dict[str, Any]], query: dict[str, list[str]]) -> tuple[list[Any], str | None, int]:
        limit_text = (query.get("limit") or ["0"])[0]
        limit = int(limit_text) if limit_text.isdigit() else 0
        start = 0
        token = (query.get("continue") or [""])[0]
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
                start = int(decoded["start"])
                if decoded.get("rv") != self._resource_version or not 0 <= start <= len(items):
                    raise ValueError
            except (ValueError, KeyError, TypeError, binascii.Error) as exc:
                raise ValueError("the provided continue parameter is too old or invalid") from exc
        if limit <= 0:
            return items[start:], None, 0
        end = start + limit
        if end >= len(items):
            return items[start:], None, 0
        raw = json.dumps({"rv": self._resource_version, "start": end}).encode()
        return items[start:end], base64.urlsafe_b64encode(raw).decode().rstrip("="), len(items) - end


def _route(path: str) -> tuple[str, str | None, str | None] | None:
    """(resource, namespace or None, object name or None for a list) of a request path; None: no such route."""
    for pattern, resource in _ROUTES:
        match = pattern.match(path)
        if match:
            found = match.groupdict()
            return resource, found.get("ns"), found.get("name")
    return None


def _one(resource: str, name: str, items: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """GET of one object by name (among ``items``, the namespace's): the object with its kind, or 404 NotFound."""
    found = next((item for item in items if item.get("metadata", {}).get("name") == name), None)
    if found is None:
        group = _API_GROUP.get(resource, "")
        qualified = f"{resource}{'.' + group if group else ''}"
        details = {"name": name, "group": group, "kind": resource}
        return 404, _status(404, "NotFound", f'{qualified} "{name}" not found', details)
    api_version, kind = _KIND[resource]
    return 200, {"apiVersion": api_version, "kind": kind, **found}


def _label_filter(items: list[dict[str, Any]], selector: str) -> list[dict[str, Any]]:
    """``key=value`` / ``key==value`` requirements, comma-separated, all to hold on ``metadata.labels`` (the label
    present with that value). The set-based forms (``!=``, ``in (…)``, ``notin``, ``key``, ``!key``) are not
    served: ValueError, answered 400."""
    wanted: list[tuple[str, str]] = []
    for clause in selector.split(","):
        match = _LABEL_EQUALS.match(clause)
        if match is None:
            raise ValueError(
                f"unable to parse requirement: {clause.strip()!r}: the fake API server serves equality label "
                "selectors only (key=value)"
            )
        wanted.append((match["key"], match["value"]))

    def holds(item: dict[str, Any]) -> bool:
        labels = item.get("metadata", {}).get("labels") or {}
        return all(key in labels and labels[key] == value for key, value in wanted)

    return [item for item in items if holds(item)]


def _field_filter(items: list[dict[str, Any]], selector: str) -> list[dict[str, Any]]:
    """``reason=…``, ``type=…``, ``involvedObject.kind=…``, ``metadata.name=…`` (``=``, ``==``, ``!=``)."""
    result = items
    for clause in selector.split(","):
        negate = "!=" in clause
        key, _, value = clause.replace("!=", "=").replace("==", "=").partition("=")
        if not key or not _:
            raise ValueError(f"invalid field selector: {clause!r}")
        path = key.strip().split(".")

        def field(item: dict[str, Any], path: list[str] = path) -> str:
            node: Any = item
            for step in path:
                node = node.get(step) if isinstance(node, dict) else None
            return "" if node is None else str(node)

        result = [item for item in result if (field(item) == value.strip()) != negate]
    return result


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # failed TLS handshakes (a client with the wrong CA) are expected in tests


def _handler_for(fake: FakeKubernetes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            code, data = fake.handle(self.command, self.path, self.headers.get("Authorization"))
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            return

    return Handler


# --------------------------------------------------------------------------- demo objects

_AZS = ("us-west-2a", "us-west-2b", "us-west-2c")
_CREATED = "2026-11-28T09:14:02Z"


def _hp_labels(name: str, group: str, instance_type: str, az: str, health: str) -> dict[str, str]:
    return {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": az[:-1],
        "topology.kubernetes.io/zone": az,
        "sagemaker.amazonaws.com/cluster-name": "ml-cluster",
        "sagemaker.amazonaws.com/compute-type": "hyperpod",
        "sagemaker.amazonaws.com/instance-group-name": group,
        "sagemaker.amazonaws.com/node-health-status": health,
        "sagemaker.amazonaws.com/deep-health-check-status": "Passed",
    }


def _conditions(ready: bool, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    stamp = "2026-11-30T11:40:00Z"
    base = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": m,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": _CREATED,
        }
        for t, r, m in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    base.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "kubelet is posting ready status"
            if ready
            else "container runtime network not ready: "
            "NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not "
            "initialized",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": _CREATED,
        }
    )
    return [*(extra or []), *base]


def _node(instance_id: str, name: str, labels: dict[str, str], az: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": hashlib.md5(instance_id.encode(), usedforsecurity=False).hexdigest(),
            "resourceVersion": "48213",
            "creationTimestamp": _CREATED,
            "labels": labels,
            "annotations": extra.pop("annotations", {"node.alpha.kubernetes.io/ttl": "0"}),
        },
        "spec": {"providerID": f"aws:///{az}/{instance_id}", **extra.pop("spec", {})},
        "status": {
            "conditions": extra.pop("conditions", _conditions(True)),
            "nodeInfo": {"kubeletVersion": "v1.32.9-eks-113cf36", "containerRuntimeVersion": "containerd://1.7.27"},
            "allocatable": extra.pop("allocatable", _allocatable(labels.get("node.kubernetes.io/instance-type"))),
        },
    }


def _allocatable(instance_type: str | None) -> dict[str, str]:
    """What the kubelet and the device plugins advertise: GPUs (NVIDIA plugin), EFA interfaces (EFA plugin)."""
    spec = spec_for(instance_type or "")
    out = {"cpu": "31850m", "ephemeral-storage": "95491281146", "memory": "127500000Ki", "pods": "110"}
    if spec is not None and spec.gpus:
        out["nvidia.com/gpu"] = str(spec.gpus)
    if spec is not None and spec.efa:
        out["vpc.amazonaws.com/efa"] = str(spec.efa)
    return out


def _container_status(name: str, image: str, *, ready: bool = True, restarts: int = 0, **state: Any) -> dict:
    body: dict[str, Any] = {
        "name": name,
        "image": image,
        "ready": ready,
        "started": ready,
        "restartCount": restarts,
        "state": state.pop("state", {"running": {"startedAt": _CREATED}}),
        "lastState": state.pop("lastState", {}),
    }
    return body


def _pod(
    name: str,
    node: str,
    app: str,
    phase: str,
    containers: list[dict[str, Any]],
    *,
    owner: tuple[str, str, str] | None = None,
    namespace: str = "kube-system",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the API server returns it. ``owner``: (apiVersion, kind, name) of its controller; a
    DaemonSet named ``app`` when not given (aws-node, kube-proxy)."""
    api_version, kind, owner_name = owner or ("apps/v1", "DaemonSet", app)
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": hashlib.md5(name.encode(), usedforsecurity=False).hexdigest(),
            "creationTimestamp": _CREATED,
            "labels": labels or {"k8s-app": app},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": owner_name,
                    "uid": hashlib.md5(f"{kind}/{owner_name}".encode(), usedforsecurity=False).hexdigest(),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": c["name"], "image": c["image"]} for c in containers]},
        "status": {"phase": phase, "containerStatuses": containers},
    }


#: The training job of the demo: a Kubeflow PyTorchJob with one worker pod on each schedulable HyperPod node
#: (its pods' controller is the PyTorchJob itself, as the training operator creates them).
TRAINING_NAMESPACE = "training"
TRAINING_JOB = "llama-70b"


def _training_pod(index: int, node: str, *, running: bool) -> dict[str, Any]:
    name = f"{TRAINING_JOB}-worker-{index}"
    image = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
    container = (
        _container_status("pytorch", image)
        if running
        else _container_status("pytorch", image, ready=False, state={"waiting": {"reason": "ContainerCreating"}})
    )
    pod = _pod(
        name,
        node,
        TRAINING_JOB,
        "Running" if running else "Pending",
        [container],
        owner=("kubeflow.org/v1", "PyTorchJob", TRAINING_JOB),
        namespace=TRAINING_NAMESPACE,
        labels={
            "training.kubeflow.org/job-name": TRAINING_JOB,
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(index),
        },
    )
    # the job asks for every EFA interface of a p5 and sets FI_PROVIDER, but not FI_EFA_USE_DEVICE_RDMA (§ E)
    pod["spec"]["containers"][0].update(
        {
            "resources": {
                "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
                "requests": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
            },
            "env": [
                {"name": "FI_PROVIDER", "value": "efa"},
                {"name": "NCCL_DEBUG", "value": "WARN"},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            ],
        }
    )
    return pod


def _daemonset(name: str, desired: int, unavailable: int = 0) -> dict[str, Any]:
    ready = desired - unavailable
    status: dict[str, Any] = {
        "currentNumberScheduled": desired,
        "desiredNumberScheduled": desired,
        "numberMisscheduled": 0,
        "numberReady": ready,
        "numberAvailable": ready,
        "updatedNumberScheduled": desired,
        "observedGeneration": 1,
    }
    if unavailable:
        status["numberUnavailable"] = unavailable
    return {
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "generation": 1,
            "creationTimestamp": _CREATED,
            "labels": {"k8s-app": name},
        },
        "spec": {"selector": {"matchLabels": {"k8s-app": name}}},
        "status": status,
    }


def demo_objects(node_names_by_instance: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Kubernetes objects (keys as :data:`RESOURCES`) for the given HyperPod nodes, by instance id.

    Each value is the node's Kubernetes name (``hyperpod-i-…``), or an instance group name, or a
    ``(group, instance_type)`` pair, or a dict with any of ``name``, ``group``, ``instance_type``.
    The first node is pending reboot; the second failed its deep health check (fault labels and
    annotation, a NoSchedule taint, a fault condition); the third (or the last) runs the crash-looping
    aws-node pod that the FailedCreatePodSandBox event points at. A non-HyperPod node (no SageMaker
    labels) is added; every other node is healthy.
    """
    entries: list[tuple[str, str, str, str]] = []
    for iid, value in node_names_by_instance.items():
        name, group, itype = f"hyperpod-{iid}", "worker-group-1", "ml.g5.8xlarge"
        if isinstance(value, tuple):
            group, itype = value
        elif isinstance(value, dict):
            name = value.get("name", name)
            group = value.get("group", group)
            itype = value.get("instance_type", itype)
        elif isinstance(value, str) and (value.startswith("hyperpod-") or iid in value):
            name = value
        elif isinstance(value, str):
            group = value
        entries.append((iid, name, group, itype))
    nodes: list[dict[str, Any]] = []
    aws_node_pods: list[dict[str, Any]] = []
    pending_reboot = entries[0][0] if entries else None
    names = {iid: name for iid, name, _, _ in entries}
    dhc_failed = entries[1][0] if len(entries) > 1 else None
    crashing = entries[2][0] if len(entries) > 2 else (entries[-1][0] if entries else None)
    fault_time = "2026-11-30T10:52:17Z"
    for index, (iid, name, group, itype) in enumerate(entries):
        az = _AZS[index % len(_AZS)]
        if iid == pending_reboot:
            labels = _hp_labels(name, group, itype, az, "UnschedulablePendingReboot")
            nodes.append(
                _node(
                    iid,
                    name,
                    labels,
                    az,
                    spec={
                        "unschedulable": True,
                        "taints": [
                            {
                                "key": "sagemaker.amazonaws.com/node-health-status",
                                "value": "Unschedulable",
                                "effect": "NoSchedule",
                            },
                            {
                                "key": "node.kubernetes.io/unschedulable",
                                "effect": "NoSchedule",
                                "timeAdded": "2026-11-30T11:02:40Z",
                            },
                        ],
                    },
                    conditions=_conditions(False),
                )
            )
        elif iid == dhc_failed:
            labels = _hp_labels(name, group, itype, az, "Unschedulable")
            labels["sagemaker.amazonaws.com/deep-health-check-status"] = "Failed"
            labels["sagemaker.amazonaws.com/fault-types"] = "NvidiaErrorTerminate"
            labels["sagemaker.amazonaws.com/fault-reasons"] = "NvidiaGpuXidError"
            details = [
                {
                    "timestamp": fault_time,
                    "type": "NvidiaErrorTerminate",
                    "reason": "NvidiaGpuXidError",
                    "message": "NVRM: Xid (PCI:0000:b9:00): 79, pid=0, GPU has fallen off the bus.",
                }
            ]
            fault_condition = {
                "type": "NvidiaErrorTerminate",
                "status": "True",
                "reason": "NvidiaGpuXidError",
                "message": "GPU has fallen off the bus (Xid 79)",
                "lastHeartbeatTime": fault_time,
                "lastTransitionTime": fault_time,
            }
            nodes.append(
                _node(
                    iid,
                    name,
                    labels,
                    az,
                    annotations={
                        "node.alpha.kubernetes.io/ttl": "0",
                        "sagemaker.amazonaws.com/fault-details": json.dumps(details),
                    },
                    spec={
                        "taints": [
                            {
                                "key": "sagemaker.amazonaws.com/node-health-status",
                                "value": "Unschedulable",
                                "effect": "NoSchedule",
                            }
                        ]
                    },
                    conditions=_conditions(True, [fault_condition]),
                )
            )
        else:
            nodes.append(_node(iid, name, _hp_labels(name, group, itype, az, "Schedulable"), az))
        cni = "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1"
        agent = "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/aws-network-policy-agent:v1.1.6-eksbuild.1"
        suffix = hashlib.md5(iid.encode(), usedforsecurity=False).hexdigest()[:5]
        if iid == crashing:
            aws_node_pods.append(
                _pod(
                    f"aws-node-{suffix}",
                    name,
                    "aws-node",
                    "Running",
                    [
                        _container_status(
                            "aws-node",
                            cni,
                            ready=False,
                            restarts=14,
                            state={
                                "waiting": {
                                    "reason": "CrashLoopBackOff",
                                    "message": "back-off 5m0s restarting "
                                    "failed container=aws-node pod=aws-node-" + suffix,
                                }
                            },
                            lastState={
                                "terminated": {
                                    "exitCode": 1,
                                    "reason": "Error",
                                    "startedAt": "2026-11-30T11:49:02Z",
                                    "finishedAt": "2026-11-30T11:49:33Z",
                                }
                            },
                        ),
                        _container_status("aws-eks-nodeagent", agent),
                    ],
                )
            )
        else:
            aws_node_pods.append(
                _pod(
                    f"aws-node-{suffix}",
                    name,
                    "aws-node",
                    "Running",
                    [_container_status("aws-node", cni), _container_status("aws-eks-nodeagent", agent)],
                )
            )
    other = "ip-10-1-37-142.us-west-2.compute.internal"
    nodes.append(
        {
            "metadata": {
                "name": other,
                "creationTimestamp": "2026-11-02T16:20:51Z",
                "labels": {
                    "eks.amazonaws.com/nodegroup": "system",
                    "kubernetes.io/hostname": other,
                    "node.kubernetes.io/instance-type": "m5.xlarge",
                    "topology.kubernetes.io/zone": "us-west-2a",
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"providerID": "aws:///us-west-2a/i-0a1b2c3d4e5f60718"},
            "status": {"conditions": _conditions(True)},
        }
    )
    aws_node_pods.append(
        _pod(
            "aws-node-sys01",
            other,
            "aws-node",
            "Running",
            [
                _container_status("aws-node", "amazon-k8s-cni:v1.19.2-eksbuild.1"),
                _container_status("aws-eks-nodeagent", "aws-network-policy-agent:v1.1.6-eksbuild.1"),
            ],
        )
    )
    proxy_image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy:v1.32.6-minimal-eksbuild.2"
    dns_image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns:v1.11.4-eksbuild.2"
    all_nodes = [n["metadata"]["name"] for n in nodes]
    workers = [(iid, name) for iid, name, _, _ in entries if iid != pending_reboot]
    training_pods = [_training_pod(i, name, running=iid != crashing) for i, (iid, name) in enumerate(workers)]
    sandbox_pod = next(
        (f"{TRAINING_JOB}-worker-{i}" for i, (iid, _) in enumerate(workers) if iid == crashing), "llama-70b-worker-0"
    )
    pods = [
        *aws_node_pods,
        *(
            _pod(
                f"kube-proxy-{hashlib.md5(n.encode(), usedforsecurity=False).hexdigest()[:5]}",
                n,
                "kube-proxy",
                "Running",
                [_container_status("kube-proxy", proxy_image)],
            )
            for n in all_nodes
        ),
        *(
            _pod(
                f"coredns-6d8c4b7f9d-{tail}",
                other,
                "kube-dns",
                "Running",
                [_container_status("coredns", dns_image)],
                owner=("apps/v1", "ReplicaSet", "coredns-6d8c4b7f9d"),
                labels={"k8s-app": "kube-dns", "pod-template-hash": "6d8c4b7f9d"},
            )
            for tail in ("7xk2p", "qm4zr")
        ),
        *training_pods,
    ]
    count = len(all_nodes)
    daemonsets = [_daemonset("aws-node", count, unavailable=1 if crashing else 0), _daemonset("kube-proxy", count)]
    namespaces = [
        {
            "metadata": {
                "name": ns,
                "creationTimestamp": "2026-11-02T16:02:11Z",
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "status": {"phase": "Active"},
        }
        for ns in ("default", "kube-node-lease", "kube-public", "kube-system", "aws-hyperpod", "training")
    ]
    events = []
    if crashing:
        events.append(
            {
                "metadata": {
                    "name": f"{sandbox_pod}.18c2f3a1b4d5e6f7",
                    "namespace": "training",
                    "creationTimestamp": "2026-11-30T11:31:12Z",
                },
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": "training",
                    "name": sandbox_pod,
                    "apiVersion": "v1",
                },
                "reason": "FailedCreatePodSandBox",
                "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network "
                'for sandbox "5b1c0e": plugin type="aws-cni" name="aws-cni" failed (add): add cmd: Error received '
                "from AddNetwork gRPC call: rpc error: code = Unavailable desc = connection error: desc = "
                '"transport: Error while dialing: dial tcp 127.0.0.1:50051: connect: connection refused"',
                "source": {"component": "kubelet", "host": names[crashing]},
                "firstTimestamp": "2026-11-30T11:31:12Z",
                "lastTimestamp": "2026-11-30T11:55:40Z",
                "count": 23,
                "type": "Warning",
            }
        )
        events.append(
            {
                "metadata": {
                    "name": f"{sandbox_pod}.18c2f3a1b4d5e700",
                    "namespace": "training",
                    "creationTimestamp": "2026-11-30T11:30:58Z",
                },
                "involvedObject": {"kind": "Pod", "namespace": "training", "name": sandbox_pod},
                "reason": "Scheduled",
                "message": f"Successfully assigned training/{sandbox_pod} to {names[crashing]}",
                "lastTimestamp": "2026-11-30T11:30:58Z",
                "count": 1,
                "type": "Normal",
            }
        )
    return {"nodes": nodes, "pods": pods, "daemonsets": daemonsets, "namespaces": namespaces, "events": events}
