"""The report's own pages: rendered tables and the summary beside the paper's values."""

import base64
import math
import re
from html import unescape
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from lmsat.products.report import (
    comparison_text,
    gradient_fact,
    key_numbers,
    paper_comparison,
    paper_values,
    summary_page,
    table_page,
)
from lmsat.saturation.verdict import VERDICT_COLUMNS, verdict_from_paired


def loss_table():
    rows = []
    for model, final in (("toy-d16", 3.3), ("toy-d32", 3.1)):
        for step, loss in ((0, 6.0), (8, 3.0), (16, final)):
            rows.append(dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=step * 256, loss=loss,
                             loss_sem=0.01, is_best=step == 8, is_final=step == 16, config_sha256="abc",
                             torch_version="2.13.0"))
    return pd.DataFrame(rows)


def cells(html, css_class="sortable"):
    """The rows of the first table of class `css_class` in `html`, as lists of shown texts."""
    table = re.search(rf'<table class="{css_class}">(.*?)</table>', html, re.S).group(1)
    head = [text.replace("<wbr>", "") for text in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table)]
    body = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1])]
    return head, body


def test_table_page_shows_rows_sortable_with_provenance_once_and_the_csv(tmp_path):
    table = loss_table()
    csv = table.to_csv(index=False).encode()
    html = table_page(table, "loss.csv", csv_bytes=csv)
    head, body = cells(html)
    assert head == ["suite", "model", "revision", "step", "tokens", "loss", "loss_sem", "is_best", "is_final"]
    assert len(body) == 6 and body[0][:4] == ["toy", "toy-d16", "step0", "0"] and body[1][7] == "True"
    assert "config_sha256 = abc; torch_version = 2.13.0" in html
    assert "addEventListener(\"click\"" in html  # headers sort
    uri = re.search(r'href="data:text/csv;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(uri) == csv
    short = table_page(table, "loss.csv", max_rows=4)
    assert len(cells(short)[1]) == 4 and "showing the first 4 of 6 rows" in short


def pythia_like():
    suites = {"pythia-160m": "pythia", "pythia-410m": "pythia", "pythia-1b": "pythia"}
    fit = pd.Series(dict(A=120.0, alpha=0.25, mean_shortfall_final_pct=7.0, mean_shortfall_best_pct=4.5))
    table1 = pd.DataFrame([
        {"model": "pythia-160m", "checkpoint": "best", "revision": "step1000", "Lambada (ppl.) ↓": 25.6, "SciQ ↑": 80.0},
        {"model": "pythia-160m", "checkpoint": "final", "revision": "step143000", "Lambada (ppl.) ↓": 30.9, "SciQ ↑": 73.4},
    ])
    heads = pd.DataFrame([
        dict(model="pythia-1b", kind="low_rank", rank=r, w_error=w, rise_point=r == 512)
        for r, w in ((256, 0.8), (512, 0.65), (1024, 0.5))
    ] + [dict(model="pythia-1b", kind="full_head", rank=2048, w_error=0.0, rise_point=False)])
    return suites, fit, table1, heads


def test_paper_comparison_gives_differences_for_the_papers_models():
    suites, fit, table1, heads = pythia_like()
    comparison = paper_comparison(paper_values(), suites, fit=fit, table1=table1, heads=heads).set_index("quantity")
    assert comparison.loc["A (fitted on models >= 410M)", "difference"] == pytest.approx(120.0 - 119.09)
    assert comparison.loc["alpha (fitted on models >= 410M)", "paper"] == "0.246"
    row = comparison.loc["mean shortfall of final checkpoints below the fit (%)"]
    assert row["paper"] == "~8" and row["difference"] == pytest.approx(-1.0)  # points: no relative difference
    assert math.isnan(row["difference_pct"])
    assert comparison.loc["Pythia-160M best: Lambada (ppl.)", "difference"] == pytest.approx(1.0)
    assert comparison.loc["Pythia-160M final: SciQ acc.", "difference"] == pytest.approx(0.0)
    assert math.isnan(comparison.loc["Pythia-160M best: ARC-e acc.", "measured"])  # task not run
    assert comparison.loc["rank below which the loss rises (any model size)", "measured"] == 512
    werror = comparison.loc["Pythia-1B: W-error where the loss starts rising"]
    assert werror["model"] == "pythia-1b" and werror["difference"] == pytest.approx(0.05)
    assert comparison["comparable"].all()
    # every value of the data file names its section and figure
    assert all(value["section"] and value["where"] for value in paper_values()["values"])


def test_toy_run_is_shown_beside_the_paper_without_differences():
    fit = pd.Series(dict(A=2.0, alpha=0.3, mean_shortfall_final_pct=1.0, mean_shortfall_best_pct=0.5))
    comparison = paper_comparison(paper_values(), {"toy-d16": "toy"}, fit=fit)
    assert not comparison["comparable"].any() and comparison["difference"].isna().all()
    assert comparison.set_index("quantity").loc["A (fitted on models >= 410M)", "measured"] == 2.0
    numbers = key_numbers(loss_table(), {"toy-d16": 16, "toy-d32": 32})
    html = summary_page("summary", ["a fact"], numbers, comparison, "Godey et al.")
    head, body = cells(html, "sortable comparison")
    assert "difference" not in head and "none of the paper's models" in unescape(html)
    assert "</script>" not in html  # the report embeds it in a <script> JSON string
    head, body = cells(html, "sortable key-numbers")
    assert [row[0] for row in body] == ["toy-d16", "toy-d32"]
    assert "final_above_best_pct" not in head  # biased up by the pick of the best: the verdicts replace it
    assert float(dict(zip(head, body[0]))["final_loss"]) == pytest.approx(3.3)


def test_an_own_run_shows_no_comparison_without_a_counterpart_and_rounds_its_shortfalls():
    """Issue 44: an own run (two sizes, no suite or model of the paper's) printed an 18-row
    "compared with the paper" table, all NaN, and shortfalls of -1.503e-14 (a law fitted
    through exactly two sizes)."""
    comparison = paper_comparison(paper_values(), {"mine-s": "mine", "mine-l": "mine"})
    assert len(comparison) == len(paper_values()["values"]) and comparison["measured"].isna().all()
    assert comparison_text(comparison).startswith(f"none of the paper's {len(comparison)} values has a counterpart")
    shortfall = pd.DataFrame([dict(model=m, kind=k, shortfall_pct=v) for m, k, v in (
        ("toy-d16", "best", 2.345678), ("toy-d16", "final", 5.0), ("toy-d32", "best", -1.503e-14),
        ("toy-d32", "final", 1.2e-14))])
    numbers = key_numbers(loss_table(), {"toy-d16": 16, "toy-d32": 32}, shortfall=shortfall)
    html = summary_page("summary", ["a fact"], numbers, comparison, "Godey et al.")
    assert 'class="sortable comparison"' not in html and "None of the paper's 18 values" in unescape(html)
    head, body = cells(html, "sortable key-numbers")
    shown = {row[0]: dict(zip(head, row)) for row in body}
    assert shown["toy-d32"]["best_shortfall_pct"] == shown["toy-d32"]["final_shortfall_pct"] == "0"
    assert shown["toy-d16"]["best_shortfall_pct"] == "2.35" and "e-14" not in html
    # a Pythia run: only the values it measured are shown (ARC-e was not run); the CSV keeps all
    suites, fit, table1, heads = pythia_like()
    pythia = paper_comparison(paper_values(), suites, fit=fit, table1=table1, heads=heads)
    head, body = cells(summary_page("summary", [], numbers, pythia, "Godey et al."), "sortable comparison")
    quantities = [dict(zip(head, row))["quantity"] for row in body]
    assert len(quantities) == pythia["measured"].notna().sum() < len(pythia)
    assert "Pythia-160M best: SciQ acc." in quantities and "Pythia-160M best: ARC-e acc." not in quantities
    assert "ARC-e" not in comparison_text(pythia) and "SciQ" in comparison_text(pythia)


def test_the_summary_leads_with_a_verdict_per_model_with_its_rise_and_interval():
    rng = np.random.default_rng(0)
    difficulty = rng.normal(0, 0.3, 200)
    curves = {"toy-d16": [4.0, 3.2, 3.0, 3.1], "toy-d32": [4.0, 3.2, 3.0, 2.9], "toy-d64": [3.0]}
    rows = []
    for model, curve in curves.items():
        losses = np.array(curve)[:, None] + difficulty[None, :] + rng.normal(0, 0.02, (len(curve), 200))
        rows.append({"model": model, **verdict_from_paired([0, 10, 20, 40][:len(curve)], losses).as_row()})
    verdicts = pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))
    numbers = key_numbers(loss_table(), {"toy-d16": 16, "toy-d32": 32})
    comparison = paper_comparison(paper_values(), {"toy-d16": "toy"})
    html = summary_page("summary", ["a fact"], numbers, comparison, "Godey et al.", verdicts=verdicts)
    assert html.index("Saturation verdicts") < html.index("a fact") < html.index("Key numbers")
    head, body = cells(html, "sortable verdicts")
    assert head[:4] == ["model", "verdict", "rise (nats)", "rise interval (90%)"]
    shown = {row[0]: dict(zip(head, row)) for row in body}
    assert shown["toy-d16"]["verdict"] == "saturates" and shown["toy-d16"]["best_step"] == "20"
    low, high = (float(x.replace("\u2212", "-")) for x in shown["toy-d16"]["rise interval (90%)"].strip("[]").split(", "))
    assert 0 < low < 0.1 < high and shown["toy-d16"]["final_step"] == "40"
    assert shown["toy-d16"]["the interval is"].startswith("above 0")
    # the final is the lowest: a negative rise inside its interval, which lies below 0 and says so
    # (issue 44: "rise 0.0" beside [-0.035, -0.023] read as a contradiction)
    d32 = shown["toy-d32"]
    assert d32["verdict"] == "no evidence" and d32["rise (nats)"].endswith("(the final is the lowest)")
    rise = float(d32["rise (nats)"].split()[0])
    low, high = (float(x) for x in d32["rise interval (90%)"].strip("[]").split(", "))
    assert low <= rise <= high < 0 and d32["the interval is"].startswith("below 0")
    assert shown["toy-d64"]["verdict"] == "too few checkpoints" and shown["toy-d64"]["rise interval (90%)"] == "–"
    assert "biases it up" in unescape(html) and "always contains the measured rise" in unescape(html)
    assert "excludes 0 exactly when" not in unescape(html)
    # issue 44, item 13: the verdict tests a rise, not its cause (repeated data reads saturates too)
    page = unescape(html)
    assert page.index("tests a rise of the eval loss, not its cause") < page.index("sortable verdicts")
    assert "training data repeat" in page


