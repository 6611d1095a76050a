# Two commands on a fresh machine:  make search   (set up, then the main job)
#                                   make test     (set up, then the test suite)
PYTHON      ?= python3
VENV        ?= .venv
SPACE       ?= ppo_small
# PyTorch: the CPU build by default. On a GPU machine pick a CUDA build, e.g.
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH       ?= torch==2.13.0
TORCH_INDEX ?=
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.tune-rl-installed
PIP         := $(BIN)/pip install --quiet --disable-pip-version-check

.PHONY: setup search test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) -e ".[test]"
	touch $@

search: setup
	$(BIN)/tune-rl search --space $(SPACE)

test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python bench/solve_cartpole.py
	$(BIN)/python bench/mlflow_batching.py

clean:
	rm -rf $(VENV) build *.egg-info
