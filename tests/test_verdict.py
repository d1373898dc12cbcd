"""The saturation verdict (lmsat.saturation.verdict) and its table (saturation_verdicts): its error rates
by simulation with a real run's own noise, and its answers on real caches of a real model.

The simulations resample the sequences of tests/data/toy_sequence_losses.csv, per-sequence
mean losses of toy-d64 at 7 of its 9 checkpoints in the default run's caches (written by
`python benchmarks/verdict_rates.py export results/default/cache/toy-d64`), about a
flat curve (the null) or a curve that falls, bottoms out at a middle checkpoint and rises to
the final (the alternative). benchmarks/verdict_rates.py prints the detection rates from 1 to
5 standard errors that docs/saturation.md quotes.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lmsat.core.io import write_json
from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
from lmsat.products.metrics import METRICS
from lmsat.products.saturation_tables import loss_from_records, loss_table, verdicts_from_records
from lmsat.saturation.verdict import (
    NO_EVIDENCE,
    SATURATES,
    TOO_FEW,
    VERDICT_COLUMNS,
    max_z_quantile,
    sequence_means,
    simulated_coverage,
    simulated_rate,
    verdict_from_estimates,
    verdict_from_paired,
)

DATA = Path(__file__).resolve().parent / "data" / "toy_sequence_losses.csv"
CURVES = 1000  # simulated curves per rate (never fewer: the bar)
DRAWS = 2000  # Monte Carlo draws of each curve's null maximum (the library's 20,000 for speed; c's error ~0.03)
ALPHA = 0.05


def rise_curve(rise_se: float, k: int = 7, bottom: int | None = None) -> np.ndarray:
    """A realistic saturating curve of k checkpoints in standard errors: falls steeply,
    bottoms out at checkpoint `bottom` (0; default k - 3, a late one) and rises linearly to
    the final (`rise_se`)."""
    bottom = k - 3 if bottom is None else bottom
    fall = np.array([400.0, 200.0, 80.0, 25.0, 6.0, 0.0])[-(bottom + 1):]  # far above, then near the bottom
    climb = rise_se * np.arange(1, k - bottom) / (k - bottom - 1)
    return np.concatenate([fall, climb])


# True curves (in standard errors of the final's paired difference from its lowest earlier
# checkpoint) on which the interval's coverage is simulated: theta = 0, > 0 and < 0.
COVERAGE_CURVES = {
    "flat": lambda k: np.zeros(k),
    "rising 2 SE to the final": lambda k: rise_curve(2.0, k),
    "still falling: the final 2 SE below the lowest earlier": lambda k: np.concatenate(
        [np.array([400.0, 200.0, 80.0, 25.0, 6.0, 2.0, 1.0, 0.0])[-(k - 1):], [-2.0]]),
}


@pytest.fixture(scope="module")
def toy_losses() -> np.ndarray:
    """(7, 256) per-sequence losses of toy-d64 at steps 0, 1, 4, 16, 400, 600, 800 (the default run)."""
    table = pd.read_csv(DATA, comment="#")
    return table.drop(columns="sequence").to_numpy().T  # columns: step0 ... step800


def binomial_upper(rate: float, curves: int, z: float = 3.0) -> float:
    """rate + z binomial standard errors: a test at the stated size fails this with
    probability ~0.13% (z = 3, one-sided)."""
    return rate + z * math.sqrt(rate * (1 - rate) / curves)


def test_a_flat_curve_with_the_runs_own_noise_is_called_saturates_at_most_at_alpha(toy_losses):
    rate, hits, se = simulated_rate(toy_losses, None, curves=CURVES, alpha=ALPHA, draws=DRAWS, seed=1)
    # 1,000 curves: under size alpha the count of `saturates` is Binomial(1000, <= 0.05), sd 6.9
    assert rate <= binomial_upper(ALPHA, CURVES), f"{hits} of {CURVES} flat curves called saturates"
    assert hits > 0  # the test is not trivially conservative: a flat curve's max sits near c


def test_a_late_rise_of_4_standard_errors_is_detected_in_90_percent(toy_losses):
    curve = rise_curve(4.0, len(toy_losses))
    assert np.argmin(curve) == 4 and curve[-1] == 4.0 and np.all(np.diff(curve[:5]) < 0)
    rate, hits, se = simulated_rate(toy_losses, curve, curves=CURVES, alpha=ALPHA, draws=DRAWS, seed=2)
    assert rate >= 0.90, f"a 4-SE rise ({4 * se:.4f} nats) detected in {hits} of {CURVES}"
    assert 0 < se < 0.02  # the paired SE of toy-d64's step-400-to-final difference, in nats


@pytest.mark.parametrize("name", list(COVERAGE_CURVES))
def test_the_interval_holds_the_true_rise_at_its_level(toy_losses, name):
    """[rise_low, rise_high] bounds theta, the true rise of the final above the best earlier
    checkpoint (issue 44: read as a contradiction where it lay below 0): each bound holds in at
    least 1 - alpha of runs with the run's own noise, both in 1 - 2 alpha, whatever theta's sign."""
    found = simulated_coverage(toy_losses, COVERAGE_CURVES[name](len(toy_losses)), curves=CURVES, alpha=ALPHA,
                               draws=DRAWS, seed=3)
    lowest = 1 - ALPHA - 3 * math.sqrt(ALPHA * (1 - ALPHA) / CURVES)  # 3 binomial SE below the claim
    assert found["low"] >= lowest and found["high"] >= lowest, found
    assert found["both"] >= 1 - 2 * ALPHA - 3 * math.sqrt(2 * ALPHA * (1 - 2 * ALPHA) / CURVES), found


def test_few_sequences_keep_the_size_with_the_t_critical_value():
    """With 8 sequences the normal critical value called 13% of flat curves saturates; the
    multivariate t one (df = n - 1) keeps it near alpha."""
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(CURVES):
        difficulty = rng.normal(0, 0.3, 8)
        losses = 3.0 + difficulty[None, :] + rng.normal(0, 0.03, (9, 8))
        hits += verdict_from_paired(np.arange(9), losses, draws=DRAWS).verdict == SATURATES
    assert hits / CURVES <= 0.09  # the normal critical value: 0.126 on these curves
    correlation = np.eye(3)
    normal, _ = max_z_quantile(correlation, ALPHA, 20000)
    heavy, _ = max_z_quantile(correlation, ALPHA, 20000, df=7)
    assert heavy > normal + 0.2


def test_the_interval_and_the_verdict_agree_and_a_rise_is_found():
    rng = np.random.default_rng(4)
    difficulty = rng.normal(0, 0.3, 400)
    curve = np.array([4.0, 3.5, 3.2, 3.1, 3.1, 3.15])
    losses = curve[:, None] + difficulty[None, :] + rng.normal(0, 0.02, (6, 400))
    v = verdict_from_paired([0, 10, 20, 40, 80, 160], losses)
    assert v.verdict == SATURATES and v.rise_low > 0 and v.best_step in (40, 80)
    assert v.rise_low < 0.05 < v.rise_high and v.p_value < ALPHA and v.t_max > v.critical
    assert v.units == 400 and v.checkpoints == 6 and v.interval_level == pytest.approx(0.9)
    assert tuple(v.as_row()) == VERDICT_COLUMNS[1:]


def test_a_curve_whose_lowest_point_is_the_final_gets_no_evidence_and_a_negative_rise_inside_its_interval():
    """Issue 44: the toy's verdicts table read `rise 0.0` beside a 90% interval [-0.035, -0.023].
    The interval bounds the final minus the best earlier checkpoint; its estimate is now the rise."""
    rng = np.random.default_rng(5)
    losses = np.array([4.0, 3.5, 3.2, 3.1])[:, None] + rng.normal(0, 0.3, 50)[None, :] + rng.normal(0, 0.02, (4, 50))
    v = verdict_from_paired([0, 1, 2, 3], losses)
    assert v.verdict == NO_EVIDENCE and v.best_step == v.final_step == 3
    means = losses.mean(axis=1)
    assert v.rise == pytest.approx(means[3] - means[2], abs=1e-12)  # the final minus the lowest earlier one
    assert v.rise_low <= v.rise <= v.rise_high < 0 and v.rise_se > 0  # the final is below every earlier one


@pytest.mark.parametrize("paired", [True, False])
def test_the_rise_always_lies_in_its_interval_and_saturates_exactly_when_it_is_above_0(paired):
    rng = np.random.default_rng(11)
    readings = set()
    for _ in range(300):
        k = int(rng.integers(3, 9))
        curve = np.cumsum(rng.normal(0, 0.05, k))  # any shape: falling, flat, rising
        if paired:
            losses = curve[:, None] + rng.normal(0, 0.3, 40)[None, :] + rng.normal(0, 0.05, (k, 40))
            v = verdict_from_paired(np.arange(k), losses, draws=2000)
        else:
            v = verdict_from_estimates(np.arange(k), curve + rng.normal(0, 0.02, k), np.full(k, 0.02), draws=2000)
        assert v.rise_low <= v.rise <= v.rise_high, v
        assert (v.verdict == SATURATES) == (v.rise_low > 0), v
        readings.add((v.rise_low > 0, v.rise_high < 0))
    assert readings == {(True, False), (False, True), (False, False)}  # above, below and across 0 all met


def test_a_checkpoint_identical_to_the_final_bounds_the_rise_below_by_0():
    """Its difference has no noise (se 0, no t statistic): it enters the bounds as it is."""
    rng = np.random.default_rng(6)
    losses = np.array([4.0, 3.5, 3.2, 3.2])[:, None] + rng.normal(0, 0.3, 50)[None, :] + rng.normal(0, 0.02, (4, 50))
    losses[2] = losses[3]  # the same weights saved twice
    v = verdict_from_paired([0, 1, 2, 3], losses)
    assert v.verdict == NO_EVIDENCE and v.rise == 0 and v.rise_low == 0 <= v.rise_high


def test_too_few_checkpoints_and_bad_input():
    v = verdict_from_paired([5], np.ones((1, 4)))
    assert v.verdict == TOO_FEW and v.final_step == 5 and math.isnan(v.rise_low)
    assert verdict_from_paired([1, 2], np.ones((2, 4)) + [[0], [1]]).verdict == TOO_FEW  # default min 3
    assert verdict_from_paired([1, 2], np.ones((2, 4)) + [[0], [1]], min_checkpoints=2).verdict == SATURATES
    with pytest.raises(ValueError, match="steps must increase"):
        verdict_from_paired([2, 1, 3], np.ones((3, 4)))
    with pytest.raises(ValueError, match="min_checkpoints"):
        verdict_from_paired([1, 2, 3], np.ones((3, 4)), min_checkpoints=1)
    with pytest.raises(ValueError, match="non-finite"):
        verdict_from_paired([1, 2, 3], np.array([[1.0, 2.0], [1.0, np.nan], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="alpha"):
        verdict_from_estimates([1, 2, 3], [3.0, 2.0, 2.5], [0.1, 0.1, 0.1], alpha=0.5)


def test_a_p_value_is_never_zero():
    losses = np.array([3.0, 2.0, 2.0, 5.0])[:, None] + np.random.default_rng(6).normal(0, 0.01, (4, 30))
    v = verdict_from_paired([0, 1, 2, 3], losses, draws=1000)
    assert v.verdict == SATURATES and v.p_value == pytest.approx(1 / 1001)


# ---------------------------------------------------------------- real caches of a real model


def train_and_cache(model, tokens: np.ndarray, steps: list[int], out: Path, lr: float = 3e-3) -> dict[int, Path]:
    """Train `model` on `tokens` (full batch, Adam) and cache it at each of `steps`, as a
    model run's checkpoints are: the same sequences scored at every one."""
    model = copy.deepcopy(model).train()
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    ids = torch.as_tensor(tokens, dtype=torch.long)
    settings = ExtractionSettings(batch_size=8, chunk_sequences=16, layer_sample=32)
    caches, step = {}, 0
    for target in steps:
        for _ in range(target - step):
            optimiser.zero_grad()
            model(ids, labels=ids).loss.backward()
            optimiser.step()
        step = target
        path = out / "cache" / f"step{step}.h5"
        extract_to_cache(model.eval(), tokens, path, settings=settings,
                         identity=dict(model="tiny", revision=f"step{step}", model_id="local/tiny", sample_sha256="s"))
        model.train()
        caches[step] = path
    return caches


