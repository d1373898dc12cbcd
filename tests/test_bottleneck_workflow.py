"""The softmax bottleneck (issue 5) on the workflow side: token sets kept apart from the eval
sample, the sharded head-training cache against a direct forward of a tiny GPT-NeoX, the
true n-gram matrix of a synthetic language against enumeration, the tables behind Figs. 6
and 8, the rule scripts run as Snakemake runs them, and the config checks."""

import itertools
import json
import logging
from types import SimpleNamespace

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from snakemake.iocontainers import Namedlist

from lmsat.bottleneck import corpus_werror as ngram_werror
from lmsat.bottleneck import rank_grid as bottleneck
from lmsat.bottleneck import representation_cache as headcache
from lmsat.bottleneck.rank_heads import HeadTrainConfig, state_file, train_head
from lmsat.bottleneck.representation_cache import ShardedRepresentations
from lmsat.bottleneck.werror import w_error_curve
from lmsat.core.io import IdentityError
from lmsat.core.plan import ModelEntry
from lmsat.data.corpus import CorpusError
from lmsat.errors import ConfigError
from lmsat.figures.bottleneck import plot_ground_truth, plot_ngram_werror, plot_rank_heads, plot_werror_loss
from lmsat.planning.load import load_plan
from lmsat.products.bottleneck_tables import HEAD_COLUMNS, SEARCH_COLUMNS, heads_tables, monotone_violations
from lmsat.toy.language import LanguageSpec, build_language

from conftest import SCHEMA, script, word_tokenizer

WORDS = [f"w{i}" for i in range(35)]  # + eos, unk = 37 tokenizer entries for the 40-row head


def werror_dense(matrix) -> np.ndarray:
    """W-error(d), d = 0..k, from a dense SVD: the brute-force reference."""
    s = np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)
    total = np.sum(s**2)
    return np.sqrt(np.array([np.sum(s[d:] ** 2) for d in range(len(s) + 1)]) / total)


# ------------------------------------------------------------------ token sets


def test_overlapping_windows_equal_a_bruteforce_check():
    rng = np.random.default_rng(0)
    seq_len, n_windows = 7, 30
    ranges = [(int(s), int(n)) for s, n in zip(rng.integers(0, 230, 12), rng.integers(1, 20, 12))]
    mask = headcache.overlapping_windows(n_windows, seq_len, ranges)
    expected = [any(j * seq_len < s + n and s < (j + 1) * seq_len for s, n in ranges) for j in range(n_windows)]
    assert mask.tolist() == expected


def test_token_sets_are_disjoint_windows_of_the_pool_away_from_the_sample():
    pool = np.arange(1000, dtype=np.int32) % 97
    other = np.arange(500, dtype=np.int32)
    sample = [(37, 10), (400, 10), (803, 10)]
    sets = headcache.draw_token_sets(
        [("eval", "a", 100), ("train", "a", 300), ("more", "b", 50)], {"a": pool, "b": other}, 10, seed=0,
        excluded={"a": sample},
    )
    starts = {name: set(s.tolist()) for name, (_, s) in sets.items()}
    assert len(sets["eval"][0]) == 10 and len(sets["train"][0]) == 30 and len(sets["more"][0]) == 5
    assert not starts["eval"] & starts["train"]
    for name in ("eval", "train"):
        tokens, window_starts = sets[name]
        for row, start in zip(tokens, window_starts):
            assert np.array_equal(row, pool[start : start + 10])
            assert all(not (start < s + n and s < start + 10) for s, n in sample)
    again = headcache.draw_token_sets([("eval", "a", 100)], {"a": pool}, 10, seed=0, excluded={"a": sample})
    assert np.array_equal(again["eval"][1], sets["eval"][1])  # same seed, same windows


def test_a_pool_too_small_names_the_key_to_change():
    with pytest.raises(CorpusError, match=r"bottleneck\.train_tokens=90.*pool_factor"):
        headcache.draw_token_sets([("train", "a", 90)], {"a": np.zeros(80, np.int32)}, 10, seed=0)


def test_sample_alignment_detects_a_changed_corpus():
    pool = np.arange(100, dtype=np.int32)
    headcache.check_sample_alignment(pool, pool[[10, 50]].reshape(2, 1) + np.arange(5), np.array([10, 50]), "c")
    with pytest.raises(CorpusError, match="delete the sample"):
        headcache.check_sample_alignment(pool, np.ones((1, 5), np.int32), np.array([10]), "c")


