"""Representation degeneration (issue 3) on the workflow side: the registered anisotropy
metric on a real cache, the per-checkpoint weight files written by the rule's script from a
saved tiny GPT-NeoX, the tidy tables with the identical-weights check, and the figures."""

import copy
from types import SimpleNamespace

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from snakemake.iocontainers import Namedlist

from lmsat.core.plan import ModelEntry
from lmsat.data.corpus import read_sample, write_sample
from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
from lmsat.degeneration.anisotropy import mean_pairwise_cosine_bruteforce
from lmsat.degeneration.attention import attention_lowrank
from lmsat.degeneration.spectra import matrix_sha256, singular_entropy
from lmsat.degeneration.weight_files import RECORD_KEYS, head_spectrum, read_attention, read_spectrum, valid_head_rows, write_spectrum
from lmsat.errors import ConfigError
from lmsat.figures import degeneration as figures
from lmsat.planning.load import load_plan
from lmsat.products.degeneration_tables import IDENTICAL_COLUMNS, anisotropy_tables, attention_table, spectra_tables
from lmsat.products.metrics import METRICS

from conftest import SCHEMA, perturbed, script, word_tokenizer

WORDS = [f"w{i}" for i in range(35)]  # + eos, unk = 37 tokenizer entries for a 40-row head


def svd(matrix) -> np.ndarray:
    return np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)


# ------------------------------------------------------------------ anisotropy metric


def test_anisotropy_metric_equals_bruteforce_on_a_real_cache(tiny_neox, tmp_path):
    tokens = np.random.default_rng(0).integers(0, 37, size=(10, 12)).astype(np.int32)
    path = tmp_path / "c.h5"
    settings = ExtractionSettings(batch_size=3, chunk_sequences=4, layer_sample=50, seed=1)
    extract_to_cache(tiny_neox, tokens, path, identity=dict(model="tiny", revision="step1"), settings=settings)
    with open_cache(path) as cache:
        values = METRICS["anisotropy"].compute(cache)
        hidden, layers = cache["hidden"][...], cache["layers"][...]
    assert values["n_layers"] == 2 and values["layer_sample"] == 50 and values["n_tokens"] == 120
    assert abs(values["anisotropy_last"] - mean_pairwise_cosine_bruteforce(hidden)) < 1e-9
    expected = [mean_pairwise_cosine_bruteforce(layer) for layer in layers]
    np.testing.assert_allclose(values["anisotropy_layers"], expected, rtol=0, atol=1e-9)


def test_anisotropy_metric_leaves_out_and_counts_zero_vectors(tiny_neox, tmp_path):
    """Issue 49, item 1: a zero embedding row (padding_idx: a Llama with pad_token_id =
    eos_token_id) makes the layer-0 states of that token zero vectors, which have no cosine:
    the metric raised ValueError (rule compute_checkpoint_metric, `lmsat analyse` and the
    callback stopped). They are left out and counted; the value is the brute-force one over
    the others. A set with fewer than two non-zero vectors is a ValueError naming it."""
    import copy

    import torch

    model = copy.deepcopy(tiny_neox)
    with torch.no_grad():
        model.get_input_embeddings().weight[7] = 0  # token 7's embedding: zero
    tokens = np.random.default_rng(0).integers(0, 37, size=(10, 12)).astype(np.int32)
    tokens[:, ::5] = 7
    path = tmp_path / "c.h5"
    settings = ExtractionSettings(batch_size=3, chunk_sequences=4, layer_sample=50, seed=1)
    extract_to_cache(model, tokens, path, identity=dict(model="tiny", revision="step1"), settings=settings)
    with open_cache(path) as cache:
        values = METRICS["anisotropy"].compute(cache)
        layers, hidden = cache["layers"][...], cache["hidden"][...]  # (n_layers + 1, k, d), (n_tokens, d)
    # token 7 everywhere at layer 0; and at every layer where it opens a sequence: it attends to itself alone,
    # and the blocks of a freshly initialised model have zero biases
    zero = [~layer.any(axis=1) for layer in layers]
    zero_last = ~hidden.any(axis=1)
    assert [int(z.sum()) for z in zero] == values["zero_rows_layers"] and zero[0].sum() > zero[1].sum() > 0
    assert values["zero_rows_last"] == zero_last.sum() == 10 and values["n_tokens"] == 120 - 10
    for layer, z, value in zip(layers, zero, values["anisotropy_layers"]):
        assert abs(value - mean_pairwise_cosine_bruteforce(layer[~z])) < 1e-9
    assert abs(values["anisotropy_last"] - mean_pairwise_cosine_bruteforce(hidden[~zero_last])) < 1e-9
    # the tables count them beside each value
    record = dict(suite="toy", model="tiny", revision="step1", step=1, tokens=10, metric="anisotropy", **values)
    by_layer, training = anisotropy_tables([record], loss_frame([record]))
    assert by_layer["zero_rows"].tolist() == values["zero_rows_layers"]
    assert (by_layer["n_tokens"] + by_layer["zero_rows"] == 50).all() and training["zero_rows"].tolist() == [10]
    tokens[:] = 7  # every layer-0 state zero: nothing to measure there
    extract_to_cache(model, tokens, tmp_path / "z.h5", identity=dict(model="tiny", revision="step1"), settings=settings)
    with open_cache(tmp_path / "z.h5") as cache, pytest.raises(ValueError, match=r"anisotropy of layer 0 needs at least "
                                                                                r"2 non-zero vectors; 50 of its 50 are zero"):
        METRICS["anisotropy"].compute(cache)


