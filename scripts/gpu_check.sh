#!/usr/bin/env bash
# The prepared GPU check: everything bessemer claims on one GPU, in one run of at most 8 minutes on an H200,
# with no network. It never installs torch: it uses the Python it finds, which must already hold PyTorch with
# CUDA (2.11 or later within the project's range). docs/performance.md says how to carry wheels and read the log.
#
#   scripts/gpu_check.sh [--wheels DIR] [--log FILE] [--strict-goals] [BENCH OPTIONS ...]
#   scripts/gpu_check.sh --wheels wheels/                       # on the GPU machine
#   scripts/gpu_check.sh --device cpu --model debug --seq-len 64 --steps 2 --warmup 1 --compile off   # smoke test
#
# Parts, each under its own time limit (seconds, below), in this order:
#   wheels     --wheels DIR (or $BESSEMER_WHEELS): pip install --no-deps --no-index of DIR's wheels (torchao,
#              torchtitan and what they need) into a directory of this run, put on PYTHONPATH; torch, triton and
#              nvidia-* wheels are refused (the machine's torch stays as it is)
#   preflight  versions (torch against pyproject's range, CUDA device, torchao, torchtitan), bessemer imports
#   tests      pytest -m gpu tests/gpu (each test skips, with its reason, where it cannot run)
#   bench      bench/gpu_throughput.py with BENCH OPTIONS, under a time budget a little below its limit
#   doctor     bessemer doctor --json (--expect-gpus 1 on CUDA): valid JSON and, on CUDA, gpu.health passing
#              with NVML's values; failed host checks are reported, not counted against this check
# One log (its path printed first and last) holds the date, the exact command and every part's output. The
# exit status is 1 when any part failed or ran out of time; with --strict-goals also when a performance goal
# was missed or not measured.
set -uo pipefail

LIMIT_WHEELS=20
LIMIT_PREFLIGHT=25
LIMIT_TESTS=105
LIMIT_BENCH=270
LIMIT_DOCTOR=25
BENCH_MARGIN=30  # the bench starts no case that would end after LIMIT_BENCH - BENCH_MARGIN seconds (its
                 # longest case so far as the estimate); stopped at the limit, it still prints what it measured

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
WHEELS=${BESSEMER_WHEELS:-}
LOG=""
STRICT=()
BENCH_ARGS=()
DEVICE=""
COMMAND="$0 $*"

while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=${2:?--wheels needs a directory}; shift 2 ;;
    --log) LOG=${2:?--log needs a file}; shift 2 ;;
    --strict-goals) STRICT=(--strict-goals); shift ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --device) DEVICE=${2:?--device needs a value}; BENCH_ARGS+=("$1" "$2"); shift 2 ;;
    --device=*) DEVICE=${1#--device=}; BENCH_ARGS+=("$1"); shift ;;
    *) BENCH_ARGS+=("$1"); shift ;;
  esac
done

if [ -n "$WHEELS" ]; then
  GIVEN=$WHEELS
  WHEELS=$(cd "$GIVEN" 2>/dev/null && pwd) || { echo "--wheels: no directory $GIVEN" >&2; exit 2; }
fi
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOG=${LOG:-$REPO/runs/gpu_check/gpu_check-$STAMP.log}
mkdir -p "$(dirname "$LOG")"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

RESULTS=()
FAILED=0

# part NAME LIMIT COMMAND...: runs COMMAND under LIMIT seconds and records PASS / FAIL / TIMEOUT.
part() {
  local name=$1 limit=$2 start=$SECONDS rc status
  shift 2
  echo
  echo "== $name (limit ${limit} s) $(date -u +%H:%M:%S)"
  timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@"  # bash: the parts below are functions
  rc=$?
  case $rc in
    0) status=PASS ;;
    124|137) status=TIMEOUT; FAILED=1 ;;
    *) status="FAIL (exit $rc)"; FAILED=1 ;;
  esac
  echo "== $name: $status in $((SECONDS - start)) s"
  RESULTS+=("$(printf '%-10s %-16s %4d s' "$name" "$status" $((SECONDS - start)))")
}

