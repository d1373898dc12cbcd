"""Rule analyse_checkpoint: everything that needs one checkpoint's weights, from one load.

The weights are loaded once, in the checkpoint's own dtype (float16 for Pythia: the stored
values exactly), straight onto the job's device. The LM-head spectrum and the low-rank
attention metrics run there (float64 Grams and batched small factorisations, under a
second on a GPU), the two weight hashes run in threads beside the forward, then the model
is cast once, on the device, to the forward dtype and the eval sample goes through it into
the hidden-state cache (resumable by chunks, so a killed job loses at most one chunk of
it). Importing torch + transformers and loading the model cost more than either part on
small models, so one job per checkpoint does both.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from lmsat.cache import ExtractionSettings, extract_to_cache
from lmsat.config import ModelEntry
from lmsat.corpus import read_sample
from lmsat.degeneration import attention_arrays, head_spectrum, write_attention, write_spectrum
from lmsat.io import setup_logging
from lmsat.models import check_sequence_length, job_device, load_causal_lm, load_tokenizer

log = logging.getLogger(__name__)


def analyse_weights(lm, entry: ModelEntry, revision: str, params, pool=None) -> tuple[dict, dict, dict]:
    """Head spectrum and attention metrics of `lm`, on its device, in float64 there.

    -> (spectrum, attention arrays, attention shape attrs); with `pool` the spectrum's two
    hashes are Futures (see head_spectrum), resolved by write_spectrum.
    """
    tokenizer_size = None
    if params.drop_padding_rows:
        tokenizer_size = len(load_tokenizer(params.tokenizer, entry.tokenizer))
    spectrum = head_spectrum(lm, tokenizer_size, params.drop_padding_rows, entry.tokenizer, pool=pool)
    spectrum["tokenizer_size"] = tokenizer_size
    log.info(
        "%s@%s: head %d x %d (%s), %d rows in the SVD",
        entry.name, revision, spectrum["n_rows"], spectrum["hidden_size"], spectrum["head_dtype"],
        spectrum["n_valid_rows"],
    )
    arrays, shape = attention_arrays(lm)
    log.info("%s@%s: attention of %d layers x %d heads", entry.name, revision, shape["n_layers"], shape["n_heads"])
    return spectrum, arrays, shape


def write_weights(output, spectrum: dict, arrays: dict, shape: dict, record: dict) -> None:
    """The spectra and attention files of analyse_weights' results."""
    tokenizer_size = spectrum.pop("tokenizer_size")
    write_spectrum(output.spectra, spectrum, record, tokenizer_size)
    write_attention(output.attention, arrays, shape, record, spectrum["hidden_size"])


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
    lm = load_causal_lm(entry, revision, dtype="auto", device=device)
    check_sequence_length(lm, entry, revision, tokens.shape[1])  # before any work on it
    seconds["load"], start = _now(device) - start, _now(device)
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two weight hashes, beside the forward
        spectrum, arrays, shape = analyse_weights(lm, entry, revision, params, pool)
        seconds["weights"], start = _now(device) - start, _now(device)
        lm = lm.to(dtype=getattr(torch, settings.dtype))
        seconds["cast"], start = _now(device) - start, _now(device)
        identity = dict(model=entry.name, revision=revision, model_id=entry.id, sample_sha256=sample["sha256"])
        extracted = extract_to_cache(lm, tokens, snakemake.output.cache, identity=identity, settings=settings, device=device)
        seconds.update(forward=extracted["forward"], cache_write=extracted["write"])
        seconds["extract_other"], start = _now(device) - start - sum(extracted.values()), _now(device)
        write_weights(snakemake.output, spectrum, arrays, shape, params.record)  # waits for the hashes
        seconds["weights_write"] = _now(device) - start
    log.info("%s@%s: seconds per phase %s", entry.name, revision, {k: round(v, 3) for k, v in seconds.items()})
    return seconds


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