# ---------------------------------------------------------------- captions as the report renders them

CAPTIONS = Path(__file__).resolve().parents[1] / "workflow" / "report"


def rendered_caption(path: Path) -> str:
    """A caption as `snakemake --report` hands it to docutils: rendered by Jinja (the templates
    workflow.rst, figure.rst, table.rst, summary.rst read the job's params, wildcards and
    config), a figure's or table's own caption as one line (products.smk, one_line)."""
    import jinja2

    from lmsat.planning.config_files import load_yaml

    job = SimpleNamespace(config=load_yaml(CAPTIONS.parents[1] / "config" / "config.yaml"),
                          params=SimpleNamespace(caption="A caption.", run="default"))
    text = jinja2.Environment().from_string(path.read_text()).render(snakemake=job, files=[], categories={})
    return " ".join(text.split()) if "{{" not in path.read_text() else text


def docutils_messages(text: str) -> str:
    """Every message docutils writes (level warning and above) on rendering `text` as the report does."""
    import io
    import warnings

    import docutils.core

    stream = io.StringIO()
    with warnings.catch_warnings():  # snakemake's own call, writer_name, is pending deprecation in docutils 0.22
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        docutils.core.publish_parts(text, writer_name="html",
                                    settings_overrides={"warning_stream": stream, "report_level": 2, "halt_level": 5})
    return stream.getvalue()


