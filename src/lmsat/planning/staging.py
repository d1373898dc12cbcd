"""Staging: everything compute jobs would fetch from the network, put on disk first.

Staging jobs (workflow/rules/staging.smk) are the only ones that reach the hub or a dataset
server; the profile decides where they run (the submit node, or a transfer partition). Every
other job imports lmsat.runtime.offline and reads what they wrote:

- a hub tokenizer -> a directory written by `save_pretrained` (`stage_tokenizer`), loaded
  with `local_files_only=True` (lmsat.checkpoints.loading.load_tokenizer);
- a hub dataset corpus -> a JSON-lines file holding exactly the prefix of documents its
  consumers read (`stage_corpus`), read back by lmsat.data.corpus.iter_documents;
- an lm-eval task -> its datasets in a staged datasets cache (`stage_lmeval_task`).

A staged corpus holds the documents in stream order, one {"text": ...} object a line, and a
last line {"lmsat_staged": {...}} saying how many there are and whether the split ended
there. The prefix is long enough for every consumer (`CorpusConsumer`): documents are
tokenized with each consumer's tokenizer until every token budget or document cap is met,
then READ_AHEAD_DOCUMENTS more are kept for readers that pull a batch before stopping. A
reader that still runs past the end of a cut prefix gets an error (never a shorter corpus),
so a staged run gives exactly the results of a run that streamed the corpus.

    python -c "from lmsat.planning.staging import stage_tokenizer; stage_tokenizer({'source': 'hub', \
        'id': 'EleutherAI/pythia-70m', 'revision': 'main'}, 'pythia', 'results/staged/tokenizers/pythia')"
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from lmsat.core.io import atomic_path, write_json
from lmsat.data.corpus import FOOTER_KEY, hf_documents
from lmsat.errors import STAGING_HINT, CorpusError, ModelLoadError
from lmsat.errors import StagingMissing as StagingMissing  # raised by the readers of what staging writes

log = logging.getLogger(__name__)

# lmsat.bottleneck.corpus_werror.corpus_token_chunks tokenizes 256 documents at a time, so it pulls up to
# 255 documents past the one that fills its budget.
READ_AHEAD_DOCUMENTS = 256
HINT = STAGING_HINT

# The rules whose jobs reach the network (workflow/rules/fetch.smk, staging.smk); every other
# job imports lmsat.runtime.offline. The workflow makes them local rules where staging_on says so, and
# `lmsat plan` counts them as the network staging jobs.
STAGING_RULES = (
    "fetch_checkpoint",
    "fetch_best_checkpoint",
    "stage_tokenizer",
    "stage_corpus",
    "stage_lmeval_task",
)


def needs_staging_tokenizer(spec: dict) -> bool:
    return spec["source"] == "hub"


def needs_staging_corpus(spec: dict) -> bool:
    return spec["type"] == "hf"


# ---------------------------------------------------------------- tokenizers


def stage_tokenizer(spec: dict, name: str, directory, policy=None) -> Path:
    """Download hub tokenizer `name` (its config['tokenizers'] entry `spec`) through the real
    `from_pretrained(id, revision=...)` with backoff, and save it into `directory`."""
    from transformers import AutoTokenizer

    from lmsat.core.retry import RetryPolicy, with_backoff

    try:
        tokenizer = with_backoff(
            lambda: AutoTokenizer.from_pretrained(spec["id"], revision=spec["revision"]),
            policy or RetryPolicy(),
            what=f"tokenizer {name} ({spec['id']}@{spec['revision']})",
        )
    except (OSError, ValueError) as error:
        raise ModelLoadError(
            f"cannot stage tokenizer {name} ({spec['id']}@{spec['revision']}; config key 'tokenizers.{name}'): {error}"
        ) from error
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "lmsat_staged.json", dict(tokenizer=name, id=spec["id"], revision=spec["revision"], size=len(tokenizer)))
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("tokenizer %s (%s@%s, %d entries) staged in %s", name, spec["id"], spec["revision"], len(tokenizer), directory)
    return directory


# ---------------------------------------------------------------- corpora


@dataclass(frozen=True)
class CorpusConsumer:
    """What one kind of job reads from a corpus: documents in order, with `tokenizer`
    (a config['tokenizers'] name), until `tokens` tokens (documents joined with
    end-of-text; 0 = the whole split) or `documents` documents (0 = no cap)."""

    job: str  # e.g. "sample_eval_tokens", for the log
    tokenizer: str
    tokens: int
    documents: int = 0


def stage_corpus(spec: dict, name: str, consumers: list[dict], tokenizers: dict, path, policy=None) -> dict:
    """Stream hub corpus `name` (config['corpora'] entry `spec`) and write the prefix its
    `consumers` (CorpusConsumer fields) read to `path`. tokenizers: name -> tokenizer.
    Returns the footer: documents written, whether the split ended, tokens per consumer."""
    consumers = [CorpusConsumer(**c) for c in consumers]
    if not consumers:
        raise CorpusError(f"corpus {name}: no job reads it, so there is nothing to stage")
    counts = [0] * len(consumers)
    done = [False] * len(consumers)
    eos_extra = 1  # every document is followed by end-of-text
    written, extra, complete = 0, None, True
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for text in hf_documents(spec, name, policy, sleep=time.sleep):
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            written += 1
            if extra is not None:
                extra -= 1
                if extra == 0:
                    complete = False
                    break
                continue
            lengths = {}
            for i, consumer in enumerate(consumers):
                if done[i]:
                    continue
                if consumer.tokenizer not in lengths:
                    ids = tokenizers[consumer.tokenizer](text, add_special_tokens=False)["input_ids"]
                    lengths[consumer.tokenizer] = len(ids) + eos_extra
                counts[i] += lengths[consumer.tokenizer]
                done[i] = bool(consumer.tokens and counts[i] >= consumer.tokens) or bool(
                    consumer.documents and written >= consumer.documents
                )
            if all(done):
                extra = READ_AHEAD_DOCUMENTS
        footer = dict(
            corpus=name, documents=written, complete=complete,
            source={k: spec.get(k) for k in ("path", "name", "split", "data_files")},
            consumers=[dict(job=c.job, tokenizer=c.tokenizer, budget=c.tokens, tokens=n) for c, n in zip(consumers, counts)],
        )
        out.write(json.dumps({FOOTER_KEY: footer}) + "\n")
    log.info("corpus %s: %d documents staged in %s (%s)", name, written, path,
             "the whole split" if complete else f"a prefix, {READ_AHEAD_DOCUMENTS} past the last budget")
    return footer


# ---------------------------------------------------------------- lm-eval tasks


def stage_lmeval_task(task: str, datasets_cache, manifest, include_path=None) -> dict:
    """Download the datasets of lm-eval `task` into `datasets_cache` through lm-eval's own task
    loading (with HF_DATASETS_CACHE pointing there; set before `datasets` is imported), and
    write a manifest. Offline jobs with the same HF_DATASETS_CACHE then load them from it."""
    import datasets
    from lm_eval.tasks import get_task_dict

    from lmsat.saturation.downstream import check_tasks, located_tasks, task_manager

    cache = Path(datasets.config.HF_DATASETS_CACHE).resolve()
    if cache != Path(datasets_cache).resolve():
        raise RuntimeError(
            f"stage_lmeval_task: datasets caches to {cache}, not {datasets_cache}; set HF_DATASETS_CACHE "
            "before importing datasets (workflow/scripts/stage_lmeval_task.py does)"
        )
    with located_tasks(include_path) as (located, _):  # lmsat's task YAMLs name their data relative to themselves
        manager = task_manager([task], located)
        check_tasks([task], manager)
        loaded = get_task_dict([task], manager)

    def leaves(tree):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from leaves(value)
            else:
                yield getattr(key, "group_name", key), value

    splits = {}
    for leaf, task_object in leaves(loaded):
        dataset = getattr(task_object, "dataset", None)
        splits[str(leaf)] = {split: len(rows) for split, rows in (dataset or {}).items()}
    payload = dict(task=task, datasets_cache=str(datasets_cache), splits=splits)
    write_json(manifest, payload)
    log.info("lm-eval task %s staged in %s: %s", task, datasets_cache, splits)
    return payload
