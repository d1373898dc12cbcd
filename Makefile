# Two commands do all set-up on a fresh machine (see README):
#   make run    install into .venv, then run the default pipeline end to end
#   make test   install into .venv, then run the tests
#   make lock   refresh envs/lock.txt: the newest releases within pyproject's ranges
VENV ?= .venv
PYTHON := $(VENV)/bin/python
CORES ?= 2
# `make test`: test files spread over this many pytest-xdist workers (0: one process)
TEST_WORKERS ?= 2
# The exact versions CI tested (pip constraints, Python 3.11); `make LOCK=` installs from
# pyproject's ranges instead (another Python, another torch).
LOCK ?= envs/lock.txt
TORCH ?= torch==$(shell sed -n 's/^torch==//p' envs/lock.txt)+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_RANGE := $(shell sed -n 's/^ *"\(torch[<>=~!][^"]*\)".*/\1/p' pyproject.toml)
LOCK_VENV ?= $(VENV)-lock

.PHONY: run test lint lock dry-run-pythia

$(VENV)/.installed: pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	# torch alone, pinned, from PyTorch's CPU index: PyPI's Linux torch is the CUDA build
	# (~530 MB plus ~3 GB of CUDA libraries). --no-deps: its dependencies come from PyPI in
	# the next step, so that index is asked about torch only. A GPU machine or cluster:
	#   make TORCH=torch==2.13.0 TORCH_INDEX=https://pypi.org/simple
	$(PYTHON) -m pip install --quiet --no-deps "$(TORCH)" --index-url $(TORCH_INDEX)
	$(PYTHON) -m pip install --quiet $(if $(LOCK),-c $(LOCK)) -e ".[test]"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/snakemake --profile profiles/local --cores $(CORES)

test: $(VENV)/.installed
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

lint: $(VENV)/.installed
	$(VENV)/bin/snakemake --lint
	$(VENV)/bin/snakefmt --check Snakefile workflow
	$(VENV)/bin/ruff check src tests workflow benchmarks

# A scratch venv resolved from pyproject's ranges alone, frozen (lmsat itself left out,
# torch without its local label, the header kept). Then pin envs/lmsat.yaml to match
# (tests/test_inputs.py says where they differ) and run the tests.
lock:
	rm -rf $(LOCK_VENV)
	python3 -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --no-deps "$(TORCH_RANGE)" --index-url $(TORCH_INDEX)
	$(LOCK_VENV)/bin/python -m pip install --quiet -e ".[test,cloud]"
	grep '^#' envs/lock.txt > envs/lock.txt.new
	$(LOCK_VENV)/bin/python -m pip freeze --exclude-editable | grep -v '^#' \
		| sed 's/^\(torch==[^+]*\)+.*/\1/' | sort -f >> envs/lock.txt.new
	mv envs/lock.txt.new envs/lock.txt
	rm -rf $(LOCK_VENV)

dry-run-pythia: $(VENV)/.installed
	$(VENV)/bin/snakemake -n --configfile config/pythia.yaml --quiet rules
