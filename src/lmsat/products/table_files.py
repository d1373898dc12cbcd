"""A table's files: the CSV with its provenance columns (write_csv, read_table), and the
Markdown and LaTeX renderings beside it (write_table)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import h5py

from lmsat.core.integrity import csv_with_checksum, verify_csv
from lmsat.core.io import atomic_path, library_versions, read_json, source_sha256
from lmsat.core.lazy import lazy_module

pd = lazy_module("pandas")  # imported by the first job that writes a table, not by every metric job
log = logging.getLogger(__name__)


def recorded_source(path) -> tuple[str, str, str]:
    """(model, revision, lmsat source hash) recorded in a per-checkpoint output: a JSON
    record or an HDF5 file (attributes); the hash is "" for a file from before it."""
    if Path(path).suffix == ".json":
        record = read_json(path)  # unreadable: a named error
        return record["model"], record["revision"], record.get("lmsat_source", "")
    with h5py.File(path, "r") as f:
        versions = json.loads(f.attrs.get("versions", "{}"))
        return str(f.attrs["model"]), str(f.attrs["revision"]), versions.get("lmsat_source", "")


def with_provenance(table: pd.DataFrame, config_sha256: str, inputs=()) -> pd.DataFrame:
    """`table` with the config hash, library versions and lmsat source hash that made it,
    as constant columns. With the per-checkpoint `inputs` it was built from, each row also
    gets `row_lmsat_source`: the source hash of the code that computed that checkpoint's
    result, so rows computed before a library edit stand out (and a warning says so)."""
    table = table.copy()
    table["config_sha256"] = config_sha256
    versions = library_versions()
    table["lmsat_source_sha256"] = versions.pop("lmsat_source")
    for name, version in versions.items():
        table[f"{name}_version"] = version
    if inputs:
        made_by = {(model, revision): source for model, revision, source in map(recorded_source, inputs)}
        if "revision" in table:
            table["row_lmsat_source"] = [made_by.get(key, "") for key in zip(table["model"], table["revision"])]
        else:  # a row per model (saturation_verdicts): the sources of all its checkpoints, ";"-joined if several
            of_model: dict[str, set[str]] = {}
            for (model, _), source in made_by.items():
                of_model.setdefault(model, set()).add(source)
            table["row_lmsat_source"] = [";".join(sorted(of_model.get(model, {""}))) for model in table["model"]]
        keys = [column for column in ("model", "revision") if column in table]
        stale = table.loc[table["row_lmsat_source"] != source_sha256(), keys].drop_duplicates()
        if len(stale):
            log.warning(
                "%d checkpoints were computed by other lmsat code than this table's (column row_lmsat_source); "
                "rerun them with --forcerun if the library change matters: %s",
                len(stale), ", ".join("@".join(map(str, key)) for key in stale.itertuples(index=False)),
            )
    return table


def write_csv(table: pd.DataFrame, path, config_sha256: str | None = None, inputs=()) -> None:
    """Write a table atomically (the file appears only once complete); with `config_sha256`,
    an aggregated table also records the config, library versions and source that made it
    (and with `inputs`, the source that made each row: with_provenance). Every CSV table of
    the workflow is written here."""
    if config_sha256 is not None:
        table = with_provenance(table, config_sha256, inputs)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(csv_with_checksum(table.to_csv(index=False, lineterminator="\n")))


def read_table(path) -> pd.DataFrame:
    """A table written by write_csv, after checking it against its checksum column (which
    is dropped): lmsat.core.integrity.IntegrityError naming the file otherwise."""
    return pd.read_csv(path).drop(columns=verify_csv(path))


def _formatted(table: pd.DataFrame) -> list[list[str]]:
    decimals = table.attrs.get("decimals", {})
    cells = []
    for key, values in zip(table.index, table.itertuples(index=False)):
        key = key if isinstance(key, tuple) else (key,)
        numbers = [
            "–" if math.isnan(value) else f"{value:.{decimals.get(column, 2)}f}"
            for column, value in zip(table.columns, values)
        ]
        cells.append([str(part) for part in key] + numbers)
    return cells


def table_to_markdown(table: pd.DataFrame) -> str:
    """GitHub Markdown; missing values shown as –."""
    header = [str(name) for name in table.index.names] + [str(column) for column in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(table.index.names) + ["---:"] * len(table.columns)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in _formatted(table)]
    return "\n".join(lines) + "\n"


def _latex_escape(text: str) -> str:
    for char, replacement in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
        text = text.replace(char, replacement)
    return text.replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$").replace("–", "--")


def table_to_latex(table: pd.DataFrame) -> str:
    """A booktabs tabular (needs \\usepackage{booktabs}); arrows as $\\uparrow$/$\\downarrow$."""
    n_keys = len(table.index.names)
    header = [str(name).capitalize() for name in table.index.names] + [str(column) for column in table.columns]
    lines = [
        r"\begin{tabular}{" + "l" * n_keys + "r" * len(table.columns) + "}",
        r"\toprule",
        " & ".join(_latex_escape(cell) for cell in header) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_latex_escape(cell) for cell in row) + r" \\" for row in _formatted(table)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_table(table: pd.DataFrame, path) -> None:
    """Render `table` as Markdown or LaTeX, chosen by the suffix of path. A CSV (full
    precision) is lmsat.products.table_files.write_csv(table.reset_index(), path), the one CSV writer."""
    path = Path(path)
    writers = {
        ".md": lambda: path.write_text(table_to_markdown(table), encoding="utf-8"),
        ".tex": lambda: path.write_text(table_to_latex(table), encoding="utf-8"),
    }
    if path.suffix not in writers:
        raise ValueError(
            f"path {path}: unknown table format {path.suffix!r}; use .md or .tex "
            "(a .csv: lmsat.products.table_files.write_csv(table.reset_index(), path))"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    writers[path.suffix]()
