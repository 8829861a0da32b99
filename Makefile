# vitfsdp: the two commands of the README, and what they need.
#   make demo   install, then run the demo weak-scaling sweep and its analysis (CPU, minutes)
#   make test   install, then run the test suite
PYTHON ?= python3
DEMO_DIR ?= runs/demo

.PHONY: install demo test lint

install:
	$(PYTHON) -m pip install --quiet -e ".[dev]"

demo: install
	$(PYTHON) -m vitfsdp.sweep experiment=demo hydra.sweep.dir=$(DEMO_DIR)
	$(PYTHON) -m vitfsdp.analysis $(DEMO_DIR)
	@echo "figures and tables: $(DEMO_DIR)/analysis/ (weak_scaling.png, memory.png, runs.csv, scaling.csv)"

test: install
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check .
