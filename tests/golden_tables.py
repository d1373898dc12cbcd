"""The default run's tables as recorded, and the comparison that says a fresh run found the
same science (tests/test_workflow.py::test_tables_match_the_recorded_default_run).

tests/data/default_tables/ holds every table of the default run (the CSVs without their
provenance columns, Table 1's Markdown and LaTeX as written), readable in a diff. A fresh
run matches when each recorded table is made again with the same columns in the same
order and the same rows in the same order; keys, names, flags and integers equal; and
each float within the tolerance of its quantity (TOLERANCES, with the measured spread it
comes from). Provenance columns (lmsat.tables.with_provenance: the config hash, the library
versions, the lmsat source hash of the table and of each row) change with any edit by
design, and weight hashes with any bit of the weights: neither is compared (is_provenance;
made_with.txt keeps the recording's). A change that means to change results records the
new tables:

    python tests/golden_tables.py record <run>/results/default/tables
    python tests/golden_tables.py compare <run>/results/default/tables  # differences, largest deviations
"""

from __future__ import annotations

import csv
import io
import math
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

RECORDED = Path(__file__).resolve().parent / "data" / "default_tables"
MADE_WITH = RECORDED / "made_with.txt"  # the recording's provenance (versions, hashes), not compared
PROVENANCE = {"config_sha256", "lmsat_source_sha256", "row_lmsat_source"}
INTEGER = re.compile(r"-?\d+")
# a number in Markdown or LaTeX text: its digits after the point set the precision it was printed at
NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Tolerance:
    """|made - recorded| <= atol + rtol * |recorded|, and why that much."""

    atol: float
    rtol: float
    why: str

    def admits(self, recorded: float, made: float) -> bool:
        if math.isnan(recorded) or math.isnan(made):
            return math.isnan(recorded) and math.isnan(made)
        if math.isinf(recorded) or math.isinf(made):
            return recorded == made
        return abs(made - recorded) <= self.atol + self.rtol * abs(recorded)


# quantity (a column name, in every table that has it) or (table, column) -> Tolerance, set
# from the measured spread of the default run (the numbers in each `why`); a float column
# without an entry is an error, not a pass.
TOLERANCES: dict[str | tuple[str, str], Tolerance] = {}


def tolerance_of(table: str, column: str, tolerances=TOLERANCES) -> Tolerance | None:
    return tolerances.get((table, column), tolerances.get(column))


def is_provenance(column: str) -> bool:
    """Not compared: provenance, and the weights' hashes (head_sha256, embedding_sha256,
    identical_weights' sha256), which identify the exact bits and so change with the last
    bit of a float32 update on another CPU (the tables' equal-weights groups, which the
    hashes serve, are compared)."""
    return column in PROVENANCE or column.endswith(("_version", "sha256"))


