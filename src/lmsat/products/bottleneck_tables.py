"""The bottleneck tables: W-error of the corpus n-gram distributions, the rank-r heads and
their learning-rate search (Figs. 6-8), and the gradient bottleneck along training."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import h5py

from lmsat.core.integrity import BOUNDS, check_values, require_keys, verify_hdf5
from lmsat.core.io import check_identity, promised_by_path, read_json
from lmsat.core.lazy import lazy_module
from lmsat.degeneration.weight_files import RECORD_KEYS
from lmsat.products.table_rows import flag_final, in_model_order

pd = lazy_module("pandas")  # imported by the first job that builds a table, not by every metric job
log = logging.getLogger(__name__)

# ---- Fig. 7 and the ground truth: W-error curves of n-gram matrices


def ngram_werror_table(paths) -> pd.DataFrame:
    """W-error(d) of every corpus x tokenizer n-gram spectrum file (rule count_corpus_ngrams),
    each checked against its path; a file with the true matrix's spectrum adds its curve."""
    from lmsat.bottleneck.corpus_werror import TABLE_COLUMNS, curve_rows

    tables = []
    for path in paths:
        with h5py.File(path, "r") as f:
            attrs = {k: f.attrs[k] for k in ("corpus", "tokenizer", "order", "n_tokens", "n_contexts", "vocab_size")}
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in attrs.items()}
            check_identity(path, attrs, promised_by_path(path, "corpus", "tokenizer"))
            verify_hdf5(f, path)
            spectra = {name: f[name][...] for name in ("singular_values", "truth_singular_values") if name in f}
            check_values(path, f"{attrs['corpus']} x {attrs['tokenizer']}", spectra,
                         bounds={name: BOUNDS["singular_values"] for name in spectra})
            tables.append(curve_rows(f["singular_values"][...], **attrs, kind="empirical"))
            if "truth_singular_values" in f:
                truth = dict(attrs, n_tokens=0, n_contexts=float(f.attrs["truth_n_contexts"]))
                tables.append(curve_rows(f["truth_singular_values"][...], **truth, kind="truth"))
    return pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]


def ngram_ground_truth_table(spectra: dict, order: int, vocab_size: int, n_buckets: int) -> pd.DataFrame:
    """W-error curves of the synthetic language's true n-gram matrix, of samples of it
    (lmsat.bottleneck.corpus_werror.ground_truth_spectra) and of its bucket matrix; logs each sample's
    largest gap to the truth."""
    from lmsat.bottleneck.corpus_werror import TABLE_COLUMNS, curve_rows

    common = dict(corpus="synthetic", tokenizer="language", order=order, vocab_size=vocab_size)
    truth = curve_rows(spectra["truth"]["singular_values"], **common, kind="truth", n_tokens=0,
                       n_contexts=spectra["truth"]["n_contexts"])
    tables = [truth]
    for n, spectrum in spectra["samples"].items():
        curve = curve_rows(spectrum["singular_values"], **common, kind="empirical", n_tokens=n,
                           n_contexts=spectrum["n_contexts"])
        gap = (curve["werror"] - truth["werror"]).abs().max()
        log.info("%d tokens: %d of %d contexts seen, max |W-error gap| to the truth %.4f", n,
                 spectrum["n_contexts"], spectra["truth"]["n_contexts"], gap)
        tables.append(curve)
    tables.append(curve_rows(spectra["buckets"], **common, kind="buckets", n_tokens=0, n_contexts=n_buckets))
    return pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]


# ---- softmax bottleneck

HEAD_COLUMNS = [
    "model", "revision", "hidden_size", "vocab_size", "kind", "rank", "peak_lr", "eval_loss", "eval_acc",
    "n_eval_tokens", "loss_gap", "reference_loss_sem", "w_error", "risen", "rise_point",
]
SEARCH_COLUMNS = ["model", "rank", "peak_lr", "eval_loss", "eval_acc", "train_loss", "chosen"]