def loss_records(caches: dict[int, Path], out: Path) -> list[Path]:
    """The loss metric's record of each cache, as rule compute_checkpoint_metric writes it."""
    paths = []
    for step, cache_path in caches.items():
        with open_cache(cache_path) as cache:
            values = METRICS["loss"].compute(cache)
        path = out / "metrics" / "loss" / "tiny" / f"step{step}.json"
        write_json(path, dict(suite="mine", model="tiny", revision=f"step{step}", step=step, tokens=step * 64,
                              metric="loss", **values))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def real_run(tiny_neox, tmp_path_factory):
    """Caches of a tiny GPT-NeoX at 4 checkpoints along real training on 48 sequences of
    mixed difficulty (half repeat a 3-token pattern, half are random), and their loss records."""
    out = tmp_path_factory.mktemp("run")
    rng = np.random.default_rng(0)
    easy = np.tile(rng.integers(0, 36, size=(24, 3)), (1, 6))  # (24, 18): learnable
    hard = rng.integers(0, 36, size=(24, 18))
    tokens = np.concatenate([easy, hard]).astype(np.int32)  # (48, 18)
    caches = train_and_cache(tiny_neox, tokens, [0, 10, 30, 60], out)
    return caches, loss_records(caches, out)


def test_the_table_of_a_real_run_whose_final_is_its_best_says_no_evidence(real_run):
    caches, records = real_run
    table = verdicts_from_records(records, {}, None)
    assert list(table.columns) == [*VERDICT_COLUMNS, "notes"] and len(table) == 1
    row = table.iloc[0]
    assert row["notes"] == ""  # nothing implausible, nothing gone
    assert row["verdict"] == NO_EVIDENCE and row["best_step"] == row["final_step"] == 60
    assert row["checkpoints"] == 4 and row["units"] == 48 and row["rise_low"] <= row["rise"] < 0
    # the loss metric's sequence means are the cache's per-token losses, averaged per sequence
    with open_cache(caches[60]) as cache:
        assert row["final_loss"] == pytest.approx(sequence_means(cache["loss"][...]).mean(), rel=1e-12)


