"""`python -m lmsat analyse` against a finished toy workflow run: the same numbers for the
same checkpoint and sample, a sample built from text that says so, and named errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import yaml

from conftest import ROOT, small_toy_config

MODEL, REVISION = "toy-d16", "step16"  # small_toy_config: step0 and the final step16
TOL = 1e-6


def analyse(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "lmsat", "analyse", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One small toy workflow run: its metric records and spectrum file for toy-d16@step16."""
    workdir = tmp_path_factory.mktemp("analyse_run")
    config = small_toy_config((MODEL,), n_seq=16, chunk=4)
    config["run"] = "analyse"
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    targets = [f"results/analyse/metrics/{m}/{MODEL}/{REVISION}.json" for m in ("loss", "anisotropy", "effective_rank")]
    targets.append(f"results/analyse/spectra/{MODEL}/{REVISION}.h5")
    targets.append(f"results/analyse/weight_diagnostics/{MODEL}/{REVISION}.h5")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(workdir / "config.yaml"), "--cores", "2", *targets],
        capture_output=True, text=True, timeout=1200, env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = workdir / "results" / "analyse"
    records = {m: json.loads((results / f"metrics/{m}/{MODEL}/{REVISION}.json").read_text())
               for m in ("loss", "anisotropy", "effective_rank")}
    with h5py.File(results / f"spectra/{MODEL}/{REVISION}.h5") as f:
        head_s = f["singular_values"][...]
    return workdir, results, records, head_s


def checkpoint_of(results):
    return results / "toy" / "hub" / f"models--lmsat-toy--{MODEL}"


