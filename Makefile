# Everything a fresh machine needs: `make demo` and `make test` create .venv and install on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test setup bench clean

# torch is pinned here (pyproject has a range for users) so that set-up never pulls a multi-GB CUDA build;
# torchao with it, in the release built against that torch.
$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || { echo "need Python >= 3.11 (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0 torchao==0.18.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/bessemer demo

test: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BIN)/python -m pytest

bench: $(STAMP)
	for f in bench/*.py; do OMP_NUM_THREADS=2 $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info
