"""Every change we make to moto, in one module, each with the real behaviour it restores.

moto 5.2 models HyperPod only partly. The demo, the integration tests and the benchmark need the
real API shapes, so :func:`apply` patches moto in place (idempotent; process-wide):

1. ``DescribeCluster`` returns the fields moto drops: ``Orchestrator``, ``NodeRecovery``,
   ``NodeProvisioningMode`` and the per-group ``Status`` (stored on the moto ``Cluster`` as
   ``hp_extra`` / ``hp_group_status`` by the seeder).
2. Cluster ARNs end with a 12-character cluster id (moto uses the name): ``hp_cluster_id``
   on the moto cluster; lookups by name or by such an ARN both work, as on AWS.
3. An unknown cluster raises ``ResourceNotFound`` (moto raises ``ValidationException``).
4. Node summaries carry the real status message (moto hard-codes ``"message"``) and
   ``PrivateDnsHostname``; ``DescribeClusterNode`` adds ``PrivatePrimaryIp``.
5. ``ListClusterEvents`` / ``DescribeClusterEvent`` exist (moto: NotImplemented), with the
   real request filters, descending order by default, 1-100 page size and opaque tokens, and
   a ``ValidationException`` for clusters without ``NodeProvisioningMode=Continuous``.
6. Service Quotas ``GetServiceQuota`` answers for EC2 quota codes set in ``EC2_QUOTAS``
   (moto knows only the ``vpc`` service code).
7. EKS ``DescribeCluster`` returns ``accessConfig`` (moto omits it) from ``hp_access_config``
   on the moto EKS cluster.
8. ``ListClusterNodes`` pages properly: moto's paginator keys page tokens on an ``arn``
   attribute that its ``ClusterNode`` lacks, so every token came out the same and page two
   repeated page one for ever. Nodes get a unique ``arn``.
9. moto's embedded web server logs every request; the demo silences it.
10. ``ListTags`` (and the other tag calls) find a cluster by its real ARN (moto looks the ARN's
    last segment up as a name).
11. SQS FIFO ordering: a received message whose visibility timeout has run out is no longer in
    flight. moto keeps it "pending" until its own turn in the receive loop, so an earlier message of
    the same group, visible again, was skipped for the later one: the group came back out of order.
    Before each ``ReceiveMessage``, visible messages leave the queue's in-flight set, as on AWS.
12. EventBridge delivers the whole event to a target: moto's default input template leaves out
    ``account``, which every real event carries (and the event handler's parser requires).
13. ``ListClusterNodes`` with ``IncludeNodeLogicalIds=True`` gives each node of a Continuous-mode cluster
    its ``NodeLogicalId`` (moto ignores the parameter); without it no summary carries one, as on AWS.
14. Step Functions' AWS SDK integrations hand the state timestamps as ISO 8601 text
    (``"2013-08-23T01:02:15.422Z"``), as the service does; moto's interpreter kept botocore's ``datetime``
    objects, which then broke ``DescribeExecution`` (a 500) as soon as one reached the output.
15. ``StartExecution`` without a name gets a generated one (a UUID), as on AWS (EventBridge's schedule
    starts executions that way); moto's interpreter left ``$$.Execution.Name`` null and put ``None`` in
    the execution ARN. ``$$.Execution.StartTime`` is ISO 8601 text with milliseconds and ``Z``, as on AWS
    (moto: microseconds and ``+00:00``).
16. A schedule-only rule (no event pattern) receives no ``PutEvents`` traffic, as on AWS; moto matched
    every event against its empty pattern and then failed on the rule's Lambda target.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from moto.core.responses import ActionResult
from moto.eks import models as eks_models
from moto.events import models as events_models
from moto.events import utils as events_utils
from moto.sagemaker import models as sm_models
from moto.sagemaker.exceptions import ResourceNotFound, ValidationError
from moto.sagemaker.responses import SageMakerResponse
from moto.servicequotas import models as sq_models
from moto.sqs import models as sqs_models

#: (ServiceCode, QuotaCode) -> value, served by the patched GetServiceQuota.
EC2_QUOTAS: dict[tuple[str, str], float] = {("ec2", "L-DF5E4CA3"): 5000.0}

_APPLIED = False
#: IncludeNodeLogicalIds of the ListClusterNodes request being answered (moto serves one request at a time
#: per thread; the summaries read it)
_REQUEST = threading.local()


def _resolve(backend: Any, name_or_arn: str) -> Any:
    """Find a moto cluster by name or by the real ARN form (``…:cluster/<12-char id>``)."""
    if name_or_arn in backend.clusters:
        return backend.clusters[name_or_arn]
    if name_or_arn.startswith("arn:"):
        tail = name_or_arn.rsplit("/", 1)[-1]
        for cluster in backend.clusters.values():
            if getattr(cluster, "hp_cluster_id", None) == tail or cluster.cluster_name == tail:
                return cluster
    raise ResourceNotFound(message=f"Cluster {name_or_arn} not found.")


def _cluster_describe(self: Any) -> dict[str, Any]:
    groups = []
    status = getattr(self, "hp_group_status", {})
    for group in self.instance_groups:
        item = dict(group)
        if group["InstanceGroupName"] in status:
            item["Status"] = status[group["InstanceGroupName"]]
        groups.append(item)
    out = {
        "ClusterArn": self.arn,
        "ClusterName": self.cluster_name,
        "ClusterStatus": self.status,
        "CreationTime": self.creation_time,
        "InstanceGroups": groups,
        "VpcConfig": self.vpc_config,
    }
    if self.failure_message:
        out["FailureMessage"] = self.failure_message
    out.update(getattr(self, "hp_extra", {}))
    return out


def _node_summary(self: Any) -> dict[str, Any]:
    out = {
        "InstanceGroupName": self.instance_group_name,
        "InstanceId": self.instance_id,
        "InstanceType": self.instance_type,
        "LaunchTime": self.launch_time,
        "InstanceStatus": {"Status": self.status, "Message": getattr(self, "hp_message", "")},
    }
    if getattr(self, "hp_hostname", None):
        out["PrivateDnsHostname"] = self.hp_hostname
    if getattr(_REQUEST, "logical_ids", False) and getattr(self, "hp_logical_id", None):
        out["NodeLogicalId"] = self.hp_logical_id
    return out


def _node_describe(self: Any) -> dict[str, Any]:
    out = _node_summary(self)
    out.update(
        {
            "LifeCycleConfig": self.life_cycle_config,
            "ThreadsPerCore": self.threads_per_core,
        }
    )
    if getattr(self, "hp_ip", None):
        out["PrivatePrimaryIp"] = self.hp_ip
    return out


def _backend_describe_cluster(self: Any, cluster_name: str) -> dict[str, Any]:
    return _resolve(self, cluster_name).describe()


def _backend_describe_cluster_node(self: Any, cluster_name: str, node_id: str) -> dict[str, Any]:
    cluster = _resolve(self, cluster_name)
    if node_id not in cluster.nodes:
        raise ResourceNotFound(message=f"Node {node_id} not found in cluster {cluster.cluster_name}.")
    return cluster.nodes[node_id].describe()


_original_list_nodes = sm_models.SageMakerModelBackend.list_cluster_nodes
_original_list_nodes_response = SageMakerResponse.list_cluster_nodes


def _list_cluster_nodes_response(self: SageMakerResponse) -> Any:
    _REQUEST.logical_ids = str(self._get_param("IncludeNodeLogicalIds")).lower() == "true"
    try:
        return _original_list_nodes_response(self)
    finally:
        _REQUEST.logical_ids = False


def _backend_list_cluster_nodes(self: Any, cluster_name: str, **kwargs: Any) -> Any:
    cluster = _resolve(self, cluster_name)
    return _original_list_nodes(self, cluster_name=cluster.cluster_name, **kwargs)


def _token(offset: int) -> str:
    # Opaque like the real service, and deliberately with characters a naive guard would reject.
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode() + "-_:."


def _offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(token.removesuffix("-_:.").encode()))["o"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValidationError(message="Invalid pagination token") from exc


def _when(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _event_summary(event: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "EventId",
        "ClusterArn",
        "ClusterName",
        "InstanceGroupName",
        "InstanceId",
        "ResourceType",
        "EventTime",
        "Description",
        "EventLevel",
    )
    return {k: event[k] for k in keys if event.get(k) is not None}


def _list_cluster_events(self: SageMakerResponse) -> ActionResult:
    cluster = _resolve(self.sagemaker_backend, self._get_param("ClusterName"))
    if getattr(cluster, "hp_extra", {}).get("NodeProvisioningMode") != "Continuous":
        raise ValidationError(message="Cluster events are only available for clusters with continuous provisioning.")
    max_results = int(self._get_param("MaxResults") or 100)
    if not 1 <= max_results <= 100:
        raise ValidationError(message="MaxResults must be between 1 and 100.")
    after, before = _when(self._get_param("EventTimeAfter")), _when(self._get_param("EventTimeBefore"))
    node, group = self._get_param("NodeId"), self._get_param("InstanceGroupName")
    rtype = self._get_param("ResourceType")
    events = [
        e
        for e in getattr(cluster, "hp_events", [])
        if (after is None or e["EventTime"] >= after)
        and (before is None or e["EventTime"] <= before)
        and (node is None or e.get("InstanceId") == node)
        and (group is None or e.get("InstanceGroupName") == group)
        and (rtype is None or e.get("ResourceType") == rtype)
    ]
    events.sort(key=lambda e: e["EventTime"], reverse=self._get_param("SortOrder") != "Ascending")
    start = _offset(self._get_param("NextToken"))
    page = events[start : start + max_results]
    result: dict[str, Any] = {"Events": [_event_summary(e) for e in page]}
    if start + max_results < len(events):
        result["NextToken"] = _token(start + max_results)
    return ActionResult(result)


def _describe_cluster_event(self: SageMakerResponse) -> ActionResult:
    cluster = _resolve(self.sagemaker_backend, self._get_param("ClusterName"))
    event_id = self._get_param("EventId")
    for event in getattr(cluster, "hp_events", []):
        if event["EventId"] == event_id:
            return ActionResult({"EventDetails": event})
    raise ResourceNotFound(message=f"Event {event_id} not found.")


_original_get_quota = sq_models.ServiceQuotasBackend.get_service_quota


def _get_service_quota(self: Any, service_code: str, quota_code: str) -> dict[str, Any]:
    value = EC2_QUOTAS.get((service_code, quota_code))
    if value is None:
        return _original_get_quota(self, service_code, quota_code)
    return {
        "ServiceCode": service_code,
        "QuotaCode": quota_code,
        "QuotaName": "Network interfaces per Region",
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


_original_eks_describe = eks_models.EKSBackend.describe_cluster


def _eks_describe_cluster(self: Any, name: str) -> Any:
    cluster: Any = _original_eks_describe(self, name)  # moto's Cluster: no access config attributes of its own
    access = getattr(cluster, "hp_access_config", None)
    if access is not None:
        cluster.accessConfig = access
        cluster.access_config = access
    return cluster


_original_resource_from_arn = sm_models.SageMakerModelBackend._get_resource_from_arn


def _resource_from_arn(self: Any, arn: str) -> Any:
    if ":cluster/" in arn:
        return _resolve(self, arn)
    return _original_resource_from_arn(self, arn)


def _node_arn(self: Any) -> str:
    return f"arn:aws:sagemaker:{self.region_name}:{self.account_id}:cluster-node/{self.instance_id}"


_original_receive = sqs_models.SQSBackend.receive_message


def _receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
    queue = self.get_queue(queue_name)
    for message in list(queue.pending_messages):
        if message.visible:
            queue.pending_messages.discard(message)
    return _original_receive(self, queue_name, *args, **kwargs)


def _sdk_timestamps(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: _sdk_timestamps(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sdk_timestamps(v) for v in value]
    return value


def _patch_sfn_sdk_timestamps() -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk as sdk,
    )

    original = sdk.StateTaskServiceAwsSdk._eval_service_task

    def evaluate(self: Any, env: Any, *args: Any, **kwargs: Any) -> None:
        original(self, env, *args, **kwargs)
        env.stack.append(_sdk_timestamps(env.stack.pop()))

    sdk.StateTaskServiceAwsSdk._eval_service_task = evaluate  # type: ignore[method-assign]  # see apply()


def _patch_sfn_execution_context() -> None:
    from moto.stepfunctions.parser import models as sfn_models
    from moto.stepfunctions.parser.backend import execution as sfn_execution

    original_start = sfn_models.StepFunctionsParserBackend.start_execution

    def start_execution(self: Any, state_machine_arn: str, name: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original_start(self, state_machine_arn, name or str(uuid.uuid4()), *args, **kwargs)

    original_details = sfn_execution.Execution.get_start_execution_details

    def start_details(self: Any) -> Any:
        details = original_details(self)
        details.start_time = _sdk_timestamps(self.start_date)  # type: ignore[misc]  # moto's Final, patched on purpose
        return details

    sfn_models.StepFunctionsParserBackend.start_execution = start_execution  # type: ignore[method-assign]  # see apply()
    sfn_execution.Execution.get_start_execution_details = start_details  # type: ignore[method-assign]  # see apply()


_original_send_to_targets = events_models.Rule.send_to_targets


def _send_to_targets(self: Any, original_event: Any, *args: Any, **kwargs: Any) -> None:
    if not self.event_pattern.get_pattern():
        return  # a scheduled rule
    _original_send_to_targets(self, original_event, *args, **kwargs)


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # Monkeypatching moto is this module's purpose: it replaces methods of moto's classes (mypy's
    # method-assign) and adds the attributes and API methods moto lacks (attr-defined).
    sm_models.ClusterNode.arn = property(_node_arn)  # type: ignore[attr-defined]
    sm_models.SageMakerModelBackend._get_resource_from_arn = _resource_from_arn  # type: ignore[method-assign]
    sm_models.Cluster.describe = _cluster_describe  # type: ignore[method-assign]
    sm_models.ClusterNode.summary = _node_summary  # type: ignore[method-assign]
    sm_models.ClusterNode.describe = _node_describe  # type: ignore[method-assign]
    sm_models.SageMakerModelBackend.describe_cluster = _backend_describe_cluster  # type: ignore[method-assign]
    sm_models.SageMakerModelBackend.describe_cluster_node = _backend_describe_cluster_node  # type: ignore[method-assign]
    # moto's paginate types its method with an unbound ParamSpec that no function matches (assignment)
    sm_models.SageMakerModelBackend.list_cluster_nodes = _backend_list_cluster_nodes  # type: ignore[method-assign, assignment]
    SageMakerResponse.list_cluster_events = _list_cluster_events  # type: ignore[attr-defined]
    SageMakerResponse.list_cluster_nodes = _list_cluster_nodes_response  # type: ignore[method-assign]
    SageMakerResponse.describe_cluster_event = _describe_cluster_event  # type: ignore[attr-defined]
    sq_models.ServiceQuotasBackend.get_service_quota = _get_service_quota  # type: ignore[method-assign]
    eks_models.EKSBackend.describe_cluster = _eks_describe_cluster  # type: ignore[method-assign]
    sqs_models.SQSBackend.receive_message = _receive_message  # type: ignore[method-assign]
    events_models.Rule.send_to_targets = _send_to_targets  # type: ignore[method-assign]
    _patch_sfn_sdk_timestamps()
    _patch_sfn_execution_context()
    events_utils.EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = (
        '{"version": "0", "id": "<id>", "detail-type": "<detail-type>", "source": "<source>", '
        '"account": "<account>", "time": <time>, "region": "<region>", "resources": <resources>, "detail": <detail>}'
    )
    _APPLIED = True