def test_shard_count_matches_the_split_of_the_script():
    for n_tokens, seq_len, shard_tokens in [(1000, 10, 300), (999, 10, 5), (64, 64, 10**6), (262144, 64, 65536)]:
        n = headcache.n_windows(n_tokens, seq_len)
        count = headcache.shard_count(n_tokens, seq_len, shard_tokens)
        per = headcache.windows_per_shard(shard_tokens, seq_len)
        assert count == len(range(0, n, per))


# ------------------------------------------------------------------ the head cache


def _sets(rng, n_train=6, n_eval=3, seq_len=9, vocab=37):
    return {
        "train": (rng.integers(0, vocab, (n_train, seq_len)).astype(np.int32), np.arange(n_train) * seq_len),
        "eval": (rng.integers(0, vocab, (n_eval, seq_len)).astype(np.int32), np.arange(n_eval) * seq_len),
    }


def test_cached_pairs_equal_a_direct_forward_and_the_reference_equals_bruteforce(tiny_neox, tmp_path):
    sets = _sets(np.random.default_rng(0))
    paths = {"train": [tmp_path / "train_0000.h5", tmp_path / "train_0001.h5"], "eval": [tmp_path / "eval_0000.h5"]}
    settings = headcache.CacheSettings(batch_size=2, storage_dtype="float32")
    summary = headcache.build_head_cache(tiny_neox, sets, paths, identity=dict(model="tiny", revision="step9"), settings=settings)
    assert summary["train"]["pairs"] == 6 * 8 and summary["eval"]["windows"] == 3
    assert not (tmp_path / ".parts").exists()
    with torch.no_grad():
        ids = torch.as_tensor(sets["train"][0], dtype=torch.long)
        last = tiny_neox(ids, output_hidden_states=True).hidden_states[-1]  # (6, 9, 16)
    hidden = np.concatenate([h5py.File(p)["hidden"][...] for p in paths["train"]])
    targets = np.concatenate([h5py.File(p)["targets"][...] for p in paths["train"]])
    np.testing.assert_allclose(hidden, last[:, :-1].reshape(-1, 16).numpy(), atol=1e-5)
    assert np.array_equal(targets, sets["train"][0][:, 1:].ravel())
    with h5py.File(paths["train"][1]) as f:
        assert f.attrs["set"] == "train" and f.attrs["shard"] == 1 and f.attrs["n_shards"] == 2 and f.attrs["windows"] == 3

    reference = headcache.full_head_reference(tiny_neox, paths["eval"])
    with torch.no_grad():
        ids = torch.as_tensor(sets["eval"][0], dtype=torch.long)
        logits = tiny_neox(ids).logits[:, :-1].reshape(-1, 40).double()
    losses = -torch.log_softmax(logits, -1).gather(1, ids[:, 1:].reshape(-1, 1)).squeeze(1).numpy()
    correct = (logits.argmax(-1) == ids[:, 1:].reshape(-1)).double().mean().item()
    assert reference["n_tokens"] == 24
    assert reference["eval_loss"] == pytest.approx(losses.mean(), abs=1e-5)
    assert reference["eval_acc"] == pytest.approx(correct)
    assert reference["loss_sem"] == pytest.approx(losses.std(ddof=1) / np.sqrt(24), rel=1e-4)


def test_a_killed_build_resumes_from_its_parts(tiny_neox, tmp_path, caplog):
    sets = _sets(np.random.default_rng(1))
    paths = {"train": [tmp_path / "train_0000.h5", tmp_path / "train_0001.h5"], "eval": [tmp_path / "eval_0000.h5"]}
    settings = headcache.CacheSettings(batch_size=2, storage_dtype="float32")
    identity = dict(model="tiny", revision="step9")
    broken = {name: (tokens.copy(), starts) for name, (tokens, starts) in sets.items()}
    broken["train"][0][4, 2] = 10_000  # an id beyond the embedding: the second shard's forward dies
    with pytest.raises(IndexError):
        headcache.build_head_cache(tiny_neox, broken, paths, identity=identity, settings=settings)
    assert (tmp_path / ".parts" / "train_0000.h5").exists() and not paths["train"][0].exists()
    with caplog.at_level(logging.INFO, logger="lmsat.bottleneck.representation_cache"):
        headcache.build_head_cache(tiny_neox, sets, paths, identity=identity, settings=settings)
    assert "reusing" in caplog.text
    resumed = {p.name: h5py.File(p)["hidden"][...] for p in paths["train"]}
    fresh = tmp_path / "fresh"
    fresh_paths = {k: [fresh / p.name for p in v] for k, v in paths.items()}
    headcache.build_head_cache(tiny_neox, sets, fresh_paths, identity=identity, settings=settings)
    for path in fresh_paths["train"]:
        np.testing.assert_array_equal(h5py.File(path)["hidden"][...], resumed[path.name])


