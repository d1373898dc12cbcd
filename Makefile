# Two commands do all set-up on a fresh machine (see README):
#   make run    install into .venv, then run the default pipeline end to end
#   make test   install into .venv, then run the tests
VENV ?= .venv
PYTHON := $(VENV)/bin/python
CORES ?= 2

.PHONY: run test lint dry-run-pythia

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	# torch first, pinned: a bare `torch` requirement would pull a multi-GB CUDA build
	$(PYTHON) -m pip install --quiet torch==2.13.0
	$(PYTHON) -m pip install --quiet -e ".[test]"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/snakemake --profile profiles/local --cores $(CORES)

test: $(VENV)/.installed
	$(PYTHON) -m pytest -q

lint: $(VENV)/.installed
	$(VENV)/bin/snakemake --lint
	$(VENV)/bin/snakefmt --check Snakefile workflow/rules

dry-run-pythia: $(VENV)/.installed
	$(VENV)/bin/snakemake -n --configfile config/pythia.yaml --quiet rules