def read_csv_text(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a CSV as text, provenance columns dropped (no float is parsed and
    written again)."""
    rows = list(csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8"), newline="")))
    if not rows:
        return [], []
    keep = [i for i, column in enumerate(rows[0]) if not is_provenance(column)]
    return [rows[0][i] for i in keep], [[row[i] for i in keep] for row in rows[1:]]


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def column_kind(cells: list[str]) -> str:
    """'int', 'float' or 'text' from a column's recorded cells (empty cells aside)."""
    cells = [cell for cell in cells if cell != ""]
    if cells and all(INTEGER.fullmatch(cell) for cell in cells):
        return "int"
    if cells and all(_float(cell) is not None for cell in cells):
        return "float"
    return "text"


def compare_csv(name: str, recorded: Path, made: Path, tolerances=TOLERANCES) -> list[str]:
    """The differences between two versions of one CSV table, each naming table, column,
    row (its text key columns) and both values; [] when they match."""
    header, rows = read_csv_text(recorded)
    made_header, made_rows = read_csv_text(made)
    if made_header != header:
        return [f"{name}: columns {made_header} differ from the recorded {header}"]
    if len(made_rows) != len(rows):
        return [f"{name}: {len(made_rows)} rows, recorded {len(rows)}"]
    differences = []
    kinds = [column_kind([row[j] for row in rows]) for j in range(len(header))]
    keys = [j for j, kind in enumerate(kinds) if kind != "float"]
    for j, (column, kind) in enumerate(zip(header, kinds)):
        tolerance = tolerance_of(name, column, tolerances) if kind == "float" else None
        if kind == "float" and tolerance is None:
            differences.append(f"{name}.{column}: a float column with no tolerance in tests/golden_tables.py TOLERANCES")
            continue
        for row, made_row in zip(rows, made_rows):
            a, b = row[j], made_row[j]
            if kind == "float" and a != "" and b != "" and _float(b) is not None:
                same = tolerance.admits(float(a), float(b))
            else:
                same = a == b
            if not same:
                key = ", ".join(f"{header[k]}={row[k]}" for k in keys if header[k] != column)
                bound = f" (tolerance atol={tolerance.atol:g}, rtol={tolerance.rtol:g})" if tolerance else ""
                differences.append(f"{name}.{column} [{key}]: {b}, recorded {a}{bound}")
    return differences


def compare_text(name: str, recorded: Path, made: Path) -> list[str]:
    """A rendered table (Markdown, LaTeX): the text between numbers equal; each number
    within one unit of the last digit it was printed with (values within their tolerance
    can round either way)."""
    a, b = Path(recorded).read_text(encoding="utf-8"), Path(made).read_text(encoding="utf-8")
    if NUMBER.split(a)[::2] != NUMBER.split(b)[::2]:  # split also returns the groups: keep the text
        return [f"{name}: its text (numbers aside) differs from the recorded one"]
    differences = []
    for ma, mb in zip(NUMBER.finditer(a), NUMBER.finditer(b)):
        unit = 10.0 ** -len(ma.group(1) or "")  # 0.01 for 3.14, 1 for 42
        exponent = "e" in ma.group().lower()
        if ma.group() != mb.group() and (exponent or abs(float(mb.group()) - float(ma.group())) > 1.000001 * unit):
            differences.append(f"{name}: {mb.group()}, recorded {ma.group()} (at character {ma.start()})")
    return differences


def compare_tables(made_dir: Path, recorded_dir: Path = RECORDED, tolerances=TOLERANCES) -> list[str]:
    """Every recorded table against the one in `made_dir` (tables made since and not
    recorded are not compared)."""
    differences = []
    for recorded in sorted(Path(recorded_dir).iterdir()):
        if recorded.name == MADE_WITH.name:
            continue
        made = Path(made_dir) / recorded.name
        if not made.exists():
            differences.append(f"{recorded.name}: recorded, not made")
        elif recorded.suffix == ".csv":
            differences += compare_csv(recorded.stem, recorded, made, tolerances)
        else:
            differences += compare_text(recorded.name, recorded, made)
    return differences


def record(made_dir: Path, recorded_dir: Path = RECORDED) -> None:
    """Write `made_dir`'s tables as the recorded ones: CSVs without provenance, others as
    they are, and what they were made with (the provenance of loss.csv) in MADE_WITH."""
    if recorded_dir.exists():
        shutil.rmtree(recorded_dir)
    recorded_dir.mkdir(parents=True)
    with open(Path(made_dir) / "loss.csv", encoding="utf-8", newline="") as f:
        first = next(csv.DictReader(f))
    made_with = {column: value for column, value in first.items() if is_provenance(column) and column != "row_lmsat_source"}
    (recorded_dir / MADE_WITH.name).write_text("".join(f"{k}: {v}\n" for k, v in made_with.items()))
    for path in sorted(Path(made_dir).iterdir()):
        if path.suffix == ".csv":
            header, rows = read_csv_text(path)
            with open(recorded_dir / path.name, "w", encoding="utf-8", newline="") as out:
                csv.writer(out, lineterminator="\n").writerows([header, *rows])
        elif path.is_file():
            shutil.copyfile(path, recorded_dir / path.name)


def spreads(made_dir: Path, other_dir: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(table, float column) -> (largest |a - b|, largest |a - b| / |a|) between two runs'
    tables: the spread a tolerance is set from."""
    out = {}
    for path in sorted(Path(made_dir).glob("*.csv")):
        header, rows = read_csv_text(path)
        other_header, other_rows = read_csv_text(Path(other_dir) / path.name)
        assert other_header == header and len(other_rows) == len(rows), path.name
        for j, column in enumerate(header):
            if column_kind([row[j] for row in rows]) != "float":
                continue
            pairs = [(float(r[j]), float(o[j])) for r, o in zip(rows, other_rows) if r[j] != "" and o[j] != ""]
            pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
            absolute = max((abs(a - b) for a, b in pairs), default=0.0)
            relative = max((abs(a - b) / abs(a) for a, b in pairs if a != 0), default=0.0)
            out[path.stem, column] = (absolute, relative)
    return out


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "record":
        record(directory)
    elif command == "compare":
        for difference in compare_tables(directory):
            print(difference)
        for (table, column), (absolute, relative) in spreads(RECORDED, directory).items():
            print(f"{table}.{column}: max |diff| {absolute:.3g}, max rel {relative:.3g}")
    else:
        sys.exit(f"usage: {sys.argv[0]} record|compare <tables directory>")