def test_the_verdict_table_is_written_with_each_models_source(real_run, tmp_path):
    """As rule tabulate_metric writes it: with provenance, a row per model (no revision column),
    whose row_lmsat_source is the source of the code that made its checkpoints' records."""
    from lmsat.core.integrity import RECORD_FIELD
    from lmsat.core.io import read_json, write_json
    from lmsat.products.table_files import read_table, write_csv

    _, records = real_run
    sourced = []
    for i, path in enumerate(records):  # as the loss jobs record them: two versions of the code
        record = dict(read_json(path), lmsat_source="a" * 64 if i < 2 else "b" * 64)
        copy = tmp_path / "metrics" / "loss" / record["model"] / path.name  # where the loss job writes it
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_json(copy, {k: v for k, v in record.items() if k != RECORD_FIELD})
        sourced.append(copy)
    write_csv(verdicts_from_records(sourced, {}, None), tmp_path / "saturation_verdicts.csv", "0" * 64, sourced)
    table = read_table(tmp_path / "saturation_verdicts.csv")
    assert list(table["row_lmsat_source"]) == ["a" * 64 + ";" + "b" * 64] and table.iloc[0]["verdict"] == NO_EVIDENCE


def test_a_user_run_with_one_checkpoint_gets_too_few_checkpoints(real_run):
    _, records = real_run
    table = verdicts_from_records(records[-1:], {}, None)
    assert table.iloc[0]["verdict"] == TOO_FEW and table.iloc[0]["checkpoints"] == 1
    assert verdicts_from_records(records[-3:], {}, None, min_checkpoints=4).iloc[0]["verdict"] == TOO_FEW