def test_anisotropy_metric_refuses_nan_layers(tiny_neox, tmp_path):
    tokens = np.random.default_rng(0).integers(0, 37, size=(4, 8)).astype(np.int32)
    path = tmp_path / "c.h5"
    extract_to_cache(tiny_neox, tokens, path, identity=dict(model="tiny", revision="step1"),
                     settings=ExtractionSettings(layer_sample=10))
    with h5py.File(path, "r+") as f:
        f["layers"][1, 3, 0] = np.nan
    with pytest.raises(ValueError, match=r"dataset 'layers' does not match its checksum"):
        open_cache(path)  # its checksum sees it first (tests/test_integrity.py); the metric's own check:
    with open_cache(path, verify=False) as cache, pytest.raises(ValueError, match=r"layers\[1\]"):
        METRICS["anisotropy"].compute(cache)


# ------------------------------------------------------------------ head spectrum


def test_head_spectrum_drops_padding_rows(tiny_neox):
    head = tiny_neox.get_output_embeddings().weight.detach()  # (40, 16)
    spectrum = head_spectrum(tiny_neox, tokenizer_size=37)
    np.testing.assert_allclose(spectrum["singular_values"], svd(head[:37]), rtol=1e-6)
    assert not np.allclose(spectrum["singular_values"], svd(head), rtol=1e-6)
    assert (spectrum["n_rows"], spectrum["n_valid_rows"], spectrum["hidden_size"]) == (40, 37, 16)
    assert spectrum["head_sha256"] == matrix_sha256(head)
    kept = head_spectrum(tiny_neox, tokenizer_size=37, drop_padding_rows=False)
    np.testing.assert_allclose(kept["singular_values"], svd(head), rtol=1e-6)
    assert kept["n_valid_rows"] == 40


def test_tokenizer_larger_than_head_names_the_fix():
    assert valid_head_rows(40, None, True) == 40
    with pytest.raises(ValueError, match="drop_padding_rows.*false"):
        valid_head_rows(40, 50, True, tokenizer="toy")


# ------------------------------------------------------------------ the checkpoint job

SETTINGS = dict(batch_size=2, chunk_sequences=2, dtype="float32", storage_dtype="float32", layer_sample=16)


