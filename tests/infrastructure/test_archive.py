"""The optional archive of finding events (``historyArchive=true``), as synthesized: its resources, its
security (cdk-nag, cfn-lint), and its Athena named queries run for real. Athena is Trino, which does not run
here; DuckDB does: the events are made by the monitor's own code, stored as Parquet under the partitions the
Firehose stream's JQ query names, read with the Glue table's own column types, and each query's SQL is taken
from the template. Where Trino and DuckDB name a function differently, a DuckDB macro supplies Trino's name
(``approx_percentile`` becomes the exact ``quantile_disc``); nothing else of the SQL is changed. The expected
rows were worked out by hand from the events below."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from aws_cdk.assertions import Match, Template

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import State, StoredFinding, TransitionKind, iso
from hyperpod_debugger.notify import finding_event
from infra import constants as c
from infra.settings import SettingsError, StackSettings
from tests.infrastructure.conftest import synth
from tests.infrastructure.test_cfn_lint import findings as lint_findings

duckdb = pytest.importorskip("duckdb")

ACCOUNTS = ("123456789012", "210987654321")


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    return synth(tmp_path_factory, historyArchive="true", historyArchiveAccounts=",".join(ACCOUNTS))


@pytest.fixture(scope="module")
def archive(archived) -> Template:
    return archived[1]


def only(archive: Template, kind: str) -> dict:
    [resource] = archive.find_resources(kind).values()
    return resource["Properties"]


# --------------------------------------------------------------------------- what is deployed


def test_the_default_stack_has_no_archive(synthesized):
    default = synthesized[1]
    for kind in ("AWS::KinesisFirehose::DeliveryStream", "AWS::Glue::Table", "AWS::Athena::NamedQuery"):
        assert default.find_resources(kind) == {}


def test_events_reach_firehose_which_partitions_by_account_and_date_and_writes_parquet(archive: Template):
    archive.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": {"source": [c.FINDING_EVENT_SOURCE]}, "EventBusName": "default"},
    )
    # the rule's source is the one the monitor's own events carry (the stack names it on its own)
    assert c.FINDING_EVENT_SOURCE == event(*EVENTS[0])["source"]
    s3 = only(archive, "AWS::KinesisFirehose::DeliveryStream")["ExtendedS3DestinationConfiguration"]
    assert (
        s3["Prefix"] == "finding-events/account_id=!{partitionKeyFromQuery:account_id}/dt=!{partitionKeyFromQuery:dt}/"
    )
    assert s3["DynamicPartitioningConfiguration"] == {"Enabled": True}
    [processor] = s3["ProcessingConfiguration"]["Processors"]
    query = {p["ParameterName"]: p["ParameterValue"] for p in processor["Parameters"]}["MetadataExtractionQuery"]
    assert query == "{account_id: .account, dt: .time[0:10]}"
    conversion = s3["DataFormatConversionConfiguration"]
    assert conversion["OutputFormatConfiguration"]["Serializer"] == {"ParquetSerDe": {"Compression": "SNAPPY"}}
    assert conversion["SchemaConfiguration"]["DatabaseName"] == c.ARCHIVE_DATABASE
    assert s3["BufferingHints"]["SizeInMBs"] >= 64  # Parquet conversion's documented minimum


def test_the_bucket_is_private_encrypted_ssl_only_expiring_and_retained(archive: Template):
    [(logical, bucket)] = archive.find_resources("AWS::S3::Bucket").items()
    props = bucket["Properties"]
    assert bucket["DeletionPolicy"] == "Retain"
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == c.DEFAULT_HISTORY_ARCHIVE_DAYS
    policy = only(archive, "AWS::S3::BucketPolicy")["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy
    ), logical


def test_the_delivery_role_writes_two_prefixes_and_reads_the_tables_schema_only(archive: Template):
    roles = archive.find_resources("AWS::IAM::Role", {"Properties": {"AssumeRolePolicyDocument": Match.any_value()}})
    [delivery] = [k for k, r in roles.items() if "firehose.amazonaws.com" in json.dumps(r["Properties"])]
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in archive.find_resources("AWS::IAM::Policy").values()
        if {"Ref": delivery} in p["Properties"]["Roles"]
    ]
    actions = sorted({a for statements in policies for s in statements for a in _list(s["Action"])})
    assert actions == [
        "glue:GetTable",
        "glue:GetTableVersion",
        "glue:GetTableVersions",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "s3:AbortMultipartUpload",
        "s3:GetBucketLocation",
        "s3:ListBucket",
        "s3:ListBucketMultipartUploads",
        "s3:PutObject",
    ]


def _list(value):
    return value if isinstance(value, list) else [value]


def test_the_glue_table_projects_its_partitions_for_the_named_accounts(archive: Template):
    table = only(archive, "AWS::Glue::Table")["TableInput"]
    assert table["Name"] == c.ARCHIVE_TABLE
    assert [k["Name"] for k in table["PartitionKeys"]] == ["account_id", "dt"]
    params = table["Parameters"]
    assert params["projection.enabled"] == "true" and params["projection.account_id.values"] == ",".join(ACCOUNTS)
    assert params["projection.dt.format"] == "yyyy-MM-dd"


def test_the_archive_passes_cdk_nag_and_cfn_lint(archived):
    _, archive, outdir = archived
    report = json.loads((outdir / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    assert lint_findings(archive.to_json()) == []


def test_the_archive_listens_on_the_bus_the_events_go_to(tmp_path_factory):
    arn = "arn:aws:events:us-west-2:123456789012:event-bus/findings"
    _, custom, _ = synth(tmp_path_factory, historyArchive="true", findingsEventBus=arn)
    [rule] = [
        r["Properties"]
        for r in custom.find_resources("AWS::Events::Rule").values()
        if r["Properties"].get("EventPattern", {}).get("source") == [c.FINDING_EVENT_SOURCE]
    ]
    assert rule["EventBusName"] == "findings"


def test_an_archive_of_events_that_are_not_put_is_refused():
    with pytest.raises(SettingsError, match="findingsEventBus is none"):
        StackSettings.from_mapping({"historyArchive": "true", "findingsEventBus": "none"})
    with pytest.raises(SettingsError, match="12-digit AWS account ids"):
        StackSettings.from_mapping({"historyArchive": "true", "historyArchiveAccounts": "1234"})


# --------------------------------------------------------------------------- the named queries, run

TODAY = date.today()


def day(n: int, hour: int = 0) -> datetime:
    """``n`` days before today (UTC), at ``hour``."""
    return datetime(TODAY.year, TODAY.month, TODAY.day, hour, tzinfo=UTC) - timedelta(days=n)


def stored(fp: str, node: str | None, check: str, *, group=None, itype=None, logical=None, section="G.1"):
    return StoredFinding(
        fingerprint=fp,
        cluster_arn="arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456",
        cluster_name="ml-train",
        instance_id=node,
        check=check,
        section=section,
        tag=Tag.FAIL,
        priority=Priority.P1,
        state=State.OPEN,
        first_seen="",
        last_seen="",
        count=1,
        message=f"{check} failed",
        instance_group=group,
        instance_type=itype,
        node_logical_id=logical,
    )


XID_A = stored("fa", "i-0a", "probe.xid", group="gpu-workers", itype="ml.p5.48xlarge")
DISK_B = stored("fb", "i-0b", "probe.root_volume", group="gpu-workers", itype="ml.p5.48xlarge", section="I.2")
XID_C1 = stored("fc1", "i-0c1", "probe.xid", group="gpu-workers", itype="ml.p5.48xlarge", logical="lg-7")
XID_C2 = stored("fc2", "i-0c2", "probe.xid", group="gpu-workers", itype="ml.p5.48xlarge", logical="lg-7")
SG = stored("fsg", None, "network.efa_sg", section="A")
SLURMD_D = stored("fd", "i-0d", "probe.services", group="cpu", itype="ml.m5.xlarge", section="H")

#: (transition, when, finding, first seen): the events the monitor puts, in the account of the cluster
EVENTS = [
    # i-0a: Xid three times (2 h, 1 h, 3 h), i.e. opened 3 times; the third reopening counts its
    # resolution from the first opening (the event's open_seconds runs from first seen)
    ("NEW", day(20, 10), XID_A, day(20, 10)),
    ("RESOLVED", day(20, 12), XID_A, day(20, 10)),
    ("REOPENED", day(12, 8), XID_A, day(20, 10)),
    ("RESOLVED", day(12, 9), XID_A, day(20, 10)),
    ("REOPENED", day(5, 0), XID_A, day(20, 10)),
    ("RESOLVED", day(5, 3), XID_A, day(20, 10)),
    # logical node lg-7: i-0c1 (6 h) then its replacement i-0c2 (2 h)
    ("NEW", day(18, 0), XID_C1, day(18, 0)),
    ("RESOLVED", day(18, 6), XID_C1, day(18, 0)),
    ("NEW", day(8, 0), XID_C2, day(8, 0)),
    ("RESOLVED", day(8, 2), XID_C2, day(8, 0)),
    # i-0b: root volume full 3 days ago, still open
    ("NEW", day(3, 0), DISK_B, day(3, 0)),
    # a cluster-wide security group problem, 5 h
    ("NEW", day(15, 0), SG, day(15, 0)),
    ("RESOLVED", day(15, 5), SG, day(15, 0)),
    # i-0d in another account's cluster: slurmd down 40 days ago (outside the 30-day queries), still open
    (
        "NEW",
        day(40, 0),
        replace(SLURMD_D, cluster_arn="arn:aws:sagemaker:us-west-2:210987654321:cluster/zz9yy8xx7ww6"),
        day(40, 0),
    ),
]


def event(kind: str, at: datetime, finding: StoredFinding, first: datetime) -> dict:
    """The event as EventBridge delivers it to the rule's target: the envelope and the monitor's own detail."""
    seen = replace(finding, first_seen=iso(first), last_seen=iso(at))
    if kind == "RESOLVED":
        seen = replace(seen, state=State.RESOLVED)
    detail = finding_event.detail_of(TransitionKind(kind), iso(at), seen)
    return {
        "version": "0",
        "id": detail.event_id,
        "detail-type": finding_event.DETAIL_TYPE,
        "source": finding_event.SOURCE,
        "account": finding.cluster_arn.split(":")[4],
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-west-2",
        "resources": [finding.cluster_arn],
        "detail": json.loads(detail.model_dump_json()),
    }


_SIMPLE = {"string": "VARCHAR", "int": "INTEGER", "bigint": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}


def duck_type(glue: str) -> str:
    """A Glue (Hive) column type as DuckDB spells it: struct<a:string> → STRUCT("a" VARCHAR), array<t> → t[]."""
    glue = glue.strip()
    if glue in _SIMPLE:
        return _SIMPLE[glue]
    if glue.startswith("array<") and glue.endswith(">"):
        return duck_type(glue[6:-1]) + "[]"
    assert glue.startswith("struct<") and glue.endswith(">"), glue
    fields, depth, start, body = [], 0, 0, glue[7:-1]
    for i, ch in enumerate(body + ","):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            name, _, kind = body[start:i].partition(":")
            fields.append(f'"{name}" {duck_type(kind)}')
            start = i + 1
    return f"STRUCT({', '.join(fields)})"


@pytest.fixture(scope="module")
def athena(archive: Template, tmp_path_factory):
    """A DuckDB database with the archive's table as Firehose would have written it."""
    table = only(archive, "AWS::Glue::Table")["TableInput"]
    columns = {col["Name"]: duck_type(col["Type"]) for col in table["StorageDescriptor"]["Columns"]}
    where = tmp_path_factory.mktemp("archive")
    lines = where / "events.json"
    lines.write_text("\n".join(json.dumps(event(*e)) for e in EVENTS) + "\n")
    db = duckdb.connect()
    # Firehose's OpenX JSON reader keeps the table's columns and drops the rest (`detail-type`, `resources`)
    spec = ", ".join(f"'{name}': '{kind}'" for name, kind in columns.items())
    db.execute(
        f"CREATE TABLE delivered AS SELECT *, account AS account_id, substr(time, 1, 10) AS dt "
        f"FROM read_json('{lines}', columns={{{spec}, 'account': 'VARCHAR'}}, format='newline_delimited')"
    )
    out = where / "finding-events"
    keep = ", ".join(f'"{name}"' for name in [*columns, "account_id", "dt"])
    db.execute(f"COPY (SELECT {keep} FROM delivered) TO '{out}' (FORMAT PARQUET, PARTITION_BY (account_id, dt))")
    db.execute(
        f"CREATE VIEW finding_events AS SELECT * FROM read_parquet('{out}/**/*.parquet', hive_partitioning=true, "
        "hive_types={'account_id': VARCHAR, 'dt': VARCHAR})"
    )
    # Trino's names for what DuckDB calls otherwise
    db.execute("CREATE MACRO approx_percentile(x, p) AS quantile_disc(x, p)")
    db.execute("CREATE MACRO array_join(a, sep) AS array_to_string(a, sep)")
    return db


