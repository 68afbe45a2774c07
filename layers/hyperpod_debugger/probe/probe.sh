#!/usr/bin/env bash
# hyperpod-debugger on-node probe (probe.sh), shipped by the hyperpod-debugger package and printed by
# `hyperpod-debugger probe-script`. The contract it follows is references/probe.md.
#
# What it does: runs a fixed list of read-only commands on ONE SageMaker HyperPod node (GPU or Trainium;
# Amazon Linux 2/2023, Ubuntu 20.04/22.04/24.04) and prints ONE JSON document on stdout:
#   {"schema_version": 1, "hostname": ..., "collected_at": "...Z", "uptime_s": ...,
#    "items": {"<item_id>": {"command", "exit_code", "stdout", "stderr", "truncated"}}}
# Feed that document to `hyperpod-debugger analyze --probe-output probe.json`.
#
# READ-ONLY BY CONSTRUCTION: it writes nothing but its stdout (no files, no temp files, no here-documents),
# changes no setting, starts or stops no service, loads no module, resets nothing, installs nothing and
# signals no process it did not start. Every probed command runs under `timeout`, stdin from /dev/null.
#
# Run it by hand (root sees more, e.g. the kernel log; it also works unprivileged):
#   sudo bash probe.sh > probe.json
#
# Limits: each command has its own timeout; the whole probe stops starting commands after a 50 s budget
# (those items report exit_code 124 with a note) and so ends in under 60 s even if every command hangs.
# Each item's stdout/stderr is capped so the document stays under 256 KiB; a cut output ends (or, for the
# kernel-log items, which keep their last lines, starts) with the line "[hyperpod-debugger: output truncated]"
# and sets "truncated": true. Optional, lower-only knobs: HYPERPOD_PROBE_BUDGET_S (1-50) and
# HYPERPOD_PROBE_MAX_TIMEOUT_S (1-10, caps every command's timeout).
#
# Exit codes in the document: the command's own status; 124 = stopped by the probe's timeout (or not run
# because a budget was spent); 126/127 = tool not installed. The script itself exits 0 whenever it printed
# the document.

# shellcheck disable=SC1003,SC2016,SC2317  # awk programs are single-quoted; command functions run via _run

if [ -z "${BASH_VERSION:-}" ]; then
  echo "probe.sh: run it with bash (sudo bash probe.sh > probe.json)" 1>&2
  exit 2
fi
set +o posix   # bash started as `sh` (Amazon Linux) runs in POSIX mode, which refuses this script's function names

export LC_ALL=C LANG=C TERM=dumb PAGER=cat SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 NO_COLOR=1
unset GREP_OPTIONS GREP_COLOR GREP_COLORS 2>/dev/null
IFS=$' \t\n'
# Tools live in places a bare SSM or sudo PATH may lack (EFA, Neuron); searched after the caller's PATH.
PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PATH="$PATH:/opt/amazon/efa/bin:/opt/aws/neuron/bin"
export PATH

MARK='[hyperpod-debugger: output truncated]'
JOBMSG=': line [0-9]+: +[0-9]+ Killed +timeout -k '
BUDGET=50   # seconds after which no further command is started
MAXT=10     # no command waits longer than this
if [[ ${HYPERPOD_PROBE_BUDGET_S:-} =~ ^[1-9][0-9]*$ ]] && ((HYPERPOD_PROBE_BUDGET_S < BUDGET)); then
  BUDGET=$HYPERPOD_PROBE_BUDGET_S
fi
if [[ ${HYPERPOD_PROBE_MAX_TIMEOUT_S:-} =~ ^[1-9][0-9]*$ ]] && ((HYPERPOD_PROBE_MAX_TIMEOUT_S < MAXT)); then
  MAXT=$HYPERPOD_PROBE_MAX_TIMEOUT_S
fi

# Kernel-log lines kept: NVRM/Xid, panic, lockup, hung task, NMI, MCE/Hardware Error, BUG:, OOM, Neuron/NRT,
# EFA (the word efa, not its letters inside another word).
KPAT='NVRM|Xid|[Pp]anic|[Ll]ockup|LOCKUP|hung_task|blocked for more than|NMI|[Mm]achine [Cc]heck|mce:|MCE'
KPAT="$KPAT"'|Hardware Error|EDAC|BUG:|Oops|sysrq|[Oo]ut of memory|oom-kill|oom_reaper|Killed process'
KPAT="$KPAT"'|killed as a result of limit|[Nn]euron|NEURON|NRT|nrt_|EFA'
KPAT="$KPAT"'|(^|[^[:alnum:]_])efa([^[:alnum:]]|$)'

