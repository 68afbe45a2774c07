"""The findings store: one on-demand TableV2 (findings, node history, sweep coverage) plus idempotency."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from infra.constants import (
    GSI_BY_CLUSTER,
    GSI_BY_CLUSTER_PK,
    GSI_BY_CLUSTER_SK,
    GSI_BY_NODE,
    GSI_BY_NODE_PK,
    GSI_BY_NODE_SK,
    IDEMPOTENCY_PK,
    IDEMPOTENCY_TTL,
    TABLE_PK,
    TABLE_SK,
    TTL_ATTRIBUTE,
)


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)


class FindingsStore(Construct):
    """Exposes `table` (findings, stream NEW_AND_OLD_IMAGES) and `idempotency_table` (Powertools)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = self._build_findings_table()
        self.idempotency_table = self._build_idempotency_table()

    def _build_findings_table(self) -> dynamodb.TableV2:
        return dynamodb.TableV2(
            self,
            "Findings",
            partition_key=_string(TABLE_PK),
            sort_key=_string(TABLE_SK),
            billing=dynamodb.Billing.on_demand(),
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTRIBUTE,
            dynamo_stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            global_secondary_indexes=[
                dynamodb.GlobalSecondaryIndexPropsV2(
                    index_name=GSI_BY_NODE,
                    partition_key=_string(GSI_BY_NODE_PK),
                    sort_key=_string(GSI_BY_NODE_SK),
                ),
                dynamodb.GlobalSecondaryIndexPropsV2(
                    index_name=GSI_BY_CLUSTER,
                    partition_key=_string(GSI_BY_CLUSTER_PK),
                    sort_key=_string(GSI_BY_CLUSTER_SK),
                ),
            ],
            # the history outlives the stack (RETAIN) and a stray delete-table call (deletion protection): deleting
            # it takes turning the protection off first (README.md, "Remove the stack")
            removal_policy=cdk.RemovalPolicy.RETAIN,
            deletion_protection=True,
        )

    def _build_idempotency_table(self) -> dynamodb.TableV2:
        return dynamodb.TableV2(
            self,
            "Idempotency",
            partition_key=_string(IDEMPOTENCY_PK),
            billing=dynamodb.Billing.on_demand(),
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=IDEMPOTENCY_TTL,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