def test_paired_standard_errors_are_far_below_independent_ones_on_real_caches(real_run):
    caches, _ = real_run
    per_sequence = []
    for step in sorted(caches):
        with open_cache(caches[step]) as cache:
            per_sequence.append(sequence_means(cache["loss"][...]))
    per_sequence = np.array(per_sequence)  # (4, 48)
    steps = sorted(caches)
    paired = verdict_from_paired(steps, per_sequence)
    independent = verdict_from_estimates(steps, per_sequence.mean(axis=1),
                                         per_sequence.std(axis=1, ddof=1) / math.sqrt(per_sequence.shape[1]))
    # the differences' SEs, final vs the step before it: the sequences' own difficulty cancels
    se_paired = np.std(per_sequence[-1] - per_sequence[-2], ddof=1) / math.sqrt(48)
    se_independent = math.hypot(*(per_sequence[-2:].std(axis=1, ddof=1) / math.sqrt(48)))
    assert se_paired < se_independent / 3, (se_paired, se_independent)
    assert paired.rise_high - paired.rise_low < (independent.rise_high - independent.rise_low) / 3
    assert paired.verdict == independent.verdict == NO_EVIDENCE


def test_records_of_different_samples_are_refused(real_run, tmp_path):
    _, records = real_run
    from lmsat.core.io import read_json

    record = {k: v for k, v in read_json(records[0]).items() if k != "record_sha256"}
    record["sequence_loss"] = record["sequence_loss"][:-1]  # a cache of another sample
    short = tmp_path / "metrics" / "loss" / "tiny" / "step0.json"
    write_json(short, record)
    with pytest.raises(ValueError, match="scored on .* sequences"):
        verdicts_from_records([short, *records[1:]], {}, None)


