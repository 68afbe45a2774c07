"""probe.sh, run for real on this machine (it is read-only) and against fake tools.

The fake tools are small Python scripts written under ``tmp_path`` and put first on PATH; they print
hostile bytes (quotes, backslashes, control characters, NUL, invalid UTF-8), flood 1 MiB, fail the
first command of a fallback chain, hang past their timeout (some ignoring SIGTERM), or leave a
process behind that keeps the output pipe open. The probe must still print one valid, contract-shaped
JSON document under 256 KiB, in under 60 s.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from hyperpod_debugger.probe.document import TRUNCATION_MARKER, loads

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "layers" / "hyperpod_debugger" / "probe" / "probe.sh"
CONTRACT = ROOT / "references" / "probe.md"
MAX_DOC_BYTES = 256 * 1024
#: size limits in probe.sh (bytes of JSON text) the tests below lean on
Q_CAP, KLOG_CAP, MEMINFO_CAP, ERR_CAP = 37888, 36864, 4096, 512
ITEM_KEYS = {"command", "exit_code", "stdout", "stderr", "truncated"}
#: the probe appends these after the caller's PATH
EXTRA_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/amazon/efa/bin:/opt/aws/neuron/bin"
#: item → the tool its command starts with
ITEM_TOOL = {
    "uptime": "cat",
    "nvidia_smi_query_gpu": "nvidia-smi",
    "nvidia_smi_q": "nvidia-smi",
    "nvidia_smi_remapped_rows": "nvidia-smi",
    "nvidia_smi_nvlink_status": "nvidia-smi",
    "dcgmi_health": "dcgmi",
    "kernel_log": "journalctl",
    "kernel_log_previous_boot": "journalctl",
    "neuron_ls": "neuron-ls",
    "fi_info_efa": "fi_info",
    "efa_devices": "ls",
    "efa_module": "cat",
    "df": "df",
    "df_inodes": "df",
    "findmnt": "findmnt",
    "free": "free",
    "meminfo": "cat",
    "chronyc_tracking": "chronyc",
    "timedatectl": "timedatectl",
    "systemctl_is_active": "systemctl",
    "lsblk": "lsblk",
    "software_versions": "uname",
}
FAKED_TOOLS = sorted(set(ITEM_TOOL.values()) - {"chronyc"} | {"dmesg"})

#: every kind of byte a tool may print
HOSTILE = (
    b'q"uote back\\slash tab\there ctl\x01\x02\x1b[31m del\x7f nul\x00 bad\xff\xfe lone\x80 overlong\xc0\xaf'
    b" surrogate\xed\xa0\x80 cut\xe2\x82 e\xc3\xa9 cjk\xe4\xb8\xad emoji\xf0\x9f\x98\x80 max\xf4\x8f\xbf\xbf"
    b" cr\r ff\x0c bs\x08 end\n"
)


def contract_items() -> list[tuple[str, list[str]]]:
    """(item id, the backticked fragments of its command cell) in table order."""
    rows = []
    for line in CONTRACT.read_text().splitlines():
        m = re.match(r"^\| `([a-z0-9_]+)` \| (.*?) \| [^|]*\|$", line)
        if m:
            rows.append((m.group(1), re.findall(r"`([^`]+)`", m.group(2))))
    return rows


def expected_text(raw: bytes) -> str:
    """What the document must hold for raw tool output: each maximal invalid UTF-8 sequence becomes U+FFFD."""
    return raw.decode("utf-8", errors="replace")


def encoded_len(text: str) -> int:
    """Bytes of text inside the probe's JSON string (its escaping: json.dumps's, plus DEL as \\u007f)."""
    return len(json.dumps(text).replace("\x7f", "\\u007f")) - 2


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
    return dict(pairs)


def check_document(stdout: bytes) -> dict:
    """One valid JSON document with the contract's shape; returns it."""
    assert len(stdout) < MAX_DOC_BYTES, len(stdout)
    assert stdout.isascii(), "the document is pure ASCII (non-ASCII is escaped)"
    text = stdout.decode()
    assert text.endswith("}\n")
    doc = json.loads(text, object_pairs_hook=_no_duplicates)  # one document, nothing after it
    assert list(doc) == ["schema_version", "hostname", "collected_at", "uptime_s", "items"]
    assert doc["schema_version"] == 1
    assert isinstance(doc["hostname"], str) and doc["hostname"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["collected_at"])
    assert doc["uptime_s"] is None or isinstance(doc["uptime_s"], int | float)
    assert list(doc["items"]) == [item for item, _ in contract_items()]
    for item_id, item in doc["items"].items():
        assert set(item) == ITEM_KEYS, item_id
        assert isinstance(item["command"], str) and item["command"], item_id
        assert isinstance(item["exit_code"], int) and not isinstance(item["exit_code"], bool), item_id
        assert isinstance(item["stdout"], str) and isinstance(item["stderr"], str), item_id
        assert isinstance(item["truncated"], bool), item_id
        # the static size budget allows 1 KiB per item for the command and the keys
        assert len(json.dumps(item["command"])) + len(item_id) + 120 < 1024, item_id
        if item["truncated"]:
            assert TRUNCATION_MARKER in item["stdout"] + item["stderr"], item_id
        else:
            assert TRUNCATION_MARKER not in item["stdout"] + item["stderr"], item_id
    loads(text)  # and the package reads it
    return doc


