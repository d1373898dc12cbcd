"""The rank-constrained head experiment, workflow side (Godey et al. 2024, 5.1, App. B).

What the rules of `workflow/rules/bottleneck.smk` and `ngrams.smk` need besides
`lmsat.heads` and `lmsat.ngram_werror`: the config checks of both sections, the rank
sweep and learning-rate grid of each model, the training config of one (model, r, lr) job
and the path of its resumable state, and the tables behind Figs. 6 and 8 (best learning
rate per (model, r) by eval loss, the model's own head as the reference row, the W-error
of that head at each r, and where the loss starts to rise).

    ranks = head_ranks(config["bottleneck"], d)           # [1, 4, 16, d]
    rates = learning_rates(config["bottleneck"])           # {"0.001": 0.001, ...}
    heads, search = heads_tables(runs, manifests, spectra, tolerance=0.01)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

# Snakemake imports this module to plan the DAG: torch, pandas and scipy are imported only
# inside the functions that jobs call.

HEAD_COLUMNS = [
    "model", "revision", "hidden_size", "vocab_size", "kind", "rank", "peak_lr", "eval_loss", "eval_acc",
    "n_eval_tokens", "loss_gap", "reference_loss_sem", "w_error", "risen", "rise_point",
]
SEARCH_COLUMNS = ["model", "rank", "peak_lr", "eval_loss", "eval_acc", "train_loss", "chosen"]


def head_ranks(bottleneck: dict, hidden_size: int) -> list[int]:
    """Ranks swept for a model of width d: `ranks`, plus d itself with `full_rank`."""
    ranks = set(bottleneck["ranks"])
    if bottleneck["full_rank"]:
        ranks.add(hidden_size)
    return sorted(ranks)


def lr_label(lr: float) -> str:
    """Path form of a learning rate (3 significant digits: 0.001, 0.0158, 0.05)."""
    return f"{lr:.3g}"


def learning_rates(bottleneck: dict) -> dict[str, float]:
    """Label -> peak learning rate of the grid, log-spaced over [lr_min, lr_max].

    The grid of `lmsat.heads.lr_grid` (tested equal), without importing torch at DAG time.
    """
    grid = np.geomspace(bottleneck["lr_min"], bottleneck["lr_max"], bottleneck["lr_count"])
    return {lr_label(lr): float(lr) for lr in grid}


def set_corpora(config: dict) -> dict[str, str]:
    """Corpus of the train and eval token sets ('' in the config = the eval sample's corpus)."""
    bottleneck, default = config["bottleneck"], config["sample"]["corpus"]
    return {name: bottleneck[f"{name}_corpus"] or default for name in ("train", "eval")}


TRAIN_KEYS = ("batch_sequences", "seq_len", "steps", "eval_every", "save_every", "chunk_tokens", "init")


def train_settings(bottleneck: dict) -> dict:
    """The bottleneck keys that shape a head's training (a rule's params: only these re-run it)."""
    return {key: bottleneck[key] for key in TRAIN_KEYS}


def train_config(settings: dict, peak_lr: float, seed: int, device: str = "cpu"):
    """The HeadTrainConfig of one (model, r, lr) job; the rest is Pythia's recipe (App. B)."""
    from lmsat.heads import HeadTrainConfig

    return HeadTrainConfig(
        peak_lr=peak_lr,
        batch_size=settings["batch_sequences"],
        seq_len=settings["seq_len"],
        n_steps=settings["steps"],
        eval_every=settings["eval_every"],
        save_every=settings["save_every"],
        chunk_tokens=settings["chunk_tokens"],
        init=settings["init"],
        seed=seed,
        device=device,
    )


def state_file(directory, hidden_size: int, vocab_size: int, rank: int, cfg) -> Path:
    """Resumable-state path of a run, named by a hash of everything that shapes it.

    A changed config gets a new name, so `train_head` never meets a foreign state file;
    `stale_states` lists the leftovers of other configs in the same directory.
    """
    run = {k: v for k, v in asdict(cfg).items() if k != "device"}
    key = json.dumps(dict(d=hidden_size, vocab_size=vocab_size, rank=rank, cfg=run), sort_keys=True, default=list)
    return Path(directory) / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"


def stale_states(path: Path) -> list[Path]:
    return [p for p in path.parent.glob("*.pt") if p.name != path.name]


def _own_head_werror(singular_values, ranks) -> dict[int, float]:
    """W-error(r) = ||sigma_{r+1:}||_2 / ||W||_F of the model's own head at each r."""
    from lmsat.werror import w_error_curve

    _, werror = w_error_curve(singular_values)
    return {r: float(werror[min(r, len(werror) - 1)]) for r in ranks}


def heads_tables(runs: list[dict], manifests: dict, spectra: dict, tolerance: float):
    """(heads, lr_search) tables from the runs of every (model, r, lr).

    runs: dicts with model, rank, peak_lr, eval_loss, eval_acc, train_loss; manifests: model
    -> cache manifest (revision, hidden_size, vocab_size, reference); spectra: model -> the
    singular values of its own head. Per (model, r) the run with the lowest eval loss is
    chosen (the paper's per-r learning-rate search). A rank has `risen` when its loss
    exceeds the reference head's by more than `tolerance` x that loss; the `rise_point` is
    the largest such rank, i.e. the smallest W-error at which the loss has risen.
    Returns two pandas DataFrames.
    """
    import pandas as pd

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
        werror = _own_head_werror(spectra[model], list(chosen["rank"]) + [manifest["hidden_size"]])
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
    return heads[HEAD_COLUMNS], search[SEARCH_COLUMNS].sort_values(["model", "rank", "peak_lr"])


def read_head_inputs(run_paths, manifest_paths, spectra_paths) -> tuple[list[dict], dict, dict]:
    """(runs, manifests by model, own-head singular values by model) for heads_tables, each
    file checked against what its path promises (lmsat.io.IdentityError naming it):
    runs/{model}/r{rank}/lr{lr}.json its model, rank and learning rate; cache/{model}/
    manifest.json its model; the spectra file its model and the manifest's revision (the
    W-error must be of the head the pairs were cached with)."""
    from lmsat.degeneration import read_spectrum
    from lmsat.io import check_identity, read_json

    runs = []
    for path in map(Path, run_paths):
        run = read_json(path)
        found = dict(model=run.get("model"), rank=run.get("rank"), peak_lr=lr_label(float(run.get("peak_lr", "nan"))))
        promised = dict(model=path.parent.parent.name, rank=path.parent.name[1:], peak_lr=path.stem[2:])
        check_identity(path, found, promised)
        runs.append(run)
    manifests = {}
    for path in map(Path, manifest_paths):
        manifest = read_json(path)
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


def entropy_rate_of(language_path) -> float | None:
    """The synthetic language's entropy rate, or None without a language file."""
    if not language_path:
        return None
    from lmsat.synthetic import load_language

    return float(load_language(language_path).entropy_rate)

