#!/usr/bin/env bash
# The GPU check of vitfsdp on a node with one NVIDIA GPU and no package registry, in steps
# that each end within their own deadline, so one 10-minute call holds one or two steps and
# a session's 30 minutes the first four.
#
#   make gpu-wheels                      # here, with network: .whl/ (hydra-core, omegaconf,
#                                        # antlr4-python3-runtime, submitit for Python 3.12;
#                                        # setuptools-scm; the version, after the last commit)
#   bash tools/gpu-check.sh STEP...      # on the GPU node, from the repository root
#
# Steps, in order of value (docs/benchmarks.md gives the calls, their minutes and where the
# figures go):
#   test      make test-gpu's tests (pytest -m gpu tests/integration/test_gpu.py)
#   bench     python -m vitfsdp.bench: ViT-H/14, bf16, batch 32: ours (fsdp), unwrapped, timm
#   jax       H/14 under JAX and under PyTorch (vitfsdp.train), bf16, batch 32, and PyTorch
#             again with math attention (its loss beside the others'); the analysis prints
#             JAX / PyTorch images/s
#   sweep     one-GPU calibration: vit_base and vit_huge x FULL_SHARD and DDP x activation
#             checkpointing off and on, through python -m vitfsdp.sweep; then the analysis,
#             python -m vitfsdp.plan --calibrate, the probe of the device for those points
#             (python -m vitfsdp.probe) and the calibration from the probe alone
#   stall     PyTorch's H/14 loss against JAX's, one factor changed a run (compile, AdamW,
#             fp32, DDP, seed), 20 steps each: where does PyTorch's loss stall?
#   profile   torch.profiler of H/14's FSDP step (bench --profile-steps): ops.txt, trace
#   fsdp2     the same benchmark and profile with engine=fsdp2 (FSDP2's fully_shard); the
#             wrappers' host cost (python -m vitfsdp.bench wrappers); H/14 uncompiled
#   more      H/14 at the largest batch of BIG_BATCHES that fits, compiled and eager; then
#             L/16 and vit_1b at batch 32
#   host      which recipe takes FSDP's host time off the step (at most 8 minutes): H/14 and
#             L/16 at batch 32 under each recipe of HOST_RECIPES, each FSDP step beside the
#             unwrapped model of its compile setting; the wrappers bench (every path, eager
#             and compiled, 4 blocks a unit too); a 5-step profile of HOST_PROFILE; then
#             batch HOST_BIG_BATCH (default 128) under each recipe
#   units     H/14 and L/16 at batch 32 under UNIT_RECIPES (larger FSDP units: 4, 8 and all
#             blocks a unit), 2 repeats each, beside the unwrapped model; host.csv
#
# Every call installs the carried wheels and the project into $SITE (offline; skipped where
# .whl/ is absent and vitfsdp, hydra and submitit already import; a copy without .git builds
# as .whl/version.txt says, through SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VITFSDP), then runs
# its steps from outside the checkout. Each step has STEP_S seconds (default 480), and the
# whole call CALL_S (default 570, inside the device tool's 600): a step's commands are
# stopped at the earlier deadline and the step packs what it has. What comes back from one
# call, at most 6 files: OUT/provenance.txt (date, device, driver, versions, device memory
# and peak), OUT/steps.csv (a row per step as it ends: step, status, seconds, size of its
# tarball) and one OUT/<step>.tar.gz per step (its log, records, CSVs, figures; at most 4
# steps a call).
#
# Environment: OUT (default runs/gpu-check), SITE (default /tmp/vitfsdp-site), WORK (records
# kept between calls on one machine; default /tmp/vitfsdp-gpu), PYTHON (default python3),
# STEP_S (STEP_S_<step>, e.g. STEP_S_test, for one step), CALL_S, DEVICE (cuda | cpu),
# BIG_BATCHES (default "128 64 48"). DEVICE=cpu
# rehearses every step on a CPU with vit_tiny at batch 4 and a few steps (CHECK_QUICK=1:
# fewer still, as the test suite runs it).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$REPO/runs/gpu-check}
SITE=${SITE:-/tmp/vitfsdp-site}
WORK=${WORK:-/tmp/vitfsdp-gpu}
STEP_S=${STEP_S:-480}
CALL_S=${CALL_S:-570}
DEVICE=${DEVICE:-cuda}
BIG_BATCHES=${BIG_BATCHES:-128 64 48}
MAX_STEPS_PER_CALL=4  # provenance.txt + steps.csv + 4 tarballs: 6 files
export PYTHONUNBUFFERED=1