@pytest.mark.parametrize("caption", sorted(CAPTIONS.glob("*.rst")), ids=lambda path: path.stem)
def test_every_caption_renders_without_a_docutils_message(caption):
    """issue 50, item 7: `|w|` is reST substitution syntax, so weight_sparsity's caption showed a
    red "System Message" block in the report (and snakemake printed `Undefined substitution
    referenced: "w"`). Every caption renders clean at warning level."""
    assert docutils_messages(rendered_caption(caption)) == ""


def test_the_caption_check_finds_a_substitution_reference():
    assert "Undefined substitution referenced" in docutils_messages("the largest |w| of a matrix")


def test_captions_and_the_summary_name_the_runs_directory():
    """issue 50, item 11: captions and the summary page named results/tables/... without the
    run's directory. A caption writes results/<run>/ (the report's rule fills in the run:
    products.smk, one_line) or the run its rule passes as a parameter (the run is a path variable,
    not a wildcard); the summary page names the run's tables."""
    for caption in sorted(CAPTIONS.glob("*.rst")):
        for path in re.findall(r"results/(?:{{[^}]*}}|[^`\s])*", caption.read_text()):
            assert path.startswith(("results/<run>/", "results/{{ snakemake.params.run }}/")), (caption.name, path)
    suites, fit, table1, heads = pythia_like()
    verdicts = pd.DataFrame([{"model": "pythia-160m", **verdict_from_paired(
        [0, 10, 20], np.array([[3.0] * 40, [2.5] * 40, [2.6] * 40]) + np.random.default_rng(0).normal(0, 0.01, (3, 40))
    ).as_row(), "notes": ""}])
    gradient = pd.DataFrame([dict(model="pythia-160m", is_final=True, energy_kept=0.2, energy_kept_sem=0.01,
                                  random_energy=0.015)])
    page = summary_page("summary", [gradient_fact(gradient, "results/mine/tables")], key_numbers(loss_table(), {}),
                        paper_comparison(paper_values(), suites, fit=fit, table1=table1, heads=heads), "Godey et al.",
                        verdicts=verdicts, tables="results/mine/tables")
    assert "results/tables" not in page and "Table: results/mine/tables/saturation_verdicts.csv" in page
    assert "Table: results/mine/tables/gradient_bottleneck.csv" in page


