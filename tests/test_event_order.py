"""The order of events (issue 53, docs/event_order.md): which comes first, a series' change of
trend or the loss's rise, with its error rates checked on planted truth.

- the per-sequence influence values the cache metrics record (anisotropy, effective rank)
  against brute-force derivatives of the statistic of a weighted real cache;
- the parts: the change test's size, the breakpoint set's and the best-checkpoint set's
  coverage (each at least its level less 3 binomial SE);
- the order: a planted lead is found within its interval, an independent series (no change)
  and a simultaneous one are ordered at most at the stated rate, a model whose loss does
  not rise says `no rise`;
- a synthetic run's records through the table builder (a planted lead, recovered);
- across models: the stratified permutation test, exact, its size, and `no power`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmsat.core.io import write_json
from lmsat.saturation.event_order import (
    LAGS,
    LEADS,
    NO_CHANGE,
    NO_RISE,
    ORDERED,
    SAMPLE,
    TOGETHER,
    TOO_FEW,
    WEIGHTS,
    SeriesData,
    best_set,
    breakpoint_set,
    change_test,
    fast_fall_end,
    order_events,
)
from lmsat.saturation.order_across import HIGHER_MORE, NO_POWER, stratified_kendall
from lmsat.saturation.order_simulation import GRIDS, planted_run, planted_runs

ALPHA = 0.05


def binomial_slack(rate: float, trials: int) -> float:
    """3 binomial standard errors of a rate over `trials`."""
    return 3 * math.sqrt(rate * (1 - rate) / trials)


# ---------------------------------------------------------------- influence values of real caches


@pytest.fixture(scope="module")
def tiny_cache(tiny_neox, tmp_path_factory):
    """A real hidden-state cache of the tiny GPT-NeoX on 12 sequences of 10 tokens."""
    from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache

    tokens = np.random.default_rng(0).integers(0, 36, size=(12, 10)).astype(np.int32)
    path = tmp_path_factory.mktemp("cache") / "step0.h5"
    extract_to_cache(tiny_neox, tokens, path, settings=ExtractionSettings(batch_size=4, chunk_sequences=4, layer_sample=16),
                     identity=dict(model="tiny", revision="step0", model_id="local/tiny", sample_sha256="s"))
    return path


def _hidden(path):
    from lmsat.data.hidden_states import open_cache

    with open_cache(path) as cache:
        return np.asarray(cache["hidden"][...], dtype=np.float64), cache["loss"].shape[0]


def test_anisotropy_influence_is_the_derivative_of_the_weighted_statistic(tiny_cache):
    """The anisotropy metric's per-sequence influence equals the central difference of the
    statistic of the sequences weighted by w (the mean cosine over the weighted pairs, which
    at integer w is the brute-force mean cosine of the rows repeated w times)."""
    from lmsat.data.hidden_states import open_cache
    from lmsat.degeneration.anisotropy import mean_pairwise_cosine_bruteforce
    from lmsat.products.metrics import METRICS

    with open_cache(tiny_cache) as cache:
        record = METRICS["anisotropy"].compute(cache)
    hidden, n_seq = _hidden(tiny_cache)
    seq_len = hidden.shape[0] // n_seq
    units = hidden / np.linalg.norm(hidden, axis=1, keepdims=True)
    cosines = units @ units.T  # (N, N), brute force

    def weighted(w):  # (n_seq,) -> the mean cosine over pairs of the weighted rows
        rows = np.repeat(w, seq_len)
        n = rows.sum()
        return (rows @ cosines @ rows - rows @ rows + (rows**2 - rows).sum()) / (n * (n - 1))

    integer = np.arange(n_seq) % 3  # some sequences dropped, some doubled
    assert weighted(integer.astype(float)) == pytest.approx(
        mean_pairwise_cosine_bruteforce(np.repeat(hidden, np.repeat(integer, seq_len), axis=0)), rel=1e-10)
    assert weighted(np.ones(n_seq)) == pytest.approx(record["anisotropy_last"], rel=1e-10)
    step = 1e-5
    differences = [(weighted(1 + step * e) - weighted(1 - step * e)) / (2 * step) for e in np.eye(n_seq)]
    influence = np.array(record["anisotropy_last_influence"])
    assert influence.shape == (n_seq,)
    assert np.allclose(influence, differences, rtol=1e-5, atol=1e-9 * np.abs(differences).max())


def test_effective_rank_influence_is_the_derivative_of_the_weighted_statistic(tiny_cache):
    """The effective-rank metric's per-sequence influence equals the central difference of
    the effective rank of the rows weighted by w (SVD of sqrt(w) H, brute force)."""
    from lmsat.data.hidden_states import open_cache
    from lmsat.degeneration.spectra import effective_rank
    from lmsat.products.metrics import METRICS

    with open_cache(tiny_cache) as cache:
        record = METRICS["effective_rank"].compute(cache)
    hidden, n_seq = _hidden(tiny_cache)
    seq_len = hidden.shape[0] // n_seq

    def weighted(w):
        return effective_rank(np.linalg.svd(np.sqrt(np.repeat(w, seq_len))[:, None] * hidden, compute_uv=False))

    # the metric takes singular values from the Gram (its small ones lose digits as eps s_max^2 / s_i^2)
    assert weighted(np.ones(n_seq)) == pytest.approx(record["effective_rank"], rel=1e-7)
    step = 1e-5
    differences = np.array([(weighted(1 + step * e) - weighted(1 - step * e)) / (2 * step) for e in np.eye(n_seq)])
    influence = np.array(record["effective_rank_influence"])
    assert np.allclose(influence, differences, rtol=1e-4, atol=1e-7 * np.abs(differences).max())


# ---------------------------------------------------------------- the parts


def test_the_change_test_holds_its_size_on_straight_lines():
    """A straight line plus independent noise: a change found in at most alpha of 400 series."""
    rng = np.random.default_rng(1)
    x = GRIDS["own run (20 checkpoints)"].astype(float)
    found = sum(change_test(x, 3 - 0.01 * x + rng.normal(0, 0.5, len(x)))[1] < ALPHA for _ in range(400))
    assert found / 400 <= ALPHA + binomial_slack(ALPHA, 400), found
    # and a clear kink is found
    kinked = 0.002 * x + 0.05 * np.maximum(x - 200, 0)
    assert change_test(x, kinked + rng.normal(0, 0.5, len(x)))[1] < 0.001
    assert change_test(x, np.full(len(x), 2.0)) == (0.0, 1.0)  # a constant series has no trend to change


def test_the_breakpoint_set_covers_the_planted_kink():
    """A kink at a grid point, noise 1/8 of its effect: the 90% set holds it in >= 90% - 3 SE of 300 series."""
    rng = np.random.default_rng(2)
    x = GRIDS["own run (20 checkpoints)"].astype(float)
    truth = 8  # index of step 180
    shape = np.maximum(x - x[truth], 0) / (x[-1] - x[truth])
    held = 0
    for _ in range(300):
        _, inside = breakpoint_set(x, shape + rng.normal(0, 0.125, len(x)), 0.1)
        held += truth in inside
    assert held / 300 >= 0.9 - binomial_slack(0.1, 300), held


def test_the_best_set_covers_the_truly_best_checkpoint():
    """Paired losses with a planted V (its bottom 3 paired SE below its neighbours' arms two
    checkpoints away): the 95% set holds the bottom in >= 95% - 3 SE of 300 runs."""
    rng = np.random.default_rng(3)
    k, n = 12, 40
    se = math.sqrt(2 / n)
    curve = 1.5 * se * np.abs(np.arange(k) - 6)
    held = 0
    for _ in range(300):
        losses = curve[:, None] + rng.normal(0, 2, n)[None, :] + rng.normal(0, 1, (k, n))
        best, members = best_set(losses, ALPHA, draws=2000)
        held += 6 in members
        assert best in members
    assert held / 300 >= 1 - ALPHA - binomial_slack(ALPHA, 300), held


def test_the_window_starts_after_the_fast_fall():
    loss = np.array([10.0, 6.0, 4.0, 3.2, 3.1, 3.05, 3.0, 3.02, 3.05])
    assert fast_fall_end(loss) == 3  # 3.2 <= 3.0 + 0.1 * (10 - 3.0)


# ---------------------------------------------------------------- the order on planted truth


OWN = GRIDS["own run (20 checkpoints)"]


def _verdicts(runs, kind: str, **options) -> list:
    found = []
    for run in runs:
        _, events = order_events(run.steps, run.steps.astype(float), run.losses, [run.sample, run.weights],
                                 replicates=100, draws=1000, verdict_draws=1000, **options)
        found.append(next(e for e in events if e.kind == kind))
    return found


@pytest.mark.parametrize("kind", [SAMPLE, WEIGHTS])
def test_a_planted_lead_is_recovered_within_its_interval(kind):
    """The series' kink 100 steps (5 checkpoints, a quarter of training) before the loss's
    bottom (a rise of 40 paired SE), noise 1/20 of the kink's effect: `leads` in more than
    half of 60 runs (measured: 40 and 47 of 60), and the interval holds the planted lead in
    at least 90% - 3 SE of them (each bound is wrong at most alpha)."""
    runs = planted_runs(OWN, 100, runs=60, seed=4, wobble=0.05, sampling=0.02, rise_se=40)
    events = _verdicts(runs, kind)
    leads = sum(e.verdict == LEADS for e in events)
    assert leads > 30, [e.verdict for e in events]
    assert not any(e.verdict == LAGS for e in events)
    held = sum(e.lead_low_steps <= run.steps[run.best] - run.kink <= e.lead_high_steps for e, run in zip(events, runs))
    assert held / len(runs) >= 1 - 2 * ALPHA - binomial_slack(2 * ALPHA, len(runs)), held
    assert all(e.lead_low_steps <= e.lead_steps <= e.lead_high_steps for e in events if e.verdict != NO_CHANGE)


@pytest.mark.parametrize("kind", [SAMPLE, WEIGHTS])
def test_an_independent_series_gets_no_evidence_of_order(kind):
    """A series with no change of trend (a line plus noise, independent of the loss): ordered
    (leads or lags) in at most alpha + 3 SE of 150 runs, the docs' stated rate; a lead in at
    most alpha."""
    events = _verdicts(planted_runs(OWN, None, runs=150, seed=5), kind)
    ordered = sum(e.verdict in ORDERED for e in events)
    assert ordered / 150 <= ALPHA + binomial_slack(ALPHA, 150), [e.verdict for e in events]
    assert sum(e.verdict == LEADS for e in events) / 150 <= ALPHA
    assert {e.verdict for e in events} <= {NO_CHANGE, TOGETHER, LEADS, LAGS}


def test_a_simultaneous_change_is_not_called_a_lead():
    """The kink at the loss's bottom (lead 0): `leads` in at most alpha + 3 SE of 150 runs."""
    events = _verdicts(planted_runs(OWN, 0, runs=150, seed=6, wobble=0.2), WEIGHTS)
    assert sum(e.verdict == LEADS for e in events) / 150 <= ALPHA + binomial_slack(ALPHA, 150)


