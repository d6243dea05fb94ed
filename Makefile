# Two commands for users: `make demo` (scan the default model) and `make test`.
# Each creates .venv if missing, installs memopt with its ORT extra, builds ORTModule's
# C++ extensions once, and skips whatever is already done.

PYTHON ?= python3
VENV ?= .venv
# cpu: onnxruntime-training-cpu; gpu: the CUDA 11.8 build with a cu118 torch (docs/supported-stacks.md).
EXTRA ?= $(if $(shell command -v nvidia-smi 2>/dev/null),gpu,cpu)
TORCH_CU118_INDEX ?= https://download.pytorch.org/whl/cu118
GPU_TORCH ?= torch==2.3.1
TORCH_ORT ?= torch-ort==1.19.2

BIN := $(VENV)/bin
INSTALLED := $(VENV)/.memopt-installed-$(EXTRA)
CHECK_TOOLS := $(VENV)/.memopt-check-tools

.PHONY: setup demo test test-all test-bench test-fast test-torch-current check bench clean-venv

setup: $(INSTALLED)
	$(BIN)/memopt stack --build-extensions

# The scan, then the main job: a tiny eight-layer GPT at batch 128, tuned headless to a verified
# config. Its budget is 90% of the no-config peak this machine measures first: RSS on CPU (and
# memory on a GPU) differs by 150 MiB and more between machines (library builds, allocator), so
# a fixed figure fits here and not there. `scan --plot` refuses a folder that does not exist.
DEMO_TARGET := gpt --size tiny -o n_layer=8 --seq 64
demo: setup
	mkdir -p runs
	$(BIN)/memopt scan gpt --batch 8 --seq 512 --plot runs/demo-scan.png
	$(BIN)/memopt trial $(DEMO_TARGET) --batch 128 --config none --json --runs-dir runs/demo-tune > runs/demo-no-config.json
	$(BIN)/memopt tune $(DEMO_TARGET) --target-batch 128 --no-tui --runs-dir runs/demo-tune \
	  --budget "$$($(BIN)/python -c 'import json; print(int(json.load(open("runs/demo-no-config.json"))["peak_bytes"] * 0.9) // 2**20, "MiB", sep="")')"

# Two workers, each test file's tests spread over both as they free up (a module's fixtures run
# once per worker that takes one of its tests); the slowest 25 are listed at the end. `make test`
# leaves out the long end-to-end runs (marker long) and the smoke runs of the bench/ scripts
# (marker bench): `make test-all` runs every test, `make test-bench` the smoke runs alone. It
# keeps one end-to-end tune to a verified result per back end and launcher, on small models: ORT
# recipe, --cmd (ORTTrainer, accelerate) and torchrun (test_tune.py, test_stacks.py,
# test_command.py), torch recipe, --cmd (the README's block as pasted) and torchrun
# (test_torch_tune.py). No
# test of `make test` takes 20 minutes: one that does is hung, and fails with its stack before
# CI's own limit ends everything unsaid (pyproject.toml's 40 allow for the long ones).
TEST_WORKERS ?= 2
PYTEST_ON_WORKERS := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25
test: setup
	$(PYTEST_ON_WORKERS) -m "not long and not bench" --timeout 1200

test-all: setup
	$(PYTEST_ON_WORKERS)

test-bench: setup
	$(PYTEST_ON_WORKERS) -m bench

# The torch back end on a current PyTorch, in a second venv without onnxruntime-training: the
# pinned stack keeps torch 2.4.1 for ORTModule, whose selective checkpointing is the private 2.4
# form, so the public create_selective_checkpoint_contexts path (torch >= 2.5) and the scan are
# tested here. pip takes torch 2.13.0 from this machine kind's disk; constraints.txt pins the ORT
# stack and stays out. CI runs it after `make test`.
TORCH_CURRENT ?= torch==2.13.0
TORCH_VENV ?= .venv-torch-current
TORCH_INSTALLED := $(TORCH_VENV)/.memopt-installed
TORCH_CURRENT_TESTS := tests/recompute tests/backends/torch/test_torch_scan.py tests/backends/torch/test_torch_simulate.py tests/backends/torch/test_torch_selective.py tests/backends/torch/test_optimizer_offload_plans.py
test-torch-current: $(TORCH_INSTALLED)
	$(TORCH_VENV)/bin/python -c 'import importlib.util, sys; sys.exit("onnxruntime is installed in $(TORCH_VENV)" if importlib.util.find_spec("onnxruntime") else 0)'
	$(TORCH_VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not long and not bench and not ort" --timeout 1200 $(TORCH_CURRENT_TESTS)

$(TORCH_INSTALLED): pyproject.toml Makefile
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TORCH_VENV)/bin/pip install --quiet '$(TORCH_CURRENT)'
	$(TORCH_VENV)/bin/pip install --quiet -e '.[hf,test]'
	touch $@

# The fast tests: in pytest's own process, no ORT (under a minute). The markers (pyproject.toml)
# select the others: `pytest -m "not ort"` adds the tests that start processes without training.
test-fast: $(INSTALLED)
	$(BIN)/python -m pytest -m "not ort and not subprocess and not torch and not slow"

# Lint, formatting, types (strict on memopt/ and tui/) and the stage layering (pyproject.toml configures each).
check: $(CHECK_TOOLS)
	$(BIN)/ruff check memopt tui tests bench
	$(BIN)/ruff format --check memopt tui tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Benchmarks (tens of minutes; not part of CI): tables for BENCHMARKS.md, plots in bench/results.
bench: setup
	$(BIN)/python bench/bench_parity.py
	$(BIN)/python bench/bench_scan.py
	$(BIN)/python bench/bench_parse.py
	$(BIN)/python bench/bench_memory_model.py
	$(BIN)/python bench/bench_planning.py
	$(BIN)/python bench/bench_tuning.py --runs-dir runs/bench-tuning

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The optimum extra (optimum's ORTTrainer, accelerate) too, so tests/targets/test_stacks.py runs
# the stacks users train with. ORTTrainer imports torch_ort, whose own dependencies would replace
# the ORT build chosen above: it goes in without them.
$(INSTALLED): pyproject.toml constraints.txt | $(BIN)/python
ifeq ($(EXTRA),gpu)
	$(BIN)/pip install $(GPU_TORCH) --index-url $(TORCH_CU118_INDEX)
	$(BIN)/pip install -e '.[gpu,hf,test,optimum]'
	$(BIN)/pip install --no-deps $(TORCH_ORT)
else
	$(BIN)/pip install -c constraints.txt -e '.[cpu,hf,test,optimum]'
	$(BIN)/pip install -c constraints.txt --no-deps $(TORCH_ORT)
endif
	touch $@

$(CHECK_TOOLS): pyproject.toml constraints.txt $(INSTALLED)
	$(BIN)/pip install -e '.[$(EXTRA),check]' $(if $(filter cpu,$(EXTRA)),-c constraints.txt)
	touch $@

clean-venv:
	rm -rf $(VENV) $(TORCH_VENV)