# ------------------------------------------------------------------ the true n-gram matrix


def _possible_by_enumeration(lang, length):
    """Per bucket, the token sequences of `length` that some start bucket can emit."""
    T = lang.transitions
    support = [set(T.indices[T.indptr[b] : T.indptr[b + 1]]) for b in range(T.shape[0])]
    counts = np.zeros(T.shape[0])
    for sequence in itertools.product(range(lang.vocab_size), repeat=length):
        ends = set()
        for start in range(T.shape[0]):
            bucket = start
            for token in sequence:
                if token not in support[bucket]:
                    break
                bucket = int(lang.next_bucket(bucket, token))
            else:
                ends.add(bucket)
        assert len(ends) <= 1  # contexts of >= order tokens determine the bucket
        if ends:
            counts[ends.pop()] += 1
    return counts


@pytest.mark.parametrize("spec", [LanguageSpec(vocab_size=6, order=2, groups=2, support=3, seed=1),
                                  LanguageSpec(vocab_size=5, order=1, groups=1, support=2, seed=2)])
def test_possible_context_counts_equal_enumeration(spec):
    lang = build_language(spec)
    for length in range(spec.order, 5):
        np.testing.assert_array_equal(ngram_werror.possible_context_counts(lang, length), _possible_by_enumeration(lang, length))


def test_true_ngram_matrix_spectrum_and_its_empirical_limit():
    lang = build_language(LanguageSpec(vocab_size=6, order=2, groups=2, support=3, seed=1))
    counts = ngram_werror.possible_context_counts(lang, 3).astype(int)
    explicit = np.repeat(lang.transitions.toarray(), counts, axis=0)  # one row per possible context
    truth = ngram_werror.true_ngram_spectrum(lang, order=4)
    np.testing.assert_allclose(w_error_curve(truth["singular_values"])[1], werror_dense(explicit), atol=1e-6)
    assert truth["n_contexts"] == counts.sum()
    spectra = ngram_werror.ground_truth_spectra(lang, [2_000, 300_000], order=4, seed=0)
    gaps = [np.abs(w_error_curve(s["singular_values"])[1] - werror_dense(explicit)).max() for s in spectra["samples"].values()]
    assert spectra["samples"][300_000]["n_contexts"] == counts.sum()
    assert gaps[1] < 0.01 and gaps[1] < gaps[0]


def test_deeper_languages_and_short_contexts_are_refused():
    lang = build_language(LanguageSpec(vocab_size=8, order=3, groups=2, support=4))
    with pytest.raises(ValueError, match="order <= 2"):
        ngram_werror.possible_context_counts(lang, 4)
    with pytest.raises(ValueError, match="n - 1 >= 2"):
        ngram_werror.possible_context_counts(build_language(LanguageSpec(vocab_size=6, groups=2, support=3, seed=1)), 1)


# ------------------------------------------------------------------ corpus n-grams


def test_corpus_chunks_join_documents_with_eos_and_stop_at_max_tokens():
    tokenizer = word_tokenizer(WORDS)
    documents = ["w1 w2 w3", "w4", "w5 w6"] * 50
    stream = np.concatenate(list(ngram_werror.corpus_token_chunks(documents, tokenizer, chunk_tokens=7, batch_documents=4)))
    eos = tokenizer.eos_token_id
    assert stream[:9].tolist() == [1, 2, 3, eos, 4, eos, 5, 6, eos] and len(stream) == 9 * 50
    short = np.concatenate(list(ngram_werror.corpus_token_chunks(documents, tokenizer, max_tokens=20, chunk_tokens=7)))
    assert np.array_equal(short, stream[:20])