# ---------------------------------------------------------------- what the reader of a verdict must know (issue 46)


@pytest.fixture(scope="module")
def reset_run(real_run, tiny_neox, tmp_path_factory):
    """The real run with a fifth checkpoint, step 90, whose weights are a fresh initialisation
    of the same architecture (a save that wrote untrained weights: it loads, its matrices are
    random, so no load check refuses it), cached and recorded as the others."""
    from transformers import GPTNeoXForCausalLM

    caches, records = real_run
    out = records[0].parents[3]
    torch.manual_seed(1)
    fresh = GPTNeoXForCausalLM(tiny_neox.config).eval()
    with open_cache(caches[0]) as cache:
        n_seq, predicted = cache["loss"].shape  # (n_seq, seq_len - 1)
    rng = np.random.default_rng(0)  # the real run's sample, made again as real_run makes it
    easy = np.tile(rng.integers(0, 36, size=(24, 3)), (1, 6))
    sample = np.concatenate([easy, rng.integers(0, 36, size=(24, 18))]).astype(np.int32)
    assert sample.shape == (n_seq, predicted + 1)
    path = out / "cache" / "step90.h5"
    extract_to_cache(fresh, sample, path, settings=ExtractionSettings(batch_size=8, chunk_sequences=16, layer_sample=32),
                     identity=dict(model="tiny", revision="step90", model_id="local/tiny", sample_sha256="s"))
    return records + loss_records({90: path}, out)


def test_a_checkpoint_back_at_ln_v_after_learning_is_flagged_and_kept(reset_run):
    """Issue 46, case 1: a checkpoint whose loss is an untrained model's after the run's own
    checkpoints fell well below it is marked in the loss table and named beside the verdict;
    its row stays (a real divergence is a finding)."""
    loss = loss_from_records(reset_run, {}, None)
    ln_v = math.log(40)  # tiny_neox's head: 40 rows
    assert list(loss["step"]) == [0, 10, 30, 60, 90]
    best, reset = (loss.loc[loss["step"] == step, "loss"].item() for step in (60, 90))
    assert best < ln_v - 1  # it learned: a nat and more below uniform
    assert abs(reset - ln_v) < 0.05 and reset > ln_v - 0.1 * (ln_v - best)  # untrained: ln V within hundredths
    assert list(loss["implausible_loss"]) == [False, False, False, False, True]  # step 0 is at ln V by design
    verdict = verdicts_from_records(reset_run, {}, None).iloc[0]
    assert verdict["verdict"] == SATURATES and verdict["final_step"] == 90  # the number stands, flagged beside it
    assert verdict["notes"].startswith(f"step90 (step 90): loss {reset:.3f} is back near ln V = {ln_v:.3f} (a uniform "
                                       f"guess over the head's rows, an untrained model's loss) after step60 (step 60) "
                                       f"reached {best:.3f}: "), verdict["notes"]
    assert "A broken checkpoint (zeroed, or untrained weights saved) or a divergence" in verdict["notes"]