if [[ $DEVICE == cpu ]]; then  # the same steps at CPU size: a rehearsal, not a measurement
    H14=vit_tiny; L16=vit_tiny; B16=vit_tiny; V1B=vit_tiny; HUGE=vit_tiny
    BATCH=4; STEPS=6; WARMUP=2; EVERY=2; BIG_BATCHES=8
    if [[ ${CHECK_QUICK:-0} == 1 ]]; then STEPS=4; BENCH_REPEATS=1; fi
    SWEEP_MODELS=vit_tiny; PRECISION=fp32; STALL_STEPS=4; WRAPPERS_ARGS="--depth 4 --steps 3 --repeats 1"
    HOST_BIG_BATCH=${HOST_BIG_BATCH:-8}; HOST_STEPS=4; HOST_WARMUP=2; HOST_EVERY=2
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
    H14=vit_huge_patch14_224; L16=vit_large_patch16_224; B16=vit_base; V1B=vit_1b
    HUGE=vit_huge; BATCH=32; STEPS=50; WARMUP=10; EVERY=10
    SWEEP_MODELS=vit_base,vit_huge; PRECISION=bf16; STALL_STEPS=20; WRAPPERS_ARGS=""
    HOST_BIG_BATCH=${HOST_BIG_BATCH:-128}; HOST_STEPS=20; HOST_WARMUP=5; HOST_EVERY=5
fi
# The recipes of the host step, name:overrides (commas between overrides), each a candidate
# for the default where the local batch leaves the GPU waiting on FSDP's hooks; the first of
# each compile setting also times the unwrapped model (docs/benchmarks.md, "The host")
# (the H100's figures of 2026-11-26 and -27 already hold fsdp2:engine=fsdp2 and
# flat:kernels.compile=false at batch 32; add them here to time them in the same call)
HOST_RECIPES=${HOST_RECIPES:-"default: fsdp2_x4:engine=fsdp2,strategy.blocks_per_unit=4 \
orig_x4:strategy.blocks_per_unit=4 flat_x4:kernels.compile=false,strategy.blocks_per_unit=4"}
HOST_PROFILE=${HOST_PROFILE:-fsdp2_x4}  # the recipe the host step profiles
# the units step: FSDP1 on flat parameters (eager) with 4, 8 and all blocks a unit, then
# FSDP1 on original parameters with compiled blocks, all blocks a unit
UNIT_RECIPES=${UNIT_RECIPES:-"flat_x4:kernels.compile=false,strategy.blocks_per_unit=4 \
flat_x8:kernels.compile=false,strategy.blocks_per_unit=8 \
flat_x32:kernels.compile=false,strategy.blocks_per_unit=32 orig_x32:strategy.blocks_per_unit=32"}