def test_corpus_spectrum_equals_a_dense_svd_of_a_dictionary_count():
    tokenizer = word_tokenizer(WORDS)
    rng = np.random.default_rng(0)
    documents = [" ".join(f"w{i}" for i in rng.integers(0, 6, rng.integers(3, 12))) for _ in range(60)]
    spectrum = ngram_werror.corpus_spectrum(documents, tokenizer, order=3)
    stream = np.concatenate(list(ngram_werror.corpus_token_chunks(documents, tokenizer)))
    rows = {}
    for a, b, c in zip(stream, stream[1:], stream[2:]):
        rows.setdefault((a, b), np.zeros(len(tokenizer)))[c] += 1
    dense = np.array([r / r.sum() for r in rows.values()])
    assert spectrum["n_contexts"] == len(rows) and spectrum["n_tokens"] == len(stream)
    np.testing.assert_allclose(w_error_curve(spectrum["singular_values"])[1][: len(tokenizer) + 1],
                               werror_dense(dense), atol=1e-6)


# ------------------------------------------------------------------ tables


def _runs_and_manifests():
    rng = np.random.default_rng(0)
    spectra = {"m8": np.sort(rng.uniform(0.1, 3, 8))[::-1], "m4": np.sort(rng.uniform(0.1, 3, 4))[::-1]}
    losses = {("m8", 1): 3.0, ("m8", 2): 2.6, ("m8", 8): 2.21, ("m4", 1): 3.1, ("m4", 4): 2.5}
    runs = [
        dict(model=m, rank=r, peak_lr=lr, eval_loss=loss + (0.0 if lr == 0.01 else 0.05 * (r % 3 - 1)),
             eval_acc=0.5 - loss / 10, train_loss=loss)
        for (m, r), loss in losses.items() for lr in (0.01, 0.03)
    ]
    manifests = {
        m: dict(model=m, revision="step9", hidden_size=d, vocab_size=11,
                reference=dict(eval_loss=ref, eval_acc=0.3, n_tokens=1000, loss_sem=0.01))
        for m, d, ref in (("m8", 8, 2.2), ("m4", 4, 2.49))
    }
    return runs, manifests, spectra


def test_heads_table_keeps_the_best_lr_and_marks_where_the_loss_rises():
    runs, manifests, spectra = _runs_and_manifests()
    heads, search = heads_tables(runs, manifests, spectra, tolerance=0.01)
    assert list(heads.columns) == HEAD_COLUMNS and list(search.columns) == SEARCH_COLUMNS
    for row in heads[heads["kind"] == "low_rank"].itertuples():
        candidates = [r for r in runs if r["model"] == row.model and r["rank"] == row.rank]
        best = min(candidates, key=lambda r: r["eval_loss"])
        assert row.eval_loss == best["eval_loss"] and row.peak_lr == best["peak_lr"]
        s = spectra[row.model]
        assert row.w_error == pytest.approx(np.sqrt(np.sum(s[row.rank:] ** 2) / np.sum(s**2)))
    assert search["chosen"].sum() == 5
    m8 = heads[heads["model"] == "m8"].set_index(["kind", "rank"])
    assert m8.loc[("full_head", 8), "eval_loss"] == 2.2 and m8.loc[("full_head", 8), "w_error"] == 0.0
    assert not m8.loc[("low_rank", 8), "risen"] and m8.loc[("low_rank", 2), "risen"]
    assert heads.loc[heads["rise_point"], ["model", "rank"]].values.tolist() == [["m4", 1], ["m8", 2]]  # by name
    assert monotone_violations(heads, slack=0.02) == []
    worse = heads.copy()
    worse.loc[(worse["model"] == "m8") & (worse["rank"] == 8) & (worse["kind"] == "low_rank"), "eval_loss"] = 2.7
    assert monotone_violations(worse, slack=0.02) == [("m8", 2, 8)]


