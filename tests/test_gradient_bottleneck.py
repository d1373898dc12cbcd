"""The gradient bottleneck (lmsat.bottleneck.gradient, issue 41) against float64 brute force
with a full V x V projector: its known truths (a random direction keeps rank / V of its
energy, a gradient in the head's column space all of it, one orthogonal to it none, a head
with repeated or zero columns has the rank of its distinct columns), the table of the
checkpoint job on a trained toy checkpoint against an independent float64 computation from
the model's own forward, its figure and summary line, and bad input refused by name before
any work."""

from __future__ import annotations

import math
from types import SimpleNamespace

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from snakemake.iocontainers import Namedlist

from lmsat.bottleneck.gradient import (
    CLASSES,
    GradientBottleneckError,
    frequent_ids,
    head_projector,
    kept_energy,
    measure,
    random_norm,
    read_gradient_file,
    summarize,
    write_gradient_file,
)
from lmsat.core.plan import ModelEntry
from lmsat.data.corpus import tokens_sha256, write_sample
from lmsat.products.metrics import METRICS, WeightsJob

from conftest import script

V, D = 520, 16  # the toy suite's head: 514 tokenizer entries padded to 520 rows


def brute_projector(weight) -> tuple[np.ndarray, int]:
    """P (V, V) float64 on the column space of `weight`, from numpy's SVD and matrix_rank."""
    w = np.asarray(weight, dtype=np.float64)
    rank = int(np.linalg.matrix_rank(w))
    u = np.linalg.svd(w, full_matrices=False)[0][:, :rank]
    return u @ u.T, rank


def brute_shares(gradients, projector: np.ndarray) -> np.ndarray:
    g = np.asarray(gradients, dtype=np.float64)
    return ((g @ projector) ** 2).sum(axis=1) / (g**2).sum(axis=1)


def shares(gradients: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The library's ||P g||^2 / ||g||^2 of each row of `gradients`."""
    kept, total = kept_energy(torch.as_tensor(gradients, dtype=torch.float32), head_projector(torch.as_tensor(head)))
    return (kept / total).numpy()


def random_head(seed=0, v=V, d=D) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(v, d)).astype(np.float32)


# ---------------------------------------------------------------- known truths


def test_a_random_direction_keeps_rank_over_v_of_its_energy_in_expectation():
    head = random_head()
    directions = np.random.default_rng(1).normal(size=(4000, V)).astype(np.float32)  # uniform on the sphere
    kept = shares(directions, head)
    projector, rank = brute_projector(head)
    np.testing.assert_allclose(kept, brute_shares(directions, projector), rtol=1e-5, atol=1e-7)
    assert rank == D
    sem = kept.std(ddof=1) / math.sqrt(kept.size)
    assert abs(kept.mean() - rank / V) < 3 * sem, (kept.mean(), rank / V, sem)
    norms = np.sqrt(kept)
    assert abs(norms.mean() - random_norm(rank, V)) < 3 * norms.std(ddof=1) / math.sqrt(norms.size)
    assert random_norm(rank, V) < math.sqrt(rank / V)  # Jensen: a little below


def test_a_gradient_in_the_column_space_keeps_all_and_one_orthogonal_to_it_none():
    head = random_head(2)
    rng = np.random.default_rng(3)
    inside = rng.normal(size=(50, D)) @ head.T.astype(np.float64)  # (50, V) = W c
    projector, _ = brute_projector(head)
    random = rng.normal(size=(50, V))
    outside = random - random @ projector  # (I - P) u
    assert np.allclose(shares(inside, head), 1.0, atol=1e-6)
    assert np.all(shares(outside, head) < 1e-9)


def test_repeated_and_zero_columns_give_the_rank_of_the_distinct_columns():
    head = random_head(4)
    head[:, 3] = head[:, 5]  # repeated
    head[:, 7] = -2.0 * head[:, 1]  # a multiple (exact in float32: 2.5 x would round off the line)
    head[:, 9] = 0.0  # zero
    head[:, 11] = head[:, 12] = 0.0
    distinct = np.delete(head, [3, 7, 9, 11, 12], axis=1)
    projector, rank = brute_projector(distinct)
    assert rank == D - 5 == int(np.linalg.matrix_rank(head.astype(np.float64)))
    assert head_projector(torch.as_tensor(head)).rank == rank
    directions = np.random.default_rng(5).normal(size=(500, V))
    np.testing.assert_allclose(shares(directions, head), brute_shares(directions, projector), rtol=1e-5, atol=1e-7)
    zero = head_projector(torch.zeros(V, D))
    assert zero.rank == 0  # no column space: nothing kept
    kept, total = kept_energy(torch.ones(2, V), zero)
    assert kept.tolist() == [0.0, 0.0] and (total > 0).all()