log() { printf '[gpu-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2; }

step_install() {
    local wheels=("$REPO"/.whl/*.whl)
    if [[ ! -e "${wheels[0]}" ]]; then
        if (cd /tmp && "$PYTHON" -c 'import vitfsdp, hydra, submitit' 2>/dev/null); then
            log "no .whl/: using the installed vitfsdp, hydra and submitit"
            return
        fi
        log "no wheels in .whl/ and no installed vitfsdp: run make gpu-wheels here first"
        exit 2
    fi
    # setuptools-scm builds the project as the version of the checkout that make gpu-wheels
    # ran in (its commit, and a date where that checkout was dirty), also where the copy has
    # a .git: the device tool's copy carried a .git whose HEAD was the session's first
    # commit, not the tree's (2026-11-26: run.json named 51622f5 for a tree at 451a6cd)
    if [[ -f "$REPO/.whl/version.txt" ]]; then
        : "${SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VITFSDP:=$(<"$REPO/.whl/version.txt")}"
        export SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VITFSDP
    elif [[ ! -e "$REPO/.git" ]]; then
        log "no .whl/version.txt: run make gpu-wheels here first"; exit 2
    fi
    log "installing ${#wheels[@]} carried wheels and the project into $SITE (no network)"
    local pip=("$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir
               --upgrade)
    "${pip[@]}" --target "$SITE" "${wheels[@]}"
    # the project itself, built from the checkout by the carried setuptools and setuptools-scm
    # (.whl/build/, in a folder of their own: the checks import the node's packaging)
    local build_wheels=("$REPO"/.whl/build/*.whl) build_site=${SITE}-build
    if [[ -e "${build_wheels[0]}" ]]; then
        "${pip[@]}" --target "$build_site" "${build_wheels[@]}"
    fi
    PYTHONPATH="$build_site${PYTHONPATH:+:$PYTHONPATH}" "${pip[@]}" --no-build-isolation \
        --target "$SITE" "$REPO"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
}

device_facts() {  # OUT/provenance.txt; DEVICE_NAME, DEVICE_MEMORY_GIB, PEAK_TFLOPS read from
    # the device (torch's properties, vitfsdp.metrics' peak table), never set by hand
    eval "$(cd /tmp && "$PYTHON" - "$DEVICE" "$OUT/provenance.txt" <<'EOF'
import datetime, importlib.metadata as md, platform, subprocess, sys
import torch
import vitfsdp, vitfsdp.provenance as p
from vitfsdp.metrics import table_peak
if sys.argv[1] == "cuda" and torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    peak, _ = table_peak(props.name, "bf16", allow_tf32=False)
    name, gib, tflops = props.name, f"{props.total_memory / 2**30:.2f}", peak and peak / 1e12
else:
    name, gib, tflops = "cpu", "null", None
lines = [datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         f"device {name}, memory_gib {gib}, bf16 peak_tflops {tflops}"]
try:
    lines.append(subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
         "power.limit", "--format=csv"], capture_output=True, text=True).stdout.strip())
except OSError:
    lines.append("nvidia-smi: not found")
lines.append(f"python {platform.python_version()}")
for dist in ("torch", "timm", "jax", "jaxlib", "flax", "optax", "hydra-core", "omegaconf",
             "submitit", "nvidia-ml-py", "triton", "pandas", "matplotlib", "vitfsdp"):
    try:
        lines.append(f"{dist}=={md.version(dist)}")
    except md.PackageNotFoundError:
        lines.append(f"{dist}: not installed")
lines.append(f"cuda {torch.version.cuda} | cudnn {torch.backends.cudnn.version()}")
lines.append(f"vitfsdp from {vitfsdp.__file__} | git {p.git_state()}")
with open(sys.argv[2], "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"DEVICE_NAME='{name}' DEVICE_MEMORY_GIB={gib} PEAK_TFLOPS={tflops or 'null'}")
EOF
)"
    log "device $DEVICE_NAME: ${DEVICE_MEMORY_GIB} GiB, bf16 peak ${PEAK_TFLOPS} TFLOP/s"
}

# run CMD...: CMD stopped (TERM, then KILL 15 s later) at the step's deadline; never fails
# the step: a measurement that did not end is data, recorded by its own run directory.
run() {
    local left=$((DEADLINE - SECONDS))
    if ((left < 20)); then
        log "deadline: skipped $*"
        STATUS=deadline
        return 0
    fi
    local rc=0
    timeout -k 15 "$left" "$@" || rc=$?
    if ((rc == 124 || rc == 137)); then
        log "deadline: stopped $* after ${left} s"
        STATUS=deadline
    elif ((rc != 0)); then
        log "exit $rc: $*"
        [[ $STATUS == deadline ]] || STATUS="exit $rc"
    fi
}

bench() {  # bench FOLDER ARGS...: python -m vitfsdp.bench into WORK/<step>/FOLDER
    local folder=$1
    shift
    run "$PYTHON" -m vitfsdp.bench --device "$DEVICE" --batch "$BATCH" \
        --precision "$PRECISION" --steps "$STEPS" --warmup "$WARMUP" --log-every "$EVERY" \
        --out "$STEP_DIR/$folder" "$@"
}

train_one() {  # train_one DIR OVERRIDES...: one vitfsdp.train run on this device
    local dir=$1
    shift
    run "$PYTHON" -m vitfsdp.train "device=$DEVICE" nodes=1 cluster.gpus_per_node=1 \
        data=synthetic "precision=$PRECISION" "train.local_batch_size=$BATCH" \
        "train.steps=$STEPS" "train.warmup_steps=$WARMUP" "train.log_every=$EVERY" "$@" \
        "hydra.run.dir=$dir"
}

analyse() {  # analyse DIR: tables, figures and report of the runs below DIR
    run "$PYTHON" -m vitfsdp.analysis "$1" --report
}

step_test() {
    # --import-mode=append: the tests import vitfsdp from $SITE (the installed wheel, which
    # carries conf/ as vitfsdp.conf), not from the checkout put first on sys.path
    run "$PYTHON" -m pytest -m gpu -v -rA -p no:cacheprovider --import-mode=append \
        --rootdir "$REPO" "$REPO/tests/integration/test_gpu.py" --junitxml="$STEP_DIR/test-gpu.xml"
}

step_bench() {
    # the spread of two repeats (three would not fit the call); one in the test suite's run
    bench h14 --models "$H14" --repeats "${BENCH_REPEATS:-2}"
}

step_jax() {
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 train_one "$STEP_DIR/jax_h14" "model=$H14" \
        framework=jax
    train_one "$STEP_DIR/torch_h14" "model=$H14" framework=torch
    # the L/16 losses of the two parted on an H200 (3.13 against 0.37 by step 12) where on a
    # CPU they agree: the same torch run with torch's math attention instead of SDPA's fused
    # kernels tells whether the attention kernel is where they part
    train_one "$STEP_DIR/torch_h14_math_attn" "model=$H14" framework=torch \
        kernels.fused_attn=false
    analyse "$STEP_DIR"
}

step_stall() {
    # PyTorch's H/14 loss stalled near ln 32 on an H100 (and L/16's on an H200) where JAX's
    # fell to 0.01 on the same device; on a CPU every torch/JAX pair agrees (docs/benchmarks.md,
    # H100). One factor changed a run, a loss every 2 steps: the default recipe (whose init
    # no longer draws torch 2.11's weights at +-2: the first run after that change), eager
    # blocks, foreach AdamW, fp32, DDP (autocast, no FSDP casts), another seed; then JAX
    local run=("model=$H14" "train.steps=$STALL_STEPS" train.warmup_steps=2 train.log_every=2)
    train_one "$STEP_DIR/torch_default" "${run[@]}" framework=torch
    train_one "$STEP_DIR/torch_eager" "${run[@]}" framework=torch kernels.compile=false
    train_one "$STEP_DIR/torch_foreach_adamw" "${run[@]}" framework=torch kernels.adamw=foreach
    train_one "$STEP_DIR/torch_fp32" "${run[@]}" framework=torch precision=fp32
    train_one "$STEP_DIR/torch_ddp" "${run[@]}" framework=torch strategy=DDP
    train_one "$STEP_DIR/torch_seed1" "${run[@]}" framework=torch train.seed=1
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 train_one "$STEP_DIR/jax" "${run[@]}" framework=jax
    analyse "$STEP_DIR"
}

step_sweep() {
    # the points, swept and then probed; the local launcher runs one rank per point
    local points=(cluster=local cluster.gpus_per_node=1 "device=$DEVICE" "precision=$PRECISION"
        data=synthetic nodes=1 "strategy=FULL_SHARD,DDP" "model=$SWEEP_MODELS"
        "train.activation_checkpointing=false,true" "train.local_batch_size=$BATCH")
    # the plan sees the device's own memory and peak (device_facts), so it skips no point
    # that fits
    run "$PYTHON" -m vitfsdp.sweep -m "${points[@]}" \
        "cluster.device_memory_gib=$DEVICE_MEMORY_GIB" "cluster.peak_tflops=$PEAK_TFLOPS" \
        "train.steps=$((STEPS / 2))" "train.warmup_steps=$((WARMUP / 2))" \
        "train.log_every=$((EVERY / 2))" "hydra.sweep.dir=$STEP_DIR/sweep"
    analyse "$STEP_DIR/sweep"
    run bash -c "'$PYTHON' -m vitfsdp.plan --calibrate '$STEP_DIR/sweep' \
        > '$STEP_DIR/sweep/calibrate.txt' 2>&1; cat '$STEP_DIR/sweep/calibrate.txt'"
    # then the probe of this device for the same points (after the sweep: its records come
    # first), and the sweep predicted from the probe alone (docs/plan.md, "The probe")
    run "$PYTHON" -m vitfsdp.probe -m "${points[@]}" --out "$STEP_DIR/sweep"
    run bash -c "'$PYTHON' -m vitfsdp.plan --calibrate '$STEP_DIR/sweep' \
        > '$STEP_DIR/sweep/calibrate-probe.txt' 2>&1; cat '$STEP_DIR/sweep/calibrate-probe.txt'"
}

step_profile() {
    bench h14 --models "$H14" --steps $((WARMUP + 2 * EVERY)) --profile-steps 5 --repeats 1
}

step_fsdp2() {
    # the FSDP2 engine (fully_shard: per-parameter sharding, fewer Python hooks) against the
    # same unwrapped and timm paths, profiled: on an H200 FSDP1's hooks left the GPU idle
    # half of H/14's step (docs/benchmarks.md, 2026-11-26)
    bench h14_fsdp2 --models "$H14" --steps $((WARMUP + 2 * EVERY)) --profile-steps 5 \
        --repeats 1 engine=fsdp2
    # the wrappers' host time apart from arithmetic (FSDP1 with and without the original
    # parameters, FSDP2, DDP), then ours uncompiled, which runs FSDP1 on flat parameters
    run "$PYTHON" -m vitfsdp.bench wrappers --device "$DEVICE" $WRAPPERS_ARGS \
        --out "$STEP_DIR/wrappers.json"
    bench h14_flat --models "$H14" --steps $((WARMUP + 2 * EVERY)) --repeats 1 \
        kernels.compile=false
}

step_more() {
    local batch
    for batch in $BIG_BATCHES; do  # largest first: the first that completes is kept
        bench "h14_b$batch" --models "$H14" --batch "$batch" --repeats 1
        if grep -q completed "$STEP_DIR/h14_b$batch/bench.csv" 2>/dev/null; then
            # the same batch eager (FSDP1 on flat parameters): on an H100 at batch 32 the
            # host decided and eager FSDP1 beat compiled FSDP1 1.4-1.7 times; does compile
            # win back where the GPU's step is longer? (docs/benchmarks.md, H100)
            bench "h14_b${batch}_eager" --models "$H14" --batch "$batch" --repeats 1 \
                kernels.compile=false
            break
        fi
        log "H/14 at batch $batch did not complete; trying a smaller batch"
    done
    bench b32 --models "$L16,$V1B" --repeats 1
}

host_recipes() {  # host_recipes TAG BATCH: every recipe of HOST_RECIPES for H/14 and L/16
    local tag=$1 batch=$2 recipe name overrides paths seen=" "
    for recipe in $HOST_RECIPES; do
        name=${recipe%%:*}
        overrides=${recipe#*:}
        # the unwrapped model once per compile setting: the recipes' common baseline
        local compiled=1
        [[ $overrides == *kernels.compile=false* ]] && compiled=0
        paths=fsdp
        [[ $seen == *" $compiled "* ]] || { paths=fsdp,unwrapped; seen+="$compiled "; }
        run "$PYTHON" -m vitfsdp.bench --device "$DEVICE" --batch "$batch" \
            --precision "$PRECISION" --steps "$HOST_STEPS" --warmup "$HOST_WARMUP" \
            --log-every "$HOST_EVERY" --repeats "${HOST_REPEATS:-1}" --paths "$paths" \
            --models "$H14,$L16" \
            --out "$STEP_DIR/${tag}_$name" ${overrides//,/ }
    done
}

step_host() {
    # on an H100 at batch 32 FSDP's per-unit host time decided the step (the GPU busy 37%;
    # docs/benchmarks.md): which recipe takes it off, and what each costs at a larger batch
    host_recipes "b$BATCH" "$BATCH"
    run "$PYTHON" -m vitfsdp.bench wrappers --device "$DEVICE" --compile both \
        --blocks-per-unit 4 ${WRAPPERS_ARGS:---steps 15 --repeats 2} \
        --out "$STEP_DIR/wrappers.json"
    local recipe
    for recipe in $HOST_RECIPES; do
        [[ ${recipe%%:*} == "$HOST_PROFILE" ]] || continue
        recipe=${recipe#*:}
        run "$PYTHON" -m vitfsdp.bench --device "$DEVICE" --batch "$BATCH" \
            --precision "$PRECISION" --steps $((HOST_WARMUP + 5)) --warmup "$HOST_WARMUP" \
            --log-every 5 --repeats 1 --paths fsdp --profile-steps 5 --models "$H14" \
            --out "$STEP_DIR/profile_$HOST_PROFILE" ${recipe//,/ }
    done
    host_recipes "b$HOST_BIG_BATCH" "$HOST_BIG_BATCH"
    host_table
}

step_units() {
    # larger FSDP units at batch 32 (the host call of 2026-11-27 on an H100: FSDP1 on flat
    # parameters with 4 blocks a unit, eager, 1.05 of the unwrapped model for H/14 and 0.79
    # for L/16; FSDP1's host time about 1.9 ms a unit): UNIT_RECIPES, 2 repeats each
    HOST_RECIPES=$UNIT_RECIPES HOST_REPEATS=${HOST_REPEATS:-2} host_recipes "b$BATCH" "$BATCH"
    host_table
}

host_table() {  # STEP_DIR/host.csv: each recipe's FSDP images/s over the unwrapped model's
    # of the same model, batch and compile setting (measured in the same call)
    run "$PYTHON" - "$STEP_DIR" <<'EOF'
import pathlib, sys
import pandas as pd
step = pathlib.Path(sys.argv[1])
rows = []
for csv in sorted(step.glob("b*_*/bench.csv")):
    t = pd.read_csv(csv).assign(recipe=csv.parent.name.split("_", 1)[1])
    rows.append(t[t["status"] == "completed"])
if not rows:
    sys.exit("no completed bench.csv below " + str(step))
t = pd.concat(rows).rename(columns={"train_samples_per_sec": "ips",
                                     "train_batch_size": "batch"})
key = ["model", "batch", "compile"]
base = t[t["path"] == "unwrapped"].groupby(key)["ips"].first().rename("unwrapped_ips")
out = t[t["path"] == "fsdp"].join(base, on=key)
out["vs_unwrapped"] = out["ips"] / out["unwrapped_ips"]
cols = ["model", "batch", "recipe", "compile", "wrapper", "ips", "ips_min", "ips_max",
        "unwrapped_ips", "vs_unwrapped", "mfu", "step_time_s"]
out[cols].to_csv(step / "host.csv", index=False)
print(out[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
EOF
}

pack() {  # OUT/<step>.tar.gz: the step's folder (log included), small files only
    local step=$1
    tar -C "$WORK" --exclude='*.pt' --exclude='checkpoint' --exclude='*.distcp' \
        -czf "$OUT/$step.tar.gz" "$step" 2>/dev/null || log "pack $step: some files missing"
    log "wrote $OUT/$step.tar.gz ($(du -h "$OUT/$step.tar.gz" | cut -f1))"
}

[[ $# -gt 0 ]] || usage
for step in "$@"; do
    declare -F "step_$step" >/dev/null && [[ $step != install ]] \
        || { log "unknown step $step; steps: test bench jax stall sweep profile fsdp2 more host units"; exit 2; }
done
(($# <= MAX_STEPS_PER_CALL)) \
    || { log "at most $MAX_STEPS_PER_CALL steps a call (6 files back): split the call"; exit 2; }
mkdir -p "$OUT" "$WORK"
step_install
device_facts
[[ -f "$OUT/steps.csv" ]] || echo "step,status,seconds,tarball_bytes,device" > "$OUT/steps.csv"
cd "$WORK"  # every command runs outside the checkout, as a user's would
for step in "$@"; do
    STEP_DIR="$WORK/$step"
    rm -rf "$STEP_DIR"
    mkdir -p "$STEP_DIR"
    STATUS=ok
    START=$SECONDS
    step_s_var="STEP_S_$step"  # STEP_S_<step> gives one step its own seconds
    DEADLINE=$((SECONDS + ${!step_s_var:-$STEP_S} - 30))  # 30 s left to pack
    ((DEADLINE <= CALL_S - 30)) || DEADLINE=$((CALL_S - 30))
    log "step $step (deadline in $((DEADLINE - SECONDS)) s)"
    "step_$step" > >(tee "$STEP_DIR/$step.log") 2>&1
    wait $! 2>/dev/null || true  # tee (the process substitution) has written the log
    pack "$step"
    echo "$step,$STATUS,$((SECONDS - START)),$(stat -c %s "$OUT/$step.tar.gz"),$DEVICE_NAME" \
        >> "$OUT/steps.csv"
    log "step $step: $STATUS in $((SECONDS - START)) s"
done
