"""The report's own pages: tables rendered as HTML, and the run's summary beside the paper's values.

Snakemake's report shows an HTML result inline (a CSV only as a download), so each table a
caption cites is rendered here as a standalone, sortable HTML page with its CSV embedded:

    html = table_html(pd.read_csv("results/tables/loss.csv"), "loss.csv")
    comparison = paper_comparison(paper_values(), {"pythia-160m": "pythia"}, fit=..., table1=...)
"""

from __future__ import annotations

import base64
import html
import math
from importlib import resources

import pandas as pd
import yaml

MAX_ROWS = 2000  # rows shown inline; the embedded CSV always has all of them
MAX_CSV_BYTES = 20_000_000  # larger CSVs are not embedded (the zip report has them)
PROVENANCE_SUFFIX = "_version"

# Scoped to .lmsat: the summary page is also embedded in the report's landing page.
STYLE = """
.lmsat { font-family: system-ui, sans-serif; font-size: 13px; margin: 12px; color: #222; max-width: 100%;
         overflow-x: auto; }
.lmsat h1 { font-size: 17px; margin: 0 0 6px; } .lmsat h2 { font-size: 15px; margin: 18px 0 6px; }
.lmsat p.note { color: #555; margin: 4px 0 10px; max-width: 60em; }
.lmsat ul { margin: 4px 0 10px 18px; list-style: disc; }
.lmsat table { border-collapse: collapse; margin-bottom: 10px; }
.lmsat th, .lmsat td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
.lmsat th { background: #f0f0f0; cursor: pointer; position: sticky; top: 0; }
.lmsat th.sorted-asc::after { content: " \\25B2"; } .lmsat th.sorted-desc::after { content: " \\25BC"; }
.lmsat td.text, .lmsat th.text { text-align: left; }
.lmsat tr:nth-child(even) td { background: #fafafa; }
.lmsat th { white-space: normal; vertical-align: bottom; }
.lmsat td.text { white-space: normal; min-width: 6em; max-width: 30em; }
.lmsat ul.figures { columns: 2 22em; }
"""

# The report's landing page puts its description (workflow.rst, which embeds the summary) in a
# narrow column (Tailwind's max-w-lg, 32rem) beside the rule graph, centred in a scrolling
# box (so what overflows it on the left or top cannot be scrolled to): where the summary is
# embedded, the column takes the page's full width from the top left and the rule graph goes
# below it, so the summary's tables are not cut off. Selectors match only a page holding it.
LANDING_STYLE = """
div.grow.flex.h-screen:has(.prose .lmsat) { align-items: flex-start; justify-content: flex-start; min-width: 0; }
div.grow.flex:has(> div > .prose .lmsat) { flex-direction: column; align-items: stretch; width: 100%; min-width: 0; }
div.grow.flex:has(> div > .prose .lmsat) > div { min-width: 0; max-width: 100%; }
.prose:has(.lmsat) { max-width: none; }
.prose .lmsat { margin: 0; }
.prose .lmsat table { width: auto; margin-top: 0; margin-bottom: 10px; font-size: 12px; line-height: 1.35; }
.prose .lmsat th, .prose .lmsat td { padding: 2px 6px; }
.prose .lmsat ul.figures { margin: 4px 0 10px 18px; padding: 0; }
.prose .lmsat ul.figures li { margin: 0; }
"""

# A figure link of the summary: inside the report, one click shows the figure with its caption
# (the report's own view of a result; `app` and `results` are the report's globals); opened on
# its own (results/<run>/report/summary.html), the link opens the PNG next to it.
FIGURE_LINK = (
    "<a href=\"{href}\" onclick=\"if (typeof app !== 'undefined' &amp;&amp; typeof results !== 'undefined' "
    "&amp;&amp; results['{path}']) {{ app.setView({{content: 'img', contentPath: results['{path}'].data_uri, "
    "resultPath: '{path}', navbarMode: 'resultinfo'}}); return false; }}\">{title}</a>"
)

# Click a header to sort by it (numbers as numbers); click again to reverse.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var ascending = !th.classList.contains("sorted-asc");
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.value, y = b.cells[column].dataset.value;
        var nx = parseFloat(x), ny = parseFloat(y);
        var order = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def page(title: str, body: str, script: bool = True) -> str:
    """A standalone HTML page (inline style and sort script; no network). script=False: no
    <script> (a page embedded in the report's landing page, whose JSON string a literal
    `</script>` would end) - its tables do not sort."""
    tail = f"<script>{SORT_SCRIPT}</script>\n" if script else ""
    style = STYLE if script else STYLE + LANDING_STYLE
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head>\n<body>\n<div class=\"lmsat\">\n{body}\n</div>\n{tail}</body></html>\n"
    )