def test_frequent_ids_are_the_most_frequent_making_half_of_the_targets():
    targets = np.array([5] * 6 + [2] * 3 + [7] * 3 + [1] * 2)  # 14 targets
    frequent, n, share = frequent_ids(targets, 10)
    assert np.flatnonzero(frequent).tolist() == [2, 5] and n == 2 and share == pytest.approx(9 / 14)  # 5 (6) + 2 (3 < 7's tie: lower id)


# ---------------------------------------------------------------- the table of a toy checkpoint


def toy_checkpoint(root, steps=40):
    """A toy-suite checkpoint (lmsat.toy.suite: 514 tokenizer entries, a 520-row head, d = 16) trained
    `steps` AdamW steps on a noisy successor language, saved with its tokenizer."""
    from lmsat.toy.suite import ToyModelSpec, TrainSpec, build_tokenizer, train_toy_model

    words = [f"w{i}" for i in range(512)]
    tokenizer = build_tokenizer(words, root / "tokenizer")
    rng = np.random.default_rng(0)
    noise = np.minimum(rng.zipf(1.6, size=60_000), 40)
    train = np.cumsum(noise) % 512  # each token a short Zipf-distributed jump past the previous one
    spec = ToyModelSpec(hidden_size=D, vocab_size=len(tokenizer), seq_len=32)
    saved = {}
    train_toy_model(train, spec, TrainSpec(max_steps=steps, batch_size=8, lr=1e-2), [steps],
                    on_checkpoint=lambda step, model: saved.setdefault(step, model.save_pretrained(root / f"step{step}")))
    tokens = (np.cumsum(np.minimum(np.random.default_rng(1).zipf(1.6, size=(12, 32)), 40), axis=1) % 512)
    write_sample(root / "sample.h5", tokens, np.arange(12) * 32, {"corpus": "toy"})
    return root / f"step{steps}", tokens


def checkpoint_job(root, revision, out, weight_metrics=("spectra", "attention", "gradient_bottleneck")):
    """Rule analyse_checkpoint's script on the saved checkpoint, with the rule's params."""
    entry = ModelEntry(
        name="toy-d16", suite="toy", source="local", id=str(root), hidden_size=D, vocab_size=V, n_params=0,
        tokenizer="toy", tokens_per_step=256, revisions=(revision,), steps=(40,), allow_pickle=False,
        trust_remote_code=False, key="suites.toy.models[0]",
    )
    outputs = {m: str(out / m / "toy-d16" / f"{revision}.h5") for m in weight_metrics}
    job = SimpleNamespace(
        input=Namedlist(fromdict={"sample": str(root / "sample.h5")}),
        output=Namedlist(fromdict={"cache": str(out / "cache" / f"{revision}.h5"), **outputs}),
        log=[str(out / "logs" / f"{revision}.log")],
        wildcards=SimpleNamespace(model="toy-d16", revision=revision),
        params=SimpleNamespace(
            model=entry.__dict__, record=dict(suite="toy", model="toy-d16", revision=revision, step=40, tokens=10240),
            tokenizer=dict(source="local", id=str(root / "tokenizer"), revision="main"), drop_padding_rows=True,
            extraction=dict(batch_size=4, chunk_sequences=4, dtype="float32", storage_dtype="float32", layer_sample=64),
            weight_metrics=list(weight_metrics), seed=0,
        ),
        threads=1,
        config=dict(device="cpu"),
    )
    script("analyse_checkpoint").main(job)
    return out / "gradient_bottleneck" / "toy-d16" / f"{revision}.h5", out / "cache" / f"{revision}.h5"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("toy"), tmp_path_factory.mktemp("out")
    checkpoint, tokens = toy_checkpoint(root)
    path, cache = checkpoint_job(root, checkpoint.name, out)
    return dict(root=root, checkpoint=checkpoint, tokens=tokens, path=path, cache=cache, out=out)