def own_head_werror(singular_values, ranks) -> dict[int, float]:
    """W-error(r) = ||sigma_{r+1:}||_2 / ||W||_F of the model's own head at each r."""
    from lmsat.bottleneck.werror import w_error_curve

    _, werror = w_error_curve(singular_values)
    return {r: float(werror[min(r, len(werror) - 1)]) for r in ranks}


def heads_tables(runs: list[dict], manifests: dict, spectra: dict, tolerance: float,
                 model_order: list[str] | None = None):
    """(heads, lr_search) tables from the runs of every (model, r, lr).

    runs: dicts with model, rank, peak_lr, eval_loss, eval_acc, train_loss; manifests: model
    -> cache manifest (revision, hidden_size, vocab_size, reference); spectra: model -> the
    singular values of its own head. Per (model, r) the run with the lowest eval loss is
    chosen (the paper's per-r learning-rate search). A rank has `risen` when its loss
    exceeds the reference head's by more than `tolerance` x that loss; the `rise_point` is
    the largest such rank, i.e. the smallest W-error at which the loss has risen. Rows
    follow `model_order` (the plan's, by size: in_model_order), by name when None.
    """
    import math

    search = pd.DataFrame(runs, columns=[c for c in SEARCH_COLUMNS if c != "chosen"])
    if search.empty:
        raise ValueError("heads_tables: no runs; the bottleneck rules produced nothing to tabulate")
    best = search.loc[search.groupby(["model", "rank"])["eval_loss"].idxmin()]
    search["chosen"] = search.index.isin(best.index)
    rows = []
    for model, manifest in manifests.items():
        reference = manifest["reference"]
        chosen = best[best["model"] == model].sort_values("rank")
        if chosen.empty:
            raise ValueError(f"heads_tables: no runs of model {model}")
        werror = own_head_werror(spectra[model], list(chosen["rank"]) + [manifest["hidden_size"]])
        common = dict(
            model=model, revision=manifest["revision"], hidden_size=manifest["hidden_size"],
            vocab_size=manifest["vocab_size"], n_eval_tokens=reference["n_tokens"],
            reference_loss_sem=reference["loss_sem"],
        )
        for run in chosen.itertuples():
            gap = run.eval_loss - reference["eval_loss"]
            rows.append(dict(
                common, kind="low_rank", rank=int(run.rank), peak_lr=run.peak_lr, eval_loss=run.eval_loss,
                eval_acc=run.eval_acc, loss_gap=gap, w_error=werror[run.rank],
                risen=bool(gap > tolerance * reference["eval_loss"]),
            ))
        rows.append(dict(
            common, kind="full_head", rank=manifest["hidden_size"], peak_lr=math.nan,
            eval_loss=reference["eval_loss"], eval_acc=reference["eval_acc"], loss_gap=0.0,
            w_error=werror[manifest["hidden_size"]], risen=False,
        ))
    heads = pd.DataFrame(rows)
    heads["rise_point"] = False
    for model, group in heads[heads["kind"] == "low_rank"].groupby("model", sort=False):
        risen = group[group["risen"]]
        if not risen.empty:
            heads.loc[risen["rank"].idxmax(), "rise_point"] = True
    heads = in_model_order(heads[HEAD_COLUMNS], model_order, [])  # stable: ranks, then the own head
    return heads, in_model_order(search[SEARCH_COLUMNS], model_order, ["rank", "peak_lr"])


