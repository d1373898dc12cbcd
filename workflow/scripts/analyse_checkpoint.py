"""Rule analyse_checkpoint: everything that needs one checkpoint's weights, from one load.

The weights are loaded once, in the checkpoint's own dtype (float16 for Pythia: the stored
values exactly), straight onto the job's device. The planned weights metrics (lmsat.products.metrics:
the LM-head spectrum, the low-rank attention metrics) run there (float64 Grams and batched small factorisations, under a
second on a GPU), the two weight hashes run in threads beside the forward, then the model
is cast once, on the device, to the forward dtype and the eval sample goes through it into
the hidden-state cache (resumable by chunks, so a killed job loses at most one chunk of
it). A weights metric that also reads the cached states (the gradient bottleneck: its
head projector made before the cast, its measure on the cache once written) is finished
last, from the cache the job wrote. Importing torch + transformers and loading the model
cost more than either part on small models, so one job per checkpoint does both.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from lmsat.checkpoints.loading import check_sequence_length, check_token_ids, job_device, load_causal_lm
from lmsat.core.integrity import verify_hdf5
from lmsat.core.io import setup_logging
from lmsat.core.job_inputs import model_at, tokenizer_at
from lmsat.core.plan import ModelEntry
from lmsat.data.corpus import read_sample
from lmsat.data.hidden_states import ExtractionSettings, extract_to_cache, open_cache
from lmsat.products.metrics import METRICS, WeightsJob, finish_weights

log = logging.getLogger(__name__)


def analyse_weights(lm, entry: ModelEntry, revision: str, params, pool=None, inputs=None) -> dict:
    """Every planned weights metric of `lm` (lmsat.products.metrics, reads="weights"), on its device.

    -> {metric: result}; with `pool` a result may hold Futures (the head's hashes), which
    its metric's write resolves.
    """
    job = WeightsJob(
        model=f"{entry.name}@{revision}",
        tokenizer=entry.tokenizer,
        # its planned paths read as the job's `inputs` (lmsat.core.job_inputs)
        tokenizer_spec=params.tokenizer if inputs is None else tokenizer_at(params.tokenizer, inputs),
        drop_padding_rows=params.drop_padding_rows,
        pool=pool,
    )
    return {name: METRICS[name].compute(lm, job) for name in params.weight_metrics}


def write_weights(output, results: dict, record: dict) -> None:
    """One file per weights metric (its output of the rule), from analyse_weights' results."""
    for name, result in results.items():
        METRICS[name].write(getattr(output, name), result, record)


def _now(device) -> float:
    """Wall clock after the device's queued work (phase times are then the device's too)."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)
    return time.perf_counter()


def main(snakemake) -> dict:
    """Run the job; returns the seconds of its phases (logged too; benchmarks/checkpoint_job.py)."""
    setup_logging(snakemake.log[0])
    params, revision = snakemake.params, snakemake.wildcards.revision
    torch.set_num_threads(snakemake.threads)
    entry = ModelEntry(**params.model)
    tokens, sample = read_sample(snakemake.input.sample)  # checked before the model loads
    settings = ExtractionSettings(
        **{k: params.extraction[k] for k in ("batch_size", "chunk_sequences", "dtype", "storage_dtype", "layer_sample")},
        seed=params.seed,
    )
    device = job_device(snakemake)
    seconds, start = {}, _now(device)
    # The checkpoint's own dtype ("auto"): the weight analyses see the stored values; the
    # one cast below, on the device, equals loading in the forward dtype.
    lm = load_causal_lm(model_at(entry, revision, snakemake.input), revision, dtype="auto", device=device)
    check_sequence_length(lm, entry, revision, tokens.shape[1])  # before any work on it
    check_token_ids(lm, entry, revision, tokens, f"the eval sample {snakemake.input.sample}")
    seconds["load"], start = _now(device) - start, _now(device)
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two weight hashes, beside the forward
        analysed = analyse_weights(lm, entry, revision, params, pool, inputs=snakemake.input)
        seconds["weights"], start = _now(device) - start, _now(device)
        lm = lm.to(dtype=getattr(torch, settings.dtype))
        seconds["cast"], start = _now(device) - start, _now(device)
        identity = dict(model=entry.name, revision=revision, model_id=entry.id, sample_sha256=sample["sha256"])
        extracted = extract_to_cache(lm, tokens, snakemake.output.cache, identity=identity, settings=settings, device=device)
        seconds.update(forward=extracted["forward"], cache_write=extracted["write"])
        seconds["extract_other"], start = _now(device) - start - sum(extracted.values()), _now(device)
        if any(METRICS[name].finish for name in analysed):  # metrics of the weights and the cached states
            path = snakemake.output.cache
            with open_cache(path, expect=dict(sample_sha256=sample["sha256"]), verify=False) as cache:
                verify_hdf5(cache, path, ("hidden",))  # what they read, against its checksums hashed from memory
                analysed = finish_weights(analysed, cache, tokens)
        seconds["weights_finish"], start = _now(device) - start, _now(device)
        write_weights(snakemake.output, analysed, params.record)  # waits for the hashes
        seconds["weights_write"] = _now(device) - start
    log.info("%s@%s: seconds per phase %s", entry.name, revision, {k: round(v, 3) for k, v in seconds.items()})
    return seconds


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
