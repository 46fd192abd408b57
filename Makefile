# Everything a fresh machine needs: `make demo` and `make test` create .venv and install on first use.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test setup bench clean

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python >= 3.11) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# Pinned here so a range in pyproject never pulls a multi-GB CUDA build on a CPU machine.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BIN)/bessemer demo

test: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BIN)/python -m pytest

bench: $(STAMP)
	for f in bench/*.py; do OMP_NUM_THREADS=2 $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info