GPU_FIELDS='index,pci.bus_id,name,uuid,temperature.gpu,power.draw,clocks_event_reasons.active'
GPU_FIELDS="$GPU_FIELDS"',clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown'
GPU_FIELDS="$GPU_FIELDS"',clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown'
GPU_FIELDS="$GPU_FIELDS"',ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total'
GPU_FIELDS="$GPU_FIELDS"',ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total'
GPU_FIELDS="$GPU_FIELDS"',retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending'
GPU_FIELDS_OLD=${GPU_FIELDS//clocks_event_reasons/clocks_throttle_reasons}
GPU_FIELDS_MIN='index,pci.bus_id,name,uuid,temperature.gpu,ecc.errors.uncorrected.volatile.total'
GPU_FIELDS_MIN="$GPU_FIELDS_MIN"',ecc.errors.uncorrected.aggregate.total'
REMAP_FIELDS='gpu_bus_id,gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending'
REMAP_FIELDS="$REMAP_FIELDS"',remapped_rows.failure'
# software_versions: the aws-ofi-nccl version string its library carries (the plugin logs it at start)
OFIPAT='aws-ofi-nccl [0-9]+[.][0-9]+[.][0-9]+[-.a-z0-9]*'
UNITS=(amazon-ssm-agent snap.amazon-ssm-agent.amazon-ssm-agent containerd kubelet slurmd slurmctld munge
  nvidia-dcgm dcgm nvidia-fabricmanager)

# The encoder: reads one stream of bytes and prints one line
#   <tag>[<rc> ]<cut 0|1> "<JSON string>"
# The JSON string is pure ASCII: quotes, backslashes and control characters (NUL too) escaped, valid UTF-8 as
# \uXXXX (surrogate pairs above U+FFFF), every byte that is not valid UTF-8 as \ufffd. Its length stays within
# `cap` bytes including the truncation marker. mode=first keeps the beginning, mode=last the last whole lines.
# rcmode=1: the stream ends with "\nrc=<status>", appended by the probe after the command's own output.
# drop: lines matching it are left out (bash's own "Killed" report when timeout had to SIGKILL).
# Output goes to stdout only: no print redirection, no system(), no getline from files.
ENC='
BEGIN {
  FS = "\n"
  for (i = 1; i < 256; i++) ord[sprintf("%c", i)] = i
  for (i = 0; i < 32; i++) esc[i] = sprintf("\\u%04x", i)
  for (i = 32; i < 127; i++) esc[i] = sprintf("%c", i)
  esc[8] = "\\b"; esc[9] = "\\t"; esc[10] = "\\n"; esc[12] = "\\f"; esc[13] = "\\r"
  esc[34] = "\\\""; esc[92] = "\\\\"; esc[127] = "\\u007f"
  room = cap - length(mark) - 2
  if (room < 0) room = 0
  nl = 0; first = 1; raw = 0; cut = 0; have = 0; np = 0; used = 0; rcv = "x"
}
function enc(s, budget,    n, i, o, u, k, out, buf, got, need, lo, hi, b, b2, b3, ucs) {
  stopped = 0
  if (s !~ /[^ -~]|["\\]/) {
    if (length(s) <= budget) return s
    stopped = 1
    return substr(s, 1, budget)
  }
  n = length(s); out = ""; buf = ""; got = 0
  for (i = 1; i <= n; i++) {
    o = ord[substr(s, i, 1)] + 0
    k = 1
    if (o < 128) u = esc[o]
    else {
      u = "\\ufffd"; need = 0
      if (o >= 194 && o <= 223) { need = 1; lo = 128; hi = 191 }
      else if (o == 224) { need = 2; lo = 160; hi = 191 }
      else if ((o >= 225 && o <= 236) || o == 238 || o == 239) { need = 2; lo = 128; hi = 191 }
      else if (o == 237) { need = 2; lo = 128; hi = 159 }
      else if (o == 240) { need = 3; lo = 144; hi = 191 }
      else if (o >= 241 && o <= 243) { need = 3; lo = 128; hi = 191 }
      else if (o == 244) { need = 3; lo = 128; hi = 143 }
      # a valid sequence becomes \uXXXX; an invalid one becomes one \ufffd per maximal invalid part (as
      # Python errors="replace" does): a lead byte plus the continuation bytes that were still valid
      if (need > 0) {
        b = ord[substr(s, i + 1, 1)]
        if (b >= lo && b <= hi) {
          k = 2
          if (need == 1) ucs = (o - 192) * 64 + (b - 128)
          else {
            b2 = ord[substr(s, i + 2, 1)]
            if (b2 >= 128 && b2 <= 191) {
              k = 3
              if (need == 2) ucs = (o - 224) * 4096 + (b - 128) * 64 + (b2 - 128)
              else {
                b3 = ord[substr(s, i + 3, 1)]
                if (b3 >= 128 && b3 <= 191) {
                  k = 4; ucs = (o - 240) * 262144 + (b - 128) * 4096 + (b2 - 128) * 64 + (b3 - 128)
                }
              }
            }
          }
          if (k == need + 1) {
            if (ucs < 65536) u = sprintf("\\u%04x", ucs)
            else { ucs -= 65536; u = sprintf("\\u%04x\\u%04x", 55296 + int(ucs / 1024), 56320 + ucs % 1024) }
          }
        }
      }
    }
    if (got + length(u) > budget) { stopped = 1; break }
    buf = buf u; got += length(u); i += k - 1
    if (length(buf) >= 512) { out = out buf; buf = "" }
  }
  return out buf
}
# the longest end of s whose encoding fits in budget, starting on a character boundary
function tailenc(s, budget,    n, k, k2, e, t, j, c) {
  n = length(s); k = (budget < n) ? budget : n
  while (k > 0) {
    t = substr(s, n - k + 1); j = 1
    while (j <= 3 && (c = ord[substr(t, j, 1)] + 0) >= 128 && c <= 191) j++
    e = enc(substr(t, j), 1e15)
    if (length(e) <= budget) return e
    k2 = int(k * budget / length(e))
    k = (k2 < k) ? k2 : k - 1
  }
  return ""
}
function take(s,    e, left) {
  nl++
  if (mode == "last") {
    L[nl] = s; raw += length(s) + 1
    # drop the oldest line once the newer ones alone hold more raw bytes than fit (escaping never shrinks)
    while (first < nl && raw - length(L[first]) - 1 >= room) {
      raw -= length(L[first]) + 1; delete L[first]; first++; cut = 1
    }
    return
  }
  if (cut) return
  if (nl > 1) s = "\n" s
  left = room - used
  if (length(s) > left) { s = substr(s, 1, left); cut = 1 }
  e = enc(s, left)
  if (stopped) cut = 1
  part[++np] = e; used += length(e)
}
{
  if (drop != "" && $0 ~ drop) next
  if (rcmode) { if (have) take(prev); prev = $0; have = 1 }
  else take($0)
}
END {
  if (rcmode) {
    if (have && prev ~ /^rc=[0-9]+$/) rcv = substr(prev, 4)
    else if (have) take(prev)
  } else if (nl > 0) take("")
  if (mode == "last") {
    # whole lines from the end while they fit; if not even one non-empty line fits, the end of it
    left = room; k = 0; kept = 0
    for (i = nl; i >= first; i--) {
      sep = (i < nl) ? 2 : 0
      e = enc(L[i], left - sep)
      if (stopped) {
        cut = 1
        if (kept == 0 && left - sep > 0) { e = tailenc(L[i], left - sep); rev[++k] = (sep ? e "\\n" : e) }
        break
      }
      rev[++k] = (sep ? e "\\n" : e); left -= length(e) + sep; kept += length(e)
    }
    if (first > 1) cut = 1
  }
  printf "%s", tag
  if (rcmode) printf "%s ", rcv
  printf "%d \"", cut
  if (mode == "last") {
    if (cut) printf "%s%s", mark, "\\n"
    for (j = k; j >= 1; j--) printf "%s", rev[j]
  } else {
    for (j = 1; j <= np; j++) printf "%s", part[j]
    if (cut) printf "%s%s", "\\n", mark
  }
  printf "\"\n"
}'

# ---------------------------------------------------------------------------------------------- helpers

J=""
# _jesc STRING: J := STRING as a JSON string literal (for our own short strings: commands, notes, hostname).
_jesc() {
  local s=$1 out="" c o i n=${#1}
  for ((i = 0; i < n; i++)); do
    c=${s:i:1}
    case $c in
      '"') out+='\"' ;;
      '\') out+='\\' ;;
      [[:print:]]) out+=$c ;;
      $'\n') out+='\n' ;;
      $'\t') out+='\t' ;;
      $'\r') out+='\r' ;;
      *)
        printf -v o '%d' "'$c" 2>/dev/null
        if ((o < 0)); then o=$((o + 256)); fi
        if ((o < 128)); then printf -v c '\\u%04x' "$o"; else c='\ufffd'; fi
        out+=$c
        ;;
    esac
  done
  J="\"$out\""
}

