"""The synthesized stack created on the simulated account from the template's own properties.

What ``cdk deploy`` and CloudFormation do, done against moto: the assets are published to the bootstrap
bucket named in the asset manifest, the template's ``Rules`` are checked against the bootstrap version
parameter, and every resource is created in dependency order from its resolved properties, with the
physical names CloudFormation would generate. Nothing here reads the CDK code: a property the stack's
constructs mean to set but the template lacks is missing here too.

Two kinds of resource are kept rather than handed to moto, because moto would act on them differently from
AWS: event source mappings (moto invokes on every ``SendMessage``; Lambda polls in batches) and
asynchronous-invoke settings. :mod:`hyperpod_sim.rehearsal.sources` and :mod:`.runtime` apply them as Lambda
does. Types the simulated account has no service for (alarms' actions are not run, EKS access entries) are
created where moto models them and listed in :attr:`Deployment.not_modelled` otherwise.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3

from hyperpod_sim.rehearsal.template import Resolver, Template, TemplateError, check_rules, evaluate_conditions

ACCOUNT = "123456789012"
#: The bootstrap stack version `cdk bootstrap` records (a template asks for at least 6).
BOOTSTRAP_VERSION = "21"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"


@dataclass
class Deployment:
    """The stack as created: each resource's physical id and attributes, and what Lambda applies itself."""

    template: Template
    region: str
    refs: dict[str, Any]
    attributes: dict[str, dict[str, Any]]
    #: resolved properties of every resource, by logical id
    properties: dict[str, dict[str, Any]]
    not_modelled: list[str] = field(default_factory=list)

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: self.properties[k] for k in self.template.of_type(resource_type)}

    def function_name(self, handler: str) -> str:
        """The physical name of the function whose handler is ``handler``."""
        for logical, props in self.of_type("AWS::Lambda::Function").items():
            if props["Handler"] == handler:
                return str(self.refs[logical])
        raise KeyError(handler)

    def function_properties(self, name_or_arn: str) -> dict[str, Any]:
        name = name_or_arn.split(":function:", 1)[-1].split(":", 1)[0]
        for logical, props in self.of_type("AWS::Lambda::Function").items():
            if self.refs[logical] == name:
                return props
        raise KeyError(name_or_arn)

    def logical_of(self, physical: str) -> str:
        for logical, ref in self.refs.items():
            if ref == physical or physical in self.attributes.get(logical, {}).values():
                return logical
        raise KeyError(physical)


def _physical(stack: str, logical: str, limit: int, suffix: str = "") -> str:
    """A name in CloudFormation's generated form: stack, logical id, 13 characters unique to the pair."""
    unique = hashlib.sha256(f"{stack}/{logical}".encode()).hexdigest()[:13].upper()
    head = f"{stack}-{logical}"[: limit - len(unique) - 1 - len(suffix)]
    return f"{head}-{unique}{suffix}"