def test_every_figure_draws_its_table():
    runs, manifests, spectra = _runs_and_manifests()
    heads, _ = heads_tables(runs, manifests, spectra, tolerance=0.01, model_order=["m4", "m8"])
    lang = build_language(LanguageSpec(vocab_size=6, order=2, groups=2, support=3, seed=1))
    spectra = ngram_werror.ground_truth_spectra(lang, [500, 5000], order=3, seed=0)
    common = dict(corpus="synthetic", tokenizer="language", order=3, vocab_size=6)
    curves_frame = pd.concat(
        [ngram_werror.curve_rows(spectra["truth"]["singular_values"], **common, kind="truth", n_tokens=0,
                                 n_contexts=spectra["truth"]["n_contexts"])]
        + [ngram_werror.curve_rows(s["singular_values"], **common, kind="empirical", n_tokens=n, n_contexts=s["n_contexts"])
           for n, s in spectra["samples"].items()]
    )
    models = list(dict.fromkeys(heads["model"]))
    assert models == ["m4", "m8"]  # the plan's order (by size), not the manifests' (m8 first), drawn as is
    labels = [f"{m} (d={int(heads.loc[heads['model'] == m, 'hidden_size'].iloc[0])})" for m in models]
    fig6 = plot_rank_heads(heads, [])
    assert [text.get_text() for text in fig6.axes[0].get_legend().get_texts()] == labels
    for ax, column in zip(fig6.axes, ("eval_loss", "eval_acc")):
        curves = [line for line in ax.lines if line.get_label() in labels]
        for model, line in zip(models, curves):
            low = heads[(heads["model"] == model) & (heads["kind"] == "low_rank")]
            np.testing.assert_allclose(line.get_xydata(), low[["rank", column]].to_numpy())
    fig8 = plot_werror_loss(heads, [])
    curves = [line for line in fig8.axes[0].lines if line.get_label() in models]
    assert [line.get_label() for line in curves] == models
    for model, line in zip(models, curves):
        low = heads[(heads["model"] == model) & (heads["kind"] == "low_rank")].sort_values("w_error")
        np.testing.assert_allclose(line.get_xydata(), low[["w_error", "eval_loss"]].to_numpy())
    fig7 = plot_ngram_werror(curves_frame, [])
    for line in fig7.axes[0].lines[:-1]:  # the last: the 0.5 guide
        kind = "truth" if "true" in line.get_label() else "empirical"
        rows = curves_frame[(curves_frame["kind"] == kind) & (curves_frame["d"] > 0)]
        np.testing.assert_allclose(line.get_xydata(), rows[["d", "werror"]].to_numpy())
    truth = plot_ground_truth(curves_frame, heads, 2.0, [])
    assert [text.get_text() for text in truth.axes[1].get_legend().get_texts()] == labels + ["entropy rate 2.000"]
    samples = [line for line in truth.axes[0].lines if "tokens" in line.get_label()]
    for n, line in zip(sorted(spectra["samples"]), samples):
        rows = curves_frame[(curves_frame["kind"] == "empirical") & (curves_frame["n_tokens"] == n)]
        np.testing.assert_allclose(line.get_xydata(), rows[["d", "werror"]].to_numpy())
    assert len(plot_ground_truth(curves_frame, None, None, []).axes) == 1


# ------------------------------------------------------------------ the rule scripts


@pytest.fixture(scope="module")
def saved_model(tiny_neox, tmp_path_factory):
    """A local model (one revision), its tokenizer and a text corpus, as the rules see them."""
    root = tmp_path_factory.mktemp("model")
    tiny_neox.save_pretrained(root / "step9")
    word_tokenizer(WORDS).save_pretrained(str(root / "tokenizer"))
    rng = np.random.default_rng(0)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(" ".join(f"w{i}" for i in rng.integers(0, 35, 40)) for _ in range(40)) + "\n")
    entry = ModelEntry(
        name="tiny", suite="s", source="local", id=str(root), hidden_size=16, vocab_size=40, n_params=0,
        tokenizer="words", tokens_per_step=10, revisions=("step9",), steps=(9,), allow_pickle=False,
        trust_remote_code=False, key="suites.s.models[0]",
    )
    return root, corpus, entry


def _cache_job(saved_model, out, sample=""):
    root, corpus, entry = saved_model
    spec = dict(type="text_files", files=[str(corpus)], text_field="text", max_documents=0)
    n_train = headcache.shard_count(160, 8, 64)
    return SimpleNamespace(
        input=Namedlist(fromdict={"sample": sample}),
        output=Namedlist(fromdict={
            "train": [str(out / f"train_{i:04d}.h5") for i in range(n_train)],
            "eval": [str(out / "eval_0000.h5")],
            "manifest": str(out / "manifest.json"),
        }),
        log=[str(out / "cache.log")],
        wildcards=SimpleNamespace(model="tiny"),
        params=SimpleNamespace(
            model=entry.__dict__, tokenizer=dict(source="local", id=str(root / "tokenizer"), revision="main"),
            corpora={"train": "words", "eval": "words"}, corpus_specs={"words": spec}, sample_corpus="words",
            seq_len=8, train_tokens=160, eval_tokens=40, pool_factor=2, storage_dtype="float32",
            chunk_tokens=64, dtype="float32", batch_size=4, seed=0,
        ),
        threads=1, config=dict(device="cpu"),  # operational: from the job, not params
    )