NOTE_J=""
# _note TEXT: a probe note, written before the item's stderr (at most 512 bytes of notes per item).
_note() {
  _jesc "[hyperpod-debugger: $1]"
  if ((${#NOTE_J} + ${#J} < 512)); then NOTE_J+="${J:1:${#J}-2}\n"; fi
}

_T=5   # the running command's timeout (seconds)
_H=8   # its helpers' timeout: the command's plus the kill delay plus a margin

# _capture MODE OUTCAP ERRCAP CMD...: run CMD once (stdin /dev/null) and set R_RC, R_OUT, R_ERR (JSON string
# literals) and R_CUT. No files: stdout and stderr go through two pipes into two encoders; the stdout
# encoder's line is printed first, the stderr encoder prints only at end of input, which comes after it.
_capture() {
  local mode=$1 ocap=$2 ecap=$3 blob oline eline o
  shift 3
  blob=$(
    {
      {
        _o=$(
          { "$@" </dev/null 3>&- 4>&-; printf '\nrc=%s' "$?"; } 2>&3 \
            | timeout -k 1 "$_H" awk -v tag=O -v cap="$ocap" -v mode="$mode" -v rcmode=1 -v mark="$MARK" "$ENC" \
              2>/dev/null
        )
        printf '%s\n' "$_o" 1>&4
      } 3>&1 \
        | timeout -k 1 "$_H" awk -v tag=E -v cap="$ecap" -v mode=first -v rcmode=0 -v mark="$MARK" -v drop="$JOBMSG" \
          "$ENC" 2>/dev/null
    } 4>&1
  )
  oline=${blob%%$'\n'*}
  eline=""
  if [[ $blob == *$'\n'* ]]; then eline=${blob#*$'\n'}; fi
  R_RC=""; R_OUT='""'; R_ERR='""'; R_CUT=0; R_LOST=0
  if [[ $oline == O* ]]; then
    o=${oline#O}
    R_RC=${o%% *}; o=${o#* }
    if [[ $R_RC =~ ^([0-9]+|x)$ && ${o:0:2} == [01]' ' && ${o:2:1} == '"' && ${o: -1} == '"' ]]; then
      R_CUT=${o:0:1}; R_OUT=${o:2}
    else
      R_RC=""
    fi
  fi
  if [[ -z $R_RC ]]; then
    R_RC=124; R_LOST=1
    _note "stdout did not close within the timeout (a process of the tool may be stuck, e.g. in uninterruptible I/O); nothing of it was kept"
  elif [[ $R_RC == x ]]; then
    R_RC=124; R_LOST=1
    _note "stdout did not close within the timeout (a process of the tool may be stuck, e.g. in uninterruptible I/O); what it wrote until then is kept"
  fi
  if [[ $eline == E[01]' "'* && ${eline: -1} == '"' && $eline != *$'\n'* ]]; then
    R_ERR=${eline:3}
    if [[ ${eline:1:1} == 1 ]]; then R_CUT=1; fi
  else
    _note "stderr not kept (it did not close within the timeout)"
  fi
}

HUNG=" "   # tools that already timed out: not started again (their items report 124 at once)

# _run SECONDS MODE OUTCAP ERRCAP FUNC [ARG]: _capture FUNC with the tool-missing check, the deadline and the
# per-command timeout (_T) applied. FUNC is named _<tool>__<what> and calls `timeout -k 2 "$_T" <tool> ...`.
_run() {
  local t=$1 mode=$2 ocap=$3 ecap=$4 tool=${5#_} left start
  tool=${tool%%__*}
  shift 4
  R_OUT='""'; R_ERR='""'; R_CUT=0
  if ! command -v "$tool" 1>/dev/null 2>&1; then
    R_RC=127; _jesc "$tool: command not found"; R_ERR=$J
    return
  fi
  case $HUNG in *" $tool "*)
    R_RC=124; _note "not run: $tool already timed out earlier in this probe"
    return ;;
  esac
  left=$((BUDGET - SECONDS))
  if ((left < 1)); then
    R_RC=124; _note "not run: the probe's ${BUDGET} s time budget was spent"
    return
  fi
  if ((MAXT < t)); then t=$MAXT; fi
  if ((left < t)); then t=$left; fi
  _T=$t; _H=$((t + 3)); start=$SECONDS
  _capture "$mode" "$ocap" "$ecap" "$@"
  if [[ $R_RC == 137 ]] && ((t <= SECONDS - start)); then R_RC=124; fi
  if [[ $R_RC == 124 ]]; then
    HUNG+="$tool "
    if [[ $R_LOST == 0 ]]; then _note "stopped by the probe's ${t} s timeout"; fi
  fi
}

# _failed: the last _run failed in a way another command may fix (not: success, timeout, tool missing).
_failed() {
  case $R_RC in 0 | 124 | 126 | 127) return 1 ;; esac
  return 0
}

ITEMS=()
# _emit ID COMMAND: the last _run as item ID (COMMAND = what was run, as text).
_emit() {
  local id cmd err=$R_ERR cut=false
  if [[ -n $NOTE_J ]]; then err="\"$NOTE_J${R_ERR:1}"; fi
  if [[ $R_CUT == 1 ]]; then cut=true; fi
  _jesc "$1"; id=$J
  _jesc "$2"; cmd=$J
  ITEMS+=("$id: {\"command\": $cmd, \"exit_code\": $R_RC, \"stdout\": $R_OUT, \"stderr\": $err, \"truncated\": $cut}")
  NOTE_J=""
}

# ------------------------------------------------------------------------- commands (each under timeout)

_cat__file() { timeout -k 2 "$_T" cat "$1"; }
_ls__one_per_line() { timeout -k 2 "$_T" ls -1 "$1"; }
_nvidia-smi__query() { timeout -k 2 "$_T" nvidia-smi "--query-gpu=$1" --format=csv; }
_nvidia-smi__q() { timeout -k 2 "$_T" nvidia-smi -q; }
_nvidia-smi__remapped_rows() { timeout -k 2 "$_T" nvidia-smi "--query-remapped-rows=$REMAP_FIELDS" --format=csv; }
_nvidia-smi__nvlink() { timeout -k 2 "$_T" nvidia-smi nvlink --status; }
_dcgmi__health() { timeout -k 2 "$_T" dcgmi health -g 0 --check; }
_neuron-ls__json() { timeout -k 2 "$_T" neuron-ls --json-output; }
_neuron-ls__table() { timeout -k 2 "$_T" neuron-ls; }
_fi_info__efa() { timeout -k 2 "$_T" fi_info -p efa -t FI_EP_RDM; }
_df__k() { timeout -k 2 "$_T" df -P -k; }
_df__i() { timeout -k 2 "$_T" df -P -i; }
_findmnt__json() { timeout -k 2 "$_T" findmnt -J -o TARGET,SOURCE,FSTYPE,SIZE; }
_free__b() { timeout -k 2 "$_T" free -b; }
_chronyc__tracking() { timeout -k 2 "$_T" chronyc tracking; }
_timedatectl__show() { timeout -k 2 "$_T" timedatectl show; }
_timedatectl__status() { timeout -k 2 "$_T" timedatectl status; }
_lsblk__json() { timeout -k 2 "$_T" lsblk -J -b -o NAME,TYPE,SIZE,MODEL,MOUNTPOINT; }
# software_versions (§ E): the versions the node runs, one "== <part>" header line per part, then what was read.
# Files are only read, tools only asked their version; each read has its own timeout of at most 2 s and none
# starts after the item's time (_T) is spent, so the item stays within it. An empty part: nothing found there;
# "(not read: ...)": something was there but could not be read (a read that failed, timed out or never started).
VEND=0
ST=2
_vleft() {
  ST=$((VEND - SECONDS))
  if ((2 < ST)); then ST=2; fi
  if ((0 < ST)); then return 0; fi
  printf '(not read: the item time was spent)\n'
  return 1
}
_uname__versions() {
  local f
  VEND=$((SECONDS + _T))
  printf '== kernel\n'
  if _vleft; then timeout -k 1 "$ST" uname -r || printf '(not read: exit %s)\n' "$?"; fi
  printf '== nvidia_driver\n'
  f=/proc/driver/nvidia/version
  if [[ -e $f ]] && _vleft; then timeout -k 1 "$ST" head -n 1 "$f" || printf '(not read: exit %s)\n' "$?"; fi
  printf '== cuda\n'
  for f in /usr/local/cuda/version.json /usr/local/cuda/version.txt; do
    if [[ -e $f ]]; then
      printf 'file %s\n' "$f"
      if _vleft; then timeout -k 1 "$ST" head -n 5 "$f" || printf '(not read: exit %s)\n' "$?"; fi
      break
    fi
  done
  printf '== efa_installer\n'
  f=/opt/amazon/efa_installed_packages
  if [[ -e $f ]] && _vleft; then timeout -k 1 "$ST" head -n 1 "$f" || printf '(not read: exit %s)\n' "$?"; fi
  printf '== libfabric\n'
  f=fi_info
  if command -v "$f" 1>/dev/null 2>&1 && _vleft; then
    timeout -k 1 "$ST" fi_info --version || printf '(not read: exit %s)\n' "$?"
  fi
  printf '== aws_ofi_nccl\n'
  for f in /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so /opt/amazon/ofi-nccl/lib/libnccl-net.so \
    /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so /opt/amazon/ofi-nccl/lib64/libnccl-net.so \
    /opt/aws-ofi-nccl/lib/libnccl-net.so; do
    if [[ -e $f ]]; then
      printf 'path %s\n' "$f"
      if _vleft; then timeout -k 1 "$ST" grep -aoE -m1 "$OFIPAT" "$f" || printf '(not read: exit %s)\n' "$?"; fi
      break
    fi
  done
  printf '== nccl\n'
  for f in /usr/local/cuda/lib/libnccl.so.2.* /usr/local/cuda/lib64/libnccl.so.2.* /usr/lib/x86_64-linux-gnu/libnccl.so.2.* \
    /usr/lib64/libnccl.so.2.* /opt/nccl/build/lib/libnccl.so.2.*; do
    if [[ -e $f ]]; then printf '%s\n' "$f"; fi
  done
  printf '== neuron_driver\n'
  f=/sys/module/neuron/version
  if [[ -e $f ]] && _vleft; then timeout -k 1 "$ST" cat "$f" || printf '(not read: exit %s)\n' "$?"; fi
  printf '== neuron_runtime\n'
  for f in /opt/aws/neuron/lib/libnrt.so.*; do
    if [[ -e $f ]]; then printf '%s\n' "$f"; fi
  done
  return 0
}

# journalctl -k -b BOOT -o FORMAT, filtered, last LINES lines; the status is journalctl's.
_journalctl__kernel() {
  timeout -k 2 "$_T" journalctl -k -b "$1" -o "$2" --no-pager \
    | timeout -k 1 "$_H" grep -aE "$KPAT" | timeout -k 1 "$_H" tail -n "$3"
  return "${PIPESTATUS[0]}"
}
_dmesg__iso() {
  timeout -k 2 "$_T" dmesg --time-format=iso | timeout -k 1 "$_H" grep -aE "$KPAT" | timeout -k 1 "$_H" tail -n 2000
  return "${PIPESTATUS[0]}"
}
_dmesg__plain() {
  timeout -k 2 "$_T" dmesg | timeout -k 1 "$_H" grep -aE "$KPAT" | timeout -k 1 "$_H" tail -n 2000
  return "${PIPESTATUS[0]}"
}
# systemctl is-active prints one state per unit, in order; each line gets its unit's name in front.
_systemctl__is_active() {
  timeout -k 2 "$_T" systemctl is-active "${UNITS[@]}" \
    | timeout -k 1 "$_H" awk -v units="${UNITS[*]}" \
      'BEGIN { n = split(units, u, " ") } { if (NR <= n) print u[NR] " " $0; else print }'
  return "${PIPESTATUS[0]}"
}

# ---------------------------------------------------------------------------------------------- items
# Order, ids and commands: references/probe.md. Caps are bytes of JSON text (stdout, stderr).

_items() {
  local q

  _run 3 first 512 512 _cat__file /proc/uptime
  _emit 'uptime' "cat /proc/uptime"

  # nvidia_smi_query_gpu: current field names, then the pre-535 names, then a minimal list.
  for q in "$GPU_FIELDS" "$GPU_FIELDS_OLD" "$GPU_FIELDS_MIN"; do
    _run 10 first 12288 512 _nvidia-smi__query "$q"
    if ! _failed || [[ $q == "$GPU_FIELDS_MIN" ]]; then break; fi
    _note "nvidia-smi --query-gpu=... exited $R_RC (a field this driver does not know?); asked again with other fields"
  done
  _emit 'nvidia_smi_query_gpu' "nvidia-smi --query-gpu=$q --format=csv"

  _run 10 first 37888 512 _nvidia-smi__q
  _emit 'nvidia_smi_q' "nvidia-smi -q"

  _run 8 first 4096 512 _nvidia-smi__remapped_rows
  _emit 'nvidia_smi_remapped_rows' "nvidia-smi --query-remapped-rows=$REMAP_FIELDS --format=csv"

  _run 8 first 12288 512 _nvidia-smi__nvlink
  _emit 'nvidia_smi_nvlink_status' "nvidia-smi nvlink --status"

  _run 8 first 8192 512 _dcgmi__health
  _emit 'dcgmi_health' "dcgmi health -g 0 --check"

  # kernel_log: the journal, else dmesg with ISO times, else plain dmesg. The journal counts as failed when
  # it exits non-zero, or when nothing matched and it complained on stderr (e.g. "No journal files were
  # found" with status 0, or no permission to read it).
  local jcmd="journalctl -k -b 0 -o short-iso-precise --no-pager | grep -aE '$KPAT' | tail -n 2000"
  _run 10 last 36864 512 _journalctl__kernel 0 short-iso-precise 2000
  if [[ $R_RC != 0 ]] || [[ $R_OUT == '""' && $R_ERR != '""' ]]; then
    if [[ $R_RC == 0 ]]; then
      _note "journalctl -k -b 0 matched no kernel line and wrote to stderr; used dmesg"
    else
      _note "journalctl -k -b 0 exited $R_RC; used dmesg"
    fi
    _run 5 last 36864 512 _dmesg__iso
    jcmd="dmesg --time-format=iso | grep -aE '$KPAT' | tail -n 2000"
    if _failed; then
      _note "dmesg --time-format=iso exited $R_RC; used plain dmesg"
      _run 5 last 36864 512 _dmesg__plain
      jcmd="dmesg | grep -aE '$KPAT' | tail -n 2000"
    fi
  fi
  _emit 'kernel_log' "$jcmd"

  # kernel_log_previous_boot: the journal only (dmesg holds this boot); systemd < 236 (Amazon Linux 2) lacks
  # short-iso-precise, so a failure is retried once with short-iso.
  jcmd="journalctl -k -b -1 -o short-iso-precise --no-pager | grep -aE '$KPAT' | tail -n 1000"
  _run 8 last 16384 512 _journalctl__kernel -1 short-iso-precise 1000
  if _failed; then
    _note "journalctl -o short-iso-precise exited $R_RC; asked again with -o short-iso"
    _run 8 last 16384 512 _journalctl__kernel -1 short-iso 1000
    jcmd="journalctl -k -b -1 -o short-iso --no-pager | grep -aE '$KPAT' | tail -n 1000"
  fi
  _emit 'kernel_log_previous_boot' "$jcmd"

  q="neuron-ls --json-output"
  _run 10 first 12288 512 _neuron-ls__json
  if _failed; then
    _note "neuron-ls --json-output exited $R_RC; used plain neuron-ls"
    _run 10 first 12288 512 _neuron-ls__table
    q="neuron-ls"
  fi
  _emit 'neuron_ls' "$q"

  _run 5 first 8192 512 _fi_info__efa
  _emit 'fi_info_efa' "fi_info -p efa -t FI_EP_RDM"

  _run 3 first 2048 512 _ls__one_per_line /sys/class/infiniband
  _emit 'efa_devices' "ls -1 /sys/class/infiniband"

  _run 3 first 512 512 _cat__file /sys/module/efa/version
  _emit 'efa_module' "cat /sys/module/efa/version"

  _run 5 first 12288 512 _df__k
  _emit 'df' "df -P -k"

  _run 5 first 12288 512 _df__i
  _emit 'df_inodes' "df -P -i"

  _run 5 first 20480 512 _findmnt__json
  _emit 'findmnt' "findmnt -J -o TARGET,SOURCE,FSTYPE,SIZE"

  _run 3 first 1024 512 _free__b
  _emit 'free' "free -b"

  _run 3 first 4096 512 _cat__file /proc/meminfo
  _emit 'meminfo' "cat /proc/meminfo"

  _run 5 first 1024 512 _chronyc__tracking
  _emit 'chronyc_tracking' "chronyc tracking"

  q="timedatectl show"
  _run 5 first 2048 512 _timedatectl__show
  if _failed; then
    _note "timedatectl show exited $R_RC (systemd < 239?); used timedatectl status"
    _run 5 first 2048 512 _timedatectl__status
    q="timedatectl status"
  fi
  _emit 'timedatectl' "$q"

  _run 5 first 1024 512 _systemctl__is_active
  _emit 'systemctl_is_active' "systemctl is-active ${UNITS[*]}"

  _run 5 first 8192 512 _lsblk__json
  _emit 'lsblk' "lsblk -J -b -o NAME,TYPE,SIZE,MODEL,MOUNTPOINT"

  _run 8 first 2048 512 _uname__versions
  _emit 'software_versions' "uname -r; head -n 1 /proc/driver/nvidia/version; head -n 5 /usr/local/cuda/version.json; head -n 1 /opt/amazon/efa_installed_packages; fi_info --version; grep -aoE -m1 '$OFIPAT' <aws-ofi-nccl library>; libnccl.so.2.* names; cat /sys/module/neuron/version; libnrt.so.* names"
}

# Every item, not run, with one reason (this node lacks a tool the probe itself needs). Same ids and order.
ITEM_IDS='uptime nvidia_smi_query_gpu nvidia_smi_q nvidia_smi_remapped_rows nvidia_smi_nvlink_status dcgmi_health
  kernel_log kernel_log_previous_boot neuron_ls fi_info_efa efa_devices efa_module df df_inodes findmnt free meminfo
  chronyc_tracking timedatectl systemctl_is_active lsblk software_versions'
_items_not_run() {
  local id
  for id in $ITEM_IDS; do
    R_RC=126; R_OUT='""'; R_ERR='""'; R_CUT=0
    _note "not run: this node lacks $1, which the probe needs"
    _emit "$id" "(not run)"
  done
}

# --------------------------------------------------------------------------------------------- document

COLLECTED=$(date -u +%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
if [[ ! $COLLECTED =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]]; then
  COLLECTED=$(export TZ=UTC0; printf '%(%Y-%m-%dT%H:%M:%SZ)T' -1)
fi
UPTIME="null"
if read -r UP _ 0</proc/uptime 2>/dev/null && [[ $UP =~ ^[0-9]+(\.[0-9]+)?$ ]]; then UPTIME=$UP; fi

MISSING=""
HELPERS='awk grep tail timeout'
for helper in $HELPERS; do
  if ! command -v "$helper" 1>/dev/null 2>&1; then MISSING+="${MISSING:+, }$helper"; fi
done
if [[ -n $MISSING ]]; then _items_not_run "$MISSING"; else _items; fi

_jesc "${HOSTNAME:-$(uname -n 2>/dev/null)}"
HOST=$J
_jesc "$COLLECTED"
DOC="{\"schema_version\": 1, \"hostname\": $HOST, \"collected_at\": $J, \"uptime_s\": $UPTIME, \"items\": {"
SEP=$'\n  '
for item in "${ITEMS[@]}"; do
  DOC+="$SEP$item"
  SEP=$',\n  '
done
printf '%s\n}}\n' "$DOC"
exit 0