def float64_from_the_models_forward(checkpoint, tokens) -> dict:
    """The table's row computed independently: the model's own forward in float64 (its
    logits, not the cache), a full V x V projector from numpy's SVD, numpy statistics."""
    from transformers import GPTNeoXForCausalLM

    lm = GPTNeoXForCausalLM.from_pretrained(checkpoint, dtype=torch.float64).eval()
    with torch.no_grad():
        logits = lm(torch.as_tensor(tokens, dtype=torch.long)).logits[:, :-1].numpy()  # (n_seq, L - 1, V) float64
    targets = tokens[:, 1:]
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    g = p.copy()
    np.put_along_axis(g, targets[..., None], np.take_along_axis(g, targets[..., None], axis=-1) - 1.0, axis=-1)
    projector, rank = brute_projector(lm.get_output_embeddings().weight.detach().numpy())
    kept = ((g @ projector) * g).sum(axis=-1)  # g^T P g = ||P g||^2 (P symmetric, idempotent)
    total = (g**2).sum(axis=-1)
    energy = kept / total  # (n_seq, L - 1)
    counts = np.bincount(targets.ravel(), minlength=logits.shape[-1])
    order = sorted(range(logits.shape[-1]), key=lambda i: (-counts[i], i))
    covered, frequent = 0, set()
    for i in order:  # the most frequent ids until half the targets
        frequent.add(i)
        covered += counts[i]
        if covered >= targets.size / 2:
            break
    is_frequent = np.vectorize(frequent.__contains__)(targets)
    n = tokens.shape[0]

    def mean_sem(values, mask):
        s, c = (values * mask).sum(axis=1), mask.sum(axis=1)
        m = s.sum() / c.sum()
        return m, math.sqrt(n / (n - 1) * ((s - m * c) ** 2).sum()) / c.sum()

    row = {}
    everything = np.ones_like(is_frequent)
    for name, mask in (("", everything), ("_frequent", is_frequent), ("_rare", ~is_frequent)):
        for kind, values in (("energy", energy), ("norm", np.sqrt(energy))):
            row[f"{kind}_kept{name}"], row[f"{kind}_kept{name}_sem"] = mean_sem(values, mask)
    per_sequence = energy.mean(axis=1)  # equal counts: the plain SE of per-sequence means
    assert row["energy_kept_sem"] == pytest.approx(per_sequence.std(ddof=1) / math.sqrt(n), rel=1e-9)
    row["energy_kept_pooled"] = kept.sum() / total.sum()
    s, c = kept.sum(axis=1), total.sum(axis=1)
    row["energy_kept_pooled_sem"] = math.sqrt(n / (n - 1) * ((s - row["energy_kept_pooled"] * c) ** 2).sum()) / c.sum()
    for q in (5, 25, 50, 75, 95):
        row[f"energy_kept_q{q:02d}"] = np.quantile(energy, q / 100)
        row[f"norm_kept_q{q:02d}"] = np.quantile(np.sqrt(energy), q / 100)
    rows, d = logits.shape[-1], lm.config.hidden_size
    row.update(rank=rank, vocab_rows=rows, hidden_size=d, random_energy=rank / rows, n_tokens=targets.size, n_seq=n,
               frequent_types=len(frequent), frequent_share=covered / targets.size)
    return row


# float32 forward, cached states and head GEMMs against the float64 forward: measured 6.1e-8
# at most on these shares (norm_kept_q95); 2e-6 is ~30x that and 1/300 of the energy share's SE.
SHARE_TOL = 2e-6