def check_commands(doc: dict) -> None:
    """Each item's command is (starts with) one the contract names for it."""
    for item_id, fragments in contract_items():
        command = doc["items"][item_id]["command"]
        fields = next((f for f in fragments if f.startswith("index,")), "")
        candidates = [f.replace("<fields>", fields) for f in fragments]
        candidates += [c.replace("clocks_event_reasons", "clocks_throttle_reasons") for c in candidates]
        tools = (ITEM_TOOL[item_id], "dmesg")
        assert any(command.startswith(c) for c in candidates if c.split()[0] in tools), (item_id, command)
        if item_id == "nvidia_smi_query_gpu":
            assert command in candidates + [f"nvidia-smi --query-gpu={f} --format=csv" for f in fragments[3:]]
        if item_id == "systemctl_is_active":
            units = [f for f in fragments if f not in ("<unit> <state>", "systemctl is-active")]
            assert command.split()[2:] == units


def run_probe(env: dict[str, str] | None = None, *, cwd: pathlib.Path, args: list[str] | None = None, stdin=None):
    started = time.monotonic()
    proc = subprocess.run(
        args or ["bash", str(SCRIPT)],
        cwd=cwd,
        env=env,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=90,
    )
    return proc, time.monotonic() - started


def augmented_path(path: str) -> str:
    return f"{path}:{EXTRA_PATH}"


# ----------------------------------------------------------------------------------------- this machine


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("probe_cwd")
    proc, wall = run_probe(cwd=cwd)
    return proc, wall, cwd


def test_real_run_prints_one_contract_document(real_run):
    proc, _, _ = real_run
    assert proc.returncode == 0, proc.stderr
    doc = check_document(proc.stdout)
    check_commands(doc)
    uptime = float(pathlib.Path("/proc/uptime").read_text().split()[0])
    assert doc["uptime_s"] is not None and 0 < doc["uptime_s"] <= uptime
    assert doc["items"]["uptime"]["exit_code"] == 0
    assert doc["items"]["meminfo"]["stdout"].startswith("MemTotal:")


def test_real_run_reports_missing_tools_with_127(real_run):
    proc, _, _ = real_run
    doc = json.loads(proc.stdout)
    path = augmented_path(os.environ["PATH"])
    missing = [item for item, tool in ITEM_TOOL.items() if shutil.which(tool, path=path) is None]
    for item_id in missing:
        if item_id.startswith("kernel_log") and shutil.which("dmesg", path=path):
            continue  # journalctl missing → dmesg
        item = doc["items"][item_id]
        assert item["exit_code"] == 127, item_id
        assert item["stderr"] == f"{ITEM_TOOL[item_id]}: command not found", item_id
        assert item["stdout"] == ""
    present = [item for item in ITEM_TOOL if item not in missing]
    assert all(doc["items"][item]["exit_code"] != 127 for item in present)


def test_real_run_writes_nothing(real_run):
    _, _, cwd = real_run
    assert list(cwd.iterdir()) == []


