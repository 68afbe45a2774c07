"""``hyperpod-debugger analyze`` end to end: saved probe output in, findings with the right sections out."""

from __future__ import annotations

import json
import pathlib

import jsonschema
import pytest

from hyperpod_debugger.cli.main import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "references" / "triage-report.schema.json").read_text())
NOW = "2026-11-30T12:00:00Z"

GPU_HEADER = (
    "index, pci.bus_id, name, uuid, temperature.gpu, ecc.errors.uncorrected.volatile.total, "
    "ecc.errors.uncorrected.aggregate.total"
)


def gpu_rows(count: int) -> str:
    rows = [GPU_HEADER] + [
        f"{i}, 00000000:{0x18 + 0x10 * i:02X}:00.0, NVIDIA H100 80GB HBM3, GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd, 40, 0, 0"
        for i in range(count)
    ]
    return "\n".join(rows) + "\n"


REMAP_PENDING = (
    "gpu_bus_id, gpu_uuid, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
    "remapped_rows.failure\n"
    "00000000:18:00.0, GPU-00000000-aaaa-bbbb-cccc-dddddddddddd, 0, 1, Yes, No\n"
)
DCGM_FAIL = """+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
+---------------------------+----------------------------------------------------------+
| GPU ID: 3                 | Failure                                                  |
|                           | PCIe system: Failure - Detected more than 8 PCIe replays |
|                           | per minute for GPU 3 : 12 Reconnect PCIe card. Run       |
|                           | system side PCIE diagnostic utilities to verify hops off |
|                           | the GPU board                                            |
+---------------------------+----------------------------------------------------------+
"""
NEURON_TABLE_TWO = """instance-type: trn1.32xlarge
instance-id: i-0123456789abcdef0
+--------+--------+--------+---------------+---------+
| NEURON | NEURON | NEURON | CONNECTED     | PCI     |
| DEVICE | CORES  | MEMORY | DEVICES       | BDF     |
+--------+--------+--------+---------------+---------+
| 0      | 2      | 32 GB  | 12, 3, 4, 1   | 10:1c.0 |
| 1      | 2      | 32 GB  | 13, 0, 5, 2   | 10:1d.0 |
+--------+--------+--------+---------------+---------+
"""
DF_FULL = (
    "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"
    "/dev/nvme0n1p1     104857600  99614720   5242880      95% /\n"
)
FINDMNT_ROOT = json.dumps(
    {"filesystems": [{"target": "/", "source": "/dev/nvme0n1p1", "fstype": "xfs", "size": "100G"}]}
)
PANIC_PREVIOUS_BOOT = (
    "2026-11-30T03:14:15.926535+00:00 ip-10-1-2-3 kernel: Kernel panic - not syncing: Fatal exception in interrupt\n"
)
CHRONY_UNSYNCED = (
    "Reference ID    : 00000000 ()\nStratum         : 0\nRef time (UTC)  : Thu Jan 01 00:00:00 1970\n"
    "System time     : 0.000000000 seconds fast of NTP time\nLast offset     : +0.000000000 seconds\n"
    "RMS offset      : 0.000000000 seconds\nFrequency       : 0.000 ppm slow\nResidual freq   : +0.000 ppm\n"
    "Skew            : 0.000 ppm\nRoot delay      : 1.000000000 seconds\nRoot dispersion : 1.000000000 seconds\n"
    "Update interval : 0.0 seconds\nLeap status     : Not synchronised\n"
)

SCENARIOS = {
    "G.1": ("ml.p5.48xlarge", None, {"nvidia_smi_query_gpu": gpu_rows(7)}),
    "G.1.a": ("ml.p5.48xlarge", None, {"nvidia_smi_remapped_rows": REMAP_PENDING}),
    "G.1.b": ("ml.p5.48xlarge", None, {"dcgmi_health": DCGM_FAIL}),
    "G.2": ("ml.trn1.32xlarge", None, {"neuron_ls": NEURON_TABLE_TWO}),
    "A": (
        "ml.p5.48xlarge",
        None,
        {
            "efa_module": "2.13.0g\n",
            "efa_devices": "rdmap16s27\nrdmap17s27\n",
            "fi_info_efa": "provider: efa\n    fabric: efa\n",
        },
    ),
    "I.2": ("ml.p5.48xlarge", None, {"df": DF_FULL, "findmnt": FINDMNT_ROOT}),
    "I.5": ("ml.p5.48xlarge", None, {"chronyc_tracking": CHRONY_UNSYNCED}),
    "N": ("ml.p5.48xlarge", None, {"kernel_log_previous_boot": PANIC_PREVIOUS_BOOT, "kernel_log": ""}),
    "K": (
        "ml.p5.48xlarge",
        None,
        {"systemctl_is_active": "amazon-ssm-agent inactive\nsnap.amazon-ssm-agent.amazon-ssm-agent inactive\n"},
    ),
    "M": (
        "ml.p5.48xlarge",
        "eks",
        {"systemctl_is_active": "amazon-ssm-agent active\ncontainerd inactive\nkubelet active\n"},
    ),
    "H": ("ml.p5.48xlarge", "slurm", {"systemctl_is_active": "amazon-ssm-agent active\nslurmd failed\nmunge active\n"}),
}