def run_checkpoint_job(model, revision, step, root, out):
    """The rule's script on a saved checkpoint, with the params the rule passes."""
    entry = ModelEntry(
        name="tiny", suite="s", source="local", id=str(root), hidden_size=16, vocab_size=40, n_params=0,
        tokenizer="words", tokens_per_step=10, revisions=("step0", "step5", "step9"), steps=(0, 5, 9),
        allow_pickle=False, trust_remote_code=False, key="suites.s.models[0]",
    )
    model.save_pretrained(root / revision)
    sample = root / "sample.h5"
    if not sample.exists():
        tokens = np.random.default_rng(0).integers(0, 37, size=(5, 8))
        write_sample(sample, tokens, np.arange(5) * 8, {"corpus": "words"})
    # the rule's layout, .../{model}/{revision}.h5: the tables check each file against its path
    spectra, attention = out / "spectra" / "tiny" / f"{revision}.h5", out / "attention" / "tiny" / f"{revision}.h5"
    cache = out / "cache" / f"{revision}.h5"
    job = SimpleNamespace(
        input=Namedlist(fromdict={"sample": str(sample)}),
        output=Namedlist(fromdict={"cache": str(cache), "spectra": str(spectra), "attention": str(attention)}),
        log=[str(out / "logs" / f"{revision}.log")],
        wildcards=SimpleNamespace(model="tiny", revision=revision),
        params=SimpleNamespace(
            model=entry.__dict__,
            record=dict(suite="s", model="tiny", revision=revision, step=step, tokens=10 * step),
            tokenizer=dict(source="local", id=str(root / "tokenizer"), revision="main"),
            drop_padding_rows=True,
            extraction=SETTINGS,
            weight_metrics=["spectra", "attention"],
            seed=0,
        ),
        threads=1,
        config=dict(device="cpu"),  # operational: from the job, not params
    )
    script("analyse_checkpoint").main(job)
    return spectra, attention, cache


@pytest.fixture(scope="module")
def checkpoints(tiny_neox, tmp_path_factory):
    """Three revisions of a tiny model: step0 and step5 share their head (a stale branch)."""
    torch.manual_seed(1)
    root, out = tmp_path_factory.mktemp("models"), tmp_path_factory.mktemp("out")
    word_tokenizer(WORDS).save_pretrained(str(root / "tokenizer"))
    later = perturbed(tiny_neox, 0.05)
    files = {
        "step0": run_checkpoint_job(tiny_neox, "step0", 0, root, out),
        "step5": run_checkpoint_job(tiny_neox, "step5", 5, root, out),
        "step9": run_checkpoint_job(later, "step9", 9, root, out),
    }
    return files, {"step0": tiny_neox, "step5": tiny_neox, "step9": later}, root


def test_checkpoint_job_writes_spectrum_and_attention_files(checkpoints):
    files, models, _ = checkpoints
    spectra_path, attention_path, _ = files["step9"]
    s, attrs = read_spectrum(spectra_path)
    head = models["step9"].get_output_embeddings().weight.detach()
    np.testing.assert_allclose(s, svd(head[: len(WORDS) + 2]), rtol=1e-6)
    assert attrs["n_rows"] == 40 and attrs["n_valid_rows"] == 37 and attrs["tokenizer_size"] == 37
    assert attrs["model"] == "tiny" and attrs["revision"] == "step9" and attrs["step"] == 9
    assert attrs["head_sha256"] == matrix_sha256(head) and "torch" in attrs["versions"]
    assert attrs["embedding_sha256"] == matrix_sha256(models["step9"].get_input_embeddings().weight)
    arrays, shape = read_attention(attention_path)
    assert (shape["n_layers"], shape["n_heads"], shape["d_head"]) == (2, 2, 8)
    for record in attention_lowrank(models["step9"]):
        at = (record.layer, record.head)
        np.testing.assert_allclose(arrays[f"{record.kind}/singular_values"][at], record.metrics.singular_values)
        assert arrays[f"{record.kind}/balance_gap"][at] == pytest.approx(record.metrics.balance_gap, rel=1e-12)


def test_checkpoint_job_cache_equals_a_direct_extraction(checkpoints, tmp_path):
    files, models, root = checkpoints
    tokens, sample = read_sample(root / "sample.h5")
    direct = tmp_path / "direct.h5"
    identity = dict(model="tiny", revision="step9", model_id=str(root), sample_sha256=sample["sha256"])
    extract_to_cache(models["step9"].eval(), tokens, direct, identity=identity, settings=ExtractionSettings(**SETTINGS))
    with h5py.File(files["step9"][2], "r") as job, h5py.File(direct, "r") as reference:
        assert set(job) == set(reference)
        for name in reference:
            np.testing.assert_array_equal(job[name][...], reference[name][...], err_msg=name)