def test_script_read_from_stdin_runs_every_item(tmp_path):
    # `sudo bash -s < probe.sh` or SSM piping: no probed command may eat the rest of the script
    with SCRIPT.open("rb") as script:
        proc, _ = run_probe(cwd=tmp_path, args=["bash", "-s"], stdin=script)
    assert proc.returncode == 0, proc.stderr
    check_document(proc.stdout)


def test_bash_started_as_sh_still_works(tmp_path):
    # Amazon Linux: /bin/sh is bash, which then runs in POSIX mode
    (tmp_path / "sh").symlink_to(shutil.which("bash"))
    proc, _ = run_probe(cwd=tmp_path, args=[str(tmp_path / "sh"), str(SCRIPT)])
    assert proc.returncode == 0, proc.stderr
    check_document(proc.stdout)


def test_plain_sh_is_refused_cleanly(tmp_path):
    sh = shutil.which("dash") or shutil.which("sh")
    if sh is None or pathlib.Path(sh).resolve().name == "bash":
        pytest.skip("no non-bash sh here")
    proc, _ = run_probe(cwd=tmp_path, args=[sh, str(SCRIPT)])
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"run it with bash" in proc.stderr


# ----------------------------------------------------------------------------------------- fake tools

FAKE = r"""#!{python} -S
import os, signal, subprocess, sys, time

tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
joined = " ".join(args)
scenario = os.environ["FAKE_SCENARIO"]
out, err = sys.stdout.buffer, sys.stderr.buffer
HOSTILE = {hostile!r}


def flood(stream, size=1 << 20):
    n, written = 0, 0
    while written < size:
        n += 1
        chunk = b"%s line %d " % (tool.encode(), n) + HOSTILE
        stream.write(chunk)
        written += len(chunk)
    stream.flush()


def hang(ignore_term):
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(120)
    sys.exit(0)


if scenario == "exact":
    with open(os.environ["FAKE_STDOUT_FILE"], "rb") as f:
        out.write(f.read())
    err.write(bytes.fromhex(os.environ.get("FAKE_STDERR_HEX", "")))
    sys.exit(int(os.environ.get("FAKE_RC", "0")))
if scenario == "flood":
    flood(out)
    flood(err)
    sys.exit(0)
if scenario == "stuck":
    # hangs, ignores SIGTERM, and leaves a process in its own session holding stdout and stderr open
    child = subprocess.Popen(["sleep", "90"], start_new_session=True)
    with open(os.environ["FAKE_PIDFILE"], "a") as pids:
        pids.write("%d\n" % child.pid)
    hang(True)

# scenario == "hostile"
if tool == "cat":
    if args == ["/proc/uptime"]:
        out.write(b"12345.67 98765.43\n")
    elif args == ["/proc/meminfo"]:
        flood(out)
    else:
        out.write(HOSTILE)
elif tool == "nvidia-smi":
    if "clocks_event_reasons" in joined:
        err.write(b'Field "clocks_event_reasons.active" is not a valid field to query.\n\n')
        sys.exit(2)
    if "--query-gpu" in joined:
        out.write(HOSTILE)
    elif args == ["-q"]:
        flood(out)
    elif "--query-remapped-rows" in joined:
        flood(err)
        sys.exit(3)
    elif args[:1] == ["nvlink"]:
        hang(True)  # ignores SIGTERM: needs the KILL after the grace period
elif tool == "dcgmi":
    # leaves a process behind that holds stdout and stderr open (as a child stuck in I/O would)
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with open(os.environ["FAKE_PIDFILE"], "a") as pids:
        pids.write("%d\n" % child.pid)
    out.write(b"dcgm partial\n")
elif tool == "journalctl":
    hang(False)
elif tool == "dmesg":
    if "--time-format=iso" in args:
        err.write(b"dmesg: unrecognized option '--time-format=iso'\n")
        sys.exit(1)
    for n in range(1, 5001):
        out.write(b"[%d.000000] benign line %d\n" % (n, n))
        if n == 4999:
            out.write(b"[4999.500000] NVRM: Xid (PCI:0000:53:00): 79, " + HOSTILE)
        out.write(b"[%d.000001] NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus. line %d\n" % (n, n))
elif tool == "neuron-ls":
    if "--json-output" in args:
        err.write(b"neuron-ls: error: unrecognized arguments: --json-output\n")
        sys.exit(2)
    out.write(b"+--------+--------+\n| NEURON | NEURON |\n")
elif tool == "fi_info":
    flood(out)
    flood(err)
elif tool == "ls":
    out.write(b"rdmap16s27\nrdmap32s27\n")
elif tool == "df":
    out.write(b"Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/root 100 50 50 50% /\n")
elif tool == "findmnt":
    out.write(b'{"filesystems": []}\n')
elif tool == "free":
    out.write(b"              total        used        free\nMem:     1000 500 500\n")
elif tool == "timedatectl":
    if args == ["show"]:
        err.write(b"Unknown operation show.\n")
        sys.exit(1)
    out.write(b"      NTP synchronized: yes\n")
elif tool == "systemctl":
    for unit in args[1:]:
        out.write(b"active\n" if unit in ("containerd", "kubelet") else b"inactive\n")
    sys.exit(3)
elif tool == "lsblk":
    out.write(HOSTILE)
"""


