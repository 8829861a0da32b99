#!/usr/bin/env bash
# The whole GPU check of vitfsdp on a node with one NVIDIA GPU and no package registry, in
# steps that each fit a 10-minute slot. Each step writes OUT/<step>.log and
# OUT/<step>.tar.gz (records, CSVs, figures, profiles), so nothing is lost if the node is
# given back between steps.
#
#   make gpu-wheels                      # here, with network: .whl/ (hydra-core, omegaconf,
#                                        # antlr4-python3-runtime, submitit for Python 3.12)
#   bash tools/gpu-check.sh STEP...      # on the GPU node, from the repository root
#
# Steps (docs/benchmarks.md says what each measures and where its figures go):
#   install   the carried wheels and the project into $SITE, offline (every step runs it)
#   test      make test-gpu's tests (pytest -m gpu tests/test_gpu.py)
#   bench     python -m vitfsdp.bench: vit_base, L/16, H/14, vit_1b at batch 32, bf16;
#             H/14 profiled (torch.profiler)
#   bench-big the same models at the largest batch of BIG_BATCHES that fits
#   jax       H/14 under JAX and under PyTorch on this device, bf16, batch 32, one run each
#   sweep     the one-GPU calibration sweep (FULL_SHARD and DDP, vit_base..vit_3b,
#             activation checkpointing off and on) through python -m vitfsdp.sweep
#   analyse   python -m vitfsdp.analysis and python -m vitfsdp.plan --calibrate of the sweep
#             (its records from this node, or unpacked from .gpu/sweep.tar.gz if carried)
#
# Environment: OUT (where results go; default runs/gpu-check), SITE (install target; default
# /tmp/vitfsdp-site), WORK (records kept between steps; default /tmp/vitfsdp-gpu),
# PYTHON (default python3), SWEEP_MODELS, SWEEP_AC, BIG_BATCHES, BENCH_MODELS, DEVICE (default
# cuda; DEVICE=cpu SWEEP_MODELS=vit_tiny rehearses the sweep and analysis steps on a CPU).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$REPO/runs/gpu-check}
SITE=${SITE:-/tmp/vitfsdp-site}
WORK=${WORK:-/tmp/vitfsdp-gpu}
BENCH_MODELS=${BENCH_MODELS:-vit_base,vit_large_patch16_224,vit_huge_patch14_224,vit_1b}
BIG_BATCHES=${BIG_BATCHES:-256 128 64}
SWEEP_MODELS=${SWEEP_MODELS:-vit_base,vit_huge,vit_1b,vit_3b}
SWEEP_AC=${SWEEP_AC:-false,true}
DEVICE=${DEVICE:-cuda}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"