def test_spectra_tables_flag_identical_heads(checkpoints, caplog):
    files, _, _ = checkpoints
    spectra, entropy, identical = spectra_tables([files[r][0] for r in ("step0", "step5", "step9")])
    assert list(identical.columns) == IDENTICAL_COLUMNS
    assert identical[["revision", "tensor", "group", "identical_to"]].values.tolist() == [
        ["step0", "lm_head", "step0", "step5"],
        ["step5", "lm_head", "step0", "step0"],
        ["step0", "input_embedding", "step0", "step5"],
        ["step5", "input_embedding", "step0", "step0"],
    ]
    assert "step0, step5 serve a bit-identical lm_head" in caplog.text and "pythia#206" in caplog.text
    assert entropy.set_index("revision")["identical_to"].to_dict() == {"step0": "step5", "step5": "step0", "step9": ""}
    assert entropy.set_index("revision")["identical_weights"].to_dict() == {"step0": True, "step5": True, "step9": False}
    assert entropy.set_index("revision")["is_final"].to_dict() == {"step0": False, "step5": False, "step9": True}
    for row in entropy.itertuples():
        s, _ = read_spectrum(files[row.revision][0])
        assert row.singular_entropy_sigma == pytest.approx(singular_entropy(s, power=1), abs=1e-12)
        assert row.singular_entropy_sigma2 == pytest.approx(singular_entropy(s, power=2), abs=1e-12)
    assert len(spectra) == 3 * 16 and spectra.groupby("revision")["normalised"].max().eq(1.0).all()
    assert spectra.groupby("revision")["identical_weights"].first().to_dict() == entropy.set_index("revision")[
        "identical_weights"
    ].to_dict()


def test_spectrum_curves_are_each_file_s_values_in_plan_order(checkpoints):
    """Fig. 4's table, built from arrays, row for row as one frame per file would give it;
    curves=False (the other two tables' jobs) skips it and leaves those tables unchanged."""
    files, _, _ = checkpoints
    paths = [files[r][0] for r in ("step9", "step0", "step5")]
    spectra, entropy, identical = spectra_tables(paths, model_order=["tiny"])
    expected = []
    for revision in ("step0", "step5", "step9"):  # by step
        s, attrs = read_spectrum(files[revision][0])
        flagged = entropy.set_index("revision").loc[revision, "identical_weights"]
        expected.append(pd.DataFrame({**{k: attrs[k] for k in RECORD_KEYS}, "index": np.arange(1, s.size + 1),
                                      "singular_value": s, "normalised": s / s[0], "identical_weights": flagged}))
    pd.testing.assert_frame_equal(spectra, pd.concat(expected, ignore_index=True))
    none, entropy_only, identical_only = spectra_tables(paths, model_order=["tiny"], curves=False)
    assert none is None
    pd.testing.assert_frame_equal(entropy_only, entropy)
    pd.testing.assert_frame_equal(identical_only, identical)


def test_a_branch_serving_another_checkpoint_s_embedding_is_flagged(checkpoints, tmp_path, caplog):
    """EleutherAI/pythia#206: a branch whose first shard (input embedding, early layers) is
    another checkpoint's, beside a head of its own."""
    files, models, _ = checkpoints
    stale = copy.deepcopy(models["step9"])
    with torch.no_grad():
        stale.get_output_embeddings().weight.mul_(1.5)  # its own head
    record = dict(suite="s", model="tiny", revision="step7", step=7, tokens=70)
    write_spectrum(tmp_path / "tiny" / "step7.h5", head_spectrum(stale, tokenizer_size=37), record, 37)
    _, entropy, identical = spectra_tables([files["step0"][0], tmp_path / "tiny" / "step7.h5", files["step9"][0]])
    assert identical[["revision", "tensor", "group"]].values.tolist() == [
        ["step7", "input_embedding", "step7"],
        ["step9", "input_embedding", "step7"],
    ]
    assert entropy.set_index("revision")["identical_weights"].to_dict() == {"step0": False, "step7": True, "step9": True}
    assert "step7, step9 serve a bit-identical input_embedding (see EleutherAI/pythia#206)" in caplog.text