def test_a_loss_that_rises_without_forgetting_what_was_learned_is_not_flagged(real_run):
    """A real rise (saturation, a divergence that keeps most of what was learned) is the
    verdict's to judge, not a broken checkpoint: only a loss back near ln V is flagged."""
    from lmsat.core.io import read_json

    _, records = real_run
    rows = [read_json(path) for path in records]
    ln_v, best = math.log(40), min(row["loss"] for row in rows)
    for lost, flagged in ((0.5, False), (0.85, False), (0.95, True)):
        risen = dict(rows[-1], step=90, revision="step90", loss=best + lost * (ln_v - best))
        table = loss_table([*rows, risen])
        assert list(table["implausible_loss"]) == [False] * 4 + [flagged], lost


def test_a_run_of_flagged_checkpoints_gets_one_note_and_past_one_epoch_overfitting_as_its_cause(real_run):
    """Issue 50, item 6: a tiny model trained for ~50 epochs on 12k tokens has a held-out loss that
    climbs past ln V; the summary called each such checkpoint "A broken checkpoint ... or a
    divergence", a 400-character note per row. Consecutive flagged checkpoints get one note; where
    the run's trainer_state.json says the data had repeated by then (steps_per_epoch, a fact of the
    plan), it names overfitting as the likely cause."""
    from lmsat.core.io import read_json
    from lmsat.products.saturation_tables import implausible_notes

    _, records = real_run
    rows = [read_json(path) for path in records]
    ln_v, best = math.log(40), min(row["loss"] for row in rows)
    climbed = [dict(rows[-1], step=step, revision=f"step{step}", loss=best + lost * (ln_v - best))
               for step, lost in ((90, 0.95), (120, 1.02), (150, 1.1))]  # past ln V, as an overfit run's
    (note,) = implausible_notes([*rows, *climbed])["tiny"]
    assert note.startswith("step90 to step150 (steps 90 to 150, 3 checkpoints in a row): loss ")
    assert "95% to 110% of what the run had learned is lost" in note and "A broken checkpoint" in note
    (note,) = implausible_notes([*rows, *climbed], steps_per_epoch={"tiny": 30.0})["tiny"]
    assert "By step 90 the training data had been gone through 3 times (30 steps per epoch" in note
    assert "likely cause is overfitting" in note and "A broken checkpoint (zeroed" not in note
    (note,) = implausible_notes([*rows, *climbed], steps_per_epoch={"tiny": 100.0})["tiny"]  # within the first epoch
    assert "A broken checkpoint (zeroed, or untrained weights saved) or a divergence" in note
    # two runs apart: a note each
    apart = [*rows, climbed[0], dict(climbed[1], loss=best), climbed[2]]
    assert [n.split(":")[0] for n in implausible_notes(apart)["tiny"]] == ["step90 (step 90)", "step150 (step 150)"]


def test_records_of_an_older_lmsat_are_held_against_the_plans_vocabulary(reset_run, tmp_path):
    """Records made before the loss metric recorded ln V: the plan's vocab_size stands in;
    with neither, nothing is flagged (nothing is known to flag against)."""
    from lmsat.core.integrity import RECORD_FIELD
    from lmsat.core.io import read_json

    older = []
    for path in reset_run:
        record = {k: v for k, v in read_json(path).items() if k not in (RECORD_FIELD, "uniform_loss")}
        copy = tmp_path / "metrics" / "loss" / "tiny" / path.name
        write_json(copy, record)
        older.append(copy)
    assert not loss_from_records(older, {}, None)["implausible_loss"].any()
    assert list(loss_from_records(older, {}, None, vocab_sizes={"tiny": 40})["implausible_loss"]) == [False] * 4 + [True]


def test_checkpoints_no_longer_on_disk_are_named_beside_the_verdict_best_first(real_run, reset_run):
    """Issue 46, case 2 at the table: the records of rotated-away checkpoints are kept, and the
    verdict says which of its checkpoints are gone, its best above all."""
    _, records = real_run
    verdict = verdicts_from_records(records, {}, None, gone=["tiny@step0", "tiny@step10"]).iloc[0]
    assert verdict["notes"] == ("2 of its 4 checkpoints are no longer on disk (step0, step10): measured before they "
                                "went, their records are kept (on_disk false in the tables)")
    verdict = verdicts_from_records(reset_run, {}, None, gone=["tiny@step60"]).iloc[0]
    assert verdict["best_step"] == 60 and ("; its best checkpoint step60 (step 60) is no longer on disk; 1 of its 5 "
                                           "checkpoints are no longer on disk (step60)") in verdict["notes"]