def _probe_json(tmp_path: pathlib.Path, items: dict[str, str]) -> pathlib.Path:
    doc = {
        "schema_version": 1,
        "hostname": "ip-10-1-2-3",
        "collected_at": NOW,
        "uptime_s": 86400.0,
        "items": {
            k: {"command": k, "exit_code": 0, "stdout": v, "stderr": "", "truncated": False} for k, v in items.items()
        },
    }
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("section", sorted(SCENARIOS))
def test_each_fault_is_reported_in_its_section(section, tmp_path, capsys):
    instance_type, orchestrator, items = SCENARIOS[section]
    argv = [
        "analyze",
        "--probe-output",
        str(_probe_json(tmp_path, items)),
        "--instance-type",
        instance_type,
        "--json",
        "--now",
        NOW,
    ]
    if orchestrator:
        argv += ["--orchestrator", orchestrator]
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, SCHEMA)
    sections = {f["section"] for f in report["findings"] if f["tag"] in ("FAIL", "WARN")}
    assert section in sections, report["findings"]
    assert code == report["exit_code"]


def test_raw_dir_with_missing_tools_skips_instead_of_failing(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "df.txt").write_text(
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/nvme0n1p1 104857600 10485760 94371840 10% /\n"
    )
    (raw / "findmnt.txt").write_text(FINDMNT_ROOT)
    code = main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.p5.48xlarge", "--json", "--now", NOW])
    report = json.loads(capsys.readouterr().out)
    status = {c["check"]: c["status"] for c in report["coverage"]["checks"]}
    assert status["probe.root_volume"] == "ran" and status["probe.gpu_count"] == "skipped"
    assert not any(f["tag"] == "FAIL" for f in report["findings"]) and code == 0