def test_cache_and_training_scripts_run_and_resume(saved_model, tmp_path):
    torch.set_num_threads(1)
    root, corpus, _ = saved_model
    from lmsat.data.corpus import build_sample

    sample = tmp_path / "sample.h5"
    tokenizer = word_tokenizer(WORDS)
    spec = dict(type="text_files", files=[str(corpus)], text_field="text", max_documents=0)
    build_sample(spec, "words", tokenizer, "words", dict(n_tokens=48, seq_len=8, pool_factor=20), 0, sample)
    cache = tmp_path / "cache"
    job = _cache_job(saved_model, cache, sample=str(sample))
    script("build_head_cache").main(job)
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["vocab_size"] == 40 and manifest["hidden_size"] == 16 and manifest["sets"]["train"]["windows"] == 20
    with h5py.File(sample) as f:
        sample_starts = f["starts"][...]
    starts = [h5py.File(p)["window_starts"][...] for p in job.output.train + job.output.eval]
    starts = np.concatenate(starts)
    assert len(set(starts.tolist())) == 25  # train and eval windows are distinct ...
    assert not set(starts.tolist()) & set(sample_starts.tolist())  # ... and none is a sample window
    assert manifest["reference"]["n_tokens"] == 5 * 7 and len(job.output.train) == 3

    settings = bottleneck.head_train_fields(
        dict(batch_sequences=2, seq_len=7, steps=6, eval_every=0, save_every=2, chunk_tokens=64, init="scaled")
    )
    state_dir = tmp_path / "state"
    run = SimpleNamespace(
        input=Namedlist(fromdict={"manifest": str(cache / "manifest.json"), "train": job.output.train, "eval": job.output.eval}),
        output=Namedlist([str(tmp_path / "run.json")]),
        log=[str(tmp_path / "run.log")],
        wildcards=SimpleNamespace(model="tiny", rank="4", lr="0.01"),
        params=SimpleNamespace(settings=settings, lr=0.01, state_dir=str(state_dir), seed=0),
        threads=1, config=dict(device="cpu"),
    )
    # a run killed after 4 of its 6 steps, and a stale state of another config
    cfg = HeadTrainConfig(**settings, peak_lr=0.01, seed=0)
    assert (cfg.batch_size, cfg.n_steps, cfg.seq_len) == (2, 6, 7)  # the config's keys, as HeadTrainConfig fields
    state = state_file(state_dir, 16, 40, 4, cfg)
    with ShardedRepresentations(job.output.train, seq_len=7) as train, ShardedRepresentations(job.output.eval) as ev:
        train_head(train, ev, 16, 40, 4, cfg, state_path=state, max_steps_this_call=4)
        uninterrupted = train_head(train, ev, 16, 40, 4, HeadTrainConfig(**{**cfg.__dict__}))
    (state_dir / "0123456789abcdef.pt").write_bytes(b"stale")
    script("train_rank_head").main(run)
    result = json.loads((tmp_path / "run.json").read_text())
    assert "resuming" in (tmp_path / "run.log").read_text() and not list(state_dir.glob("*.pt"))
    assert result["steps"] == 6 and result["rank"] == 4 and result["peak_lr"] == 0.01
    assert result["eval_loss"] == pytest.approx(uninterrupted["eval_loss"], rel=1e-6)