def run_query(archive: Template, athena, name: str) -> list[tuple]:
    [query] = [
        q["Properties"]
        for q in archive.find_resources("AWS::Athena::NamedQuery").values()
        if q["Properties"]["Name"] == f"hyperpod-debugger-{name}"
    ]
    assert query["Database"] == c.ARCHIVE_DATABASE
    sql = query["QueryString"].replace(f'"{c.ARCHIVE_DATABASE}"."{c.ARCHIVE_TABLE}"', "finding_events")
    return athena.execute(sql).fetchall()


def test_the_stored_parquet_has_the_partitions_the_stream_names(athena):
    rows = athena.execute("SELECT account_id, count(*) FROM finding_events GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("123456789012", 13), ("210987654321", 1)]
    [(node_logical_id,)] = athena.execute(
        "SELECT detail.node_logical_id FROM finding_events WHERE detail.instance_id = 'i-0c2' LIMIT 1"
    ).fetchall()
    assert node_logical_id == "lg-7"  # the event's fields reach the table's columns by name


def test_repeat_offenders(archive, athena):
    # openings in 30 days: i-0a 3 (NEW, REOPENED, REOPENED); lg-7 2 (i-0c1, i-0c2); i-0b 1; i-0d outside
    rows = run_query(archive, athena, "repeat-offenders")
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("123456789012", "i-0a", "gpu-workers", 3),
        ("123456789012", "lg-7", "gpu-workers", 2),
    ]


