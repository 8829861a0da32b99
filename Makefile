# vitfsdp: the two commands of the README, and what they need.
#   make demo   install, then run the demo weak-scaling sweep, probe its nodes (the plan's
#               prediction beside every point) and analyse (CPU, about 20 minutes on 2 cores)
#   make test   install, start the virtual Slurm cluster (root: installs slurm-wlm + munge),
#               install Debian's chromium (the report's headless-browser test), then run the
#               test suite; the Slurm tests fail if the cluster is not up
#   make test-noslurm   the same without the cluster (its tests are skipped), for non-root users
#   make test-fast  tests/unit only (in-process checks of one module or function; no training,
#               no Slurm, no subprocess): 1-2 minutes on 2 cores, for a developer between edits (after
#               make install; tests/integration is the rest, make test runs both)
#   make torch  torch and torchvision where either is missing or the two do not import together
#               (install and install-run run it first): the PyTorch CPU index on a machine with
#               no GPU (pip's own index where that gives no working pair), else pip's own index
#   make test-gpu   on a GPU node, offline: every GPU path (tests/integration/test_gpu.py), through
#               tools/gpu-check.sh test (the carried wheels of .whl/, else what is installed)
#   make bench-gpu  on a GPU node, offline: the single-GPU benchmark (tools/gpu-check.sh bench)
#   make gpu-wheels here (network): the wheels a GPU node without a package registry lacks,
#               for tools/gpu-check.sh (the whole GPU check in steps; docs/benchmarks.md)
#   make gpu-rehearsal here (root, VENV=<Python 3.12 venv>): tools/gpu-check.sh's calls at
#               CPU size, offline, within the GPU machine's limits
# the project's virtual environment where there is one (README: python3 -m venv .venv)
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
DEMO_DIR ?= runs/demo
# more overrides for the demo's sweep, e.g. DEMO_OVERRIDES=repeat=0,1,2 (three rounds, about
# three times as long: differences between points then count where they hold over repeats)
DEMO_OVERRIDES ?=
SLURM_DIR ?= /tmp/vitfsdp-slurm

.PHONY: install install-run torch demo test test-fast test-noslurm test-gpu bench-gpu gpu-wheels gpu-rehearsal slurm-up slurm-down browser lint

# Where torch and torchvision come from when the environment has neither: on a machine with
# no GPU (no nvidia-smi, no rocm-smi on PATH) the PyTorch CPU index (PyPI's are CUDA builds,
# several GB: README, "Two commands" and "Installing"); with a GPU, pip's own index. `make demo TORCH_INDEX=<url>`
# picks another, `TORCH_INDEX=` pip's own.
CPU_TORCH_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi || command -v rocm-smi),,$(CPU_TORCH_INDEX))
# Only the index chosen here (not one named on the command line or in the environment) falls
# back to pip's own when it gives no pair that imports: unreachable, or a mirror that offers a
# CPU torch beside a CUDA torchvision.
TORCH_FALLBACK := $(if $(filter file,$(origin TORCH_INDEX)),yes,)

# Two retries, not pip's five: an unreachable index fails in seconds, not minutes (seen: 141 s
# for the README's CPU-index line on a machine that cannot reach it, 2.4 s with one retry).
# torch and torchvision together from TORCH_INDEX when either is missing or the two do not
# import together (a CPU torch beside PyPI's torchvision: "operator torchvision::nms does not
# exist"); nothing when both import. Where the default CPU index gives no working pair, one
# line says so and pip's own index installs them (CUDA builds, which also run on the CPU).
torch:
	@$(PYTHON) -c "import torch, torchvision" 2>/dev/null || [ -z "$(TORCH_INDEX)" ] || { \
	    echo "torch or torchvision missing in $(PYTHON)'s environment: both from" \
	         "TORCH_INDEX=$(TORCH_INDEX)"; \
	    { $(PYTHON) -m pip install --quiet --retries 2 torch torchvision \
	          --index-url "$(TORCH_INDEX)" && \
	      $(PYTHON) -c "import torch, torchvision" 2>/dev/null; } || \
	    { [ -n "$(TORCH_FALLBACK)" ] && \
	      echo "the PyTorch CPU index gave no torch and torchvision that import together" \
	           "(unreachable, or a mirror's CPU torch beside a CUDA torchvision): both from" \
	           "pip's own index instead (CUDA builds, several GB; they run on the CPU)" && \
	      $(PYTHON) -m pip install --quiet --upgrade torch torchvision && \
	      $(PYTHON) -c "import torch, torchvision"; } || { \
	        echo "torch and torchvision from $(TORCH_INDEX) did not install, or do not import" \
	             "together: install a matching pair first (README, 'Installing'), or run make with" \
	             "TORCH_INDEX= for pip's own index (CUDA builds)" >&2; \
	        exit 1; }; }

install: torch
	$(PYTHON) -m pip install --quiet -e ".[dev]"

# the demo needs the package alone: no JAX, no test tools (make install adds them)
install-run: torch
	$(PYTHON) -m pip install --quiet -e .