def test_a_loss_that_does_not_rise_orders_nothing():
    """A loss still falling at the final (the toy's): the loss row `no rise`, every series
    `no rise` with no lead, even with a clear planted change."""
    rng = np.random.default_rng(7)
    run = planted_run(OWN, rng, 100, wobble=0.01)
    falling = run.losses - np.linspace(0, 5, len(OWN))[:, None]  # downhill to the final (the V's arms: 1.4)
    verdict, events = order_events(run.steps, run.steps.astype(float), falling, [run.sample, run.weights],
                                   replicates=50, draws=500, verdict_draws=500)
    assert verdict.verdict != "saturates"
    assert [e.verdict for e in events] == [NO_RISE] * 3
    assert all(math.isnan(e.lead_steps) for e in events)
    assert events[1].onset_step > 0  # the onset is still dated, just not ordered


def test_a_window_too_short_says_so():
    rng = np.random.default_rng(8)
    run = planted_run(GRIDS["toy"], rng, 0, rise_se=30)
    _, events = order_events(run.steps, run.steps.astype(float), run.losses,
                             [SeriesData("short", WEIGHTS, np.where(np.arange(9) < 7, np.nan, 1.0))],
                             replicates=50, draws=500, verdict_draws=500)
    assert events[0].verdict == "rise" and events[1].verdict == TOO_FEW and events[1].window_checkpoints == 2