def test_the_table_equals_an_independent_float64_computation_from_the_model_s_own_forward(toy):
    from lmsat.products.bottleneck_tables import GRADIENT_COLUMNS, gradient_from_files

    table = gradient_from_files([toy["path"]], {}, ["toy-d16"])
    assert list(table.columns) == ["suite", "model", "revision", "step", "tokens", "is_final", *GRADIENT_COLUMNS]
    (row,) = table.to_dict("records")
    assert (row["model"], row["revision"], row["step"], row["is_final"]) == ("toy-d16", "step40", 40, True)
    truth = float64_from_the_models_forward(toy["checkpoint"], toy["tokens"])
    for column, value in truth.items():
        if isinstance(value, (int, np.integer)):
            assert row[column] == value, column
        else:
            assert abs(row[column] - value) <= SHARE_TOL, (column, row[column], value)
    assert row["energy_kept_over_random"] == pytest.approx(row["energy_kept"] / row["random_energy"], rel=1e-12)
    assert row["random_norm"] == pytest.approx(random_norm(row["rank"], V), rel=1e-12)
    assert 0 < row["energy_kept"] < 1 and row["energy_kept_sem"] > 100 * SHARE_TOL  # a real, measured spread
    assert row["energy_kept_q05"] < row["energy_kept_q50"] < row["energy_kept_q95"]


def check_default_run(results) -> None:
    """The default run's table: a row per toy checkpoint, and at the first and last
    checkpoints of the narrowest and widest model the float64 computation from the model's
    own forward on the run's sample; its figure and summary line are there."""
    from lmsat.data.corpus import read_sample
    from lmsat.products.table_files import read_table

    table = read_table(results / "tables" / "gradient_bottleneck.csv")
    steps = [0, 1, 4, 16, 64, 200, 400, 600, 800]
    models = ["toy-d16", "toy-d32", "toy-d64", "toy-d128"]
    assert table["model"].tolist() == [m for m in models for _ in steps] and table["step"].tolist() == steps * 4
    tokens, _ = read_sample(results / "samples" / "synthetic" / "toy.h5")
    for model, revision in (("toy-d16", "step0"), ("toy-d16", "step800"), ("toy-d128", "step0"), ("toy-d128", "step800")):
        hub = results / "toy" / "hub" / f"models--lmsat-toy--{model}"
        truth = float64_from_the_models_forward(hub / "snapshots" / (hub / "refs" / revision).read_text().strip(), tokens)
        row = table[(table["model"] == model) & (table["revision"] == revision)].iloc[0]
        for column, value in truth.items():
            if isinstance(value, (int, np.integer)):
                assert row[column] == value, (model, revision, column)
            else:
                assert abs(row[column] - value) <= SHARE_TOL, (model, revision, column, row[column], value)
    assert (results / "figures" / "gradient_bottleneck.png").stat().st_size > 0
    summary = (results / "report" / "summary.html").read_text(encoding="utf-8")
    assert "Gradient bottleneck at each model&#x27;s final checkpoint" in summary
    assert "Loses the most: toy-d16 (" in summary


def test_the_default_run_has_a_row_per_toy_checkpoint_equal_to_float64_from_the_model_s_forward(default_run):
    check_default_run(default_run[0] / "results" / "default")


def test_the_checkpoint_job_shares_one_gram_and_its_spectrum_is_unchanged(toy):
    """The spectra from the Gram the gradient bottleneck shares equal numpy's singular values
    of the head's tokenizer rows (514 of 520)."""
    from transformers import GPTNeoXForCausalLM

    from lmsat.degeneration.weight_files import read_spectrum

    s, attrs = read_spectrum(toy["out"] / "spectra" / "toy-d16" / "step40.h5")
    head = GPTNeoXForCausalLM.from_pretrained(toy["checkpoint"]).get_output_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(s, np.linalg.svd(head[:514].astype(np.float64), compute_uv=False), rtol=1e-6)
    assert attrs["n_valid_rows"] == 514
    found = read_gradient_file(toy["path"])
    assert found["rows"] == V and found["rank"] == D and found["head_dtype"] == "float32"


def test_a_file_is_refused_when_edited_or_moved(toy, tmp_path):
    from lmsat.core.integrity import IntegrityError
    from lmsat.core.io import IdentityError

    moved = tmp_path / "gradient_bottleneck" / "toy-d16" / "step8.h5"
    moved.parent.mkdir(parents=True)
    moved.write_bytes(toy["path"].read_bytes())
    with pytest.raises(IdentityError, match="step8"):
        read_gradient_file(moved)
    edited = tmp_path / "gradient_bottleneck" / "toy-d16" / "step40.h5"
    edited.write_bytes(toy["path"].read_bytes())
    with h5py.File(edited, "r+") as f:
        f["energy_sum"][0, 0] += 1.0
    with pytest.raises(IntegrityError, match="energy_sum.*rule analyse_checkpoint"):
        read_gradient_file(edited)