# The sweep, then the probe of the demo's nodes on the same link and CPU quota (about 6 of the
# 20 minutes here; its framework runs train in the probe's own processes), whose probe.json in
# the sweep's directory gives every point the plan's prediction (pred_ips in runs.csv, the
# plan's line in weak_scaling.png), the calibration (predicted against measured, nothing
# fitted), then the analysis.
demo: install-run
	$(PYTHON) -m vitfsdp.sweep experiment=demo hydra.sweep.dir=$(DEMO_DIR) $(DEMO_OVERRIDES)
	$(PYTHON) -m vitfsdp.probe experiment=demo strategy=DDP,FULL_SHARD,HYBRID_2GPU nodes=1,2,4 --out $(DEMO_DIR)
	$(PYTHON) -m vitfsdp.plan --calibrate $(DEMO_DIR)
	$(PYTHON) -m vitfsdp.analysis $(DEMO_DIR) --report
	@echo "figures, tables and report: $(DEMO_DIR)/analysis/ (memory.png, weak_scaling.png, loss.png, report.html, runs.csv ...)"

# The virtual cluster's settings come from the environment or this command line, e.g.
# `make slurm-up VITFSDP_SLURM_NETWORK_GBIT_S=0.2`: nodes apart on an emulated link (root);
# slurm-down stops it and removes its network (launch/virtual/README.md).
slurm-up:
	VITFSDP_SLURM_DIR=$(SLURM_DIR) bash launch/virtual/start.sh

slurm-down:
	VITFSDP_SLURM_DIR=$(SLURM_DIR) bash launch/virtual/stop.sh

# Two pytest workers, each test file on one worker (module fixtures run once): much of the
# suite waits on process start-up and the Slurm queue rather than on the CPU. Files in the
# order tests/conftest.py gives them (the longest first), not reordered by number of tests;
# the 15 slowest tests listed at the end, to keep CI time in view.
PYTEST_ARGS ?= -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15

# Debian's chromium, for the test that opens the HTML report in a headless browser (root; the
# test is skipped where chromium is absent).
browser:
	@command -v chromium >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }

test: install slurm-up browser
	VITFSDP_SLURM=1 SLURM_CONF=$(SLURM_DIR)/etc/slurm.conf $(PYTHON) -m pytest $(PYTEST_ARGS)

test-noslurm: install
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# no install: between edits, offline too (make install or make test first)
test-fast:
	$(PYTHON) -m pytest -q -n 2 --durations=5 tests/unit

# No pip install from an index here: a GPU node may reach none. tools/gpu-check.sh installs
# the carried wheels (make gpu-wheels) offline, or uses the installed project where there are
# none; results in GPU_OUT (provenance.txt, steps.csv, <step>.tar.gz with the log, the -rA
# summary of every test's figures, bench.csv and the records).
GPU_OUT ?= runs/gpu-check

test-gpu:
	OUT=$(GPU_OUT) PYTHON=$(PYTHON) bash tools/gpu-check.sh test

bench-gpu:
	OUT=$(GPU_OUT) PYTHON=$(PYTHON) bash tools/gpu-check.sh bench

gpu-rehearsal:
	bash tools/rehearse-gpu-check.sh

lint:
	$(PYTHON) -m ruff check .

# hydra-core, omegaconf, antlr4 (built here: PyPI has only its sdist), submitit and filelock 4
# (vitfsdp.core.locks; the node's torch may bring a 3.x) as
# Python 3.12 wheels in .whl/, for tools/gpu-check.sh on a node that reaches no registry; in
# .whl/build/ what the project's own build there needs (setuptools, setuptools-scm and its
# dependencies); and .whl/version.txt, this checkout's version by setuptools-scm (commit, and a
# date where it is dirty), which a copy without .git builds as: run it after the last commit
GPU_PY ?= 3.12
GPU_WHEELS ?= hydra-core==1.3.2 omegaconf==2.3.0 submitit==1.5.4 filelock==4.0.8
GPU_BUILD_WHEELS ?= setuptools==84.2.1 setuptools-scm==10.3.4 vcs-versioning==2.6.0 \
    packaging==26.2

gpu-wheels:
	mkdir -p .whl/build
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PY) \
	    --implementation cp --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)
	$(PYTHON) -m pip wheel --quiet --no-deps -w .whl antlr4-python3-runtime==4.9.3
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PY) \
	    --implementation cp --platform manylinux2014_x86_64 -d .whl/build $(GPU_BUILD_WHEELS)
	@# setuptools-scm for this Python, in a folder of its own: nothing installed here
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	    $(PYTHON) -m pip install --quiet --target "$$tmp" \
	        $(filter setuptools-scm==%,$(GPU_BUILD_WHEELS)) && \
	    PYTHONPATH="$$tmp" $(PYTHON) -m setuptools_scm > .whl/version.txt
	@echo "gpu-wheels: version $$(cat .whl/version.txt)"