def test_no_identical_heads_gives_an_empty_table_with_columns(checkpoints):
    files, _, _ = checkpoints
    _, entropy, identical = spectra_tables([files["step0"][0], files["step9"][0]])
    assert identical.empty and list(identical.columns) == IDENTICAL_COLUMNS
    assert not entropy["identical_weights"].any()


def test_attention_table_is_one_row_per_checkpoint_layer_head_kind(checkpoints):
    files, models, _ = checkpoints
    _, _, identical = spectra_tables([files[r][0] for r in files])
    table = attention_table([files[r][1] for r in files], identical)
    assert len(table) == 3 * 2 * 2 * 2  # revisions x layers x heads x kinds
    row = table[(table["revision"] == "step9") & (table["layer"] == 1) & (table["head"] == 0) & (table["kind"] == "vo")]
    record = next(r for r in attention_lowrank(models["step9"]) if (r.layer, r.head, r.kind) == (1, 0, "vo"))
    assert row["nuclear_ratio"].item() == pytest.approx(record.metrics.nuclear_ratio, rel=1e-12)
    assert row["relative_depth"].item() == 1.0
    assert table.groupby("revision")["identical_weights"].all().to_dict() == {"step0": True, "step5": True, "step9": False}


def test_a_file_copied_from_another_revision_is_refused_naming_both(checkpoints, tmp_path):
    """A spectra file copied over another revision's would be tabulated as that revision:
    step400 twice, no step800, is_final moved, identical_weights empty (issue 13)."""
    import shutil

    from lmsat.core.io import IdentityError

    files, _, _ = checkpoints
    for kind, (read, index, table) in {
        "spectra": (read_spectrum, 0, lambda paths: spectra_tables(paths)),
        "attention": (read_attention, 1, lambda paths: attention_table(paths)),
    }.items():
        copied = tmp_path / kind / "tiny" / "step9.h5"
        copied.parent.mkdir(parents=True)
        shutil.copy(files["step5"][index], copied)
        expected = (rf"{copied} was made for model='tiny', revision='step5', but its path promises model='tiny', "
                    rf"revision='step9' .*Fix: delete {copied} and rerun")
        with pytest.raises(IdentityError, match=expected):
            table([files["step0"][index], files["step5"][index], copied])
        with pytest.raises(IdentityError, match=expected):
            read(copied)
        other_model = tmp_path / kind / "other" / "step5.h5"
        other_model.parent.mkdir()
        shutil.copy(files["step5"][index], other_model)
        with pytest.raises(IdentityError, match=r"made for model='tiny', revision='step5', but its path promises "
                                                r"model='other', revision='step5'"):
            read(other_model)
        read(copied, check_path=False)  # a reader outside the layout may opt out


# ------------------------------------------------------------------ anisotropy tables


def anisotropy_records():
    records = []
    for model, n_layers in (("a", 2), ("b", 3)):
        for step in (0, 4, 8):
            layers = [0.1 * step + 0.01 * i for i in range(n_layers + 1)]
            records.append(dict(suite="toy", model=model, revision=f"step{step}", step=step, tokens=100 * step,
                                metric="anisotropy", anisotropy_layers=layers, anisotropy_last=layers[-1] + 0.001,
                                n_layers=n_layers, layer_sample=50, n_tokens=1000))
    return records


def loss_frame(records):
    return pd.DataFrame([dict(model=r["model"], revision=r["revision"], loss=5.0 - r["step"] / 10, loss_sem=0.01,
                              is_best=r["step"] == 8) for r in records])


def test_anisotropy_tables():
    records = anisotropy_records()
    layers, training = anisotropy_tables(records, loss_frame(records))
    assert len(layers) == 3 * 3 + 3 * 4
    final_b = layers[(layers["model"] == "b") & layers["is_final"]]
    assert final_b["relative_depth"].tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert final_b["anisotropy"].tolist() == pytest.approx([0.8, 0.81, 0.82, 0.83])
    row = training[(training["model"] == "a") & (training["step"] == 4)].iloc[0]
    assert row["loss"] == pytest.approx(4.6) and row["anisotropy_last"] == pytest.approx(0.421)
    # records from before zero vectors were counted had none (that lmsat refused them)
    assert (layers["zero_rows"] == 0).all() and (training["zero_rows"] == 0).all() and (layers["n_tokens"] == 50).all()
    ordered, _ = anisotropy_tables(records, loss_frame(records), model_order=["b", "a"])
    assert list(dict.fromkeys(ordered["model"])) == ["b", "a"]  # the plan's order, not by name
    loss = loss_frame(records)
    without = loss[~((loss["model"] == "a") & (loss["revision"] == "step8"))]
    with pytest.raises(ValueError, match="1 checkpoints.*a@step8"):
        anisotropy_tables(records, without)