# ---------------------------------------------------------------- bad input, before any work


def test_a_head_with_nan_is_refused_naming_the_checkpoint_and_row_before_the_forward(toy, tmp_path):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "generation_config.json"):
        if (toy["checkpoint"] / name).exists():
            (broken / name).write_bytes((toy["checkpoint"] / name).read_bytes())
    tensors = load_file(str(toy["checkpoint"] / "model.safetensors"))
    tensors["embed_out.weight"][17, 3] = float("nan")
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "sample.h5").write_bytes((toy["root"] / "sample.h5").read_bytes())
    (tmp_path / "tokenizer").symlink_to(toy["root"] / "tokenizer")
    from lmsat.errors import ModelLoadError

    # the checkpoint job: its loader refuses the file first (lmsat.checkpoints.validation), naming the tensor
    with pytest.raises(ModelLoadError, match=r"at revision broken: tensor lm_head.weight \(520, 16\) holds 1 NaN.*\(17, 3\)"):
        checkpoint_job(tmp_path, "broken", tmp_path / "out", weight_metrics=("gradient_bottleneck",))
    assert not (tmp_path / "out" / "cache" / "broken.h5").exists()  # refused before the forward
    # a model in memory (the callback's, lmsat.monitor's): the metric's own check, before its Gram
    from transformers import GPTNeoXForCausalLM

    lm = GPTNeoXForCausalLM.from_pretrained(toy["checkpoint"])
    with torch.no_grad():
        lm.get_output_embeddings().weight[17, 3] = float("nan")
    job = WeightsJob(model="toy-d16@step40", tokenizer="toy", tokenizer_spec={}, drop_padding_rows=False)
    with pytest.raises(GradientBottleneckError, match=r"toy-d16@step40: the LM head has NaN/Inf values \(first in row 17"):
        METRICS["gradient_bottleneck"].compute(lm, job)


def test_a_tokenizer_larger_than_the_head_is_refused_by_name(tiny_neox, tmp_path):
    from conftest import word_tokenizer

    word_tokenizer([f"w{i}" for i in range(60)]).save_pretrained(str(tmp_path / "tokenizer"))  # 62 entries, 40 rows
    job = WeightsJob(model="tiny@step0", tokenizer="words", drop_padding_rows=False,
                     tokenizer_spec=dict(source="local", id=str(tmp_path / "tokenizer"), revision="main"))
    with pytest.raises(GradientBottleneckError, match=r"tiny@step0: tokenizer 'words' has 62 entries but the LM head only 40"):
        METRICS["gradient_bottleneck"].compute(tiny_neox, job)


def test_a_cache_without_hidden_states_or_of_another_shape_is_refused_by_name(tmp_path):
    projector = head_projector(torch.as_tensor(random_head(6)))
    tokens = np.random.default_rng(7).integers(0, 514, size=(3, 9))
    path = tmp_path / "cache.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("loss", data=np.ones((3, 8), dtype=np.float32))
        f.attrs["sample_sha256"] = tokens_sha256(tokens)
    with h5py.File(path, "r") as f, pytest.raises(GradientBottleneckError, match=r"m@s: .*cache.h5 holds no hidden states"):
        measure(projector, f, tokens, where="m@s")
    with h5py.File(path, "r+") as f:
        f.create_dataset("hidden", data=np.ones((27, D + 1), dtype=np.float32))
    with h5py.File(path, "r") as f, pytest.raises(GradientBottleneckError, match=r"hidden states are \(27, 17\).*\(27, 16\)"):
        measure(projector, f, tokens, where="m@s")
    with h5py.File(path, "r") as f, pytest.raises(GradientBottleneckError, match="another token sample"):
        measure(head_projector(torch.ones(V, D + 1)), f, tokens + 1, where="m@s")


def test_sample_ids_past_the_head_are_refused_by_name(tmp_path):
    projector = head_projector(torch.as_tensor(random_head(8)))
    tokens = np.array([[1, 2, 600]])
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f.create_dataset("hidden", data=np.zeros((3, D), dtype=np.float32))
    with h5py.File(tmp_path / "c.h5", "r") as f, pytest.raises(GradientBottleneckError, match="token id 600.*520 rows"):
        measure(projector, f, tokens, where="m@s")


