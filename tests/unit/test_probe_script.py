"""probe.sh, read as text (nothing is executed): read-only by construction, every probed command under
``timeout``, the same items as references/probe.md, and a size budget that keeps the document under
256 KiB. The checker is tested too: small bad scripts must fail it, small good ones must pass.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "layers" / "hyperpod_debugger" / "probe" / "probe.sh"
CONTRACT = ROOT / "references" / "probe.md"

#: tools whose every invocation must be ``timeout -k <s> <s> TOOL`` (probed tools and pipeline helpers)
TIMED_TOOLS = (
    "cat nvidia-smi dcgmi journalctl dmesg neuron-ls fi_info ls df findmnt free chronyc timedatectl systemctl lsblk"
    " grep tail tr awk sed sort head sleep uname"
).split()

#: the argument lists allowed after each probed tool (full match; ``\S+`` is a variable's value)
ALLOWED_ARGS = {
    "cat": [r"\S+"],
    "nvidia-smi": [
        r"-q",
        r"--query-gpu=\S+ --format=csv",
        r"--query-remapped-rows=\S+ --format=csv",
        "nvlink --status",
    ],
    "dcgmi": [r"health -g 0 --check"],
    "journalctl": [r"-k -b \S+ -o \S+ --no-pager"],
    "dmesg": [r"", r"--time-format=iso"],
    "neuron-ls": [r"", r"--json-output"],
    "fi_info": [r"-p efa -t FI_EP_RDM", r"--version"],
    "ls": [r"-1 \S+"],
    "df": [r"-P -k", r"-P -i"],
    "findmnt": [r"-J -o TARGET,SOURCE,FSTYPE,SIZE"],
    "free": [r"-b"],
    "chronyc": [r"tracking"],
    "timedatectl": [r"show", r"status"],
    "systemctl": [r"is-active \S+"],
    "lsblk": [r"-J -b -o NAME,TYPE,SIZE,MODEL,MOUNTPOINT"],
    "grep": [r"-aE \S+", r"-aoE -m1 \S+ \S+"],
    "head": [r"-n \d+ \S+"],
    "uname": [r"-r"],
    "tail": [r"-n \S+"],
    "awk": [r".*"],  # the programs are checked separately (no system(), no print redirection)
}


def _word(word: str) -> str:
    """``word`` as a whole shell word (not inside another name, path or option)."""
    return rf"(?<![\w./$=-]){re.escape(word)}(?![\w./-])"


#: mutating or otherwise forbidden commands, searched in the code and in every quoted string
DENY = [
    *(
        (_word(w), f"forbidden command {w!r}")
        for w in (
            "rm mv cp dd ln tee mktemp truncate chmod chown chgrp reboot shutdown poweroff halt kill pkill killall"
            " modprobe insmod rmmod mount umount swapon swapoff kubectl apt apt-get yum dnf rpm dpkg pip pip3 zypper"
            " eval source curl wget nohup setsid nsenter docker python python3 perl ruby"
        ).split()
    ),
    (r"(?<![\w./-])mkfs", "forbidden command mkfs"),
    (r"(?<![\w./-])(ba|da)?sh[ \t]+-c\b", "a shell running a string"),
    (r"(?<![\w./-])snap[ \t]+(install|remove|refresh)", "package manager (snap)"),
    (r"(?<![\w./$=-])systemctl[ \t]+(?!is-active\b)(?:--?\S+[ \t]+)*\S", "systemctl other than is-active"),
    (r"(?<![\w./-])sysctl[ \t]+(?:\S+[ \t]+)*?(-w|--write|-p|--load|--system)\b", "sysctl write"),
    (r"\bscontrol[ \t]+update\b", "scontrol update"),
    (r"\bcrictl[ \t]+(rm|rmi|rmp|stop|stopp|kill)\b", "crictl mutation"),
    (r"\bdcgmi[ \t]+diag\b", "dcgmi diag"),
    (r"\bdcgmi[ \t]+health[ \t]+(?:\S+[ \t]+)*?(-s|--set|-c|--clear)\b", "dcgmi health watch change"),
    (r"\bdcgmi[ \t]+(config|policy|modules|profile)\b", "dcgmi setting"),
    (
        r"\bnvidia-smi\b[^\n|;&]*\s(-r|--gpu-reset|-pm|--persistence-mode|-e|--ecc-config|-c|--compute-mode|-ac"
        r"|--applications-clocks|-rac|-pl|--power-limit|-lgc|-rgc|-lmc|-rmc|-mig|--multi-instance-gpu|-am|-caa"
        r"|-cc|--auto-boost)(?=[\s=]|$)",
        "nvidia-smi setting or reset",
    ),
    (
        r"\bdmesg\b[^\n|;&]*\s(-c|-C|--clear|--read-clear|-n|--console-level|-D|-E|--console-off|--console-on)\b",
        "dmesg clearing or console change",
    ),
    (
        r"\bjournalctl\b[^\n|;&]*\s--(vacuum-\w+|rotate|flush|sync|relinquish-var|setup-keys|update-catalog)\b",
        "journalctl maintenance",
    ),
    (r"(?<![\w./$=-])chronyc[ \t]+(?!tracking\b)\S", "chronyc other than tracking"),
    (r"\btimedatectl[ \t]+(set-\S+)", "timedatectl set-*"),
]


def _skip_quoted(text: str, i: int) -> tuple[int, str]:
    """From an opening quote at ``i``: the index after the closing one, and the contents."""
    if text.startswith("$'", i):
        j = i + 2
        while j < len(text) and text[j] != "'":
            j += 2 if text[j] == "\\" else 1
        return j + 1, text[i + 2 : j]
    if text[i] == "'":
        j = text.index("'", i + 1)
        return j + 1, text[i + 1 : j]
    # double quotes: backslash escapes, and $( … ) may nest
    j, depth = i + 1, 0
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if text.startswith("$(", j):
            depth += 1
            j += 2
            continue
        if depth and c == ")":
            depth -= 1
        elif depth and c == "'":
            j = text.index("'", j + 1)
        elif not depth and c == '"':
            return j + 1, text[i + 1 : j]
        j += 1
    raise ValueError(f"unterminated double quote at offset {i}")


def shell_views(text: str) -> tuple[str, str, list[str]]:
    """Views of a bash script without its comments: ``code`` has every quoted string replaced by ``""``
    (newlines kept, so its lines are the script's), ``words`` keeps the quoted contents without the quotes
    (same lines), ``quoted`` lists the quoted contents (awk programs among them)."""
    code: list[str] = []
    words: list[str] = []
    quoted: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        at_word_start = i == 0 or text[i - 1] in " \t\n;&|()"
        if c == "#" and at_word_start:
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        if c == "\\" and i + 1 < len(text):
            code.append(text[i : i + 2])
            words.append(text[i : i + 2])
            i += 2
            continue
        if c in "'\"" or text.startswith("$'", i):
            end, inner = _skip_quoted(text, i)
            code.append('""' + "\n" * inner.count("\n"))
            words.append(inner)
            quoted.append(inner)
            i = end
            continue
        code.append(c)
        words.append(c)
        i += 1
    return "".join(code), "".join(words), quoted


_ALLOWED_REDIRECT = re.compile(r"(?:\d*|&)>\s*/dev/null(?![\w/.-])|\d*>&(?:\d+|-)(?![\w])")


def check_script(text: str) -> list[str]:
    """Every problem found in a bash script's text; empty when it is read-only and fully timed."""
    problems: list[str] = []
    try:
        code, words, quoted = shell_views(text)
    except ValueError as exc:
        return [str(exc)]
    code = code.replace("\\\n", " ")
    words = words.replace("\\\n", " ")

    def line_of(view: str, pos: int) -> int:
        return view.count("\n", 0, pos) + 1

    for pattern, why in DENY:
        for m in re.finditer(pattern, words):
            problems.append(f"line ~{line_of(words, m.start())}: {why}: {m.group(0)!r}")

    # writes: only to /dev/null or fd duplications; no here-documents/strings (bash may back them with
    # temp files), no read-write opens, no process substitution, no backticks to hide commands in
    for m in re.finditer(r"(?:\d*|&)>", code):
        if not _ALLOWED_REDIRECT.match(code, m.start()):
            problems.append(f"line {line_of(code, m.start())}: file redirection {code[m.start() : m.start() + 20]!r}")
    for token, why in (
        ("<<", "here-document/here-string"),
        ("<>", "read-write open"),
        ("<(", "process substitution"),
        (">(", "process substitution"),
        ("`", "backticks"),
    ):
        for m in re.finditer(re.escape(token), code):
            problems.append(f"line {line_of(code, m.start())}: {why}")

    # every probed tool (and pipeline helper) under `timeout -k <grace> <limit>` ...
    for tool in TIMED_TOOLS:
        for m in re.finditer(_word(tool), code):
            before = code[: m.start()].rsplit("\n", 1)[-1]
            if not re.search(r"(?:^|[\s|;&({])timeout\s+-k\s+\S+\s+\S+\s+$", before):
                problems.append(f"line {line_of(code, m.start())}: {tool} not run under `timeout -k`")
    timed_lines = set()
    for m in re.finditer(_word("timeout"), code):
        timed_lines.add(line_of(code, m.start()))
        if not re.match(r"\s+-k\s+\S+\s+\S+\s", code[m.end() :]):
            problems.append(f"line {line_of(code, m.start())}: timeout without -k <grace> <limit>")
    # ... with arguments from the allow-list (read on the same line of the words view)
    word_lines = words.split("\n")
    for number in sorted(timed_lines):
        line = word_lines[number - 1]
        for m in re.finditer(r"(?<![\w-])timeout[ \t]+(?:-k[ \t]+\S+[ \t]+\S+[ \t]+)?([\w.-]+)([^\n|;&)}]*)", line):
            tool = m.group(1)
            args = " ".join(a for a in m.group(2).split() if not re.match(r"^(\d*|&)>", a))
            if tool == "--foreground":
                problems.append(f"line {number}: timeout --foreground would not stop the command's children")
            elif tool not in ALLOWED_ARGS:
                problems.append(f"line {number}: unexpected command under timeout: {tool!r}")
            elif not any(re.fullmatch(a, args) for a in ALLOWED_ARGS[tool]):
                problems.append(f"line {number}: {tool} with arguments not allowed: {args!r}")

    # awk programs and other quoted text: no system(), getline or close(), no print into a file or pipe
    for inner in quoted:
        for m in re.finditer(r"\bsystem\s*\(|\bgetline\b|\bclose\s*\(", inner):
            problems.append(f"quoted text: awk {m.group(0)!r}")
        for m in re.finditer(r"\bprintf?\b[^;{}\n]*?[>|]", inner):
            problems.append(f"quoted text: print redirected: {m.group(0)!r}")
    return problems


def contract_ids() -> list[str]:
    return re.findall(r"^\| `([a-z0-9_]+)` \|", CONTRACT.read_text(), flags=re.M)


# ------------------------------------------------------------------------------------------ the script


def test_script_is_read_only_and_fully_timed():
    assert check_script(SCRIPT.read_text()) == []


def test_script_header_says_what_it_is():
    head = SCRIPT.read_text().split("\n\n", 1)[0]
    assert head.startswith("#!/usr/bin/env bash\n")
    for phrase in ("READ-ONLY", "sudo bash probe.sh > probe.json", "shipped by the hyperpod-debugger package"):
        assert phrase in head


def test_items_match_the_contract_in_order():
    text = SCRIPT.read_text()
    ids = contract_ids()
    assert len(ids) == 22 and len(set(ids)) == len(ids)
    assert re.findall(r"^\s*_emit '([a-z0-9_]+)' ", text, flags=re.M) == ids
    listed = re.search(r"^ITEM_IDS='([^']*)'", text, flags=re.M)
    assert listed is not None and listed.group(1).split() == ids


def test_every_run_has_a_timeout_and_caps_within_the_document_budget():
    """Σ stdout caps + Σ stderr caps + per item 1 KiB for command and keys + 512 B of notes < 256 KiB."""
    text = SCRIPT.read_text()
    body = text[text.index("_items() {") : text.index("_items_not_run() {")]
    caps: dict[str, tuple[int, int]] = {}
    pending: list[tuple[int, int, int]] = []
    for line in body.splitlines():
        if m := re.match(r"\s*_run (\d+) (first|last) (\d+) (\d+) _([\w.-]+)__\w+", line):
            seconds, out_cap, err_cap = int(m.group(1)), int(m.group(3)), int(m.group(4))
            assert 1 <= seconds <= 10
            pending.append((seconds, out_cap, err_cap))
        elif m := re.match(r"\s*_emit '([a-z0-9_]+)' ", line):
            assert pending, f"{m.group(1)} emitted without a _run"
            caps[m.group(1)] = (max(p[1] for p in pending), max(p[2] for p in pending))
            pending = []
    assert sorted(caps) == sorted(contract_ids())
    total = sum(o + e for o, e in caps.values()) + len(caps) * (1024 + 512) + 512
    assert total < 256 * 1024, total
    # kernel logs keep their last lines, everything else the first
    runs = re.findall(r"_run \d+ (first|last) \d+ \d+ _([\w.-]+)__", body)
    assert {tool for mode, tool in runs if mode == "last"} == {"journalctl", "dmesg"}
    assert {mode for mode, tool in runs if tool in ("journalctl", "dmesg")} == {"last"}


def test_overall_deadline_leaves_room_under_60_seconds():
    text = SCRIPT.read_text()
    budget = int(re.search(r"^BUDGET=(\d+)", text, flags=re.M).group(1))
    max_timeout = int(re.search(r"^MAXT=(\d+)", text, flags=re.M).group(1))
    grace = {int(g) for g in re.findall(r"timeout -k (\d+) \"\$_T\"", text)}
    helper = re.search(r"_H=\$\(\(t \+ (\d+)\)\)", text)
    assert helper is not None and grace == {2}
    # the last command starts before the budget with at most 1 s left (it gets no more than what is
    # left): its helpers stop by then + _H margin + their own 1 s kill grace
    assert budget + int(helper.group(1)) + 1 + 1 < 60
    assert max_timeout <= 10


def test_no_colour_and_fixed_locale():
    text = SCRIPT.read_text()
    for setting in ("LC_ALL=C", "TERM=dumb", "PAGER=cat", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=cat"):
        assert setting in text
    assert "</dev/null" in text  # stdin of every command


# ------------------------------------------------------------------------------------------ the checker

GOOD = [
    'echo "a > b" 2>/dev/null',
    "# rm -rf / in a comment, tee, mktemp, > /etc/passwd",
    "x=$(timeout -k 2 5 nvidia-smi -q 2>&1)",
    '{ timeout -k 2 "$_T" dmesg; } 3>&1 4>&- 1>&2',
    "printf '%s' \"$x\" 1>&4",
    'timeout -k 2 5 journalctl -k -b 0 -o short-iso-precise --no-pager | timeout -k 1 8 grep -aE "$P"',
    "echo 'oom-kill and snap.amazon-ssm-agent are words, not commands'",
    "n=${#1}; if ((a < b)); then :; fi",
    'timeout -k 2 5 systemctl is-active "${UNITS[@]}" &>/dev/null',
]

BAD = [
    "echo hi > /tmp/x",
    "echo hi >> /var/log/x",
    "echo hi >/tmp/x",
    "printf x >| f",
    "echo 1 > /proc/sys/vm/drop_caches",
    'echo 1 > "$f"',
    "exec 3> /tmp/f",
    "cat <<EOF\nx\nEOF",
    'read -r x <<< "$y"',
    "exec 3<> /dev/tcp/1.2.3.4/80",
    "diff <(a) >(b)",
    "x=`id`",
    "timeout -k 2 5 nvidia-smi -q | tee /tmp/x",
    "f=$(mktemp)",
    "rm -rf /tmp/x",
    "mv a b",
    "cp a b",
    "dd if=/dev/zero of=/dev/nvme0n1",
    "truncate -s 0 /var/log/messages",
    "chmod 777 /etc/shadow",
    "chown root /x",
    "ln -s a b",
    "mkfs.ext4 /dev/nvme1n1",
    "reboot",
    "shutdown -h now",
    "scontrol update nodename=x state=drain",
    "kubectl drain node",
    "crictl rm abc",
    "modprobe -r efa",
    "systemctl restart kubelet",
    "timeout -k 2 5 systemctl stop slurmd",
    "timeout -k 2 5 nvidia-smi -r",
    "timeout -k 2 5 nvidia-smi --gpu-reset -i 0",
    "timeout -k 2 5 nvidia-smi -pm 1",
    "timeout -k 2 5 nvidia-smi -e 0",
    "timeout -k 2 5 nvidia-smi -c 3",
    "timeout -k 2 5 nvidia-smi -ac 1215,1410",
    "timeout -k 2 5 dcgmi diag -r 1",
    "timeout -k 2 5 dcgmi health -s a",
    "timeout -k 2 5 dcgmi health -g 0 -s mpi",
    "sysctl -w kernel.panic=1",
    "mount -o remount,rw /",
    "umount /mnt",
    "apt-get install -y x",
    "yum install x",
    "kill -9 1",
    "pkill -f x",
    "nvidia-smi -q",
    "journalctl -k",
    "x=$(dmesg)",
    "timeout 5 dmesg",
    "timeout -k 2 5 dmesg --clear",
    "timeout -k 2 5 dmesg -C",
    "timeout -k 2 5 chronyc makestep",
    "timeout -k 2 5 timedatectl set-ntp false",
    "timeout -k 2 5 journalctl --vacuum-size=1M",
    "timeout --foreground -k 2 5 df -P -k",
    "timeout -k 2 5 bash -c 'echo'",
    "timeout -k 2 5 nvidia-smi -q | grep x",
    "timeout -k 1 8 awk 'BEGIN { system(\"reboot\") }'",
    "timeout -k 1 8 awk '{ print > \"/tmp/x\" }'",
    "timeout -k 1 8 awk '{ print | \"sh\" }'",
    "timeout -k 1 8 awk '{ while ((getline l < \"/etc/shadow\") > 0) print l }'",
    'eval "$cmd"',
    "echo 'unterminated",
]


@pytest.mark.parametrize("snippet", GOOD)
def test_checker_passes_good_snippets(snippet):
    assert check_script(snippet) == []


@pytest.mark.parametrize("snippet", BAD)
def test_checker_fails_bad_snippets(snippet):
    assert check_script(snippet) != []


def test_checker_sees_through_comments_and_quotes():
    code, words, quoted = shell_views("a='x > y' # c > d\nb=\"$(e 'f')\" g\n")
    assert code == 'a="" \nb="" g\n'
    assert words == "a=x > y \nb=$(e 'f') g\n"
    assert quoted == ["x > y", "$(e 'f')"]