def test_ngram_scripts_write_the_tables(saved_model, tmp_path):
    root, corpus, _ = saved_model
    out = tmp_path / "words" / "words.h5"  # the rule's layout {corpus}/{tokenizer}.h5, checked by the table
    job = SimpleNamespace(
        input=Namedlist(fromdict={"corpus": [str(corpus)], "language": []}),
        output=Namedlist([str(out)]), log=[str(tmp_path / "count.log")],
        wildcards=SimpleNamespace(corpus="words", tokenizer="words"),
        params=SimpleNamespace(corpus=dict(type="text_files", files=[str(corpus)], text_field="text", max_documents=0),
                               tokenizer=dict(source="local", id=str(root / "tokenizer"), revision="main"),
                               order=3, max_tokens=0),
        threads=1, config=dict(device="cpu"),
    )
    script("count_corpus_ngrams").main(job)
    table = tmp_path / "ngram_werror.csv"
    script("tabulate_ngrams").main(SimpleNamespace(input=Namedlist([str(out)]), output=Namedlist([str(table)]),
                                                    log=[str(tmp_path / "tab.log")],
                                                    params=SimpleNamespace(config_sha256="c0ffee")))
    curve = pd.read_csv(table)
    assert set(curve["kind"]) == {"empirical"} and curve["werror"].iloc[0] == pytest.approx(1.0)
    assert (curve["config_sha256"] == "c0ffee").all() and "numpy_version" in curve  # provenance
    assert curve["n_tokens"].iloc[0] == 40 * 41 and (np.diff(curve["werror"]) <= 1e-12).all()
    moved = tmp_path / "pile" / "words.h5"  # another corpus's path: refused, not tabulated as it
    moved.parent.mkdir()
    moved.write_bytes(out.read_bytes())
    with pytest.raises(IdentityError, match=r"was made for corpus='words', tokenizer='words', but its path promises "
                                            r"corpus='pile'"):
        script("tabulate_ngrams").main(SimpleNamespace(input=Namedlist([str(moved)]), output=Namedlist([str(table)]),
                                                        log=[str(tmp_path / "tab.log")],
                                                        params=SimpleNamespace(config_sha256="c0ffee")))
    truth = tmp_path / "truth.csv"
    script("ngram_ground_truth").main(SimpleNamespace(
        output=Namedlist([str(truth)]), log=[str(tmp_path / "truth.log")],
        params=SimpleNamespace(language=dict(vocab_size=8, order=2, groups=2, support=3, zipf_exponent=0.5, seed=0),
                               sample_sizes=[1000, 20000], order=3, seed=0, config_sha256="c0ffee"),
    ))
    assert set(pd.read_csv(truth)["kind"]) == {"truth", "empirical", "buckets"}


# ------------------------------------------------------------------ config


def test_ranks_learning_rates_and_the_default_config(default_config):
    assert bottleneck.head_ranks(dict(ranks=[4, 1, 16], full_rank=True), 64) == [1, 4, 16, 64]
    assert bottleneck.head_ranks(dict(ranks=[4, 1], full_rank=False), 4) == [1, 4]
    rates = bottleneck.learning_rates(dict(lr_min=1e-3, lr_max=5e-2, lr_count=4))
    assert list(rates) == ["0.001", "0.00368", "0.0136", "0.05"]
    assert list(rates.values()) == pytest.approx([1e-3, 1e-3 * 50 ** (1 / 3), 1e-3 * 50 ** (2 / 3), 5e-2], rel=1e-12)
    assert list(rates.values()) == bottleneck.lr_grid()  # the paper's grid is the default one
    plan = load_plan(default_config, SCHEMA)  # cross-checks the bottleneck and ngrams sections
    for name in plan.config["bottleneck"]["models"]:
        assert plan.models[name].hidden_size in bottleneck.head_ranks(plan.config["bottleneck"], plan.models[name].hidden_size)


@pytest.mark.parametrize("change, key", [
    ({"bottleneck": {"lr_min": 0.1, "lr_max": 0.01}}, "bottleneck.lr_min"),
    ({"bottleneck": {"train_corpus": "nope"}}, "bottleneck.train_corpus"),
    ({"bottleneck": {"seq_len": 10**8}}, "bottleneck.seq_len"),
    ({"bottleneck": {"ranks": [], "full_rank": False}}, "bottleneck.ranks"),
    ({"ngrams": {"order": 2}}, "ngrams.order"),
])
def test_config_problems_name_the_key(default_config, change, key):
    default_config.setdefault("bottleneck", {}).setdefault("models", ["toy-d32"])
    for section, values in change.items():
        default_config.setdefault(section, {}).update(values)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_plan(default_config, SCHEMA)


def test_ngram_references_are_checked(default_config):
    with pytest.raises(ConfigError, match=r"ngrams\.corpora\[0\]"):
        load_plan(dict(default_config, ngrams=dict(default_config["ngrams"], corpora=["nope"])), SCHEMA)
    with pytest.raises(ConfigError, match=r"ngrams\.tokenizers\[0\]"):
        load_plan(dict(default_config, ngrams=dict(default_config["ngrams"], tokenizers=["nope"])), SCHEMA)

