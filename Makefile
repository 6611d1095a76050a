# Two commands on a fresh machine:  make search   (set up, then the main job)
#                                   make test     (set up, then the test suite)
PYTHON      ?= python3
VENV        ?= .venv
SPACE       ?= ppo_small
# The unit tests' order (pytest-random-order): a new one each `make test`, shown in the command line make prints;
# `make test SEED=<that number>` runs the same order again
SEED        ?= $(shell date +%s)
# PyTorch: the CPU build by default. On a GPU machine pick a CUDA build, e.g.
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH       ?= torch==2.13.0
TORCH_INDEX ?=
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.tune-rl-installed
# The exact version of every package but torch that the suite last passed with (`make lock` writes it, on purpose
# only): setup installs through it, so a fresh clone gets those versions and not the newest of the day.
LOCK        := constraints.txt
LOCK_TORCH  := $(VENV)/.torch-constraint
# What the CLI, the tests, Ray's daemons and a trial's worker import (setup writes their bytecode). BOHB's statsmodels,
# psycopg and torch._dynamo (RLlib's optimizers import it, with sympy) were 1,100 of the 1,830 files the unit tests
# compiled after setup in a clean clone (2026-11-26)
WARM_IMPORTS_CLI := tune_runner.cli.main, torch, gymnasium, mlflow, mlflow.server, mlflow.pyfunc, pandas, \
                    matplotlib.pyplot, sklearn.gaussian_process, optuna, hyperopt, smac, nevergrad, pytest, xdist, \
                    ray.tune.search.bohb, psycopg
WARM_IMPORTS_RAY := ray.tune, ray.rllib.algorithms.ppo, ray.rllib.algorithms.dqn, ray.job_submission, \
                    ray._private.workers.default_worker, ray.dashboard.agent, ray._private.runtime_env.agent.main, \
                    ray._private.log_monitor, ray.autoscaler._private.monitor, torch._dynamo
PIP         := $(BIN)/pip install --quiet --disable-pip-version-check
# pip's wheel folders (PIP_FIND_LINKS, else pip's config), handed to uv, which reads no pip settings
FIND_LINKS  ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))

# The tests also need a browser and a database server from Debian: headless Chromium for the
# dashboard's browser test, PostgreSQL for the tracking-server tests (installed once, then skipped).
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup system-deps search test lint bench shipped lock clean

setup: $(STAMP)

# torch with uv from the wheel folders pip is set up with (find-links: this machine's CPU build), 16 s where pip
# takes 35; with pip for TORCH_INDEX's build or where pip names no wheel folder. The rest with uv, which resolves
# and installs the same versions as pip in about a minute instead of 7 (torch, already there, satisfies the
# package's torch>=2.4 and is left alone).
# Bytecode: without .pyc files, where PYTHONDONTWRITEBYTECODE is set, every Ray worker and CLI process compiled
# Ray and MLflow again and the test suite took 43 minutes instead of about 25. uv's --compile-bytecode compiled all
# of site-packages (19,700 files, 52 s on 2 cores); importing what our processes import (WARM_IMPORTS, two
# interpreters at once) writes the 5,200 they use in 24 s. `make test` writes the rest as they are first imported.
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PIP) uv
	$(if $(and $(FIND_LINKS),$(if $(TORCH_INDEX),,1)),\
	  $(BIN)/uv pip install --quiet --python $(BIN)/python "$(TORCH)" $(foreach d,$(FIND_LINKS),--find-links $(d)),\
	  $(PIP) "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)))
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[test]" --constraint $(LOCK)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "import $(WARM_IMPORTS_CLI)" & \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "import $(WARM_IMPORTS_RAY)"; status=$$?; wait $$! && exit $$status
	touch $@

search: setup
	$(BIN)/tune-rl search --space $(SPACE)

system-deps:
	@if ! command -v chromium >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium postgresql >/dev/null; \
	fi
	@# zsh and fish only widen the completion tests (they skip without them): best effort
	@if ! command -v zsh >/dev/null 2>&1 || ! command -v fish >/dev/null 2>&1; then \
		{ $(SUDO) apt-get update -qq >/dev/null 2>&1; \
		  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq zsh fish >/dev/null 2>&1; } || \
		echo "zsh/fish not installed: their completion tests will skip"; \
	fi

# The unit tests in parallel (pytest-xdist, one worker per core; no Ray, so nothing to share), then the e2e
# tests on 2 workers, each with its own Ray session: every e2e file but the shipped spaces' runs whole on one
# worker (tests/conftest.py: xdist_group), so tests written to share a file's state still do. One worker left a
# quarter of the 2 cores idle: 1315 s for the e2e tests against 1181 s on 2 workers (2026-11-25).
# --no-loadscope-reorder: xdist sends the groups with the most tests first by default, which put the longest single
# tests (the shipped spaces', which conftest sorts first) last, one worker idle while the other ran them. --durations: CI
# prints the slowest tests, where the suite's time goes. PYTHONDONTWRITEBYTECODE is emptied (Python reads that as
# unset) so that a module setup did not warm is compiled once (into .venv, and __pycache__ beside our own
# modules), not again in every process that imports it.
# The unit tests run in a shuffled order (a new SEED each run): a test that passes only after, or before, another one
# (state left in the process: a registry, an env var, torch's threads) fails here rather than hiding; -q hides
# pytest-random-order's header, so the seed to reproduce a failure is the one in the command line make echoes.
test: export PYTHONDONTWRITEBYTECODE =
test: setup system-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not e2e" -n auto --durations=15 \
		--random-order-bucket=global --random-order-seed=$(SEED)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m e2e -n 2 --dist loadgroup --no-loadscope-reorder --durations=40

lint: setup
	$(BIN)/ruff check .

# The shipped spaces exactly as shipped, one after another, each row into bench/SHIPPED.md (bench/shipped.py);
# `make shipped SPACE=dqn_acrobot` for one. A slow space (tier: slow) is tested in CI at its smoke budget only.
shipped: setup
	$(BIN)/python bench/shipped.py $(if $(filter command line,$(origin SPACE)),--space $(SPACE))

bench: setup
	$(BIN)/python bench/solve_cartpole.py --rllib-seeds 3 --max-wall 150
	$(BIN)/python bench/mlflow_batching.py
	$(BIN)/python bench/dashboard_start.py
	$(BIN)/python bench/cli_startup.py

# Resolve every dependency again (all extras, CPython 3.11 on x86-64 Linux, torch left to TORCH), newest versions
# first, into $(LOCK). Run it when pyproject.toml's requirements change or to take newer versions, then `make test`;
# tests/test_lock.py fails while the installed versions or pyproject.toml disagree with the file.
lock: setup
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__)" > $(LOCK_TORCH)
	$(BIN)/uv pip compile pyproject.toml --all-extras --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	  --constraint $(LOCK_TORCH) $(foreach d,$(FIND_LINKS),--find-links $(d)) --no-emit-package torch \
	  --no-annotate --no-header --quiet -o $(LOCK).new
	{ sed -n '/^#/p' $(LOCK); cat $(LOCK).new; } > $(LOCK).tmp && mv $(LOCK).tmp $(LOCK) && rm $(LOCK).new

clean:
	rm -rf $(VENV) build *.egg-info