# ---------------------------------------------------------------- a synthetic run through the table


def test_a_synthetic_runs_records_give_the_planted_lead(tmp_path):
    """Loss and anisotropy records of a synthetic run (the per-sequence losses and influence a
    real run's jobs write) with the anisotropy's kink 100 steps before the loss's bottom: the
    table says `leads` with the planted lead inside its interval, in steps and in tokens
    (tokens = 64 per step), and the rows name what they resample."""
    from lmsat.products.event_tables import EVENT_ORDER_COLUMNS, event_order_from_records

    run = planted_run(OWN, np.random.default_rng(9), 100, wobble=0.03, sampling=0.02, rise_se=40)
    loss_files, anisotropy_files = [], []
    for k, step in enumerate(run.steps):
        identity = dict(suite="mine", model="mine", revision=f"checkpoint-{step}", step=int(step), tokens=int(step) * 64)
        path = tmp_path / "metrics" / "loss" / "mine" / f"checkpoint-{step}.json"
        write_json(path, dict(identity, metric="loss", loss=float(run.losses[k].mean()), loss_sem=0.01,
                              sequence_loss=run.losses[k].tolist(), uniform_loss=None))
        loss_files.append(path)
        path = tmp_path / "metrics" / "anisotropy" / "mine" / f"checkpoint-{step}.json"
        write_json(path, dict(identity, metric="anisotropy", anisotropy_last=0.2 + 0.5 * float(run.sample.values[k]),
                              anisotropy_last_influence=(0.5 * run.sample.influence[k]).tolist()))  # a cosine: in [-1, 1]
        anisotropy_files.append(path)
    table = event_order_from_records(loss_files, {}, None, files_of={"anisotropy": anisotropy_files})
    assert list(table.columns) == EVENT_ORDER_COLUMNS and list(table["series"]) == ["loss", "anisotropy"]
    loss, series = table.iloc[0], table.iloc[1]
    assert loss["verdict"] == "rise" and loss["onset_low_step"] <= run.steps[run.best] <= loss["onset_high_step"]
    assert series["verdict"] == LEADS, series.to_dict()
    planted = run.steps[run.best] - run.kink
    assert series["lead_low_steps"] <= planted <= series["lead_high_steps"]
    assert series["lead_low_tokens"] <= 64 * planted <= series["lead_high_tokens"]
    assert "eval sequences" in series["resampled"] and series["resolution_steps"] == 20