# ---------------------------------------------------------------- table, figure, summary line


def synthetic_result(rng, d: int, share: float) -> dict:
    """What measure gives for 20 sequences of 64 tokens whose tokens keep about `share` of
    their gradient's energy, with a head of rank d."""
    energy = np.clip(rng.normal(share, 0.1 * share, size=(20, 63)), 0, 1)
    masks = [np.ones_like(energy, dtype=bool), rng.random(energy.shape) < 0.5]
    masks.append(~masks[1])
    return dict(
        energy_sum=np.stack([(energy * m).sum(1) for m in masks], 1),
        norm_sum=np.stack([(np.sqrt(energy) * m).sum(1) for m in masks], 1),
        count=np.stack([m.sum(1) for m in masks], 1), kept_energy_sum=energy.sum(1), total_energy_sum=np.full(20, 63.0),
        energy_quantiles=np.quantile(energy, [0.05, 0.25, 0.5, 0.75, 0.95]),
        norm_quantiles=np.quantile(np.sqrt(energy), [0.05, 0.25, 0.5, 0.75, 0.95]),
        rank=d, rows=V, hidden_size=d, head_dtype="float32", frequent_types=30, frequent_share=0.51, seq_len=64,
        zero_gradients=0,
    )


def synthetic_table(tmp_path, models=(("toy-d16", 16, 0.5), ("toy-d128", 128, 0.65)), steps=(0, 16, 64, 800)):
    """gradient_bottleneck.csv from real files in the rule's layout: each model keeps about
    `final` x rank / V at its last step, rank / V at step 0."""
    from lmsat.products.bottleneck_tables import gradient_from_files

    rng = np.random.default_rng(9)
    files = []
    for model, d, final in models:
        for i, step in enumerate(steps):
            result = synthetic_result(rng, d, d / V * (1 - (1 - final) * i / (len(steps) - 1)))
            path = tmp_path / "gradient_bottleneck" / model / f"step{step}.h5"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_gradient_file(path, result, dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=1024 * step))
            files.append(path)
    return gradient_from_files(files[::-1], {}, [m for m, _, _ in models])


def test_the_table_has_a_row_per_checkpoint_in_plan_order_and_summarize_reads_the_file(tmp_path):
    table = synthetic_table(tmp_path)
    assert table["model"].tolist() == ["toy-d16"] * 4 + ["toy-d128"] * 4
    assert table["step"].tolist() == [0, 16, 64, 800] * 2 and table["is_final"].tolist() == [False] * 3 + [True] + [False] * 3 + [True]
    assert table["random_energy"].tolist() == [16 / V] * 4 + [128 / V] * 4
    assert set(CLASSES) == {"all", "frequent", "rare"}
    first = read_gradient_file(tmp_path / "gradient_bottleneck" / "toy-d16" / "step0.h5")
    assert summarize(first)["energy_kept"] == table["energy_kept"].iloc[0]


def test_the_figure_draws_the_kept_share_per_model_with_rank_over_v_marked(tmp_path):
    from lmsat.figures import FIGURES

    table = synthetic_table(tmp_path)
    fig = FIGURES["gradient_bottleneck"].plot({"gradient_bottleneck": table}, [tmp_path / "g.png"])
    assert (tmp_path / "g.png").stat().st_size > 0
    share, relative, by_target = fig.axes[:3]
    dashed = [line for line in share.lines if line.get_linestyle() == "--"]
    assert sorted(round(line.get_ydata()[0], 9) for line in dashed) == [round(16 / V, 9), round(128 / V, 9)]
    assert [t.get_text() for t in share.get_legend().get_texts()] == ["toy-d16", "toy-d128"]
    drawn = [line for line in relative.lines if len(line.get_xdata()) == 3]  # step 0 (0 tokens) left out
    assert len(drawn) == 2 and np.allclose(drawn[0].get_ydata()[-1], table["energy_kept_over_random"].iloc[3])
    assert len([line for line in by_target.lines if line.get_linestyle() == ":"]) == 2