log() { printf '[gpu-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

step_install() {
    local wheels=("$REPO"/.whl/*.whl)
    [[ -e "${wheels[0]}" ]] || { log "no wheels in .whl/: run make gpu-wheels here first"; exit 2; }
    log "installing ${#wheels[@]} carried wheels and the project into $SITE (no network)"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "${wheels[@]}"
    # the project itself, built here from the checkout (setuptools is on the node)
    "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
        --upgrade --target "$SITE" "$REPO"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    # run.json's git: in a copy without .git (the device's), the build took it from the
    # manifest make gpu-wheels wrote (.whl/checkout.json), dirty where a file differs
    (cd /tmp && "$PYTHON" -c 'import vitfsdp, hydra, submitit, torch, vitfsdp.provenance as p
print("vitfsdp from", vitfsdp.__file__, "| torch", torch.__version__, "| cuda",
      torch.cuda.is_available(), "| git", p.git_state())')
}

provenance() {  # the device, driver and versions, for docs/benchmarks.md
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
            --format=csv 2>/dev/null || true
        "$PYTHON" - <<'EOF'
import importlib.metadata as md
for name in ("torch", "timm", "jax", "jaxlib", "flax", "optax", "hydra-core", "omegaconf",
             "submitit", "nvidia-ml-py", "triton", "vitfsdp"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
import torch
print("cuda", torch.version.cuda, "| cudnn", torch.backends.cudnn.version(),
      "| device", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
EOF
    } > "$OUT/provenance.txt" 2>&1
}

pack() {  # OUT/<name>.tar.gz of the given folders (relative to WORK), small files only
    local name=$1
    shift
    tar -C "$WORK" --exclude='*.pt' --exclude='checkpoint' --exclude='*.distcp' \
        -czf "$OUT/$name.tar.gz" "$@" 2>/dev/null || log "pack $name: some files missing"
    log "wrote $OUT/$name.tar.gz ($(du -h "$OUT/$name.tar.gz" | cut -f1))"
}

step_test() {
    # --import-mode=append: the tests import vitfsdp from $SITE (the installed wheel, which
    # carries conf/ as vitfsdp.conf), not from the checkout put first on sys.path
    "$PYTHON" -m pytest -m gpu -v -rA -p no:cacheprovider --import-mode=append \
        --rootdir "$REPO" "$REPO/tests/test_gpu.py" \
        --junitxml="$WORK/test-gpu.xml" || log "test-gpu: failures (see the log)"
    mkdir -p "$WORK/test"
    cp "$WORK/test-gpu.xml" "$WORK/test/" 2>/dev/null || true
    pack test test
}

step_bench() {
    rm -rf "$WORK/bench"
    "$PYTHON" -m vitfsdp.bench --models "$BENCH_MODELS" --batch 32 --precision bf16 \
        --out "$WORK/bench" || log "bench: exit $?"
    rm -rf "$WORK/bench-profile"
    "$PYTHON" -m vitfsdp.bench --models vit_huge_patch14_224 --batch 32 --precision bf16 \
        --steps 30 --warmup 10 --profile-steps 10 --out "$WORK/bench-profile" \
        || log "bench (profile): exit $?"
    pack bench bench bench-profile
}

step_bench_big() {
    local model batch
    rm -rf "$WORK/bench-big"
    for model in ${BENCH_MODELS//,/ }; do
        for batch in $BIG_BATCHES; do  # largest first: the first that completes is kept
            if "$PYTHON" -m vitfsdp.bench --models "$model" --batch "$batch" --precision bf16 \
                --steps 30 --warmup 10 --out "$WORK/bench-big/$model-b$batch"; then
                break
            fi
            log "bench $model batch $batch did not complete; trying a smaller batch"
        done
    done
    pack bench-big bench-big
}

train_one() {  # train_one DIR OVERRIDES...: one vitfsdp.train run on this GPU
    local dir=$1
    shift
    "$PYTHON" -m vitfsdp.train device=cuda nodes=1 cluster.gpus_per_node=1 data=synthetic \
        precision=bf16 train.local_batch_size=32 train.steps=60 train.warmup_steps=20 \
        train.log_every=10 "$@" "hydra.run.dir=$dir" || log "train $*: exit $?"
}

step_jax() {
    rm -rf "$WORK/jax"
    train_one "$WORK/jax/torch_h14" model=vit_huge_patch14_224 framework=torch
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 train_one "$WORK/jax/jax_h14" \
        model=vit_huge_patch14_224 framework=jax
    "$PYTHON" -m vitfsdp.analysis "$WORK/jax" || log "analysis of jax runs: exit $?"
    pack jax jax
}

step_sweep() {
    # the plan needs the device's memory and peak; the local launcher runs one rank per point
    "$PYTHON" -m vitfsdp.sweep -m cluster=local cluster.gpus_per_node=1 "device=$DEVICE" \
        precision=bf16 "cluster.device_memory_gib=${DEVICE_MEMORY_GIB:-79.1}" \
        "cluster.peak_tflops=${PEAK_TFLOPS:-989}" data=synthetic nodes=1 \
        strategy=FULL_SHARD,DDP "model=$SWEEP_MODELS" \
        "train.activation_checkpointing=$SWEEP_AC" train.local_batch_size=32 \
        train.steps=25 train.warmup_steps=10 train.log_every=5 \
        "hydra.sweep.dir=$WORK/sweep" || log "sweep: exit $? (points not completed are data)"
    pack sweep sweep
}

step_analyse() {
    if [[ ! -d "$WORK/sweep" && -f "$REPO/.gpu/sweep.tar.gz" ]]; then
        tar -C "$WORK" -xzf "$REPO/.gpu/sweep.tar.gz"
    fi
    [[ -d "$WORK/sweep" ]] || { log "no sweep records: run the sweep step first"; exit 2; }
    "$PYTHON" -m vitfsdp.analysis "$WORK/sweep" --report || log "analysis: exit $?"
    "$PYTHON" -m vitfsdp.plan --calibrate "$WORK/sweep" > "$WORK/sweep/calibrate.txt" 2>&1 \
        || log "plan --calibrate: exit $?"
    cat "$WORK/sweep/calibrate.txt" >&2
    pack analyse sweep
}

[[ $# -gt 0 ]] || { sed -n '2,27p' "$0"; exit 2; }
step_install
provenance
# every command runs outside the checkout, as a user's would: vitfsdp comes from $SITE
cd "$WORK"
for step in "$@"; do
    [[ $step == install ]] && continue
    fn="step_${step//-/_}"
    declare -F "$fn" >/dev/null || { log "unknown step $step"; exit 2; }
    log "step $step"
    SECONDS=0
    "$fn" 2>&1 | tee "$OUT/$step.log"
    log "step $step done in ${SECONDS} s"
done