# ---------------------------------------------------------------- across models


def test_stratified_kendall_is_exact_and_sized():
    """Three sizes of four models (4!^3 = 13,824 arrangements, enumerated): a perfect
    association within every size is found; under no association the rate of p <= alpha
    is at most alpha + 3 SE over 200 suites; two models of one size have no power."""
    strata = np.repeat(["s", "m", "l"], 4)
    rises = np.tile([0.01, 0.02, 0.03, 0.04], 3) + np.repeat([0.5, 0.0, -0.5], 4)  # size drives the level
    values = np.tile([1.0, 2.0, 3.0, 4.0], 3) - np.repeat([10, 0, 10], 4)
    result = stratified_kendall(values, rises, strata, ALPHA)
    assert result["exact"] and result["arrangements"] == 13824 and result["tau"] == 1.0
    assert result["p_value"] == pytest.approx(2 / 13824) and result["verdict"] == HIGHER_MORE
    rng = np.random.default_rng(10)
    found = sum(stratified_kendall(rng.normal(size=12), rng.normal(size=12), strata, ALPHA)["p_value"] <= ALPHA
                for _ in range(200))
    assert found / 200 <= ALPHA + binomial_slack(ALPHA, 200)
    two = stratified_kendall([1.0, 2.0, 5.0], [0.1, 0.2, 0.3], ["a", "a", "b"], ALPHA)
    assert two["verdict"] == NO_POWER and two["smallest_p"] == 1.0 and two["compared"] == 2
    alone = stratified_kendall([1.0, 2.0], [0.1, 0.2], ["a", "b"], ALPHA)  # every model its own size: the toy's
    assert alone["verdict"] == NO_POWER and alone["strata"] == 0


def _write_run(tmp_path, model: str, run, losses) -> tuple[list, list]:
    loss_files, anisotropy_files = [], []
    for k, step in enumerate(run.steps):
        identity = dict(suite="mine", model=model, revision=f"checkpoint-{step}", step=int(step), tokens=int(step) * 64)
        path = tmp_path / "metrics" / "loss" / model / f"checkpoint-{step}.json"
        write_json(path, dict(identity, metric="loss", loss=float(losses[k].mean()), loss_sem=0.01,
                              sequence_loss=losses[k].tolist(), uniform_loss=None))
        loss_files.append(path)
        path = tmp_path / "metrics" / "anisotropy" / model / f"checkpoint-{step}.json"
        write_json(path, dict(identity, metric="anisotropy", anisotropy_last=0.2 + 0.5 * float(run.sample.values[k])))
        anisotropy_files.append(path)
    return loss_files, anisotropy_files