def _cell(value) -> tuple[str, str, bool]:
    """(shown text, sort key, is_text) of one cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–", "", False
    if isinstance(value, bool):
        return str(value), str(int(value)), True
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 100_000 else str(value), str(value), False
    if isinstance(value, float):
        text = f"{value:.4g}" if abs(value) < 1e5 else f"{value:.4e}"
        return text, repr(value), False
    return str(value), str(value), True


def html_table(table: pd.DataFrame, css_class: str = "sortable") -> str:
    """`table` (its index dropped) as an HTML <table>; numbers right-aligned, text left."""
    kinds = {column: not pd.api.types.is_numeric_dtype(table[column]) or pd.api.types.is_bool_dtype(table[column])
             for column in table.columns}
    head = "".join(  # long snake_case headers may wrap after an underscore (<wbr>)
        f"<th class=\"{'text' if kinds[c] else 'num'}\">{html.escape(str(c)).replace('_', '_<wbr>')}</th>"
        for c in table.columns
    )
    rows = []
    for values in table.itertuples(index=False):
        cells = []
        for value in values:
            value = value.item() if hasattr(value, "item") else value
            text, key, is_text = _cell(value)
            cells.append(f"<td class=\"{'text' if is_text else 'num'}\" data-value=\"{html.escape(key)}\">"
                         f"{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<table class=\"{css_class}\"><thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows)
            + "\n</tbody></table>")


def provenance_columns(table: pd.DataFrame) -> list[str]:
    """The constant columns lmsat.products.table_files.with_provenance adds (config hash, library versions)."""
    return [c for c in table.columns if c == "config_sha256" or str(c).endswith(PROVENANCE_SUFFIX)]


def table_page(table: pd.DataFrame, name: str, csv_bytes: bytes | None = None, max_rows: int = MAX_ROWS) -> str:
    """A table of results/tables as a sortable HTML page named after its CSV `name`.

    Provenance columns are shown once, above the table; the first `max_rows` rows are shown,
    and the whole CSV (`csv_bytes`) is embedded as a download link when not too large.
    """
    provenance = provenance_columns(table)
    notes = []
    if provenance and len(table):
        notes.append("; ".join(f"{c} = {table[c].iloc[0]}" for c in provenance))
    shown = table.drop(columns=provenance)
    if len(shown) > max_rows:
        notes.append(f"showing the first {max_rows:,} of {len(shown):,} rows; the CSV has them all")
        shown = shown.head(max_rows)
    else:
        notes.append(f"{len(shown):,} rows; click a column header to sort")
    link = ""
    if csv_bytes is not None and len(csv_bytes) <= MAX_CSV_BYTES:
        uri = "data:text/csv;base64," + base64.b64encode(csv_bytes).decode("ascii")
        link = f" <a download=\"{html.escape(name)}\" href=\"{uri}\">download {html.escape(name)}</a>"
    body = (f"<h1>{html.escape(name)}</h1>\n<p class=\"note\">{html.escape('. '.join(notes))}.{link}</p>\n"
            + html_table(shown))
    return page(name, body)


# ---------------------------------------------------------------- the paper's values


def paper_values() -> dict:
    """The packaged paper_values.yaml: {source, values: [...]} (see the file's comments)."""
    return yaml.safe_load(resources.files("lmsat.products").joinpath("paper_values.yaml").read_text(encoding="utf-8"))


COMPARISON_COLUMNS = ["where", "section", "quantity", "model", "paper", "measured", "difference",
                      "difference_pct", "comparable"]


def _measured(value: dict, fit, table1, heads) -> list[tuple[str, float]]:
    """[(model, measured value)] of the run's counterparts of one paper value ('' = the run)."""
    measure = value["measure"]
    if measure.startswith("fit_") or measure.startswith("mean_shortfall"):
        if fit is None:
            return []
        column = measure[4:] if measure.startswith("fit_") else measure
        return [("", float(fit[column]))]
    if measure == "table1":
        if table1 is None or value["column"] not in table1.columns:
            return []
        rows = table1[(table1["model"] == value["model"]) & (table1["checkpoint"] == value["checkpoint"])]
        return [(value["model"], float(rows[value["column"]].iloc[0]))] if len(rows) else []
    if measure in ("rise_rank", "rise_werror"):
        if heads is None:
            return []
        column = "rank" if measure == "rise_rank" else "w_error"
        found = []
        for model, rows in heads[heads["kind"] == "low_rank"].groupby("model", sort=False):
            if "model" in value and value["model"] != model:
                continue
            point = rows[rows["rise_point"].astype(bool)]
            found.append((model, float(point[column].iloc[0]) if len(point) else math.nan))
        return found
    raise ValueError(f"paper_values.yaml: unknown measure {measure!r}")


def paper_comparison(paper: dict, suites: dict[str, str], fit=None, table1: pd.DataFrame | None = None,
                     heads: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's values beside this run's, one row per value and measured model.

    suites: model -> suite of this run; fit: the scaling_fit.csv row; table1: table1.csv;
    heads: bottleneck_heads.csv (None where the run made no such table). A value is
    `comparable` when the run has its suite (or model); the difference is measured - paper,
    given only then. A value the run has no counterpart of still gets a row (measured nan).
    """
    rows = []
    for value in paper["values"]:
        if "model" in value:
            comparable = value["model"] in suites
        else:
            comparable = value["suite"] in set(suites.values())
        measured = _measured(value, fit, table1, heads) or [(value.get("model", ""), math.nan)]
        for model, number in measured:
            difference = number - value["value"] if comparable and not math.isnan(number) else math.nan
            rows.append(dict(
                where=value["where"], section=value["section"], quantity=value["quantity"], model=model,
                paper=("~" if value.get("approximate") else "") + f"{value['value']:g}",
                measured=number, difference=difference,
                difference_pct=math.nan if value.get("unit") == "%" else 100 * difference / value["value"],
                comparable=comparable,
            ))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


# A shortfall is shown to 0.01 percentage points: far below the loss's own standard error
# (0.1% or more on lmsat's samples), far above the fit's float rounding (a law fitted through
# exactly two sizes leaves them shortfalls of 1e-14 %, which is 0).
SHORTFALL_DECIMALS = 2


def shortfall_shown(value: float) -> float:
    """A shortfall (%) rounded as the summary shows it (SHORTFALL_DECIMALS), -0 as 0."""
    return round(value, SHORTFALL_DECIMALS) + 0.0


def with_counterpart(comparison: pd.DataFrame) -> pd.DataFrame:
    """The rows of a paper comparison this run measured a counterpart of; the others (a
    model, suite or task the run does not have) are all NaN, left to the CSV."""
    return comparison[comparison["measured"].notna()]


def comparison_text(comparison: pd.DataFrame) -> str:
    """The paper comparison as a log shows it: the rows with a counterpart, or why none."""
    shown = with_counterpart(comparison)
    if not len(shown):
        return (f"none of the paper's {len(comparison)} values has a counterpart in this run (its models, suites "
                "and tasks are not the paper's)")
    return shown.to_string()


def key_numbers(loss: pd.DataFrame, hidden_sizes: dict[str, int], shortfall: pd.DataFrame | None = None,
                heads: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per model (loss table order, i.e. by size): d, checkpoints, best and final
    checkpoint and loss, and where available the shortfall below the scaling law and the rank
    at which a rank-r head's loss rises. Whether the final is above the best beyond noise is
    the verdict's question (verdict_rows); the raw final / best - 1, biased up by the pick of
    the best, is not given."""
    rows = []
    for model, rows_of in loss.groupby("model", sort=False):
        best = rows_of[rows_of["is_best"].astype(bool)].iloc[0]
        final = rows_of[rows_of["is_final"].astype(bool)].iloc[0]
        row = dict(model=model, hidden_size=hidden_sizes.get(model, math.nan), checkpoints=len(rows_of),
                   best_revision=best["revision"], best_loss=float(best["loss"]), final_revision=final["revision"],
                   final_loss=float(final["loss"]))
        if "implausible_loss" in rows_of:  # the loss table's flag beside the loss it marks (the best is never)
            row["final_implausible_loss"] = str(final["implausible_loss"]) == "True"
        if shortfall is not None:
            for kind in ("best", "final"):
                match = shortfall[(shortfall["model"] == model) & (shortfall["kind"] == kind)]
                row[f"{kind}_shortfall_pct"] = (shortfall_shown(float(match["shortfall_pct"].iloc[0])) if len(match)
                                                else math.nan)
        if heads is not None:
            point = heads[(heads["model"] == model) & heads["rise_point"].astype(bool)]
            row["risen_up_to_rank"] = int(point["rank"].iloc[0]) if len(point) else None
        rows.append(row)
    return pd.DataFrame(rows)


def _signed(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:+.3g}"


def interval_reading(low: float, high: float) -> str:
    """What a verdict's interval of the true rise says, in words: above 0 (the final is worse
    than some earlier checkpoint beyond noise: saturates), below 0 (better than every earlier
    one beyond noise: still improving) or across 0 (neither)."""
    if math.isnan(low) or math.isnan(high):
        return "–"
    if low > 0:
        return "above 0: the final is worse than the best earlier checkpoint"
    if high < 0:
        return "below 0: the final is better than every earlier checkpoint"
    return "across 0: no rise or fall shown"


def verdict_rows(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The summary's first table, one row per model of results/<run>/tables/saturation_verdicts.csv
    (lmsat.saturation.verdict): the verdict, the measured rise of the final above the lowest earlier
    checkpoint (negative: the final is the lowest), the simultaneous interval of the true
    rise (which always contains the measured one) and what it says, its standard error, the
    p-value, the best and the final step, and its notes (an implausible loss,
    checkpoints no longer on disk: lmsat.products.saturation_tables.verdicts_from_records)."""
    rows = []
    for v in verdicts.to_dict("records"):
        final_is_best = int(v["best_step"]) == int(v["final_step"])
        measured = v["verdict"] != "too few checkpoints"
        level = f"{100 * (1 - 2 * float(v['alpha'])):.0f}%"
        notes = v.get("notes")
        low, high = float(v["rise_low"]), float(v["rise_high"])
        rise = (_signed(float(v["rise"])) + (" (the final is the lowest)" if final_is_best else "")) if measured else "–"
        interval = f"[{_signed(low)}, {_signed(high)}]" if measured else "–"
        rows.append({"model": v["model"], "verdict": v["verdict"], "rise (nats)": rise,
                     f"rise interval ({level})": interval, "the interval is": interval_reading(low, high),
                     "rise_se": float(v["rise_se"]), "p_value": float(v["p_value"]), "best_step": int(v["best_step"]),
                     "final_step": int(v["final_step"]), "checkpoints": int(v["checkpoints"]),
                     "notes": notes if isinstance(notes, str) else ""})
    return pd.DataFrame(rows)


def verdict_notes(rows: pd.DataFrame) -> str:
    """The notes of verdict_rows as a list under the table, an item per model (issue 50: a
    400-character note per flagged checkpoint stood in a narrow column of the table; the
    column now says "below")."""
    noted = rows[rows["notes"] != ""]
    if noted.empty:
        return ""
    items = "".join(f"<li><b>{html.escape(model)}</b>: {html.escape(notes)}</li>"
                    for model, notes in zip(noted["model"], noted["notes"]))
    return f"<ul class=\"verdict-notes\">{items}</ul>"


TABLES = "results/<run>/tables"  # a run's tables, as the notes name them where the run is not known

VERDICT_NOTE = (
    "A one-sided max-t test of the final checkpoint's loss against every earlier one's, paired over the same "
    "{units:,} eval sequences at every checkpoint (sequences are the independent units; docs/saturation.md). "
    "saturates: the final is worse than some earlier checkpoint beyond noise, at level {alpha:g} after "
    "accounting for picking the best of many noisy checkpoints; no evidence: it is not (which is not evidence "
    "of no rise); too few checkpoints: fewer than saturation.min_checkpoints. rise = the final's loss − the "
    "lowest earlier checkpoint's, as measured (negative: the final is the lowest so far): picking the lowest of "
    "many noisy losses biases it up, which is why the summary no longer gives final ÷ best − 1 as the "
    "saturation. The interval bounds the true rise, simultaneously over which earlier checkpoint is truly best "
    "({level:.0f}%: each bound {bound:.0f}%), and always contains the measured rise. Above 0 it is the verdict "
    "saturates; below 0 the final is better than every earlier checkpoint beyond noise (still improving); "
    "across 0 neither is shown. rise_se: standard error of the paired difference between the final and the "
    "lowest earlier checkpoint. Table: {tables}/saturation_verdicts.csv."
)


def verdict_section(verdicts: pd.DataFrame, tables: str = TABLES) -> list[str]:
    """The summary's lead: does each model saturate, and how sure are we (verdict_rows)."""
    alpha = float(verdicts["alpha"].iloc[0]) if len(verdicts) else 0.05
    units = int(verdicts["units"].max()) if len(verdicts) else 0
    note = VERDICT_NOTE.format(units=units, alpha=alpha, level=100 * (1 - 2 * alpha), bound=100 * (1 - alpha),
                               tables=tables)
    rows = verdict_rows(verdicts)
    listed = verdict_notes(rows)
    shown = rows.assign(notes=["below" if text else "" for text in rows["notes"]])
    return ["<h2>Saturation verdicts, by model (smallest first)</h2>", f"<p class=\"note\">{html.escape(note)}</p>",
            f"<p class=\"note\">{html.escape(VERDICT_CAUSE_NOTE)}</p>",
            html_table(shown, css_class="sortable verdicts"), *([listed] if listed else [])]


VERDICT_CAUSE_NOTE = (
    "The verdict tests a rise of the eval loss, not its cause. The paper's cause is the softmax bottleneck "
    "(Figs. 4 to 8 test it); a loss that rises because the training data repeat (several epochs: overfitting "
    "to them) reads saturates too (docs/saturation.md).")


Z95 = 1.959963984540054  # two-sided 95% normal quantile


def _lowest(final: pd.DataFrame, value: pd.Series, sem: pd.Series, fmt: str) -> str:
    """The model of the lowest `value`, its 95% interval, and whether that interval is clear
    of the next lowest model's (a separation beyond noise) or overlaps it."""
    order = value.sort_values(kind="stable").index
    first = order[0]
    text = f"{final.loc[first, 'model']} ({value[first]:{fmt}} ± {Z95 * sem[first]:.2g}"
    if len(order) < 2:
        return text + ")"
    second = order[1]
    clear = value[first] + Z95 * sem[first] < value[second] - Z95 * sem[second]
    return (text + f"; {'its interval clear of' if clear else 'its interval overlapping'} the next lowest, "
            f"{final.loc[second, 'model']}'s {value[second]:{fmt}} ± {Z95 * sem[second]:.2g})")


def gradient_fact(gradient: pd.DataFrame, tables: str = TABLES) -> str:
    """The summary's line on the gradient bottleneck (results/<run>/tables/gradient_bottleneck.csv,
    lmsat.bottleneck.gradient): at each model's final checkpoint the share of each token's
    logit-gradient energy the head passes back (mean ± 95% interval over sequences) beside
    rank / V, what a random direction keeps, and which models lose the most: the lowest share
    and the lowest share relative to rank / V, each said clear of or overlapping the next."""
    final = gradient[gradient["is_final"].astype(bool)].reset_index(drop=True)
    if final.empty:
        return "Gradient bottleneck: no final checkpoint in its table."
    ratio = final["energy_kept"] / final["random_energy"]
    ratio_sem = final["energy_kept_sem"] / final["random_energy"]
    per_model = "; ".join(
        f"{r['model']} {r['energy_kept']:.3g} ± {Z95 * r['energy_kept_sem']:.2g} (rank/V {r['random_energy']:.3g}, "
        f"{ratio[i]:.2f}x)" for i, r in final.iterrows()
    )
    return (
        "Gradient bottleneck at each model's final checkpoint (share of each token's loss-gradient energy inside the "
        "head's column space, the part backpropagation passes below the head; mean ± 95% interval over sequences; a "
        f"random direction keeps rank / V): {per_model}. Loses the most: "
        + _lowest(final, final["energy_kept"], final["energy_kept_sem"], ".3g")
        + "; relative to rank / V: " + _lowest(final, ratio, ratio_sem, ".2f")
        + ". These are shares of the eval sample's loss gradient, not of the training batches'. "
        f"Table: {tables}/gradient_bottleneck.csv."
    )


def figure_links(figures) -> str:
    """A list of links, one per (title, path in the report, href from the summary page) of
    `figures`: one click from the summary to each figure (FIGURE_LINK)."""
    items = "".join(
        "<li>" + FIGURE_LINK.format(title=html.escape(title), path=html.escape(path), href=html.escape(href)) + "</li>"
        for title, path, href in figures
    )
    return f"<ul class=\"figures\">{items}</ul>"




def published_section(published: pd.DataFrame, source: dict, shots: int, tables: str = TABLES) -> list[str]:
    """The summary's part on EleutherAI's published evaluations (lmsat.data.published_evals.compare): the
    rows of the run's best and final checkpoints, of checkpoints with an own lm-eval value and
    of checkpoints whose weights are bit-identical to another revision's, at the run's number
    of shots; every row is in results/<run>/tables/published_evals.csv."""
    shown = published[(published["shots"] == shots) & (
        (published["checkpoint"] != "") | published["measured"].notna() | (published["identical_weights"] != "")
    )]
    compared = int(published["measured"].notna().sum())
    note = (f"EleutherAI's lm-eval results of the Pythia checkpoints this run has ({source['repository']} at "
            f"{source['commit'][:12]}, evals/pythia-v1, {source['license']}), beside this run's lm-eval result of "
            f"the same model, step, task, metric and shots where it has one ({compared:,} of {len(published):,}; "
            "difference = measured − published; both harness versions given: scores drift across versions). "
            "identical_weights names the tensors of a checkpoint that are bit-identical to another revision's: "
            "such a checkpoint is broken upstream whatever its published evals say. Shown: the best and final "
            f"checkpoints, those with a result of this run and those flagged, at {shots} shots; all rows are in "
            f"{tables}/published_evals.csv.")
    return ["<h2>Published Pythia evaluations</h2>", f"<p class=\"note\">{html.escape(note)}</p>",
            html_table(shown.drop(columns=["published_stderr"]), css_class="sortable published")]


def _plus_minus(value: float, error: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3g} ± {error:.2g}"


def dynamics_rows(loss: pd.DataFrame, alpha: pd.DataFrame | None = None,
                  similarity: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per model (loss table order): at its best (loss-minimising) and final
    checkpoints, the LM head's power-law alpha with its standard error, stable rank and MP
    soft rank (weight_alpha.csv, WeightWatcher's measures), and the last layer's linear CKA,
    plain and debiased, between the best and the final checkpoint (representation_similarity.csv)."""
    rows = []
    for model, of_model in loss.groupby("model", sort=False):
        best = of_model[of_model["is_best"].astype(bool)].iloc[0]
        final = of_model[of_model["is_final"].astype(bool)].iloc[0]
        row = dict(model=model, best_step=int(best["step"]), final_step=int(final["step"]))
        if alpha is not None:
            head = alpha[(alpha["model"] == model) & (alpha["matrix"] == "head")].set_index("revision")
            for kind, at in (("best", best), ("final", final)):
                found = head.loc[at["revision"]] if at["revision"] in head.index else None
                row[f"head_alpha_{kind}"] = (_plus_minus(float(found["alpha"]), float(found["alpha_sigma"]))
                                             if found is not None else "–")
            for column in ("stable_rank", "mp_softrank"):
                for kind, at in (("best", best), ("final", final)):
                    row[f"head_{column}_{kind}"] = (float(head.loc[at["revision"], column]) if at["revision"] in head.index
                                                    else math.nan)
        if similarity is not None:
            last = similarity[(similarity["model"] == model) & (similarity["reference"] == "final")
                              & (similarity["revision"] == best["revision"])]
            last = last[last["layer"] == last["layer"].max()] if len(last) else last
            for column in ("cka", "cka_debiased"):
                row[f"last_layer_{column}_best_final"] = float(last[column].iloc[0]) if len(last) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def dynamics_section(rows: pd.DataFrame, tables: str = TABLES) -> list[str]:
    """The summary's part on the peers' measures at the best and final checkpoints (dynamics_rows)."""
    note = ("WeightWatcher's and pico-analyze's measures at each model's best and final checkpoints. The paper ties "
            "saturation to the LM head's spectrum collapsing: a head stable rank and MP soft rank lower at the final "
            "than at the best checkpoint is that collapse (Fig. 4's curves, in one number each; no interval: compare it "
            "with the table's changes between neighbouring checkpoints). head_alpha: the power-law exponent of the "
            "head's eigenvalue tail ± its standard error as WeightWatcher fits it; its reading (2 to 6 well trained, "
            "below 2 over-fitted) comes from large layers, and a toy's head has too few eigenvalues to trust it; where the "
            "table's alpha_D_margin is below 0.02 its xmin, and so alpha, may differ on another CPU, and where "
            "mp_softrank_margin is below 0.01 the MP fit may too (even with the same eigenvalues summed in another "
            "order). "
            "last_layer_cka_best_final: linear CKA of the last layer's representations at the best and at the final "
            "checkpoint over the same tokens; below 1 the representations changed after the loss-minimising "
            "checkpoint, in a way CKA sees (not a rotation or a rescaling); its debiased form removes the part an "
            f"unrelated pair would show at this sample size. Tables: {tables}/weight_alpha.csv, "
            "representation_similarity.csv.")
    return ["<h2>Weight and representation diagnostics at the best and final checkpoints</h2>",
            f"<p class=\"note\">{html.escape(note)}</p>", html_table(rows, css_class="sortable dynamics")]


def summary_page(title: str, facts: list[str], numbers: pd.DataFrame, comparison: pd.DataFrame,
                 source: str, figures=(), published: pd.DataFrame | None = None, published_source=None,
                 shots: int = 0, verdicts: pd.DataFrame | None = None, dynamics: pd.DataFrame | None = None,
                 tables: str = TABLES) -> str:
    """The report's first page: the saturation verdict of each model (`verdicts`, the table
    saturation_verdicts), the run's facts, a link to each of its figures (`figures`:
    (title, path in the report, href from this page)), its key numbers, the paper's values
    beside them, and EleutherAI's published evaluations of its Pythia checkpoints beside its
    own lm-eval results (`published`, when the run has any such checkpoint). `tables`: the run's
    tables directory (results/<run>/tables), as every note names it."""
    comparable = bool(comparison["comparable"].any()) if len(comparison) else False
    shown = with_counterpart(comparison)  # a value the run has no counterpart of: in the CSV only
    if not comparable:  # the paper's values this run has a counterpart of, without a difference
        shown = shown.drop(columns=["difference", "difference_pct"])
    intro = ("Differences are measured − paper, for the values whose suite or model this run has "
             "(the values it measured no counterpart of are in the CSV)."
             if comparable else
             "This run has none of the paper's models, so nothing here is a reproduction: the "
             "paper's values stand beside this run's counterparts for orientation, without a difference "
             "(the values it has no counterpart of, e.g. Table 1 of Pythia-160M, are in the CSV).")
    if len(shown):
        comparison_table = html_table(shown, css_class="sortable comparison")
    else:
        comparison_table = (f"<p class=\"note\">None of the paper's {len(comparison)} values has a counterpart "
                            "in this run: its models, suites and tasks are not the paper's "
                            f"({html.escape(tables)}/paper_comparison.csv lists them).</p>")
        intro = "This run has none of the paper's models, so nothing here is a reproduction."
    body = "\n".join([
        f"<h1>{html.escape(title)}</h1>",
        *(verdict_section(verdicts, tables) if verdicts is not None else []),
        "<ul>" + "".join(f"<li>{html.escape(fact)}</li>" for fact in facts) + "</ul>",
        *(["<h2>Figures</h2>", "<p class=\"note\">Click one to see it with its caption.</p>", figure_links(figures)]
          if figures else []),
        "<h2>Key numbers, by model (smallest first)</h2>",
        "<p class=\"note\">best_*: the loss-minimising checkpoint, final_*: the last (whether the final "
        "is above the best beyond noise: the verdicts above); final_implausible_loss: the final's loss is back near "
        "ln V, an untrained model's (loss.csv's implausible_loss); *_shortfall_pct: loss above the scaling law of Fig. 1b; "
        "risen_up_to_rank: largest rank r whose rank-r head loses to the full head by more than "
        f"bottleneck.rise_tolerance (Fig. 6). Tables: {html.escape(tables)}.</p>",
        html_table(numbers, css_class="sortable key-numbers"),
        *(dynamics_section(dynamics, tables) if dynamics is not None and len(dynamics) else []),
        "<h2>Compared with the paper</h2>",
        f"<p class=\"note\">{html.escape(intro)} Paper values: {html.escape(source)}, "
        "section and figure as given (~ marks a value the paper gives approximately).</p>",
        comparison_table,
        *(published_section(published, published_source, shots, tables) if published is not None and len(published)
          else []),
    ])
    return page(title, body, script=False)  # embedded in the report's landing page