def test_the_verdicts_notes_stand_under_their_table_not_in_a_narrow_column():
    """Issue 50, item 6: a 400-character note per flagged checkpoint filled a narrow column of the
    summary's verdict table; the notes are listed under the table, the column says where."""
    rng = np.random.default_rng(0)
    note = "step90 to step150 (steps 90 to 150, 3 checkpoints in a row): loss 3.6 to 3.9 are back near ln V " * 3
    rows = [{"model": model, **verdict_from_paired([0, 10, 20], np.array([[3.0] * 40, [2.5] * 40, [2.6] * 40])
                                                   + rng.normal(0, 0.01, (3, 40))).as_row(), "notes": text}
            for model, text in (("toy-d16", note), ("toy-d32", ""))]
    html = summary_page("summary", [], key_numbers(loss_table(), {}), paper_comparison(paper_values(), {"toy-d16": "toy"}),
                        "Godey et al.", verdicts=pd.DataFrame(rows))
    head, body = cells(html, "sortable verdicts")
    shown = {row[0]: dict(zip(head, row)) for row in body}
    assert shown["toy-d16"]["notes"] == "below" and shown["toy-d32"]["notes"] == ""
    listed = re.search(r'<ul class="verdict-notes">(.*?)</ul>', html, re.S).group(1)
    assert unescape(listed) == f"<li><b>toy-d16</b>: {note}</li>"
    assert html.index("sortable verdicts") < html.index("verdict-notes")