def awk_implementations() -> list[str]:
    found = [name for name in ("mawk", "gawk", "original-awk", "busybox") if shutil.which(name)]
    return found or ["awk"]


def make_fakes(tmp_path: pathlib.Path, awk: str | None = None) -> pathlib.Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    source = FAKE.replace("{python}", sys.executable).replace("{hostile!r}", repr(HOSTILE))
    for tool in FAKED_TOOLS:
        path = bin_dir / tool
        path.write_text(source)
        path.chmod(0o755)
    if awk and awk != "awk":
        target = shutil.which(awk)
        assert target is not None, f"{awk} is not installed"  # awk_implementations() offers installed ones only
        if awk == "busybox":
            (bin_dir / "awk").write_text(f'#!/bin/sh\nexec {target} awk "$@"\n')
            (bin_dir / "awk").chmod(0o755)
        else:
            (bin_dir / "awk").symlink_to(target)
    return bin_dir


def fake_env(bin_dir: pathlib.Path, scenario: str, tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERPOD_PROBE_")}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        FAKE_SCENARIO=scenario,
        FAKE_PIDFILE=str(tmp_path / "pids"),
        **extra,
    )
    return env


def kill_leftovers(tmp_path: pathlib.Path) -> None:
    pidfile = tmp_path / "pids"
    if pidfile.exists():
        for line in pidfile.read_text().split():
            try:
                os.kill(int(line), signal.SIGKILL)  # only the sleeps our own fake dcgmi started
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module", params=awk_implementations())
def hostile_run(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(f"hostile_{request.param}")
    bin_dir = make_fakes(tmp_path, request.param)
    env = fake_env(bin_dir, "hostile", tmp_path, HYPERPOD_PROBE_MAX_TIMEOUT_S="3")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    try:
        proc, wall = run_probe(env, cwd=cwd)
    finally:
        kill_leftovers(tmp_path)
    assert proc.returncode == 0, proc.stderr
    return check_document(proc.stdout), wall, cwd


def test_hostile_run_is_valid_and_quick(hostile_run):
    doc, _, cwd = hostile_run
    check_commands(doc)
    assert list(cwd.iterdir()) == []


def test_hostile_bytes_are_escaped_exactly(hostile_run):
    doc, _, _ = hostile_run
    items = doc["items"]
    expected = expected_text(HOSTILE)
    assert "\ufffd" in expected and "\U0001f600" in expected and "\x01" in expected and "\x00" in expected
    assert items["efa_module"]["stdout"] == expected
    assert items["lsblk"]["stdout"] == expected
    assert items["nvidia_smi_query_gpu"]["stdout"] == expected
    assert items["uptime"]["stdout"] == "12345.67 98765.43\n"


def test_fallback_chains_record_the_command_used(hostile_run):
    items = hostile_run[0]["items"]
    gpu = items["nvidia_smi_query_gpu"]
    assert "clocks_throttle_reasons.active" in gpu["command"] and "clocks_event_reasons" not in gpu["command"]
    assert gpu["exit_code"] == 0
    assert "asked again" in gpu["stderr"]
    assert items["neuron_ls"]["command"] == "neuron-ls"
    assert items["timedatectl"]["command"] == "timedatectl status"
    assert items["timedatectl"]["stdout"] == "      NTP synchronized: yes\n"
    # journalctl hung → dmesg --time-format=iso refused → plain dmesg
    klog = items["kernel_log"]
    assert klog["command"].startswith("dmesg | grep -aE '")
    assert klog["command"].endswith("' | tail -n 2000")
    assert klog["exit_code"] == 0
    assert "timeout" in klog["stderr"] and "plain dmesg" in klog["stderr"]


def test_systemctl_states_carry_their_unit(hostile_run):
    item = hostile_run[0]["items"]["systemctl_is_active"]
    assert item["exit_code"] == 3
    lines = item["stdout"].splitlines()
    assert lines[0] == "amazon-ssm-agent inactive"
    assert "containerd active" in lines and "kubelet active" in lines
    # every unit probe.sh asks about (the nine service units and nvidia-fabricmanager), one line each
    assert len(lines) == 10 and lines[-1].startswith("nvidia-fabricmanager ")


def test_big_outputs_are_cut_with_marker_and_flag(hostile_run):
    items = hostile_run[0]["items"]
    q = items["nvidia_smi_q"]
    assert q["truncated"] is True and q["exit_code"] == 0
    assert q["stdout"].startswith('nvidia-smi line 1 q"uote')
    assert q["stdout"].endswith("\n" + TRUNCATION_MARKER)
    assert Q_CAP - 200 < encoded_len(q["stdout"]) <= Q_CAP
    remap = items["nvidia_smi_remapped_rows"]
    assert remap["truncated"] is True and remap["exit_code"] == 3 and remap["stdout"] == ""
    assert remap["stderr"].endswith(TRUNCATION_MARKER) and ERR_CAP - 200 < encoded_len(remap["stderr"]) <= ERR_CAP
    meminfo = items["meminfo"]
    assert meminfo["truncated"] is True and encoded_len(meminfo["stdout"]) <= MEMINFO_CAP
    # the kept head is the real beginning, escaped the same way as untruncated output
    first = ("nvidia-smi line 1 " + expected_text(HOSTILE)).splitlines()[0]
    assert q["stdout"].splitlines()[0] == first


def test_kernel_log_keeps_the_last_lines(hostile_run):
    klog = hostile_run[0]["items"]["kernel_log"]
    assert klog["truncated"] is True
    lines = klog["stdout"].splitlines()
    assert lines[0] == TRUNCATION_MARKER
    assert lines[-1].endswith("GPU has fallen off the bus. line 5000")
    assert not any("benign" in line for line in lines)
    assert len(lines) - 1 <= 2000
    assert KLOG_CAP - 400 < encoded_len(klog["stdout"]) <= KLOG_CAP
    # whole lines only after the marker, consecutive up to the end
    numbers = [int(m.group(1)) for line in lines[1:] if (m := re.search(r"bus\. line (\d+)$", line))]
    assert numbers == list(range(numbers[0], 5001))
    hostile_line = "[4999.500000] NVRM: Xid (PCI:0000:53:00): 79, " + expected_text(HOSTILE).rstrip("\n")
    assert hostile_line in klog["stdout"].split("\n")


def test_per_command_timeouts(hostile_run):
    items = hostile_run[0]["items"]
    nvlink = items["nvidia_smi_nvlink_status"]  # ignores SIGTERM
    assert nvlink["exit_code"] == 124
    assert "stopped by the probe's 3 s timeout" in nvlink["stderr"]
    assert "Killed" not in nvlink["stderr"]  # bash's own report of the SIGKILL is left out
    previous = items["kernel_log_previous_boot"]  # journalctl already hung once: not started again
    assert previous["exit_code"] == 124
    assert "journalctl already timed out" in previous["stderr"]
    dcgmi = items["dcgmi_health"]  # a leftover process kept the pipe open
    assert dcgmi["exit_code"] == 124
    assert "did not close" in dcgmi["stderr"] and "stopped by" not in dcgmi["stderr"]


def test_missing_tool_among_fakes_is_127(hostile_run):
    item = hostile_run[0]["items"]["chronyc_tracking"]
    if shutil.which("chronyc", path=augmented_path(os.environ["PATH"])):
        pytest.skip("chronyc is installed here")
    assert item["exit_code"] == 127
    assert item["stderr"] == "chronyc: command not found"


def test_every_tool_flooding_stays_under_the_size_limit(tmp_path):
    bin_dir = make_fakes(tmp_path)
    proc, wall = run_probe(fake_env(bin_dir, "flood", tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = check_document(proc.stdout)
    assert len(proc.stdout) < MAX_DOC_BYTES
    for item_id, item in doc["items"].items():
        if item["exit_code"] == 127:
            continue
        assert item["truncated"] is True, item_id
        assert item["stderr"].endswith(TRUNCATION_MARKER), item_id
    assert doc["uptime_s"] is not None  # the document's own uptime comes from /proc, not from the fake cat


def test_every_tool_hanging_still_gives_a_complete_document(tmp_path):
    """Every probed command hangs, ignores SIGTERM and leaves a process that keeps its output pipes open
    (as one stuck in uninterruptible I/O would), under a short budget; that the default budget ends inside
    60 s is timed in bench/timing_bench.py."""
    bin_dir = make_fakes(tmp_path)
    env = fake_env(bin_dir, "stuck", tmp_path, HYPERPOD_PROBE_BUDGET_S="6", HYPERPOD_PROBE_MAX_TIMEOUT_S="2")
    try:
        proc, _ = run_probe(env, cwd=tmp_path)
    finally:
        kill_leftovers(tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = check_document(proc.stdout)
    items = doc["items"]
    codes = {item_id: item["exit_code"] for item_id, item in items.items()}
    assert set(codes.values()) <= {124, 127}, codes
    # the items that ran were stopped at their timeout, the later ones were not started once the budget was
    # spent; which item is the first of the second kind depends on the machine's speed, so neither is named
    stderr = [item["stderr"] for item in items.values()]
    assert any("already timed out" in text for text in stderr), stderr
    assert any("time budget was spent" in text for text in stderr), stderr
    assert "time budget was spent" in items["software_versions"]["stderr"]  # the last item always finds it spent


EFA_MODULE_CAP = 512


@pytest.mark.parametrize(
    ("raw", "rc"),
    [
        (b"", 0),
        (b"abc", 0),
        (b"\n\n", 0),
        (b"rc=5", 0),  # looks like the probe's own status line: still data
        (b"x\nrc=7\n", 5),
        (b"\x00\x00\n", 0),
        (b"\xe4\xb8", 0),  # a cut 3-byte sequence at the very end: one U+FFFD
    ],
)
@pytest.mark.parametrize("awk", awk_implementations())
def test_small_outputs_are_kept_exactly(tmp_path, raw, rc, awk):
    bin_dir = make_fakes(tmp_path, awk)
    (tmp_path / "out").write_bytes(raw)
    env = fake_env(
        bin_dir,
        "exact",
        tmp_path,
        FAKE_STDOUT_FILE=str(tmp_path / "out"),
        FAKE_STDERR_HEX=b"warn".hex(),
        FAKE_RC=str(rc),
    )
    proc, _ = run_probe(env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    item = check_document(proc.stdout)["items"]["efa_module"]
    assert item == {
        "command": "cat /sys/module/efa/version",
        "exit_code": rc,
        "stdout": expected_text(raw),
        "stderr": "warn\n",
        "truncated": False,
    }


@pytest.mark.parametrize("awk", awk_implementations())
def test_head_cut_keeps_whole_characters(tmp_path, awk):
    bin_dir = make_fakes(tmp_path, awk)
    raw = "\u00e9".encode() * 300  # 600 bytes, 1,800 bytes once escaped
    (tmp_path / "out").write_bytes(raw)
    env = fake_env(bin_dir, "exact", tmp_path, FAKE_STDOUT_FILE=str(tmp_path / "out"))
    proc, _ = run_probe(env, cwd=tmp_path)
    item = check_document(proc.stdout)["items"]["efa_module"]
    assert item["truncated"] is True
    kept, marker = item["stdout"].rsplit("\n", 1)
    assert marker == TRUNCATION_MARKER
    assert kept and set(kept) == {"\u00e9"}
    assert EFA_MODULE_CAP - 6 < encoded_len(item["stdout"]) <= EFA_MODULE_CAP


@pytest.mark.parametrize("awk", awk_implementations())
def test_tail_cut_of_one_huge_line_keeps_its_end(tmp_path, awk):
    bin_dir = make_fakes(tmp_path, awk)
    body = "\u4e2d".encode() * 350_000 + b" END"  # about 1 MiB, one line, 6 bytes per character escaped
    (tmp_path / "out").write_bytes(b"[1.0] NVRM: Xid " + body + b"\n")
    env = fake_env(bin_dir, "exact", tmp_path, FAKE_STDOUT_FILE=str(tmp_path / "out"))
    proc, _ = run_probe(env, cwd=tmp_path)
    item = check_document(proc.stdout)["items"]["kernel_log"]
    assert item["command"].startswith("journalctl -k -b 0 -o short-iso-precise --no-pager | grep -aE '")
    assert item["truncated"] is True and item["exit_code"] == 0
    first, rest = item["stdout"].split("\n", 1)
    assert first == TRUNCATION_MARKER
    assert rest.endswith("\u4e2d END\n") and set(rest[:-5]) == {"\u4e2d"}
    assert KLOG_CAP - 12 < encoded_len(item["stdout"]) <= KLOG_CAP


# ------------------------------------------------------------------------------- software_versions (§ E)

#: the absolute paths the software_versions item reads, moved under a folder of the test's own
_VERSION_PATHS = (
    "/proc/driver/nvidia/version",
    "/usr/local/cuda/",
    "/opt/amazon/",
    "/opt/aws-ofi-nccl/",
    "/usr/lib/x86_64-linux-gnu/libnccl",
    "/usr/lib64/libnccl",
    "/opt/nccl/",
    "/sys/module/neuron/version",
    "/opt/aws/neuron/lib/",
)


def _write(path: pathlib.Path, data: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def test_software_versions_reads_a_node_laid_out_like_a_hyperpod_ami(tmp_path):
    """The item's reads run for real over files laid out as on a GPU node (formats: probe/versions.py), the
    script's absolute paths pointed at them; the package's parser then reads every version back."""
    from hyperpod_debugger.probe.versions import parse

    root = tmp_path / "root"
    _write(
        root / "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Oct  8 03:22:07 UTC 2024\nGCC version:  gcc version 12.3.0\n",
    )
    _write(
        root / "usr/local/cuda/version.json",
        '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "12.4.1"\n   },\n'
        '   "cuda_cccl" : {\n      "name" : "CUDA C++ Core Compute Libraries",\n      "version" : "12.4.127"\n   }\n}\n',
    )
    _write(root / "usr/local/cuda/lib/libnccl.so.2.21.5", b"\x7fELF")
    _write(
        root / "opt/amazon/efa_installed_packages",
        "# EFA installer version: 1.38.0\n# Debug packages installed: no\n# Packages installed:\n"
        "ibacm_54.0-1 libfabric-aws-bin_1.22.0amzn5.0-1 libfabric1-aws_1.22.0amzn5.0-1\n",
    )
    _write(
        root / "opt/amazon/efa/bin/fi_info",
        "#!/bin/sh\necho 'fi_info: 1.22.0amzn5.0'\necho 'libfabric: 1.22.0amzn5.0'\necho 'libfabric api: 1.22'\n",
        0o755,
    )
    _write(
        root / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so",
        b"\x7fELF\x00\x01junk\x00NET/OFI Initializing aws-ofi-nccl 1.13.2-aws\x00%s\x00more\xff\xfe",
    )
    text = SCRIPT.read_text()
    for path in _VERSION_PATHS:
        text = text.replace(path, f"{root}{path}")
    script = tmp_path / "probe.sh"
    script.write_text(text)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc, _ = run_probe(env, cwd=tmp_path, args=["bash", str(script)])
    assert proc.returncode == 0, proc.stderr
    doc = loads(proc.stdout.decode())
    item = doc.items["software_versions"]
    assert item.exit_code == 0 and not item.truncated, item
    got = {c: r.version for c, r in parse(doc) if r.state == "read"}
    assert {
        k: got.get(k) for k in ("nvidia_driver", "cuda_toolkit", "efa_installer", "libfabric", "aws_ofi_nccl", "nccl")
    } == {
        "nvidia_driver": "550.127.05",
        "cuda_toolkit": "12.4.1",
        "efa_installer": "1.38.0",
        "libfabric": "1.22.0amzn5.0",
        "aws_ofi_nccl": "1.13.2-aws",
        "nccl": "2.21.5",
    }
    assert got.get("kernel")  # this machine's own uname -r
    assert parse(doc).get("neuron_driver").state == "absent"
