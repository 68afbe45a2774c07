"""The optional archive of finding events (``historyArchive=true``): every event the monitor puts on its bus,
kept in S3 as Parquet, partitioned by account and date, with a Glue table over it and Athena named queries for
the questions ``findings stats`` answers, across accounts and beyond the table's 90 days.

EventBridge rule (source ``hyperpod-node-debugger``) → Kinesis Data Firehose (dynamic partitioning on the event's
``account`` and the date of its ``time``; JSON converted to Parquet with the Glue table's schema) → S3
``finding-events/account_id=<id>/dt=<yyyy-mm-dd>/``. The table uses partition projection (no crawler, no
partition to add): ``dt`` is a date range, ``account_id`` the accounts named in ``historyArchiveAccounts``
(default: this one; a central account lists every account that forwards to it).
"""

# ruff: noqa: S608  (the named queries are this module's own fixed SQL; the only text put in is our table's name)

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_athena as athena
from aws_cdk import aws_events as events
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct
from jsii import implements

from infra import constants as c

PREFIX = "finding-events"
#: the Glue table's columns: the envelope's id and time, and the event's detail as a struct (its commands left
#: out: long, and no question needs them); names as the event spells them, lower case as Glue keeps them
DETAIL_TYPE = (
    "struct<schema_version:string,event_id:string,transition:string,at:string,"
    "cluster:struct<name:string,arn:string,region:string,account:string>,"
    "instance_id:string,instance_group:string,instance_type:string,node_logical_id:string,"
    "finding:struct<fingerprint:string,check:string,tag:string,priority:string,state:string,message:string,"
    "evidence:array<string>,section:string,runbook:string,runbook_url:string,first_seen:string,last_seen:string,"
    "count:int,acknowledged_by:string>,"
    "open_seconds:double,trigger:struct<kind:string,what:string,node:string>,truncated:boolean>"
)
COLUMNS = (("id", "string"), ("time", "string"), ("region", "string"), ("detail", DETAIL_TYPE))
PARTITIONS = (("account_id", "string"), ("dt", "string"))

#: the node a finding is about: its logical id where HyperPod gives one (a replacement keeps it), else the instance
_NODE = "coalesce(detail.node_logical_id, detail.instance_id)"
_OPENINGS = "detail.transition IN ('NEW', 'REOPENED')"
_LAST_30_DAYS = "dt >= CAST(current_date - INTERVAL '30' DAY AS varchar)"

#: Athena named queries (Trino SQL): name → (description, SQL over the table, written ``{table}``)
QUERIES: dict[str, tuple[str, str]] = {
    "repeat-offenders": (
        "Nodes with two or more findings opened in the last 30 days, in every account",
        f"SELECT account_id, detail.cluster.name AS cluster, {_NODE} AS node, "
        "arbitrary(detail.instance_group) AS instance_group, count(*) AS openings, "
        "array_join(array_agg(DISTINCT detail.finding.\"check\"), ', ') AS checks "
        f"FROM {{table}} WHERE {_LAST_30_DAYS} AND {_OPENINGS} AND detail.instance_id IS NOT NULL "
        f"GROUP BY account_id, detail.cluster.name, {_NODE} HAVING count(*) >= 2 "
        "ORDER BY openings DESC, node",
    ),
    "failures-by-group-and-type": (
        "Findings opened in the last 30 days per instance group and instance type, and the nodes they hit",
        "SELECT account_id, detail.cluster.name AS cluster, detail.instance_group AS instance_group, "
        f"detail.instance_type AS instance_type, count(*) AS openings, count(DISTINCT {_NODE}) AS nodes "
        f"FROM {{table}} WHERE {_LAST_30_DAYS} AND {_OPENINGS} AND detail.instance_id IS NOT NULL "
        "GROUP BY account_id, detail.cluster.name, detail.instance_group, detail.instance_type "
        "ORDER BY openings DESC, instance_group",
    ),
    "what-fails-most": (
        "Findings opened in the last 30 days by check and runbook section",
        'SELECT detail.finding."check" AS "check", detail.finding.section AS section, count(*) AS openings, '
        f"count(DISTINCT {_NODE}) AS nodes "
        f"FROM {{table}} WHERE {_LAST_30_DAYS} AND {_OPENINGS} "
        'GROUP BY detail.finding."check", detail.finding.section ORDER BY openings DESC, "check"',
    ),
    "time-to-resolve": (
        "Hours from first seen to resolved, p50 and p90, per check, for findings resolved in the last 30 days",
        'SELECT detail.finding."check" AS "check", count(*) AS resolved, '
        "round(approx_percentile(detail.open_seconds, 0.5) / 3600, 2) AS p50_hours, "
        "round(approx_percentile(detail.open_seconds, 0.9) / 3600, 2) AS p90_hours "
        f"FROM {{table}} WHERE {_LAST_30_DAYS} AND detail.transition = 'RESOLVED' "
        'GROUP BY detail.finding."check" ORDER BY resolved DESC, "check"',
    ),
    "still-open": (
        "Findings whose latest transition in the last 90 days is not RESOLVED, oldest first",
        "SELECT account_id, detail.cluster.name AS cluster, detail.finding.fingerprint AS fingerprint, "
        'max_by(detail.finding."check", detail.at) AS "check", max_by(detail.instance_id, detail.at) AS instance_id, '
        "max_by(detail.finding.priority, detail.at) AS priority, min(detail.finding.first_seen) AS first_seen "
        "FROM {table} WHERE dt >= CAST(current_date - INTERVAL '90' DAY AS varchar) "
        "GROUP BY account_id, detail.cluster.name, detail.finding.fingerprint "
        "HAVING max_by(detail.transition, detail.at) <> 'RESOLVED' ORDER BY first_seen",
    ),
}