def read_head_inputs(run_paths, manifest_paths, spectra_paths) -> tuple[list[dict], dict, dict]:
    """(runs, manifests by model, own-head singular values by model) for heads_tables, each
    file checked against what its path promises (lmsat.core.io.IdentityError naming it):
    runs/{model}/r{rank}/lr{lr}.json its model, rank and learning rate; cache/{model}/
    manifest.json its model; the spectra file its model and the manifest's revision (the
    W-error must be of the head the pairs were cached with)."""
    from lmsat.bottleneck.rank_grid import lr_label
    from lmsat.core.io import check_identity
    from lmsat.degeneration.weight_files import read_spectrum

    runs = []
    for path in map(Path, run_paths):
        run = read_json(path, require_checksum=True)
        found = dict(model=run.get("model"), rank=run.get("rank"), peak_lr=lr_label(float(run.get("peak_lr", "nan"))))
        promised = dict(model=path.parent.parent.name, rank=path.parent.name[1:], peak_lr=path.stem[2:])
        check_identity(path, found, promised)
        where = f"{run['model']} rank {run['rank']} lr {run['peak_lr']}"
        require_keys(path, where, run, ("eval_loss", "eval_acc"))
        check_values(path, where, {key: run[key] for key in ("eval_loss", "eval_acc")})  # loss >= 0, accuracy in [0, 1]
        runs.append(run)
    manifests = {}
    for path in map(Path, manifest_paths):
        manifest = read_json(path, require_checksum=True)
        check_identity(path, manifest, dict(model=path.parent.name))
        manifests[manifest["model"]] = manifest
    spectra = {}
    for path in spectra_paths:
        values, attrs = read_spectrum(path)  # checks model and revision against its path
        model = attrs["model"]
        if model in manifests:
            check_identity(path, attrs, dict(model=model, revision=manifests[model]["revision"]))
        spectra[model] = values
    return runs, manifests, spectra


def monotone_violations(heads, slack: float) -> list[tuple[str, int, int]]:
    """(model, r, r') pairs with r < r' whose chosen loss at r' exceeds the one at r by > slack."""
    bad = []
    for model, group in heads[heads["kind"] == "low_rank"].groupby("model"):
        group = group.sort_values("rank")
        losses, ranks = group["eval_loss"].to_numpy(), group["rank"].to_numpy()
        for i in range(len(ranks)):
            for j in range(i + 1, len(ranks)):
                if losses[j] > losses[i] + slack:
                    bad.append((model, int(ranks[i]), int(ranks[j])))
    return bad


# ---------------------------------------------------------------- the gradient bottleneck

GRADIENT_COLUMNS = [
    "energy_kept", "energy_kept_sem", "norm_kept", "norm_kept_sem", "random_energy", "random_norm",
    "energy_kept_over_random", "energy_kept_pooled", "energy_kept_pooled_sem", "rank", "hidden_size", "vocab_rows",
    "d_over_v", "energy_kept_frequent", "energy_kept_frequent_sem", "energy_kept_rare", "energy_kept_rare_sem",
    "norm_kept_frequent", "norm_kept_frequent_sem", "norm_kept_rare", "norm_kept_rare_sem",
    "energy_kept_q05", "energy_kept_q25", "energy_kept_q50", "energy_kept_q75", "energy_kept_q95",
    "norm_kept_q05", "norm_kept_q25", "norm_kept_q50", "norm_kept_q75", "norm_kept_q95",
    "n_tokens", "n_seq", "frequent_types", "frequent_share",
]  # fmt: skip


def gradient_from_files(files, needed: dict, model_order: list[str] | None) -> pd.DataFrame:
    """One row per checkpoint (RECORD_KEYS, is_final, GRADIENT_COLUMNS) from the gradient
    bottleneck files of rule analyse_checkpoint (lmsat.bottleneck.gradient): the shares of
    each token's logit gradient kept in the head's column space, means with their standard
    errors over sequences, by target frequency, pooled (sum ||P g||^2 / sum ||g||^2), token
    quantiles, and the random-subspace reference rank / V beside them."""
    from lmsat.bottleneck.gradient import read_gradient_file, summarize

    rows = []
    for path in files:
        found = read_gradient_file(path)
        summary = summarize(found)
        summary["energy_kept_over_random"] = summary["energy_kept"] / summary["random_energy"] if summary["rank"] else math.nan
        rows.append({**{k: found[k] for k in RECORD_KEYS}, **summary})
    if not rows:
        raise ValueError("no gradient bottleneck files to tabulate")
    table = flag_final(pd.DataFrame.from_records(rows))
    return in_model_order(table, model_order, ["step"])[[*RECORD_KEYS, "is_final", *GRADIENT_COLUMNS]]
