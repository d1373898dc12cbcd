"""Digests of a run's tables without their provenance columns: what a refactor must leave
byte-identical (tests/test_workflow.py::test_tables_match_the_recorded_default_run).

Provenance columns (lmsat.tables.with_provenance: the config hash, the library versions,
the lmsat source hash of the table and of each row) change with any edit by design; every
other byte of every CSV, and Table 1's Markdown and LaTeX, must not. Columns are dropped
by name on the raw text (no float is parsed and written again).

    python tests/golden_tables.py results/default/tables > tests/data/default_tables.json
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from pathlib import Path

PROVENANCE = {"config_sha256", "lmsat_source_sha256", "row_lmsat_source", "table_sha256"}


def _is_provenance(column: str) -> bool:
    return column in PROVENANCE or column.endswith("_version")


def table_digest(path: Path) -> str:
    """sha256 of the file; for a CSV, of its text without the provenance columns."""
    data = path.read_bytes()
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
        keep = [i for i, column in enumerate(rows[0]) if not _is_provenance(column)] if rows else []
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([[row[i] for i in keep] for row in rows])
        data = out.getvalue().encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def table_digests(directory: Path) -> dict[str, str]:
    return {path.name: table_digest(path) for path in sorted(Path(directory).iterdir()) if path.is_file()}


if __name__ == "__main__":
    json.dump(table_digests(Path(sys.argv[1])), sys.stdout, indent=1, sort_keys=True)
    print()
