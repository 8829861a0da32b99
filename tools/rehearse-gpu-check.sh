#!/usr/bin/env bash
# Rehearse tools/gpu-check.sh here as a lent GPU machine would run it, at CPU size
# (DEVICE=cpu): in a copy of HEAD without .git plus .whl/ (what the machine receives), with
# no network (unshare -n: root; loopback up, as on the machine), a Python 3.12 virtual
# environment holding what the machine has (torch 2.11, timm, JAX 0.11, flax, optax,
# orbax-checkpoint, nvidia-ml-py, pandas, matplotlib, scikit-learn, pytest) but not
# hydra-core, omegaconf, antlr4, submitit or setuptools-scm (they come from .whl/), each call
# under the machine's 10-minute limit, and at most 8 files back. The copy builds as
# .whl/version.txt says (the version of the checkout make gpu-wheels ran in), as the
# machine's does.
#
#   make gpu-wheels                                   # with network: .whl/
#   VENV=/path/to/py312-venv bash tools/rehearse-gpu-check.sh [CALL...]
#
# CALL: the steps of one call, comma-separated (default: the calls of docs/benchmarks.md,
# test,bench jax sweep profile more). Prints one line per call: steps, minutes,
# files back, each step's status; exits 1 if a call broke a limit or a step did not end ok.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
VENV=${VENV:?set VENV to a Python 3.12 venv with torch 2.11, timm, JAX (docs/benchmarks.md)}
COPY=${COPY:-/tmp/vitfsdp-rehearsal}
CALL_LIMIT_S=600  # one call of the device tool
MAX_FILES=8       # files back from one call
[[ $# -gt 0 ]] || set -- test,bench jax sweep profile more
[[ -f .whl/version.txt ]] || { echo "no .whl/version.txt: run make gpu-wheels first" >&2; exit 2; }

rm -rf "$COPY"
mkdir -p "$COPY"
git archive HEAD | tar -x -C "$COPY"  # the committed tree, no .git
cp -r .whl "$COPY/"
cd "$COPY"
failed=0
n=0
for call in "$@"; do
    n=$((n + 1))
    out="$COPY/out$n"
    start=$SECONDS
    rc=0
    # SITE and WORK fresh per call: each lent machine starts bare
    timeout -k 10 "$CALL_LIMIT_S" unshare -n bash -c 'ip link set lo up && exec "$@"' _ \
        env PATH="$VENV/bin:$PATH" DEVICE=cpu \
        OUT="$out" SITE="/tmp/rehearsal-site$n" WORK="/tmp/rehearsal-work$n" \
        bash tools/gpu-check.sh ${call//,/ } > "$COPY/call$n.log" 2>&1 || rc=$?
    files=$(find "$out" -type f 2>/dev/null | wc -l)
    statuses=$(tail -n +2 "$out/steps.csv" 2>/dev/null | cut -d, -f1,2 | tr '\n' ' ')
    printf 'call %d: %s: %s min, exit %d, %d files back; steps %s\n' "$n" "$call" \
        "$(awk "BEGIN { printf \"%.1f\", ($SECONDS - $start) / 60 }")" "$rc" "$files" \
        "$statuses"
    if ((rc != 0 || files > MAX_FILES)) || grep -qv ',ok,' <(tail -n +2 "$out/steps.csv"); then
        failed=1
        tail -20 "$COPY/call$n.log"
    fi
done
exit $failed
