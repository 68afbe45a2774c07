"""No PASS without having read: a check reports PASS only over input it parsed.

Every check is fed text that is not what its item should hold (a proxy's error page, a Python traceback,
a directory listing, an operator's note) and, item by item, a real healthy output cut short by the
probe's tail cap. Foreign text never earns a PASS; a cut item's PASS says it judged a truncated output.
Undated kernel-log lines are covered in test_klog_forms.py (every form, with and without a boot time).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.delivery import item_ids
from hyperpod_debugger.probe.document import TRUNCATION_MARKER, ProbeDocument, ProbeItem
from hyperpod_debugger.probe.registry import evaluate
from hyperpod_sim.probe_docs import node_document

NOW = datetime(2026, 12, 2, tzinfo=UTC)

FOREIGN = {
    "html error page": (
        "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
        "<body><center><h1>502 Bad Gateway</h1></center>\n<hr><center>nginx/1.18.0 (Ubuntu)</center>\n</body></html>\n"
    ),
    "python traceback": (
        'Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n    import torch\n'
        "ModuleNotFoundError: No module named 'torch'\n"
    ),
    "directory listing": (
        "total 8\ndrwxr-xr-x 2 ubuntu ubuntu 4096 Jan  8 10:00 .\ndrwxr-xr-x 5 ubuntu ubuntu 4096 Jan  8 09:59 ..\n"
        "-rw-r--r-- 1 ubuntu ubuntu  220 Jan  8 10:00 .bash_logout\n"
    ),
    "an operator's note": "Please find attached the logs from the node. Let me know: what else do you need?\nAlex\n",
}
NODES = {
    "p5 on EKS": ("ml.p5.48xlarge", "EKS", "compute"),
    "trn1 Slurm compute": ("ml.trn1.32xlarge", "Slurm", "compute"),
    "Slurm controller": ("ml.m5.xlarge", "Slurm", "controller"),
}

#: which checks read which item (a cut item must not yield an unqualified PASS from these)
READERS = {
    "kernel_log": ("probe.xid", "probe.kernel_faults", "probe.oom"),
    "kernel_log_previous_boot": ("probe.xid", "probe.kernel_faults", "probe.oom"),
    "nvidia_smi_query_gpu": ("probe.gpu_count", "probe.gpu_ecc", "probe.gpu_row_remap", "probe.gpu_thermal"),
    "nvidia_smi_remapped_rows": ("probe.gpu_row_remap",),
    "df": ("probe.root_volume", "probe.data_volumes", "probe.shm"),
    "findmnt": ("probe.data_volumes",),
    "efa_devices": ("probe.efa",),
    "efa_module": ("probe.efa",),
    "fi_info_efa": ("probe.efa",),
    "chronyc_tracking": ("probe.clock",),
    "meminfo": ("probe.memory",),
    "systemctl_is_active": ("probe.services",),
}


def run(doc: ProbeDocument, instance_type: str, orchestrator, role) -> list:
    ctx = ProbeContext(
        instance_type=instance_type,
        now=NOW,
        window=timedelta(hours=24),
        orchestrator=orchestrator,
        role=role,
    )
    findings, _ = evaluate(doc, ctx)
    return findings


@pytest.mark.parametrize("node", sorted(NODES))
@pytest.mark.parametrize("sample", sorted(FOREIGN))
def test_foreign_text_in_every_item_earns_no_pass(sample, node):
    text = FOREIGN[sample]
    items = {i: ProbeItem(command="(pasted)", exit_code=0, stdout=text) for i in item_ids() if i != "uptime"}
    doc = ProbeDocument(hostname="node", collected_at=NOW, uptime_s=3600.0, items=items)
    passes = [f"{f.check}: {f.message}" for f in run(doc, *NODES[node]) if f.tag is Tag.PASS]
    assert passes == []


def test_foreign_text_in_a_kernel_log_is_said_to_be_unread():
    items = {"kernel_log": ProbeItem(command="(pasted)", exit_code=0, stdout=FOREIGN["python traceback"])}
    doc = ProbeDocument(hostname="node", collected_at=NOW, uptime_s=3600.0, items=items)
    xid = [f for f in run(doc, "ml.p5.48xlarge", "EKS", "compute") if f.check == "probe.xid"]
    assert [f.tag for f in xid] == [Tag.UNKNOWN]
    assert "not a kernel log" in xid[0].message and "Traceback" in xid[0].message


@pytest.mark.parametrize("item_id", sorted(READERS))
def test_a_cut_item_never_yields_an_unqualified_pass(item_id):
    healthy = node_document("ip-10-1-2-3", NOW, orchestrator="EKS")
    original = healthy.items[item_id]
    half = original.stdout[: max(1, len(original.stdout) // 2)]
    items = dict(healthy.items)
    items[item_id] = ProbeItem(original.command, 0, f"{half}\n{TRUNCATION_MARKER}\n", truncated=True)
    doc = ProbeDocument(hostname=healthy.hostname, collected_at=NOW, uptime_s=healthy.uptime_s, items=items)
    for f in run(doc, "ml.p5.48xlarge", "EKS", "compute"):
        if f.check in READERS[item_id] and f.tag is Tag.PASS:
            said = " ".join([f.message, *f.evidence]).lower()
            assert "truncat" in said or "cut" in said, (f.check, f.message, f.evidence)