def test_analyse_on_the_run_s_sample_equals_the_workflow(toy_run):
    from lmsat.degeneration.spectra import singular_entropy

    workdir, results, records, head_s = toy_run
    sample = results / "samples" / "synthetic" / "toy.h5"
    done = analyse(checkpoint_of(results), "--revision", REVISION, "--sample", sample, "--config", workdir / "config.yaml",
                   "--tokenizer", results / "toy" / "tokenizer", "--json", cwd=workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    metrics = out["metrics"]
    assert abs(metrics["loss"]["loss"] - records["loss"]["loss"]) < TOL
    assert abs(metrics["anisotropy"]["anisotropy_last"] - records["anisotropy"]["anisotropy_last"]) < TOL
    np.testing.assert_allclose(metrics["anisotropy"]["anisotropy_layers"], records["anisotropy"]["anisotropy_layers"], atol=TOL, rtol=0)
    assert abs(metrics["effective_rank"]["singular_entropy"] - records["effective_rank"]["singular_entropy"]) < TOL
    assert abs(metrics["spectra"]["singular_entropy_sigma"] - singular_entropy(head_s)) < TOL
    assert metrics["spectra"]["n_valid_rows"] >= len(head_s)
    assert out["sample"]["path"] == str(sample) and out["sample"]["kind"] == "sample"
    # every metric of one checkpoint (representation_similarity compares checkpoints: not analyse's)
    assert set(metrics) == {"loss", "anisotropy", "effective_rank", "spectra", "attention", "weight_diagnostics",
                            "gradient_bottleneck"}
    from lmsat.degeneration.weight_diagnostics import read_diagnostics

    arrays, _ = read_diagnostics(results / f"weight_diagnostics/{MODEL}/{REVISION}.h5")  # the workflow's job
    assert metrics["weight_diagnostics"]["head_stable_rank"] == pytest.approx(arrays["stable_rank"][-1], rel=1e-12)
    assert metrics["weight_diagnostics"]["head_alpha"] == pytest.approx(arrays["alpha"][-1], rel=1e-12, nan_ok=True)
    from lmsat.bottleneck.gradient import read_gradient_file, summarize  # the job's file (analyse_checkpoint's output)

    job = summarize(read_gradient_file(results / f"gradient_bottleneck/{MODEL}/{REVISION}.h5"))
    for key in ("energy_kept", "energy_kept_sem", "norm_kept", "energy_kept_rare", "random_energy"):
        assert abs(metrics["gradient_bottleneck"][key] - job[key]) < TOL, key
    assert len(metrics["attention"]["qk"]["effective_rank"]["median_per_layer"]) == metrics["attention"]["shape"]["n_layers"]


def test_analyse_on_text_builds_the_workflow_s_sample_and_names_it(toy_run, tmp_path):
    """--text on the run's own eval text with its config: the very sample rule
    sample_eval_tokens built (same SHA-256), so the same loss; the output says how it was built."""
    from lmsat.data.corpus import read_sample

    workdir, results, records, _ = toy_run
    text = results / "corpora" / "synthetic" / "eval.txt"
    saved = tmp_path / "sample.h5"
    done = analyse(checkpoint_of(results), "--revision", REVISION, "--text", text, "--config", workdir / "config.yaml",
                   "--tokenizer", results / "toy" / "tokenizer", "--metrics", "loss", "--save-sample", saved, cwd=workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    _, run_sample = read_sample(results / "samples" / "synthetic" / "toy.h5")
    _, built = read_sample(saved)
    assert built["sha256"] == run_sample["sha256"]
    assert f"built from {text}" in done.stdout and "sample_eval_tokens" in done.stdout
    assert str(saved) in done.stdout and built["sha256"][:12] in done.stdout
    # issue 50, item 11: the output said "its numbers are not that run's" of this very sample
    assert "the same sha256, so that run's numbers" in done.stdout and "not that run's" not in done.stdout
    loss = float(next(line.split()[1] for line in done.stdout.splitlines() if line.strip().startswith("loss ")))
    assert abs(loss - records["loss"]["loss"]) < TOL


def test_a_directory_without_config_json_is_named(toy_run, tmp_path):
    workdir, results, _, _ = toy_run
    (tmp_path / "empty").mkdir()
    done = analyse(tmp_path / "empty", "--sample", results / "samples" / "synthetic" / "toy.h5", cwd=workdir)
    assert done.returncode == 2 and "has no config.json" in done.stderr and str(tmp_path / "empty") in done.stderr


def test_a_revision_that_is_not_there_is_named_with_the_ones_that_are(toy_run):
    workdir, results, _, _ = toy_run
    done = analyse(checkpoint_of(results), "--revision", "step999", "--sample", results / "samples" / "synthetic" / "toy.h5",
                   cwd=workdir)
    assert done.returncode == 2, done.stderr
    assert "revision 'step999' is not in" in done.stderr and REVISION in done.stderr and "--revision" in done.stderr


def test_a_folder_of_checkpoints_without_revision_points_to_it(tmp_path, tiny_neox):
    tiny_neox.save_pretrained(tmp_path / "run" / "checkpoint-50")
    done = analyse(tmp_path / "run", "--metrics", "spectra", cwd=tmp_path)
    assert done.returncode == 2 and "checkpoint-50" in done.stderr and "--revision" in done.stderr
    done = analyse(tmp_path / "run", "--revision", "checkpoint-50", "--metrics", "spectra", "attention", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["sample"] is None and out["metrics"]["spectra"]["n_rows"] == 40  # no tokenizer: every head row kept


def test_a_cache_metric_without_a_sample_names_the_options(tmp_path, tiny_neox):
    tiny_neox.save_pretrained(tmp_path / "checkpoint-50")
    done = analyse(tmp_path / "checkpoint-50", "--metrics", "loss", cwd=tmp_path)
    assert done.returncode == 2 and "--sample" in done.stderr and "--text" in done.stderr


def test_the_public_api_is_exported_lazily_with_docstrings():
    code = ("import sys, lmsat; heavy = {'torch', 'h5py', 'transformers'} & set(sys.modules); "
            "assert not heavy, heavy; missing = [n for n in lmsat.__all__[1:] if not getattr(lmsat, n).__doc__]; "
            "assert not missing, missing; print(len(lmsat.__all__))")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    import lmsat
    from lmsat.products.metrics import METRICS

    assert lmsat.METRICS is METRICS and lmsat.mean_pairwise_cosine(np.eye(3)) == 0.0


def checkpoint_and_text(tmp_path, model, lines: int):
    """(run/checkpoint-50 of `model` with a tokenizer of 30 words, eval.txt of `lines` lines of
    12 of those words: 13 tokens a line with its end)."""
    from conftest import word_tokenizer

    words = [f"w{i}" for i in range(30)]
    checkpoint = tmp_path / "run" / "checkpoint-50"
    model.save_pretrained(checkpoint)
    word_tokenizer(words).save_pretrained(checkpoint)
    rng = np.random.default_rng(0)
    text = tmp_path / "eval.txt"
    text.write_text("\n".join(" ".join(rng.choice(words, size=12)) for _ in range(lines)) + "\n")
    return checkpoint, text


def test_text_without_a_config_fits_the_sequences_to_a_small_model_s_context(tmp_path, tiny_neox):
    """Issue 31, case 4: the README's `analyse CHECKPOINT --text eval.txt` on a model whose
    context (64) is below the run default (2048 tokens a sequence): the sample's sequences are
    capped at the context, with a note; --seq-len and --n-tokens choose them."""
    checkpoint, text = checkpoint_and_text(tmp_path, tiny_neox, lines=4000)  # 52k tokens: the default 50k
    done = analyse(checkpoint, "--text", text, "--metrics", "loss", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Sequences of 64: the paper's 2048 capped at the context of checkpoint" in done.stderr
    assert "(max_position_embeddings=64)" in done.stderr and "--seq-len L" in done.stderr
    out = json.loads(done.stdout)
    assert out["sample"]["seq_len"] == 64 and out["sample"]["settings"]["seq_len"] == 64
    assert out["metrics"]["loss"]["n_tokens"] == out["sample"]["n_seq"] * 63 and np.isfinite(out["metrics"]["loss"]["loss"])
    # --seq-len and --n-tokens choose the sample: no note then
    chosen = analyse(checkpoint, "--text", text, "--metrics", "loss", "--json", "--seq-len", "32", "--n-tokens", "320",
                     cwd=tmp_path)
    assert chosen.returncode == 0, chosen.stderr[-3000:]
    assert "capped" not in chosen.stderr and "320 tokens: --n-tokens 320" in chosen.stderr
    sample = json.loads(chosen.stdout)["sample"]
    assert (sample["n_seq"], sample["seq_len"]) == (10, 32)
    # a --seq-len past the context is refused before any forward, naming the flag and the fix
    long = analyse(checkpoint, "--text", text, "--metrics", "loss", "--seq-len", "65", cwd=tmp_path)
    assert long.returncode == 2 and "--seq-len 65 exceeds the context" in long.stderr
    assert "Fix: --seq-len 64 or less" in long.stderr and "Traceback" not in long.stderr
    # without --text they mean nothing: said so
    alone = analyse(checkpoint, "--metrics", "spectra", "--seq-len", "32", cwd=tmp_path)
    assert alone.returncode == 2 and "--text" in alone.stderr


def test_a_vocabulary_smaller_than_the_tokenizer_is_refused_before_the_forward(tmp_path, tiny_neox):
    """Issue 31, case 3: a checkpoint of 40 vocabulary rows and a tokenizer of 62 ids, `--metrics
    loss` on text: the pipeline's refusal (lmsat.checkpoints.loading.check_token_ids), not a raw IndexError."""
    from conftest import word_tokenizer

    tiny_neox.save_pretrained(tmp_path / "checkpoint-50")
    words = [f"w{i}" for i in range(60)]  # ids 0..59 (+ eos 60, unk 61): past the model's 40 rows
    word_tokenizer(words).save_pretrained(tmp_path / "tokenizer")
    text = tmp_path / "eval.txt"
    text.write_text("\n".join(" ".join(words[(7 * i + j) % 60] for j in range(40)) for i in range(40)) + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"sample": {"n_tokens": 256, "seq_len": 16, "pool_factor": 2}}))
    done = analyse(tmp_path / "checkpoint-50", "--text", text, "--tokenizer", tmp_path / "tokenizer", "--config", config,
                   "--metrics", "loss", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "IndexError" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "ModelLoadError" in done.stderr and "vocabulary of 40 rows" in done.stderr, done.stderr
    assert "--tokenizer" in done.stderr and "Fix:" in done.stderr
    debug = analyse(tmp_path / "checkpoint-50", "--text", text, "--tokenizer", tmp_path / "tokenizer", "--config", config,
                    "--metrics", "loss", "--debug", cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "check_token_ids" in debug.stderr


def test_a_text_too_short_for_n_tokens_names_the_flag_and_the_default_is_init_s_sample(tmp_path, tiny_neox):
    """Issue 44, item 4: on a ~19k-token text, `analyse --text` failed with the sample
    builder's error naming `sample.n_tokens`, and printed `settings {'corpus': 'synthetic',
    ...}` for a sample of the user's file. A size the text cannot give names --n-tokens (or
    the config's key) and the size it can; left out, the size is the one `lmsat init` writes
    for the same text and model, printed; the settings name the text's corpus."""
    from test_own_run import init

    checkpoint, text = checkpoint_and_text(tmp_path, tiny_neox, lines=1470)  # 1470 x 13 = 19,110 tokens
    windows = 19_110 // 64
    asked = analyse(checkpoint, "--text", text, "--metrics", "loss", "--n-tokens", "50000", cwd=tmp_path)
    assert asked.returncode == 2 and "Traceback" not in asked.stderr
    assert f"{windows} windows of 64, fewer than the 782 sequences that --n-tokens 50000 needs" in asked.stderr
    assert f"Fix: --n-tokens {windows // 2 * 64} or less" in asked.stderr and "sample.n_tokens" not in asked.stderr
    config = tmp_path / "config.yaml"
    config.write_text("sample: {n_tokens: 50000, seq_len: 64}\n")
    from_config = analyse(checkpoint, "--text", text, "--metrics", "loss", "--config", config, cwd=tmp_path)
    assert from_config.returncode == 2 and "Traceback" not in from_config.stderr
    assert f"sample.n_tokens: 50000 in {config} (--n-tokens N overrides it) needs" in from_config.stderr
    done = analyse(checkpoint, "--text", text, "--metrics", "loss", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"eval sample of {windows // 2} sequences of 64 tokens ({windows // 2 * 64:,})" in done.stderr
    assert "'corpus': 'synthetic'" not in done.stdout and "(corpus 'text')" in done.stdout
    assert f"'corpus': 'text', 'n_tokens': {windows // 2 * 64}, 'seq_len': 64" in done.stdout
    assert f"{windows // 2} x 64 tokens" in done.stdout
    # `lmsat init` on the same folder and text writes that sample into the workflow's config
    made = init(tmp_path / "run", "--text", text, "--tokens-per-step", "128", "-o", tmp_path / "mine.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert yaml.safe_load((tmp_path / "mine.yaml").read_text())["sample"] == {"corpus": "text", "n_tokens": windows // 2 * 64,
                                                                              "seq_len": 64}