def test_the_figure_and_summary_lines_of_a_rising_and_a_falling_model(tmp_path):
    """Two models through the tables, the figure and the summary: one whose loss rises (its
    anisotropy's kink 100 steps before), one whose loss still falls (`no rise`); records of
    an older lmsat (no influence values) say that their sampling noise is not resampled."""
    from lmsat.figures.events import plot_event_order
    from lmsat.products.event_tables import event_order_facts, event_order_from_records, event_prediction_from_records

    rng = np.random.default_rng(11)
    rising = planted_run(OWN, rng, 100, wobble=0.03, rise_se=40)
    falling = planted_run(OWN, rng, 100, wobble=0.03)
    files = [_write_run(tmp_path, "rises", rising, rising.losses),
             _write_run(tmp_path, "falls", falling, falling.losses - np.linspace(0, 5, len(OWN))[:, None])]
    loss_files = files[0][0] + files[1][0]
    files_of = {"anisotropy": files[0][1] + files[1][1]}
    table = event_order_from_records(loss_files, {}, ["rises", "falls"], files_of=files_of)
    assert list(table["model"]) == ["rises", "rises", "falls", "falls"]
    assert list(table["verdict"])[2:] == [NO_RISE, NO_RISE] and table.iloc[0]["verdict"] == "rise"
    assert "not resampled" in table.iloc[1]["resampled"]
    figure = plot_event_order(table, [tmp_path / "event_order.png"])
    assert (tmp_path / "event_order.png").stat().st_size > 0
    titles = [ax.get_title(loc="left") for ax in figure.axes if ax.get_visible() and ax.get_title(loc="left")]
    assert titles == ["rises", "falls"]
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "rise" in labels and "no rise" in labels
    prediction = event_prediction_from_records(loss_files, {}, ["rises", "falls"], sizes={"rises": 1, "falls": 2},
                                               files_of=files_of)
    assert list(prediction["series"]) == ["anisotropy"] and prediction.iloc[0]["verdict"] == NO_POWER
    lines = event_order_facts(table, prediction)
    assert lines[0].startswith("Order of events, rises: the loss rises after its best checkpoint step 240")
    assert "leads: anisotropy (lead +" in lines[0]
    assert lines[1].startswith("Order of events, falls: no rise") and "no power (1 series)" in lines[2]


@pytest.mark.parametrize("grid", ["own run (20 checkpoints)", "pythia"])
def test_the_figure_keeps_its_labels_off_the_data_and_the_ticks(tmp_path, grid):
    """The figure of a rising model on an own run's grid and on Pythia's 154 revisions: no two
    tick labels overlap, no legend or label covers a data point, a tick label or another label
    (lmsat.figures.legibility.collisions, as tests/test_figure_legibility.py for every figure)."""
    from lmsat.figures.events import plot_event_order
    from lmsat.figures.legibility import collisions
    from lmsat.products.event_tables import event_order_from_records

    from test_figure_legibility import assert_no_overlap

    steps = GRIDS[grid]
    run = planted_run(steps, np.random.default_rng(12), 0.2 * steps[-1], wobble=0.03, rise_se=40)
    loss_files, anisotropy_files = _write_run(tmp_path, "mine", run, run.losses)
    table = event_order_from_records(loss_files, {}, None, files_of={"anisotropy": anisotropy_files})
    figure = plot_event_order(table, [])
    assert_no_overlap(figure, f"event_order ({grid})")
    assert not collisions(figure), collisions(figure)[:5]


def test_a_run_of_the_loss_alone_has_its_rise_and_says_no_series_is_measured(tmp_path):
    """metrics: [loss] (tests/test_own_run.py's rising run): the table holds the loss's row, the
    prediction table no row, and the summary line says what would add the series."""
    from lmsat.products.event_tables import event_order_facts, event_order_from_records, event_prediction_from_records

    run = planted_run(OWN, np.random.default_rng(13), 100, rise_se=40)
    loss_files, _ = _write_run(tmp_path, "mine", run, run.losses)
    table = event_order_from_records(loss_files, {}, None)
    assert list(table["series"]) == ["loss"] and table.iloc[0]["verdict"] == "rise"
    prediction = event_prediction_from_records(loss_files, {}, None)
    assert len(prediction) == 0
    (line,) = event_order_facts(table, prediction)
    assert "no other series is measured" in line
