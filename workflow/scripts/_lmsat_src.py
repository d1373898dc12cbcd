"""Imported first by every workflow script: puts this workflow's own `src/` at the front of
sys.path, so that a job imports the lmsat beside its scripts whether or not lmsat is
installed in the job's environment (`--sdm conda` builds envs/lmsat.yaml, which holds only
the dependencies: Snakemake copies that file under .snakemake/conda/, where a `-e ..` of
this repository would point nowhere).

Snakemake puts the directory of a local script on sys.path before running it, so
`import _lmsat_src` finds this file.
"""

import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
# At the front even when already on sys.path: Snakemake's script preamble appends the
# planner's sys.path (which holds this src/) behind site-packages, where an installed
# lmsat (another checkout's editable install) would otherwise win.
sys.path[:] = [SRC] + [entry for entry in sys.path if entry != SRC]