def test_figure_suites_are_checked_against_the_config(default_config):
    load_plan(dict(default_config, figures={"anisotropy_suites": ["toy"]}), SCHEMA)
    with pytest.raises(ConfigError, match=r"figures.anisotropy_suites\[1\].*gpt2.*toy"):
        load_plan(dict(default_config, figures={"anisotropy_suites": ["toy", "gpt2"]}), SCHEMA)


# ------------------------------------------------------------------ figures


def test_every_figure_draws_its_table(checkpoints):
    files, _, _ = checkpoints
    records = anisotropy_records()
    layers, training = anisotropy_tables(records, loss_frame(records), model_order=["b", "a"])
    spectra, entropy, identical = spectra_tables([files[r][0] for r in files])
    attention = attention_table([files[r][1] for r in files], identical)

    fig2 = figures.plot_anisotropy_depth(layers, [], suites=["toy"])
    assert [line.get_label() for line in fig2.axes[0].lines] == ["b", "a"]  # the table's order (the plan's)
    for line in fig2.axes[0].lines:
        final = layers[(layers["model"] == line.get_label()) & layers["is_final"]]
        np.testing.assert_allclose(line.get_xydata(), final[["relative_depth", "anisotropy"]].to_numpy())
    fig3 = figures.plot_anisotropy_training(training, [])
    assert [ax.get_title(loc="left") for ax in fig3.axes[:2]] == ["b", "a"]
    along = training[(training["model"] == "b") & (training["tokens"] > 0)]
    np.testing.assert_allclose(fig3.axes[0].collections[0].get_array(), along["anisotropy_last"])

    fig4 = figures.plot_head_spectra(spectra, [])
    assert len(fig4.axes[0].lines) == spectra["revision"].nunique()
    for line, (_, curve) in zip(fig4.axes[0].lines, spectra.groupby("revision", sort=False)):
        np.testing.assert_allclose(line.get_xydata(), curve[["index", "normalised"]].to_numpy())
    fig5 = figures.plot_singular_entropy(entropy, [], power=2)
    (line,) = fig5.axes[0].lines
    along = entropy[entropy["tokens"] > 0]
    np.testing.assert_allclose(line.get_xydata(), along[["tokens", "singular_entropy_sigma2"]].to_numpy())

    fig = figures.plot_attention_lowrank(attention, [])
    medians = figures.attention_medians(attention[attention["tokens"] > 0])
    effective = fig.axes[0]  # the first model's effective rank, a line per (kind, layer)
    assert effective.get_ylabel() == "effective rank"
    for line, (_, curve) in zip(effective.lines, medians.groupby(["kind", "layer"], sort=True)):
        np.testing.assert_allclose(line.get_xydata(), curve.sort_values("step")[["tokens", "effective_rank"]])
    assert len(effective.lines) == medians.groupby(["kind", "layer"]).ngroups

    with pytest.raises(ValueError, match="figures.anisotropy_suites"):
        figures.plot_anisotropy_depth(layers, [], suites=["gpt2"])
    with pytest.raises(ValueError, match="entropy_power"):
        figures.plot_singular_entropy(entropy, [], power=3)


def test_attention_medians_are_medians_over_heads(checkpoints):
    files, _, _ = checkpoints
    table = attention_table([files[r][1] for r in files])
    medians = figures.attention_medians(table)
    assert len(medians) == 3 * 2 * 2  # revisions x kinds x layers
    one = table[(table["revision"] == "step9") & (table["kind"] == "qk") & (table["layer"] == 0)]
    row = medians[(medians["revision"] == "step9") & (medians["kind"] == "qk") & (medians["layer"] == 0)]
    assert row["effective_rank"].item() == pytest.approx(np.median(one["effective_rank"]))
