# Two commands do all set-up on a fresh machine (see README):
#   make run    install into .venv, then run the default pipeline end to end
#   make test   install into .venv, then run the tests
VENV ?= .venv
PYTHON := $(VENV)/bin/python
CORES ?= 2
TORCH ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: run test lint dry-run-pythia

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	# torch first, pinned, from PyTorch's CPU index: PyPI's Linux torch is the CUDA build
	# (~530 MB plus ~3 GB of CUDA libraries). A GPU machine or cluster takes that one:
	#   make TORCH=torch==2.13.0 TORCH_INDEX=https://pypi.org/simple
	$(PYTHON) -m pip install --quiet "$(TORCH)" --extra-index-url $(TORCH_INDEX)
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