@pytest.mark.parametrize("n_checkpoints", [3, 8, 154])
def test_no_two_tick_labels_of_the_figure_overlap(tmp_path, n_checkpoints):
    from lmsat.figures import FIGURES
    from lmsat.figures.style import plt

    from test_figure_legibility import assert_no_overlap, run_steps

    table = synthetic_table(tmp_path, steps=tuple(run_steps(n_checkpoints)))
    fig = FIGURES["gradient_bottleneck"].plot({"gradient_bottleneck": table}, [])
    assert_no_overlap(fig, f"gradient_bottleneck ({n_checkpoints} checkpoints)")
    plt.close(fig)


def test_the_summary_line_names_the_models_that_lose_the_most_with_their_intervals():
    from lmsat.products.report import gradient_fact

    rows = [dict(model=m, is_final=True, energy_kept=k, energy_kept_sem=s, random_energy=r)
            for m, k, s, r in (("a", 0.0165, 0.0002, 0.031), ("b", 0.05, 0.001, 0.062), ("c", 0.157, 0.002, 0.246))]
    table = pd.DataFrame(rows + [dict(model="a", is_final=False, energy_kept=0.03, energy_kept_sem=0.001, random_energy=0.031)])
    text = gradient_fact(table)
    assert "a 0.0165 ± 0.00039 (rank/V 0.031, 0.53x)" in text
    assert "Loses the most: a (0.0165 ± 0.00039; its interval clear of the next lowest, b's 0.05 ± 0.002)" in text
    assert "relative to rank / V: a (0.53 ± 0.013; its interval clear of the next lowest, c's 0.64 ± 0.016)" in text
    close = table.assign(energy_kept_sem=[0.02, 0.02, 0.002, 0.001])  # a's and b's ratios' intervals overlap
    assert "relative to rank / V: a (0.53 ± 1.3; its interval overlapping the next lowest" in gradient_fact(close)


def _zero_counts(result):
    """A hostile edit: every count zeroed, so each mean would be 0 / 0."""
    result.update(count=np.zeros_like(result["count"]), energy_sum=np.zeros_like(result["energy_sum"]),
                  norm_sum=np.zeros_like(result["norm_sum"]))


@pytest.mark.parametrize("edit, problem", [
    (_zero_counts, r"dataset `count` holds 0 targets and 0 zero gradients, not the sample's 20 x 63"),
    (lambda r: r["energy_sum"].__setitem__((3, 0), r["norm_sum"][3, 0] + 5),
     r"dataset `energy_sum` at \(3, 0\) is [0-9.]+, outside \[0, [0-9.]+\] \(per token the energy share is at most"),
    (lambda r: r["norm_sum"].__setitem__((0, 1), 64.0), r"dataset `norm_sum` at \(0, 1\) is 64.0, outside \[0, \d+\] "
     r"\(per token a share is at most 1\)"),
    (lambda r: r.update(rank=3822), r"attribute `rank` is 3822.0, outside \[0, 16\] \(the head's rank is at most min"),
    (lambda r: r["kept_energy_sum"].__setitem__(0, 70.0), r"dataset `kept_energy_sum` at \(0,\) is 70.0, outside \[0, 63\]"),
    (lambda r: r.update(frequent_share=-0.5), r"attribute `frequent_share` is -0.5, outside \[0, 1\] \(a share\)"),
    (lambda r: r["count"].__setitem__((2, 1), r["count"][2, 1] + 1), r"dataset `count` at \(2,\) is \d+.0, outside "
     r"\[\d+, \d+\] \(the frequent and rare targets of a sequence are all its targets\)"),
])
def test_a_gradient_file_with_impossible_values_is_refused_even_with_its_checksum_recomputed(tmp_path, edit, problem):
    """Values a gradient file cannot hold, written with valid checksums (write_gradient_file
    hashes what it is given): a named error before summarize makes a NaN or a share above 1."""
    import re

    from lmsat.core.integrity import IntegrityError

    result = synthetic_result(np.random.default_rng(0), D, D / V)
    edit(result)
    path = tmp_path / "gradient_bottleneck" / "toy-d16" / "step8.h5"
    path.parent.mkdir(parents=True)
    write_gradient_file(path, result, dict(suite="toy", model="toy-d16", revision="step8", step=8, tokens=8192))
    with pytest.raises(IntegrityError, match=rf"{re.escape(str(path))} is corrupt: toy-d16@step8: {problem}.*"
                       r"Fix: delete .* \(rule analyse_checkpoint makes it again\)"):
        read_gradient_file(path)