def test_node_commands_are_filled_in_when_the_node_is_named(tmp_path, capsys):
    path = _probe_json(tmp_path, {"nvidia_smi_query_gpu": gpu_rows(7)})
    main(
        [
            "analyze",
            "--probe-output",
            str(path),
            "--instance-type",
            "ml.p5.48xlarge",
            "--json",
            "--now",
            NOW,
            "--instance-id",
            "i-0123456789abcdef0",
            "--cluster",
            "ml-eks-prod",
            "--region",
            "us-west-2",
            "--orchestrator",
            "eks",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    [count] = [f for f in report["findings"] if f["check"] == "probe.gpu_count"]
    commands = [c["command"] for c in count["suggested_commands"]]
    assert any("batch-reboot-cluster-nodes" in c and "i-0123456789abcdef0" in c for c in commands)
    assert any(c.startswith("kubectl cordon hyperpod-i-0123456789abcdef0") for c in commands)


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not valid JSON"), ('{"schema_version": 7, "items": {}}', "schema_version"), ("[]", "JSON object")],
)
def test_bad_documents_get_a_clear_message_and_exit_2(content, message, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["analyze", "--probe-output", str(path), "--instance-type", "ml.p5.48xlarge"]) == 2
    assert message in capsys.readouterr().err


def test_probe_script_command_prints_the_packaged_script(capsys):
    assert main(["probe-script"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/usr/bin/env bash") and "nvidia_smi_query_gpu" in out


# --------------------------------------------------------------------------- no PASS without having read


def test_an_unknown_instance_type_is_refused_with_the_known_ones(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "kernel_log.txt").write_text("[  416.096724] NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.\n")
    assert main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.foo.bar"]) == 2
    err = capsys.readouterr().err
    assert "unknown instance type 'ml.foo.bar'" in err and "ml.p5.48xlarge" in err and "ml.trn1.32xlarge" in err


@pytest.mark.parametrize("files", [{}, {"dmesg.log": "x\n", "nvidia-smi.txt": "x\n"}], ids=["empty", "misnamed"])
def test_a_raw_dir_with_nothing_readable_is_unknown_and_says_what_it_expected(files, tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name, text in files.items():
        (raw / name).write_text(text)
    code = main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.p5.48xlarge", "--json"])
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, SCHEMA)
    assert code == 1 and report["exit_code"] == 1
    assert not any(f["tag"] == "PASS" for f in report["findings"])
    [unread] = [f for f in report["findings"] if f["tag"] == "UNKNOWN"]
    assert "Nothing could be judged" in unread["message"] and "kernel_log" in " ".join(unread["evidence"])
    for name in files:
        assert name in unread["message"]


def test_a_pasted_dmesg_without_uptime_is_judged_as_of_its_newest_line(tmp_path, capsys):
    # GIVEN a dmesg -T capture from months ago, no --now, no uptime file
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "kernel_log.txt").write_text(
        "[Tue Mar  5 10:11:12 2024] NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
        "[Tue Mar  5 10:11:13 2024] NVRM: GPU 0000:53:00.0: GPU has fallen off the bus.\n"
    )
    code = main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.p5.48xlarge", "--json"])
    report = json.loads(capsys.readouterr().out)
    # THEN the Xid is judged inside the window that ends at the log's newest line, and the report says so
    [xid] = [f for f in report["findings"] if f["check"] == "probe.xid" and f["tag"] != "INFO"]
    assert (xid["tag"], xid["node_action"]) == ("FAIL", "reboot") and code == 1
    assert any("Judged as of 2024-03-05T10:11:13Z" in f["message"] for f in report["findings"])


# --------------------------------------------------------------------------- inputs that are not text

_GZIP = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x1b[2J\x1b]0;owned\x07" + bytes(range(256))
_ELF = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + b"\x1b[31mred\x1b[0m\x07" + bytes(range(256))


def _no_control_bytes(text: str) -> None:
    assert not any(ord(ch) < 32 and ch not in "\n" for ch in text), repr(text)


@pytest.mark.parametrize(("data", "said"), [(_GZIP, "gzip"), (_ELF, "ELF")], ids=["gzip", "elf"])
def test_a_binary_probe_output_is_refused_without_echoing_it(data, said, tmp_path, capsys):
    path = tmp_path / "probe.json"
    path.write_bytes(data)
    code = main(["analyze", "--probe-output", str(path), "--instance-type", "ml.p5.48xlarge"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "is not a text file" in captured.err and said in captured.err
    _no_control_bytes(captured.err)


def test_a_binary_file_in_a_raw_dir_is_refused_by_name_and_never_judged(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "df.txt").write_text("Filesystem 1024-blocks Used Available Capacity Mounted on\n")
    (raw / "kernel_log.txt").write_bytes(_ELF)
    code = main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.p5.48xlarge", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 2 == report["exit_code"] and report["error"]["kind"] == "invalid_argument"
    assert "kernel_log.txt is not a text file (an ELF executable)" in captured.err and report["findings"] == []
    _no_control_bytes(captured.err)


def test_a_file_name_with_escape_sequences_is_shown_escaped(tmp_path, capsys):
    path = tmp_path / "evil\x1b[2J\x07.json"
    path.write_bytes(_GZIP)
    assert main(["analyze", "--probe-output", str(path), "--instance-type", "ml.p5.48xlarge"]) == 2
    err = capsys.readouterr().err
    assert "evil\\x1b[2J\\x07.json" in err
    _no_control_bytes(err)


def test_a_folder_that_cannot_be_read_is_could_not_look(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "iterdir", denied)  # what a folder without read permission gives
    code = main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.p5.48xlarge"])
    err = capsys.readouterr().err
    assert code == 3 and f"cannot read {raw}: Permission denied" in err


def test_a_folder_given_as_probe_output_says_to_use_raw_dir(tmp_path, capsys):
    assert main(["analyze", "--probe-output", str(tmp_path), "--instance-type", "ml.p5.48xlarge"]) == 2
    assert "--raw-dir" in capsys.readouterr().err


def test_a_kernel_log_with_a_stray_escape_and_latin1_bytes_is_still_text(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "kernel_log.txt").write_bytes(
        b"[  416.096724] NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.\n"
        b"[  417.000000] usb 1-1: Manufacturer: Caf\xe9 \x1b[0m\n"
    )
    code = main(["analyze", "--raw-dir", str(raw), "--instance-type", "ml.p5.48xlarge", "--json", "--now", NOW])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["error"] is None
    assert any(f["check"] == "probe.xid" and f["tag"] == "FAIL" for f in report["findings"])
