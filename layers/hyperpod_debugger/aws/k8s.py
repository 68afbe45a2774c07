"""Read-only access to the Kubernetes API of a HyperPod cluster's EKS cluster.

The API server is the one named by ``eks:DescribeCluster`` (endpoint and CA bundle); no kube-context,
kubeconfig or ``kubectl`` is involved, so the objects read are always those of the HyperPod's own EKS
cluster. Authentication is the standard EKS bearer token (:func:`eks_token`): a presigned STS
``GetCallerIdentity`` URL whose signature covers the ``x-k8s-aws-id`` header (the cluster name).

:class:`KubeReader` can only send GET requests: the class has no other method. Every failure becomes
an :class:`~hyperpod_debugger.aws.errors.ApiCallError` carrying an
:class:`~hyperpod_debugger.domain.observations.ApiFailure`, and :func:`collect_kubernetes` wraps each list in
its own :class:`~hyperpod_debugger.domain.observations.Observed`, so one denied list does not hide the others.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
from botocore.exceptions import BotoCoreError, ClientError
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from hyperpod_debugger.aws.errors import ApiCallError
from hyperpod_debugger.domain.observations import ApiFailure, EksCluster, Observed
from hyperpod_debugger.domain.orchestrators import (
    K8sContainerStatus,
    K8sDaemonSet,
    K8sEfaContainer,
    K8sEvent,
    K8sNode,
    K8sPod,
    KubernetesObservation,
)

__all__ = [
    "ACCESS_ACTION",
    "TOKEN_PREFIX",
    "KubeReader",
    "collect_kubernetes",
    "eks_token",
    "parse_daemonset",
    "parse_event",
    "parse_node",
    "parse_pod",
]

#: The IAM action reported for every Kubernetes access failure (401, 403): the identity running the
#: triage needs an EKS access entry (or aws-auth mapping) and read RBAC on the lists below.
ACCESS_ACTION = "kubernetes:api"  # not an IAM action: EKS access entries and RBAC decide, reported as such
TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
TOKEN_EXPIRES_S = 60
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 15.0
PAGE_LIMIT = 500
#: at 500 per page: 100,000 objects, far above any HyperPod cluster; beyond it the list is reported failed
MAX_PAGES = 200
SANDBOX_REASON = "FailedCreatePodSandBox"

_UNREACHABLE = "the EKS API endpoint is not reachable: private-only endpoint or no route"


# --------------------------------------------------------------------------- token


def eks_token(session_or_sts_client: Any, cluster_name: str, region: str) -> str:
    """The bearer token ``aws eks get-token`` / aws-iam-authenticator produce for ``cluster_name``.

    ``session_or_sts_client`` is a boto3 ``Session`` (an STS client for ``region`` is made from it),
    a botocore session, or an STS client. The URL is presigned (query-string SigV4, 60 s), with the
    cluster name in the signed ``x-k8s-aws-id`` header, then base64url-encoded without padding.
    """
    sts = _sts_client(session_or_sts_client, region)

    def add_cluster_header(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = cluster_name

    event = "before-sign.sts.GetCallerIdentity"
    unique_id = f"hyperpod-debugger-eks-token-{id(add_cluster_header)}"
    sts.meta.events.register(event, add_cluster_header, unique_id=unique_id)
    try:
        url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=TOKEN_EXPIRES_S, HttpMethod="GET")
    except (BotoCoreError, ClientError) as exc:
        raise ApiCallError(
            ApiFailure("sts:GetCallerIdentity", "error", f"could not sign the EKS token: {exc}")
        ) from exc
    finally:
        sts.meta.events.unregister(event, unique_id=unique_id)
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


def _sts_client(obj: Any, region: str) -> Any:
    if hasattr(obj, "generate_presigned_url") and hasattr(obj, "meta"):
        return obj
    if hasattr(obj, "create_client"):  # botocore session
        return obj.create_client("sts", region_name=region)
    return obj.client("sts", region_name=region)  # boto3 session


# --------------------------------------------------------------------------- REST client


def _ssl_context(ca_data: str) -> ssl.SSLContext:
    """A verifying context trusting only the cluster CA (``certificateAuthority.data``: base64 PEM)."""
    try:
        pem = base64.b64decode(ca_data, validate=False).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ApiCallError(
            ApiFailure(ACCESS_ACTION, "malformed", "the EKS certificate authority is not base64 PEM")
        ) from exc
    if "BEGIN CERTIFICATE" not in pem:
        raise ApiCallError(
            ApiFailure(ACCESS_ACTION, "malformed", "the EKS certificate authority holds no PEM certificate")
        )
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        context.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise ApiCallError(
            ApiFailure(ACCESS_ACTION, "malformed", f"the EKS certificate authority does not load: {exc}")
        ) from exc
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class KubeReader:
    """GET-only JSON client for one Kubernetes API server. It has no method that could change anything.

    ``private_endpoint_only``: what DescribeCluster said, to word connection failures precisely.
    """

    def __init__(
        self,
        endpoint: str,
        ca_data: str,
        token: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        read_timeout: float = READ_TIMEOUT_S,
        page_limit: int = PAGE_LIMIT,
        max_pages: int = MAX_PAGES,
        private_endpoint_only: bool = False,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "https" or not parts.hostname:
            raise ApiCallError(ApiFailure(ACCESS_ACTION, "malformed", f"not an https API endpoint: {endpoint!r}"))
        self.endpoint = endpoint.rstrip("/")
        self.page_limit = page_limit
        self.max_pages = max_pages
        self.private_endpoint_only = private_endpoint_only
        #: GETs sent (path with query), for call accounting
        self.requests: list[str] = []
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._pool = urllib3.PoolManager(
            ssl_context=_ssl_context(ca_data),
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            retries=False,
            num_pools=1,
            maxsize=2,
        )

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> KubeReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the only verb

    def get(self, path: str, params: dict[str, str] | None = None, *, what: str = "") -> dict[str, Any]:
        """GET ``path`` and return the decoded JSON object. ``what`` names the read in messages."""
        what = what or path
        url = self.endpoint + path + (("?" + urlencode(params)) if params else "")
        self.requests.append(path + (("?" + urlencode(params)) if params else ""))
        try:
            response = self._pool.request(
                "GET", url, headers=self._headers, redirect=False, preload_content=True, retries=False
            )
        except SSLError as exc:
            raise ApiCallError(
                ApiFailure(
                    ACCESS_ACTION,
                    "endpoint",
                    f"TLS verification of the EKS API endpoint failed against the cluster CA ({what}): {exc}",
                )
            ) from exc
        except (ConnectTimeoutError, NewConnectionError) as exc:
            raise ApiCallError(ApiFailure(ACCESS_ACTION, "endpoint", self._unreachable(exc))) from exc
        except ReadTimeoutError as exc:
            raise ApiCallError(
                ApiFailure(
                    ACCESS_ACTION,
                    "timeout",
                    f"the EKS API server accepted the connection but did not answer {what} within the read timeout",
                )
            ) from exc
        except MaxRetryError as exc:  # urllib3 wraps the cause even with retries disabled
            reason = exc.reason
            if isinstance(reason, SSLError):
                raise ApiCallError(
                    ApiFailure(
                        ACCESS_ACTION,
                        "endpoint",
                        f"TLS verification of the EKS API endpoint failed against the cluster CA ({what}): {reason}",
                    )
                ) from exc
            if isinstance(reason, ReadTimeoutError):
                raise ApiCallError(
                    ApiFailure(ACCESS_ACTION, "timeout", f"the EKS API server did not answer {what} in time")
                ) from exc
            raise ApiCallError(ApiFailure(ACCESS_ACTION, "endpoint", self._unreachable(reason or exc))) from exc
        except (ProtocolError, HTTPError, OSError) as exc:
            raise ApiCallError(ApiFailure(ACCESS_ACTION, "endpoint", self._unreachable(exc))) from exc
        return self._decode(response.status, response.data, what)

    def get_list(self, path: str, *, what: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every item of a list endpoint, following ``metadata.continue`` page by page."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        seen: set[str] = set()
        for _ in range(self.max_pages):
            query = dict(params or {})
            query["limit"] = str(self.page_limit)
            if token:
                query["continue"] = token
            body = self.get(path, query, what=what)
            page = body.get("items")
            if page is None:
                page = []
            if not isinstance(page, list) or not all(isinstance(item, dict) for item in page):
                raise ApiCallError(ApiFailure(ACCESS_ACTION, "malformed", f"{what}: 'items' is not a list of objects"))
            items.extend(page)
            metadata = body.get("metadata") or {}
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            if not token:
                return items
            if token in seen:
                raise ApiCallError(
                    ApiFailure(ACCESS_ACTION, "malformed", f"{what}: the API server repeated a continue token")
                )
            seen.add(token)
        raise ApiCallError(
            ApiFailure(ACCESS_ACTION, "error", f"{what}: more than {self.max_pages} pages; list not read completely")
        )

    # -- helpers

    def _unreachable(self, exc: object) -> str:
        hint = (
            " (DescribeCluster says the endpoint is private-only: run from inside the cluster VPC)"
            if self.private_endpoint_only
            else ""
        )
        return f"{_UNREACHABLE}{hint}: {self.endpoint}: {_short(exc)}"

    def _decode(self, status: int, data: bytes, what: str) -> dict[str, Any]:
        body: Any = None
        try:
            body = json.loads(data.decode("utf-8")) if data else None
        except (UnicodeDecodeError, ValueError):
            body = None
        if 200 <= status < 300:
            if not isinstance(body, dict):
                snippet = data[:80].decode("utf-8", "replace")
                raise ApiCallError(
                    ApiFailure(ACCESS_ACTION, "malformed", f"{what}: the response is not a JSON object: {snippet!r}")
                )
            return body
        server_message = body.get("message") if isinstance(body, dict) else None
        reason = body.get("reason") if isinstance(body, dict) else None
        code = str(reason or status)
        if status == 401:
            raise ApiCallError(
                ApiFailure(
                    ACCESS_ACTION,
                    "denied",
                    "the EKS API server did not accept the token (401 Unauthorized): the IAM principal running "
                    "the triage has no EKS access entry (or aws-auth mapping) on this cluster, or the token is "
                    f"for another cluster or expired ({what})",
                    code=code,
                )
            )
        if status == 403:
            detail = f": {server_message}" if server_message else ""
            raise ApiCallError(
                ApiFailure(ACCESS_ACTION, "denied", f"Kubernetes RBAC: cannot {what}{detail}", code=code)
            )
        if status == 404:
            detail = server_message or "not found"
            raise ApiCallError(ApiFailure(ACCESS_ACTION, "not_found", f"{what}: {detail}", code=code))
        if status == 410:
            raise ApiCallError(
                ApiFailure(
                    ACCESS_ACTION, "error", f"{what}: the list changed while paging (410 Expired); run again", code=code
                )
            )
        if status == 429:
            raise ApiCallError(ApiFailure(ACCESS_ACTION, "throttled", f"{what}: 429 Too Many Requests", code=code))
        detail = server_message or data[:120].decode("utf-8", "replace")
        raise ApiCallError(ApiFailure(ACCESS_ACTION, "error", f"{what}: HTTP {status}: {detail}", code=code))


def _short(exc: object) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------- JSON -> observations


def _str_dict(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _dicts(value: Any) -> tuple[dict[str, Any], ...]:
    return tuple(v for v in value if isinstance(v, dict)) if isinstance(value, list) else ()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _map(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is a map, else an empty one (the API may omit or garble any part)."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _meta(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise ApiCallError(ApiFailure(ACCESS_ACTION, "malformed", f"a {kind} without metadata.name"))
    return metadata


def parse_node(obj: dict[str, Any]) -> K8sNode:
    metadata = _meta(obj, "node")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    provider = spec.get("providerID")
    return K8sNode(
        name=metadata["name"],
        labels=_str_dict(metadata.get("labels")),
        annotations=_str_dict(metadata.get("annotations")),
        taints=_dicts(spec.get("taints")),
        conditions=_dicts(status.get("conditions")),
        provider_id=provider if isinstance(provider, str) else None,
        unschedulable=spec.get("unschedulable") is True,
        allocatable=_str_dict(status.get("allocatable")) if isinstance(status.get("allocatable"), dict) else None,
    )


def _container(status: dict[str, Any]) -> K8sContainerStatus:
    state = _map(status, "state")
    name, detail = next(((k, v) for k, v in state.items() if isinstance(v, dict)), ("unknown", {}))
    last = _map(status, "lastState")
    last_terminated = _map(last, "terminated")
    reason = detail.get("reason")
    message = detail.get("message")
    last_reason = last_terminated.get("reason")
    code = detail.get("exitCode") if name == "terminated" else None
    return K8sContainerStatus(
        name=str(status.get("name", "")),
        ready=status.get("ready") is True,
        restart_count=_int(status.get("restartCount")),
        state=str(name),
        reason=reason if isinstance(reason, str) else None,
        message=message if isinstance(message, str) else None,
        last_terminated_reason=last_reason if isinstance(last_reason, str) else None,
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        finished_at=_time(detail.get("finishedAt")) if name == "terminated" else None,
    )


EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: nodes advertising EFA whose pods one triage lists (one GET each), the first by name
EFA_POD_NODES = 10


def _efa_containers(spec: dict[str, Any]) -> tuple[K8sEfaContainer, ...]:
    out = []
    for container in _dicts(spec.get("containers")):
        resources = _map(container, "resources")
        wanted = _map(resources, "limits").get(EFA_RESOURCE) or _map(resources, "requests").get(EFA_RESOURCE)
        if wanted is None or str(wanted).strip() in ("", "0"):
            continue
        env: dict[str, str] = {}
        for var in _dicts(container.get("env")):
            name = var.get("name")
            if isinstance(name, str):
                value = var.get("value")
                env[name] = value if isinstance(value, str) else "(from a reference)"
        out.append(K8sEfaContainer(name=str(container.get("name", "")), efa=str(wanted), env=env))
    return tuple(out)


def parse_pod(obj: dict[str, Any]) -> K8sPod:
    metadata = _meta(obj, "pod")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    # Init containers matter only while they have not completed (e.g. aws-vpc-cni-init crash-looping).
    pending_init = [c for c in _dicts(status.get("initContainerStatuses")) if not _completed(c)]
    containers = [*pending_init, *_dicts(status.get("containerStatuses"))]
    node = spec.get("nodeName")
    owners = _dicts(metadata.get("ownerReferences"))
    owner = next((o for o in owners if o.get("controller") is True), owners[0] if owners else {})
    return K8sPod(
        namespace=str(metadata.get("namespace", "")),
        name=metadata["name"],
        labels=_str_dict(metadata.get("labels")),
        node_name=node if isinstance(node, str) else None,
        phase=str(status.get("phase", "Unknown")),
        containers=tuple(_container(c) for c in containers),
        owner_kind=str(owner["kind"]) if owner.get("kind") else None,
        owner_name=str(owner["name"]) if owner.get("name") else None,
        efa_containers=_efa_containers(spec),
        reason=status["reason"] if isinstance(status.get("reason"), str) else None,
        message=status["message"] if isinstance(status.get("message"), str) else None,
    )


def _completed(status: dict[str, Any]) -> bool:
    state = _map(status, "state")
    terminated = state.get("terminated")
    return isinstance(terminated, dict) and terminated.get("exitCode") == 0


def parse_daemonset(obj: dict[str, Any]) -> K8sDaemonSet:
    metadata = _meta(obj, "daemonset")
    status = _map(obj, "status")
    return K8sDaemonSet(
        namespace=str(metadata.get("namespace", "")),
        name=metadata["name"],
        desired=_int(status.get("desiredNumberScheduled")),
        ready=_int(status.get("numberReady")),
        available=_int(status.get("numberAvailable")),
        unavailable=_int(status.get("numberUnavailable")),
    )


def parse_event(obj: dict[str, Any]) -> K8sEvent:
    metadata = _meta(obj, "event")
    involved = _map(obj, "involvedObject")
    series = _map(obj, "series")
    last_seen = (
        _time(obj.get("lastTimestamp"))
        or _time(series.get("lastObservedTime"))
        or _time(obj.get("eventTime"))
        or _time(obj.get("firstTimestamp"))
        or _time(metadata.get("creationTimestamp"))
    )
    count = _int(obj.get("count")) or _int(series.get("count")) or 1
    return K8sEvent(
        namespace=str(metadata.get("namespace", "")),
        reason=str(obj.get("reason", "")),
        message=str(obj.get("message", "")),
        kind=str(involved.get("kind", "")),
        object_name=str(involved.get("name", "")),
        count=count,
        last_seen=last_seen,
        type=str(obj.get("type", "")),
    )


def _namespace_name(obj: dict[str, Any]) -> str:
    return str(_meta(obj, "namespace")["name"])


# --------------------------------------------------------------------------- collection


def _observe(
    reader: KubeReader, path: str, what: str, parse: Callable[[dict[str, Any]], Any], params: dict[str, str] | None
) -> Observed[list[Any]]:
    try:
        return Observed.ok([parse(item) for item in reader.get_list(path, what=what, params=params)])
    except ApiCallError as exc:
        return Observed.failed(exc.failure)


def open_reader(eks: EksCluster, token: str) -> KubeReader:
    """A reader for the EKS cluster's API server, verified against its CA; ApiCallError when
    DescribeCluster gave no endpoint or CA, or the endpoint is not https."""
    if not eks.endpoint or not eks.certificate_authority:
        raise ApiCallError(
            ApiFailure(
                ACCESS_ACTION, "malformed", "eks:DescribeCluster returned no API endpoint or certificate authority"
            )
        )
    return KubeReader(
        eks.endpoint,
        eks.certificate_authority,
        token,
        private_endpoint_only=eks.endpoint_public is False and eks.endpoint_private is True,
    )


def collect_kubernetes(
    eks: EksCluster,
    token: str,
    *,
    now: datetime,
    event_window: timedelta | None = None,
    reader: KubeReader | None = None,
) -> KubernetesObservation:
    """Read nodes, kube-system pods and DaemonSets, namespaces and sandbox-failure events.

    ``now`` with ``event_window`` drops sandbox events last seen before ``now - event_window``
    (events without a time are kept). Once the endpoint proves unreachable or silent, the remaining lists
    are reported with the same failure instead of each waiting for its own timeout.
    """
    endpoint = eks.endpoint or ""
    if reader is None:
        try:
            reader = open_reader(eks, token)
        except ApiCallError as exc:
            return _all_failed(endpoint, exc.failure)

    reads: list[tuple[str, str, str, Callable[[dict[str, Any]], Any], dict[str, str] | None]] = [
        ("nodes", "/api/v1/nodes", "list nodes (cluster scope)", parse_node, None),
        ("system_pods", "/api/v1/namespaces/kube-system/pods", "list pods in namespace kube-system", parse_pod, None),
        (
            "daemonsets",
            "/apis/apps/v1/namespaces/kube-system/daemonsets",
            "list daemonsets.apps in namespace kube-system",
            parse_daemonset,
            None,
        ),
        ("namespaces", "/api/v1/namespaces", "list namespaces (cluster scope)", _namespace_name, None),
        (
            "sandbox_events",
            "/api/v1/events",
            "list events (all namespaces)",
            parse_event,
            {"fieldSelector": f"reason={SANDBOX_REASON}"},
        ),
    ]
    results: dict[str, Observed[list[Any]]] = {}
    unreachable: ApiFailure | None = None
    try:
        for key, path, what, parse, params in reads:
            if unreachable is not None:
                results[key] = Observed.failed(unreachable)
                continue
            results[key] = _observe(reader, path, what, parse, params)
            failed = results[key].failure
            if failed is not None and failed.kind in ("endpoint", "timeout"):
                unreachable = failed
        efa_pods, efa_nodes = _efa_pods(reader, results["nodes"], unreachable)
    finally:
        reader.close()

    events = results["sandbox_events"]
    if events.available and event_window is not None:
        since = now - event_window
        kept = [e for e in events.get() if e.last_seen is None or e.last_seen >= since]
        events = Observed.ok(kept)
    return KubernetesObservation(
        endpoint=endpoint,
        nodes=results["nodes"],
        system_pods=results["system_pods"],
        daemonsets=results["daemonsets"],
        namespaces=results["namespaces"],
        sandbox_events=events,
        efa_pods=efa_pods,
        efa_pod_nodes=efa_nodes,
    )


def _efa_pods(
    reader: KubeReader, nodes: Observed[list[Any]], unreachable: ApiFailure | None
) -> tuple[Observed[list[K8sPod]], tuple[str, ...]]:
    """The pods on the first :data:`EFA_POD_NODES` nodes (by name) that advertise EFA, one list per node."""
    if unreachable is not None:
        return Observed.failed(unreachable), ()
    if nodes.failure is not None:
        return Observed.failed(nodes.failure), ()  # could not look: unknown, not "no EFA node"
    if not nodes.available:
        return Observed.skip("the node list was not read"), ()
    advertising = sorted(
        n.name for n in nodes.get() if str((n.allocatable or {}).get(EFA_RESOURCE, "0")).strip() not in ("", "0")
    )
    chosen = tuple(advertising[:EFA_POD_NODES])
    pods: list[K8sPod] = []
    for name in chosen:
        listed = _observe(
            reader,
            "/api/v1/pods",
            f"list pods on node {name} (all namespaces)",
            parse_pod,
            {"fieldSelector": f"spec.nodeName={name}"},
        )
        if not listed.available:
            return Observed.failed(listed.failure) if listed.failure else listed, chosen
        pods += listed.get()
    return Observed.ok(pods), chosen


def _all_failed(endpoint: str, failure: ApiFailure) -> KubernetesObservation:
    return KubernetesObservation(
        endpoint=endpoint,
        nodes=Observed.failed(failure),
        system_pods=Observed.failed(failure),
        daemonsets=Observed.failed(failure),
        namespaces=Observed.failed(failure),
        sandbox_events=Observed.failed(failure),
    )


#: Nodes whose pods one triage lists before a node action (one GET each); more are reported as not read.
OCCUPANCY_MAX_NODES = 50


def pods_on_nodes(
    eks: EksCluster, token: str, node_names: list[str], *, reader: KubeReader | None = None
) -> dict[str, Observed[list[K8sPod]]]:
    """The pods on each named node, all namespaces (``fieldSelector=spec.nodeName=<name>``): what a drain,
    reboot or replacement of that node would evict. Read-only like every read here."""
    if reader is None:
        try:
            reader = open_reader(eks, token)
        except ApiCallError as exc:
            return {name: Observed.failed(exc.failure) for name in node_names}
    out: dict[str, Observed[list[K8sPod]]] = {}
    unreachable: ApiFailure | None = None
    try:
        for name in node_names:
            if unreachable is not None:
                out[name] = Observed.failed(unreachable)
                continue
            params = {"fieldSelector": f"spec.nodeName={name}"}
            out[name] = _observe(
                reader, "/api/v1/pods", f"list pods on node {name} (all namespaces)", parse_pod, params
            )
            failed = out[name].failure
            if failed is not None and failed.kind in ("endpoint", "timeout"):
                unreachable = failed
    finally:
        reader.close()
    return out
