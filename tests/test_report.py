"""The report's own pages: rendered tables and the summary beside the paper's values."""

import base64
import math
import re
from html import unescape

import numpy as np
import pandas as pd
import pytest

from lmsat.products.report import comparison_text, key_numbers, paper_comparison, paper_values, summary_page, table_page
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