def test_failures_by_group_and_type(archive, athena):
    # gpu-workers/p5: 3 + 2 + 1 = 6 openings on i-0a, lg-7, i-0b (3 nodes)
    rows = run_query(archive, athena, "failures-by-group-and-type")
    assert [(r[2], r[3], r[4], r[5]) for r in rows] == [("gpu-workers", "ml.p5.48xlarge", 6, 3)]


def test_what_fails_most(archive, athena):
    rows = run_query(archive, athena, "what-fails-most")
    assert rows == [("probe.xid", "G.1", 5, 2), ("network.efa_sg", "A", 1, 0), ("probe.root_volume", "I.2", 1, 1)]


def test_time_to_resolve(archive, athena):
    # probe.xid resolutions, hours from first seen (day 20, 10:00): i-0a 2, then day 12 09:00 = 8 days less
    # 1 h = 191, then day 5 03:00 = 15 days less 7 h = 353; i-0c1 6; i-0c2 2 → sorted 2 2 6 191 353:
    # nearest-rank p50 (rank 3) 6, p90 (rank 5) 353
    rows = run_query(archive, athena, "time-to-resolve")
    assert rows == [("probe.xid", 5, 6.0, 353.0), ("network.efa_sg", 1, 5.0, 5.0)]


def test_still_open(archive, athena):
    # i-0b's full disk (3 days) and i-0d's slurmd in the other account (40 days), oldest first
    rows = run_query(archive, athena, "still-open")
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("210987654321", "fd", "probe.services", "i-0d"),
        ("123456789012", "fb", "probe.root_volume", "i-0b"),
    ]


def test_every_named_query_is_exercised(archive):
    names = {q["Properties"]["Name"] for q in archive.find_resources("AWS::Athena::NamedQuery").values()}
    tested = {
        f"hyperpod-debugger-{m.group(1)}"
        for m in re.finditer(r'run_query\(archive, athena, "([a-z-]+)"\)', open(__file__).read())
    }
    assert names == tested
