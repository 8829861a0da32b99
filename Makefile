# vitfsdp: the two commands of the README, and what they need.
#   make demo   install, then run the demo weak-scaling sweep and its analysis (CPU, minutes)
#   make test   install, start the virtual Slurm cluster (root: installs slurm-wlm + munge),
#               then run the test suite; the Slurm tests fail if the cluster is not up
#   make test-noslurm   the same without the cluster (its tests are skipped), for non-root users
#   make test-gpu   on a GPU node: install, then check every GPU path (tests/test_gpu.py)
#   make bench-gpu  on a GPU node: issue 9's single-GPU benchmark into runs/bench/<host>/
PYTHON ?= python3
DEMO_DIR ?= runs/demo
SLURM_DIR ?= /tmp/vitfsdp-slurm

.PHONY: install demo test test-noslurm test-gpu bench-gpu slurm-up slurm-down lint

install:
	$(PYTHON) -m pip install --quiet -e ".[dev]"

demo: install
	$(PYTHON) -m vitfsdp.sweep experiment=demo hydra.sweep.dir=$(DEMO_DIR)
	$(PYTHON) -m vitfsdp.analysis $(DEMO_DIR)
	@echo "figures and tables: $(DEMO_DIR)/analysis/ (weak_scaling.png, memory.png, runs.csv, points.csv, best.csv ...; add --report for report.md/html)"

slurm-up:
	VITFSDP_SLURM_DIR=$(SLURM_DIR) bash launch/virtual/start.sh

slurm-down:
	VITFSDP_SLURM_DIR=$(SLURM_DIR) bash launch/virtual/stop.sh

# Two pytest workers, each test file on one worker (module fixtures run once): much of the
# suite waits on process start-up and the Slurm queue rather than on the CPU.
PYTEST_ARGS ?= -q -n 2 --dist loadfile

test: install slurm-up
	VITFSDP_SLURM=1 SLURM_CONF=$(SLURM_DIR)/etc/slurm.conf $(PYTHON) -m pytest $(PYTEST_ARGS)

test-noslurm: install
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# -rA: every test's printed figures (timings, memory, peaks) after the results
test-gpu: install
	$(PYTHON) -m pytest -m gpu -v -rA tests/test_gpu.py

# the bench refuses an --out that holds measurements: a second run needs BENCH_OUT=...
BENCH_MODELS ?= vit_base,vit_large_patch16_224,vit_huge_patch14_224,vit_1b
BENCH_OUT ?= runs/bench/$(shell hostname -s)

bench-gpu: install
	$(PYTHON) -m vitfsdp.bench --models $(BENCH_MODELS) --batch 32 --precision bf16 \
	    --profile-steps 10 --out $(BENCH_OUT)

lint:
	$(PYTHON) -m ruff check .