@implements(events.IRuleTarget)
class _ToFirehose:
    """An EventBridge target for a Firehose stream built with the L1 construct (the L2 target wants an L2)."""

    def __init__(self, stream_arn: str, role: iam.IRole) -> None:
        self.stream_arn, self.role = stream_arn, role

    def bind(self, _rule: events.IRule, _id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(arn=self.stream_arn, role=self.role)


class FindingsArchive(Construct):
    """Exposes `bucket`, `database_name`, `table_name`, `stream` (CfnDeliveryStream), `rule` and `queries`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        event_bus: str,
        accounts: Sequence[str],
        expire_days: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.database_name = c.ARCHIVE_DATABASE
        self.table_name = c.ARCHIVE_TABLE
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(expire_days))],
            # the archive is history: it outlives the stack, like the findings table
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=stack.account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=self.database_name, description="HyperPod Node Debugger finding events"
            ),
        )
        table = self._table(stack, accounts)
        table.node.add_dependency(database)
        log_group = logs.LogGroup(self, "DeliveryLogs", retention=log_retention)
        # the group is kept with the stack's other log groups; its stream is recreated with it
        stream_log = logs.LogStream(
            self, "DeliveryErrors", log_group=log_group, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        role = self._delivery_role(stack, log_group)
        self.stream = self._stream(stack, role, log_group, stream_log)
        self.stream.node.add_dependency(role, table)
        target_role = iam.Role(self, "RuleRole", assumed_by=iam.ServicePrincipal("events.amazonaws.com"))
        target_role.add_to_policy(
            iam.PolicyStatement(
                actions=["firehose:PutRecord", "firehose:PutRecordBatch"], resources=[self.stream.attr_arn]
            )
        )
        bus = (
            events.EventBus.from_event_bus_arn(self, "Bus", event_bus)
            if event_bus.startswith("arn:")
            else events.EventBus.from_event_bus_name(self, "Bus", event_bus)
        )
        self.rule = events.Rule(
            self,
            "ToArchive",
            event_bus=bus,
            description="Every finding event of the monitor, to the archive's Firehose stream",
            event_pattern=events.EventPattern(source=[c.FINDING_EVENT_SOURCE]),
            targets=[cast(events.IRuleTarget, _ToFirehose(self.stream.attr_arn, target_role))],
        )
        self.queries = {
            name: athena.CfnNamedQuery(
                self,
                f"Query{''.join(part.title() for part in name.split('-'))}",
                database=self.database_name,
                name=f"hyperpod-debugger-{name}",
                description=description,
                query_string=sql.format(table=f'"{self.database_name}"."{self.table_name}"'),
            )
            for name, (description, sql) in QUERIES.items()
        }
        for query in self.queries.values():
            query.node.add_dependency(table)
        self._acknowledge(stack)

    def _acknowledge(self, stack: cdk.Stack) -> None:
        """The archive's own cdk-nag acknowledgements (only when it is built, so none goes stale without it)."""
        bucket = stack.get_logical_id(cast(cdk.CfnElement, self.bucket.node.default_child))
        for finding_id, reason in {
            "AwsSolutions-S1": "The archive bucket holds only the finding events its own Firehose stream writes "
            "(the role may put objects under two prefixes and read nothing); access logging would take a second "
            "bucket that logs itself. Use CloudTrail S3 data events where reads of the archive must be audited.",
            f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/{PREFIX}/*]": "Firehose writes one object per buffer "
            "under the archive's prefix, named by the stream (partition, date, a random suffix): the objects "
            "cannot be named in advance; the role may only put objects and abort its uploads there.",
            f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/errors/*]": "Firehose writes the records it could not "
            "convert or partition under errors/, named by the stream; only put and abort there.",
        }.items():
            cdk.Validations.of(self).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::{finding_id}", reason=reason))

    def _table(self, stack: cdk.Stack, accounts: Sequence[str]) -> glue.CfnTable:
        location = f"s3://{self.bucket.bucket_name}/{PREFIX}/"
        parameters = {
            "classification": "parquet",
            "projection.enabled": "true",
            "projection.dt.type": "date",
            "projection.dt.format": "yyyy-MM-dd",
            "projection.dt.range": "2026-01-01,NOW",
            "projection.dt.interval": "1",
            "projection.dt.interval.unit": "DAYS",
            "projection.account_id.type": "enum",
            "projection.account_id.values": ",".join(accounts),
            "storage.location.template": location + "account_id=${account_id}/dt=${dt}/",
        }
        return glue.CfnTable(
            self,
            "Table",
            catalog_id=stack.account,
            database_name=self.database_name,
            table_input=glue.CfnTable.TableInputProperty(
                name=self.table_name,
                description="One row per finding event (a finding's transition), as the monitor put it on its bus",
                table_type="EXTERNAL_TABLE",
                parameters=parameters,
                partition_keys=[glue.CfnTable.ColumnProperty(name=n, type=t) for n, t in PARTITIONS],
                storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
                    location=location,
                    columns=[glue.CfnTable.ColumnProperty(name=n, type=t) for n, t in COLUMNS],
                    input_format="org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                    output_format="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                    serde_info=glue.CfnTable.SerdeInfoProperty(
                        serialization_library="org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                    ),
                ),
            ),
        )

    def _delivery_role(self, stack: cdk.Stack, log_group: logs.LogGroup) -> iam.Role:
        role = iam.Role(self, "DeliveryRole", assumed_by=iam.ServicePrincipal("firehose.amazonaws.com"))
        # what Firehose's S3 destination documents it needs, on the two prefixes it writes only
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:AbortMultipartUpload"],
                resources=[self.bucket.arn_for_objects(f"{PREFIX}/*"), self.bucket.arn_for_objects("errors/*")],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
                resources=[self.bucket.bucket_arn],
            )
        )
        # the record format conversion reads the table's schema
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["glue:GetTable", "glue:GetTableVersion", "glue:GetTableVersions"],
                resources=[
                    stack.format_arn(service="glue", resource="catalog"),
                    stack.format_arn(service="glue", resource="database", resource_name=self.database_name),
                    stack.format_arn(
                        service="glue", resource="table", resource_name=f"{self.database_name}/{self.table_name}"
                    ),
                ],
            )
        )
        log_group.grant_write(role)
        return role

    def _stream(
        self, stack: cdk.Stack, role: iam.Role, log_group: logs.LogGroup, stream_log: logs.LogStream
    ) -> firehose.CfnDeliveryStream:
        f = firehose.CfnDeliveryStream
        jq = "{account_id: .account, dt: .time[0:10]}"
        return f(
            self,
            "Stream",
            delivery_stream_type="DirectPut",
            delivery_stream_encryption_configuration_input=f.DeliveryStreamEncryptionConfigurationInputProperty(
                key_type="AWS_OWNED_CMK"
            ),
            extended_s3_destination_configuration=f.ExtendedS3DestinationConfigurationProperty(
                bucket_arn=self.bucket.bucket_arn,
                role_arn=role.role_arn,
                prefix=f"{PREFIX}/account_id=!{{partitionKeyFromQuery:account_id}}/dt=!{{partitionKeyFromQuery:dt}}/",
                error_output_prefix="errors/!{firehose:error-output-type}/dt=!{timestamp:yyyy-MM-dd}/",
                # Parquet conversion asks for at least 64 MB; a quiet fleet's events still land every 15 minutes
                buffering_hints=f.BufferingHintsProperty(interval_in_seconds=900, size_in_m_bs=64),
                dynamic_partitioning_configuration=f.DynamicPartitioningConfigurationProperty(enabled=True),
                processing_configuration=f.ProcessingConfigurationProperty(
                    enabled=True,
                    processors=[
                        f.ProcessorProperty(
                            type="MetadataExtraction",
                            parameters=[
                                f.ProcessorParameterProperty(
                                    parameter_name="MetadataExtractionQuery", parameter_value=jq
                                ),
                                f.ProcessorParameterProperty(
                                    parameter_name="JsonParsingEngine", parameter_value="JQ-1.6"
                                ),
                            ],
                        )
                    ],
                ),
                data_format_conversion_configuration=f.DataFormatConversionConfigurationProperty(
                    enabled=True,
                    input_format_configuration=f.InputFormatConfigurationProperty(
                        deserializer=f.DeserializerProperty(open_x_json_ser_de=f.OpenXJsonSerDeProperty())
                    ),
                    output_format_configuration=f.OutputFormatConfigurationProperty(
                        serializer=f.SerializerProperty(parquet_ser_de=f.ParquetSerDeProperty(compression="SNAPPY"))
                    ),
                    schema_configuration=f.SchemaConfigurationProperty(
                        catalog_id=stack.account,
                        database_name=self.database_name,
                        table_name=self.table_name,
                        region=stack.region,
                        role_arn=role.role_arn,
                        version_id="LATEST",
                    ),
                ),
                cloud_watch_logging_options=f.CloudWatchLoggingOptionsProperty(
                    enabled=True, log_group_name=log_group.log_group_name, log_stream_name=stream_log.log_stream_name
                ),
            ),
        )
