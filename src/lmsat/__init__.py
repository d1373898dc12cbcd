"""lmsat: language-model saturation and the softmax bottleneck across checkpoints.

The functions the workflow computes with are the library's public API, imported on first
use (so `import lmsat` and `lmsat plan` load neither torch nor h5py):

    import lmsat
    tokens, sample = lmsat.read_sample("results/default/samples/synthetic/toy.h5")  # (n_seq, seq_len)
    report = lmsat.analyse_checkpoint("runs/mine/checkpoint-400", tokens, sample)     # as the pipeline

    lmsat.mean_pairwise_cosine(H)           # anisotropy A(H) of (n, d) representations
    lmsat.singular_values(W)                # (min(V, d),) of a (V, d) head, float64 Gram
    lmsat.singular_entropy(s), lmsat.effective_rank(s), lmsat.stable_rank(s)
    lmsat.head_spectrum(lm), lmsat.attention_lowrank(lm)
    lmsat.extract_to_cache(lm, tokens, path, identity=..., settings=lmsat.ExtractionSettings())
    lmsat.METRICS["loss"].compute(cache)    # every per-checkpoint metric, by name
    lmsat.monitor(model, "results/default/samples/synthetic/toy.h5")  # the same, on a model in memory

The library's folders are its layers, bottom to top; an import, even one inside a
function, only goes down (or within its layer, without a cycle), and no private name
crosses a module (tests/test_layers.py walks every import; docs/layout.md draws the tree):

- leaves: core/ (plan types, path names, schedules, records and checksums, fingerprints,
  retries, lazy imports), runtime/ (offline switches, the warm interpreter, progress),
  tasks/ (lm-eval templates), errors, compat (the module paths of lmsat 0.1);
- data access: checkpoints/ (families' weights, formats, fetch, pins, checks, loading),
  data/ (corpora and samples, the hidden-state cache, published evaluations);
- compute: saturation/, degeneration/, bottleneck/ (the maths of sections 3, 4 and 5),
  toy/ (the synthetic language and its tiny models);
- registries: products/ (metrics, tables, report pages, the published run), figures/;
- orchestration: planning/ (config to plan), standalone/ (analyse, monitor, the watch of any
  training loop and its Trainer, Lightning and OLMo-core callbacks), commands/, cli, and this
  package's lazy API.

Output paths are the workflow's (workflow/rules/*.smk).
"""

__version__ = "0.1.0"

# public name -> module that defines it (each documents its shapes)
PUBLIC = {
    "analyse_checkpoint": "lmsat.standalone.analyse",
    "run_settings": "lmsat.standalone.analyse",
    "resolve_checkpoint": "lmsat.standalone.analyse",
    "text_sample": "lmsat.standalone.analyse",
    "mean_pairwise_cosine": "lmsat.degeneration.anisotropy",
    "MeanCosineAccumulator": "lmsat.degeneration.anisotropy",
    "singular_values": "lmsat.degeneration.spectra",
    "singular_entropy": "lmsat.degeneration.spectra",
    "effective_rank": "lmsat.degeneration.spectra",
    "stable_rank": "lmsat.degeneration.spectra",
    "head_spectrum": "lmsat.degeneration.weight_files",
    "attention_arrays": "lmsat.degeneration.weight_files",
    "attention_lowrank": "lmsat.degeneration.attention",
    "ExtractionSettings": "lmsat.data.hidden_states",
    "extract_to_cache": "lmsat.data.hidden_states",
    "open_cache": "lmsat.data.hidden_states",
    "build_sample": "lmsat.data.corpus",
    "read_sample": "lmsat.data.corpus",
    "load_causal_lm": "lmsat.checkpoints.loading",
    "load_tokenizer": "lmsat.checkpoints.loading",
    "load_saved_step": "lmsat.checkpoints.loading",
    "METRICS": "lmsat.products.metrics",
    "monitor": "lmsat.standalone.monitor",
    "SaturationCallback": "lmsat.standalone.callback",
    "SaturationWatch": "lmsat.standalone.watch",
}  # the Lightning and OLMo-core callbacks import their framework: lmsat.standalone.lightning_watch, olmo_core_watch

__all__ = ["__version__", *PUBLIC]

from lmsat import compat  # noqa: E402  (the module paths before docs/layout.md, with a warning)

compat.install()


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'lmsat' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(PUBLIC[name]), name)
    globals()[name] = value  # imported once
    return value


def __dir__():
    return sorted(__all__)