install_wheels() {
  local keep=() w base
  for w in "$WHEELS"/*.whl; do
    [ -e "$w" ] || continue
    base=$(basename "$w")
    case "$base" in
      torch-*|torchvision-*|torchaudio-*|triton-*|nvidia_*|nvidia-*)
        echo "refused $base: the machine's torch and its runtime stay as they are" ;;
      *) keep+=("$w") ;;
    esac
  done
  if [ ${#keep[@]} -eq 0 ]; then
    echo "no wheel to install in $WHEELS"
    return 1
  fi
  "$PY" -m pip install --isolated --no-deps --no-index --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$WORK/site" "${keep[@]}"
}

preflight() {
  "$PY" - "$DEVICE" <<'EOF'
import importlib, sys, tomllib
from pathlib import Path

import torch

device = sys.argv[1] or "cuda"  # a GPU check: CPU only when asked for (--device cpu)
deps = tomllib.loads(Path("pyproject.toml").read_text())["project"]["dependencies"]
wanted = next(d for d in deps if d.replace(" ", "").startswith("torch>") or d.startswith("torch="))
try:
    from packaging.requirements import Requirement
    inside = Requirement(wanted).specifier.contains(torch.__version__.split("+")[0], prereleases=True)
    print(f"torch {torch.__version__} {'within' if inside else 'OUTSIDE'} the project's range {wanted!r}")
except ImportError:
    inside = True
    print(f"torch {torch.__version__}; the project's range {wanted!r} (packaging not installed: not compared)")
print(f"python {sys.version.split()[0]}; CUDA {torch.version.cuda}; cuda available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        cap = torch.cuda.get_device_capability(i)
        print(f"cuda:{i} {torch.cuda.get_device_name(i)} (compute capability {cap[0]}.{cap[1]})")
for name, role in (("torchao.float8", "FP8 (needed by the FP8 tests and bench cases)"),
                   ("torchtitan.models.llama3", "the bench's reference (else a plain PyTorch loop)")):
    try:
        importlib.import_module(name)
        top = name.split(".")[0]
        print(f"{top} {getattr(sys.modules[top], '__version__', '?')}: {name} imports; {role}")
    except Exception as e:
        print(f"{name} not importable ({type(e).__name__}: {e}): {role}")
import pytest, pytest_timeout  # noqa: E401,F401  (pyproject's pytest options need pytest-timeout)
import bessemer.doctor.cli, bessemer.precision.fp8, bessemer.train.trainer  # noqa: E401,F401

print("bessemer, pytest and pytest-timeout imports: ok")
if device == "cuda" and not torch.cuda.is_available():
    sys.exit("no CUDA device: this check needs a GPU (--device cpu --model debug ... runs its smoke test)")
sys.exit(0 if inside else 1)
EOF
}

doctor() {
  local expect=()
  [ "$DEVICE" = cpu ] || expect=(--expect-gpus 1)
  "$PY" -m bessemer.cli doctor --json "${expect[@]}" > "$WORK/doctor.json"
  local rc=$?
  cat "$WORK/doctor.json"
  if [ $rc -gt 1 ]; then  # 0: all passed, 1: a check failed; anything else: the doctor itself broke
    echo "bessemer doctor exited $rc"
    return 1
  fi
  "$PY" - "$WORK/doctor.json" "${DEVICE:-cuda}" <<'EOF'
import json, sys
from collections import Counter

doc = json.load(open(sys.argv[1]))
checks = {c["id"]: c for c in doc["checks"]}
print("doctor: " + ", ".join(f"{n} {s}" for s, n in sorted(Counter(c["status"] for c in checks.values()).items())))
for c in checks.values():
    if c["status"] in ("fail", "warn"):
        print(f"  {c['status']:<4} {c['id']}: {c['evidence']}")
gpu = checks.get("gpu.health")
print(f"gpu.health: {gpu['status'] if gpu else 'absent'}: {gpu['evidence'] if gpu else ''}")
if sys.argv[2] == "cuda" and (gpu is None or gpu["status"] != "pass"):
    sys.exit("gpu.health did not pass: no real NVML values")
EOF
}

export -f install_wheels preflight doctor
export PY WHEELS WORK DEVICE

main() {
  echo "bessemer GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: $COMMAND"
  echo "log: $LOG"
  local commit changes=""
  commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
  git -C "$REPO" status --porcelain 2>/dev/null | grep -q . && changes=", with local changes"
  echo "repository: $REPO ($commit$changes)"
  echo "python: $(command -v "$PY")"
  cd "$REPO" || return 1
  export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
  if [ -n "$WHEELS" ]; then
    part wheels "$LIMIT_WHEELS" install_wheels
    export PYTHONPATH="$REPO:$WORK/site${PYTHONPATH#"$REPO"}"
  fi
  part preflight "$LIMIT_PREFLIGHT" preflight
  part tests "$LIMIT_TESTS" "$PY" -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider
  part bench "$LIMIT_BENCH" "$PY" bench/gpu_throughput.py --budget-s $((LIMIT_BENCH - BENCH_MARGIN)) \
    "${STRICT[@]}" "${BENCH_ARGS[@]}"
  part doctor "$LIMIT_DOCTOR" doctor
  echo
  echo "== summary ($SECONDS s in all)"
  printf '%s\n' "${RESULTS[@]}"
  echo "log: $LOG"
  if [ $FAILED -ne 0 ]; then
    echo "GPU check FAILED"
    return 1
  fi
  echo "GPU check passed"
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