def _zip_dir(path: pathlib.Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for file in sorted(path.rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(path).as_posix())
    return buffer.getvalue()


class Deployer:
    def __init__(self, template: Template, region: str) -> None:
        self.template = template
        self.region = region
        self.stack = template.name
        self._clients: dict[str, Any] = {}
        self.resolver = Resolver(
            pseudo={
                "AWS::AccountId": ACCOUNT,
                "AWS::Region": region,
                "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com",
                "AWS::StackName": self.stack,
                "AWS::StackId": f"arn:aws:cloudformation:{region}:{ACCOUNT}:stack/{self.stack}/rehearsal",
            },
            mappings=template.body.get("Mappings", {}),
        )
        self.properties: dict[str, dict[str, Any]] = {}
        self.not_modelled: list[str] = []

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = boto3.client(service, region_name=self.region)
        return self._clients[service]

    # ------------------------------------------------------------------ the deploy

    def deploy(self) -> Deployment:
        self._publish_assets()
        self._parameters()
        failed = check_rules(self.template, self.resolver)
        if failed:
            raise TemplateError(f"the template's rules refuse this account: {failed}")
        evaluate_conditions(self.template, self.resolver)
        for logical in self.template.order():
            resource = self.template.resources[logical]
            if "Condition" in resource and not self.resolver.condition(resource["Condition"], logical):
                continue
            props = self.resolver.resolve(resource.get("Properties", {}), logical)
            self.properties[logical] = props
            create = _CREATORS.get(resource["Type"])
            if create is None:
                self.not_modelled.append(f"{logical} ({resource['Type']})")
                self.resolver.refs[logical] = logical
                self.resolver.attributes[logical] = {}
                continue
            ref, attributes = create(self, logical, props)
            self.resolver.refs[logical] = ref
            self.resolver.attributes[logical] = attributes
        return Deployment(
            self.template,
            self.region,
            self.resolver.refs,
            self.resolver.attributes,
            self.properties,
            self.not_modelled,
        )

    def _publish_assets(self) -> None:
        s3 = self.client("s3")
        for asset in self.template.assets.values():
            bucket = self.resolver.resolve({"Fn::Sub": asset.bucket}, "assets")
            try:
                s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": self.region})
            except s3.exceptions.BucketAlreadyOwnedByYou:
                pass
            body = _zip_dir(asset.path) if asset.packaging == "zip" else asset.path.read_bytes()
            s3.put_object(Bucket=bucket, Key=asset.key, Body=body)

    def _parameters(self) -> None:
        # Parameter Store is moto's, even where Session Manager is the fake agent's (AWS_ENDPOINT_URL_SSM)
        ssm = boto3.client("ssm", region_name=self.region, endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
        for name, spec in self.template.body.get("Parameters", {}).items():
            if spec.get("Type", "").startswith("AWS::SSM::Parameter::Value"):
                parameter = spec["Default"]
                if parameter == BOOTSTRAP_VERSION_PARAMETER:
                    ssm.put_parameter(Name=parameter, Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True)
                self.resolver.parameters[name] = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
            elif "Default" in spec:
                self.resolver.parameters[name] = spec["Default"]
            else:
                raise TemplateError(f"parameter {name} has no default and the rehearsal passes none")

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.region}:{ACCOUNT}:{resource}"


Created = tuple[Any, dict[str, Any]]


def _table(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("TableName") or _physical(d.stack, logical, 255)
    (replica,) = [r for r in p.get("Replicas", []) if r.get("Region") == d.region] or [{}]
    args: dict[str, Any] = {
        "TableName": name,
        "AttributeDefinitions": p["AttributeDefinitions"],
        "KeySchema": p["KeySchema"],
        "BillingMode": p.get("BillingMode", "PROVISIONED"),
    }
    if p.get("GlobalSecondaryIndexes"):
        args["GlobalSecondaryIndexes"] = [
            {k: v for k, v in gsi.items() if k in ("IndexName", "KeySchema", "Projection")}
            for gsi in p["GlobalSecondaryIndexes"]
        ]
    if p.get("StreamSpecification"):
        args["StreamSpecification"] = {"StreamEnabled": True, **p["StreamSpecification"]}
    sse = p.get("SSESpecification")
    if sse and sse.get("SSEEnabled"):
        args["SSESpecification"] = {"Enabled": True, "SSEType": sse.get("SSEType", "KMS")}
    # a GlobalTable sets it per replica, a Table on the table; either way DeleteTable is then refused
    if replica.get("DeletionProtectionEnabled") or p.get("DeletionProtectionEnabled"):
        args["DeletionProtectionEnabled"] = True
    dynamodb = d.client("dynamodb")
    table = dynamodb.create_table(**args)["TableDescription"]
    ttl = p.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
    pitr = replica.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
    if pitr:
        dynamodb.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    attributes = {"Arn": table["TableArn"], "TableId": table.get("TableId", name)}
    if table.get("LatestStreamArn"):
        attributes["StreamArn"] = table["LatestStreamArn"]
    return name, attributes


def _queue(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    fifo = str(p.get("FifoQueue", "false")).lower() == "true"
    name = p.get("QueueName") or _physical(d.stack, logical, 80, ".fifo" if fifo else "")
    attributes = {
        key: (
            json.dumps(value)
            if isinstance(value, dict)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
        for key, value in p.items()
        if key not in ("QueueName", "Tags")
    }
    url = d.client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = d.arn("sqs", name)
    return url, {"Arn": arn, "QueueName": name, "QueueUrl": url}


def _queue_policy(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    for url in p["Queues"]:
        d.client("sqs").set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(p["PolicyDocument"])})
    return logical, {}


def _key(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    kms = d.client("kms")
    key = kms.create_key(Description=p.get("Description", ""), Policy=json.dumps(p["KeyPolicy"]))["KeyMetadata"]
    if p.get("EnableKeyRotation"):
        kms.enable_key_rotation(KeyId=key["KeyId"])
    return key["KeyId"], {"Arn": key["Arn"], "KeyId": key["KeyId"]}


def _topic(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    fifo = str(p.get("FifoTopic", "false")).lower() == "true"
    name = p.get("TopicName") or _physical(d.stack, logical, 256, ".fifo" if fifo else "")
    attributes = {k: str(v) for k, v in p.items() if k in ("DisplayName", "KmsMasterKeyId", "FifoTopic")}
    arn = d.client("sns").create_topic(Name=name, Attributes=attributes)["TopicArn"]
    return arn, {"TopicArn": arn, "TopicName": name}


def _topic_policy(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    for arn in p["Topics"]:
        d.client("sns").set_topic_attributes(
            TopicArn=arn, AttributeName="Policy", AttributeValue=json.dumps(p["PolicyDocument"])
        )
    return logical, {}


def _subscription(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    arn = d.client("sns").subscribe(
        TopicArn=p["TopicArn"], Protocol=p["Protocol"], Endpoint=p["Endpoint"], ReturnSubscriptionArn=True
    )["SubscriptionArn"]
    return arn, {"Arn": arn}


def _log_group(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("LogGroupName") or _physical(d.stack, logical, 512)
    logs = d.client("logs")
    logs.create_log_group(logGroupName=name)
    if p.get("RetentionInDays"):
        logs.put_retention_policy(logGroupName=name, retentionInDays=int(p["RetentionInDays"]))
    return name, {"Arn": d.arn("logs", f"log-group:{name}:*")}


def _role(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("RoleName") or _physical(d.stack, logical, 64)
    iam = d.client("iam")
    role = iam.create_role(
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(p["AssumeRolePolicyDocument"]),
        Description=p.get("Description", ""),
        Path=p.get("Path", "/"),
    )["Role"]
    for arn in p.get("ManagedPolicyArns", []):
        iam.attach_role_policy(RoleName=name, PolicyArn=arn)
    for policy in p.get("Policies", []):
        iam.put_role_policy(
            RoleName=name, PolicyName=policy["PolicyName"], PolicyDocument=json.dumps(policy["PolicyDocument"])
        )
    return name, {"Arn": role["Arn"], "RoleId": role["RoleId"]}


def _policy(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    for role in p.get("Roles", []):
        d.client("iam").put_role_policy(
            RoleName=role, PolicyName=p["PolicyName"], PolicyDocument=json.dumps(p["PolicyDocument"])
        )
    return p["PolicyName"], {}


def _layer(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("LayerName") or logical
    version = d.client("lambda").publish_layer_version(
        LayerName=name,
        Description=p.get("Description", ""),
        Content=p["Content"],
        CompatibleRuntimes=p.get("CompatibleRuntimes", []),
        CompatibleArchitectures=p.get("CompatibleArchitectures", []),
    )
    return version["LayerVersionArn"], {"LayerVersionArn": version["LayerVersionArn"]}


def _function(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("FunctionName") or _physical(d.stack, logical, 64)
    args = {
        "FunctionName": name,
        "Runtime": p["Runtime"],
        "Role": p["Role"],
        "Handler": p["Handler"],
        "Code": p["Code"],
        "Timeout": int(p.get("Timeout", 3)),
        "MemorySize": int(p.get("MemorySize", 128)),
        "Architectures": p.get("Architectures", ["x86_64"]),
        "Layers": p.get("Layers", []),
        "Environment": p.get("Environment", {"Variables": {}}),
        "TracingConfig": p.get("TracingConfig", {"Mode": "PassThrough"}),
    }
    if p.get("LoggingConfig"):
        args["LoggingConfig"] = p["LoggingConfig"]
    if p.get("ReservedConcurrentExecutions") is not None:
        args["ReservedConcurrentExecutions"] = int(p["ReservedConcurrentExecutions"])
    function = d.client("lambda").create_function(**args)
    return name, {"Arn": function["FunctionArn"]}


def _permission(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    args: dict[str, Any] = {k: p[k] for k in ("Action", "FunctionName", "Principal") if k in p}
    args.update({k: p[k] for k in ("SourceArn", "SourceAccount") if k in p})
    d.client("lambda").add_permission(StatementId=logical, **args)
    return logical, {}


def _kept(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    """Applied by the rehearsal's own Lambda service (event source mappings, async-invoke settings)."""
    return hashlib.sha256(logical.encode()).hexdigest()[:36], {}


def _rule(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("Name") or _physical(d.stack, logical, 64)
    events = d.client("events")
    args: dict[str, Any] = {"Name": name, "State": p.get("State", "ENABLED"), "Description": p.get("Description", "")}
    if "EventPattern" in p:
        args["EventPattern"] = json.dumps(p["EventPattern"])
    if "ScheduleExpression" in p:
        args["ScheduleExpression"] = p["ScheduleExpression"]
    if "EventBusName" in p:
        args["EventBusName"] = p["EventBusName"]
    arn = events.put_rule(**args)["RuleArn"]
    if p.get("Targets"):
        events.put_targets(Rule=name, EventBusName=p.get("EventBusName", "default"), Targets=p["Targets"])
    return name, {"Arn": arn}


def _state_machine(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("StateMachineName") or _physical(d.stack, logical, 80)
    definition = p.get("DefinitionString") or json.dumps(p["Definition"])
    args: dict[str, Any] = {"name": name, "definition": definition, "roleArn": p["RoleArn"]}
    if p.get("LoggingConfiguration"):
        logging = {
            "level": p["LoggingConfiguration"].get("Level", "OFF"),
            "includeExecutionData": bool(p["LoggingConfiguration"].get("IncludeExecutionData", False)),
            "destinations": [
                {"cloudWatchLogsLogGroup": {"logGroupArn": x["CloudWatchLogsLogGroup"]["LogGroupArn"]}}
                for x in p["LoggingConfiguration"].get("Destinations", [])
            ],
        }
        args["loggingConfiguration"] = logging
    if p.get("TracingConfiguration"):
        args["tracingConfiguration"] = {"enabled": bool(p["TracingConfiguration"].get("Enabled"))}
    arn = d.client("stepfunctions").create_state_machine(**args)["stateMachineArn"]
    return arn, {"Name": name, "Arn": arn}


def _document(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("Name") or _physical(d.stack, logical, 128)
    content = p["Content"]
    d.client("ssm").create_document(
        Name=name,
        Content=content if isinstance(content, str) else json.dumps(content),
        DocumentType=p.get("DocumentType", "Command"),
        DocumentFormat=p.get("DocumentFormat", "JSON"),
        Tags=p.get("Tags", []),
    )
    return name, {}


def _alarm(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("AlarmName") or _physical(d.stack, logical, 255)
    fields = (
        "AlarmDescription",
        "ComparisonOperator",
        "DatapointsToAlarm",
        "EvaluationPeriods",
        "MetricName",
        "Namespace",
        "Period",
        "Statistic",
        "Threshold",
        "TreatMissingData",
        "AlarmActions",
        "OKActions",
        "Dimensions",
        "Metrics",
    )
    args: dict[str, Any] = {k: p[k] for k in fields if k in p}
    for number in ("DatapointsToAlarm", "EvaluationPeriods", "Period"):
        if number in args:
            args[number] = int(args[number])
    if "Threshold" in args:
        args["Threshold"] = float(args["Threshold"])
    d.client("cloudwatch").put_metric_alarm(AlarmName=name, **args)
    return name, {"Arn": d.arn("cloudwatch", f"alarm:{name}")}


def _dashboard(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("DashboardName") or _physical(d.stack, logical, 255)
    d.client("cloudwatch").put_dashboard(DashboardName=name, DashboardBody=p["DashboardBody"])
    return name, {}


def _subscription_filter(d: Deployer, logical: str, p: dict[str, Any]) -> Created:
    name = p.get("FilterName") or _physical(d.stack, logical, 512)
    d.client("logs").put_subscription_filter(
        logGroupName=p["LogGroupName"],
        filterName=name,
        filterPattern=p.get("FilterPattern", ""),
        destinationArn=p["DestinationArn"],
    )
    return name, {}


_CREATORS: dict[str, Callable[[Deployer, str, dict[str, Any]], Created]] = {
    "AWS::DynamoDB::GlobalTable": _table,
    "AWS::DynamoDB::Table": _table,
    "AWS::SQS::Queue": _queue,
    "AWS::SQS::QueuePolicy": _queue_policy,
    "AWS::KMS::Key": _key,
    "AWS::SNS::Topic": _topic,
    "AWS::SNS::TopicPolicy": _topic_policy,
    "AWS::SNS::Subscription": _subscription,
    "AWS::Logs::LogGroup": _log_group,
    "AWS::Logs::SubscriptionFilter": _subscription_filter,
    "AWS::IAM::Role": _role,
    "AWS::IAM::Policy": _policy,
    "AWS::Lambda::LayerVersion": _layer,
    "AWS::Lambda::Function": _function,
    "AWS::Lambda::Permission": _permission,
    "AWS::Lambda::EventSourceMapping": _kept,
    "AWS::Lambda::EventInvokeConfig": _kept,
    # moto has no EKS access entries; the stage's Kubernetes API admits the principals these name
    "AWS::EKS::AccessEntry": _kept,
    "AWS::Events::Rule": _rule,
    "AWS::StepFunctions::StateMachine": _state_machine,
    "AWS::SSM::Document": _document,
    "AWS::CloudWatch::Alarm": _alarm,
    "AWS::CloudWatch::Dashboard": _dashboard,
}


def deploy(cdk_out: pathlib.Path, stack: str, region: str) -> Deployment:
    """Create the stack of ``cdk_out`` on the account the AWS SDK points at (the simulated one)."""
    return Deployer(Template.load(cdk_out, stack), region).deploy()
