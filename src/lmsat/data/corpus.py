"""Eval corpora and the eval token sample (the paper: 50k tokens sampled from The Pile).

The sample is built once per corpus x tokenizer: documents are tokenized and joined with
the end-of-text token into a pool of about `pool_factor x n_tokens` tokens, cut into
windows of `seq_len`, and `ceil(n_tokens / seq_len)` windows are drawn without
replacement with a fixed seed. Every checkpoint of every model sharing that tokenizer
reads the same file, identified by the SHA-256 of its tokens.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from lmsat.core.io import atomic_path
from lmsat.errors import CorpusError, StagingMissing

log = logging.getLogger(__name__)

# The last line of a staged corpus (lmsat.planning.staging.stage_corpus): {"lmsat_staged": {...}}.
FOOTER_KEY = "lmsat_staged"


def corpus_inputs(spec: dict) -> list[str]:
    """Files a corpus reads (what a Snakemake rule must wait for). A synthetic corpus is the
    split that rule build_synthetic_language writes into the run's directory, which the
    workflow puts in its spec (workflow/rules/common.smk)."""
    if spec["type"] in ("synthetic", "text_files"):
        return list(spec["files"])
    return []


MAX_DOCUMENT_BYTES = 16_000_000  # schema default of corpora.<name>.max_document_bytes


def _too_long(where: str, name: str, limit: int) -> CorpusError:
    return CorpusError(
        f"{where}: a document longer than {limit} bytes (corpora.{name}.max_document_bytes); it is not read "
        "whole (tokenizing it would need ~100x its size in memory). Fix: split the document into lines "
        f"(.txt: one document per line), or raise corpora.{name}.max_document_bytes with the job's memory"
    )


def _lines(path: str, limit: int, name: str) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line, read `limit` bytes at a time: a longer line is
    refused after its first `limit` bytes, never read whole."""
    with open(path, "rb") as handle:
        number = 0
        while line := handle.readline(limit + 1):
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise _too_long(f"{path}:{number}", name, limit)
            yield number, line


def _read_text_file(path: str, text_field: str, name: str = "corpus", limit: int = MAX_DOCUMENT_BYTES) -> Iterator[str]:
    for number, raw in _lines(path, limit, name):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CorpusError(
                f"{path}:{number}: not valid UTF-8 ({error.reason} at byte {error.start} of the line). "
                "Fix: re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8) or remove the line"
            ) from None
        if path.endswith(".jsonl"):
            if not line.strip():
                continue
            try:
                line = json.loads(line)[text_field]
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise CorpusError(
                    f"{path}:{number}: not a JSON object with field {text_field!r} ({type(error).__name__}: {error})"
                ) from None
            if not isinstance(line, str):
                raise CorpusError(
                    f"{path}:{number}: field {text_field!r} holds {type(line).__name__} {str(line)[:40]!r}, not a "
                    f"string. Fix: give every line a string {text_field!r}, or set corpora.{name}.text_field"
                )
        if line.strip():
            yield line.rstrip("\r\n")


def iter_documents(spec: dict, name: str = "corpus", policy=None, sleep=time.sleep) -> Iterator[str]:
    """Documents of a corpus, in a fixed order. `policy` (lmsat.core.retry.RetryPolicy): how a
    hub dataset retries transient faults (`hf_documents`). A spec with `staged` (set by the
    workflow for hub datasets) reads the prefix a staging job wrote there instead
    (`staged_documents`), the same documents in the same order, without network."""
    if spec.get("staged"):
        yield from staged_documents(spec["staged"], name)
        return
    if spec["type"] == "hf":
        yield from hf_documents(spec, name, policy, sleep)
        return
    for path in corpus_inputs(spec):
        yield from _read_text_file(path, spec["text_field"], name, spec.get("max_document_bytes", MAX_DOCUMENT_BYTES))


def staged_documents(path, name: str):
    """Documents of staged corpus `name` (from lmsat.planning.staging.stage_corpus), in stream order. Reading past
    the end of a cut prefix raises: the job would otherwise see a shorter corpus."""
    if not os.path.exists(path):
        raise StagingMissing(f"corpus {name}", path, "stage_corpus")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusError(f"staged corpus {path}:{number} is not JSON ({error}); delete it and rerun staging")
            if FOOTER_KEY in row:
                footer = row[FOOTER_KEY]
                if footer["complete"]:
                    return
                raise CorpusError(
                    f"corpus {name}: a job read past the {footer['documents']} documents staged in {path}, "
                    f"more than staging planned for ({footer['consumers']}); delete {path} and rerun staging"
                )
            yield row["text"]
    raise CorpusError(f"staged corpus {path} has no end marker (cut short?); delete it and rerun staging")


def hf_documents(spec: dict, name: str, policy, sleep) -> Iterator[str]:
    """Texts of a `datasets` split. A transient fault (connection, timeout, 5xx) while
    loading or streaming it is retried with backoff: the split is opened again and the
    rows already read are skipped, so the documents come out once each, in order. The
    count of tries starts again whenever rows were read since the last fault."""
    import datasets

    from lmsat.core.retry import RetryPolicy, is_transient, retry_wait

    policy = policy or RetryPolicy()
    done, failures, done_at_failure = 0, 0, -1
    while True:
        try:
            dataset = datasets.load_dataset(
                spec["path"],
                spec["name"] or None,
                split=spec["split"],
                streaming=spec["streaming"],
                data_files=spec.get("data_files") or None,
            )
            for row in dataset.skip(done) if done else dataset:
                if spec["text_field"] not in row:
                    raise CorpusError(
                        f"corpus {name}: rows have no field {spec['text_field']!r} (fields: {sorted(row)})"
                    )
                text = row[spec["text_field"]]
                if not isinstance(text, str):
                    raise CorpusError(
                        f"corpus {name}: row {done} of {spec['path']}: field {spec['text_field']!r} holds "
                        f"{type(text).__name__}, not a string. Fix: set corpora.{name}.text_field to a text field"
                    )
                limit = spec.get("max_document_bytes", MAX_DOCUMENT_BYTES)
                if len(text) > limit // 4 and len(text.encode("utf-8")) > limit:
                    raise _too_long(f"corpus {name}: row {done} of {spec['path']}", name, limit)
                yield text
                done += 1
            return
        except CorpusError:
            raise
        except Exception as error:  # datasets raises many types; name the corpus in all of them
            failures = failures + 1 if done == done_at_failure else 1
            done_at_failure = done
            wait = retry_wait(error, failures, policy, what=f"corpus {name}: reading {spec['path']} after {done} rows")
            if wait is None:
                tries = f" (try {failures} of {policy.attempts})" if is_transient(error) else ""
                raise CorpusError(
                    f"cannot load dataset {spec['path']} for corpus {name} after {done} rows{tries}: {error}"
                ) from error
            sleep(wait)


def _pool_pieces(documents: Iterator[str], tokenizer, n_pool: int, max_documents: int = 0) -> Iterator[np.ndarray]:
    """Each document's ids and an end-of-text, up to the document that brings the total to
    `n_pool` (or the `max_documents`-th): the pieces of build_token_pool. # each (n_i,) int64"""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise CorpusError("the tokenizer has no eos_token_id to separate documents")
    total = 0
    for count, text in enumerate(documents, 1):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        yield np.asarray(ids + [eos], dtype=np.int64)
        total += len(ids) + 1
        if total >= n_pool or (max_documents and count >= max_documents):
            return


def build_token_pool(documents: Iterator[str], tokenizer, n_pool: int, max_documents: int = 0, corpus: str = "") -> np.ndarray:
    """About `n_pool` tokens of whole documents joined with end-of-text (`corpus`: its
    name in config['corpora'], for errors). # (n,) int32"""
    pieces = list(_pool_pieces(documents, tokenizer, n_pool, max_documents))
    if not pieces:
        where = f"corpus {corpus} (config key 'corpora.{corpus}')" if corpus else "the corpus"
        raise CorpusError(f"{where} has no documents; point it at files or a dataset split with text")
    pool = np.concatenate(pieces)
    if pool.max() >= np.iinfo(np.int32).max:
        raise CorpusError("token ids do not fit int32")
    return pool.astype(np.int32)


def draw_windows(pool: np.ndarray, n_tokens: int, seq_len: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """ceil(n_tokens/seq_len) random non-overlapping windows. -> tokens (n_seq, seq_len), starts (n_seq,)"""
    n_seq = math.ceil(n_tokens / seq_len)
    n_windows = len(pool) // seq_len
    if n_windows < n_seq:
        raise CorpusError(
            f"the corpus gave {len(pool)} tokens, fewer than the {n_seq * seq_len} that "
            f"sample.n_tokens={n_tokens} needs; lower sample.n_tokens or use a larger corpus"
        )
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(n_windows, size=n_seq, replace=False)) * seq_len
    tokens = np.stack([pool[s : s + seq_len] for s in starts])
    return tokens, starts


def tokens_sha256(tokens: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(tokens, dtype=np.int32).tobytes()).hexdigest()


def write_sample(path: str | Path, tokens: np.ndarray, starts: np.ndarray, attrs: dict) -> str:
    """Write the sample atomically; returns its SHA-256."""
    digest = tokens_sha256(tokens)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("tokens", data=tokens.astype(np.int32))
        f.create_dataset("starts", data=starts.astype(np.int64))
        f.attrs.update({**attrs, "sha256": digest, "n_seq": tokens.shape[0], "seq_len": tokens.shape[1]})
    return digest


def read_sample(path: str | Path) -> tuple[np.ndarray, dict]:
    """Tokens (n_seq, seq_len) and attributes, checked against the recorded hash."""
    try:
        with h5py.File(path, "r") as f:
            tokens = f["tokens"][...]
            attrs = dict(f.attrs)
    except (OSError, KeyError) as error:
        raise CorpusError(f"token sample {path} is unreadable or incomplete ({error}); delete it and rerun") from error
    if tokens_sha256(tokens) != attrs.get("sha256"):
        raise CorpusError(f"token sample {path} does not match its recorded sha256; delete it and rerun")
    return tokens, attrs


def build_sample(corpus_spec: dict, corpus_name: str, tokenizer, tokenizer_name: str, sample: dict, seed: int, path) -> str:
    """Build and write the eval token sample of (corpus, tokenizer); returns its SHA-256."""
    n_pool = sample["pool_factor"] * sample["n_tokens"]
    docs = iter_documents(corpus_spec, corpus_name)
    pool = build_token_pool(docs, tokenizer, n_pool, corpus_spec["max_documents"], corpus=corpus_name)
    if pool.max() >= len(tokenizer):
        raise CorpusError(f"tokenizer {tokenizer_name} produced id {pool.max()} >= its size {len(tokenizer)}")
    tokens, starts = draw_windows(pool, sample["n_tokens"], sample["seq_len"], seed)
    attrs = dict(corpus=corpus_name, tokenizer=tokenizer_name, seed=seed, pool_tokens=len(pool))
    digest = write_sample(path, tokens, starts, attrs)
    log.info("sample %s: %d x %d tokens from a pool of %d (sha256 %s)", path, *tokens.shape, len(pool), digest[:12])
    return digest


# ---------------------------------------------------------------- the sample of a user's text

SAMPLE_MAX_TOKENS = 50_000  # the paper's eval sample: the most a text sample takes unless asked
SAMPLE_MAX_SEQ_LEN = 2048  # the paper's sequences: the longest unless asked (or the context is shorter)
SAMPLE_MIN_SEQ_LEN = 16  # a short text's sequences are halved down to this, no further
SAMPLE_POOL_FACTOR = 20  # schema default of sample.pool_factor
CONFIG_OPTIONS = {"n_tokens": "sample.n_tokens: {}", "seq_len": "sample.seq_len: {}"}  # how a config sets them


@dataclass(frozen=True)
class SampleSize:
    """The size of an eval sample of a text: `n_tokens` (rounded up to whole sequences when
    drawn) in sequences of `seq_len`; `pool_tokens` the tokens of the text it is drawn from
    (read up to pool_factor x n_tokens), `windows` the seq_len-token windows they hold;
    `how` says how each value was chosen, for the user to read."""

    n_tokens: int
    seq_len: int
    pool_tokens: int
    windows: int
    how: str

    @property
    def n_seq(self) -> int:
        return math.ceil(self.n_tokens / self.seq_len)

    def describe(self) -> str:
        return (f"eval sample of {self.n_seq} sequences of {self.seq_len} tokens ({self.n_seq * self.seq_len:,}), drawn "
                f"from {self.windows} windows of the text's first {self.pool_tokens:,} tokens. {self.how[0].upper()}{self.how[1:]}")


def document_lengths(documents: Iterator[str], tokenizer, n_pool: int) -> np.ndarray:
    """Tokens of each document in a pool of `n_pool` tokens as build_token_pool joins them
    (its ids and an end-of-text), up to the document that reaches n_pool. # (n_docs,) int64"""
    return np.asarray([len(piece) for piece in _pool_pieces(documents, tokenizer, n_pool)], dtype=np.int64)


def pool_tokens(lengths: np.ndarray, n_pool: int) -> int:
    """Tokens of the pool build_token_pool reads for `n_pool`: whole documents up to the first
    total of n_pool or more, or all of them."""
    total = np.cumsum(lengths)
    return int(total[min(int(np.searchsorted(total, n_pool)), len(total) - 1)]) if len(total) else 0


def choose_sample_size(lengths: np.ndarray, context: tuple[str, int] | None, *, n_tokens: int | None = None,
                       seq_len: int | None = None, pool_factor: int = SAMPLE_POOL_FACTOR, options: dict = CONFIG_OPTIONS,
                       where: str = "the text", model: str = "the model") -> SampleSize:
    """The eval sample a text (its documents' token counts, `lengths`, read up to pool_factor
    x the largest sample asked) gives a model of `context` ((field, positions) of its
    config.json, lmsat.checkpoints.loading.context_length; None: unstated). What is not given is chosen:

    - seq_len: SAMPLE_MAX_SEQ_LEN capped at the context, halved (down to SAMPLE_MIN_SEQ_LEN)
      while the text gives fewer than 4 windows;
    - n_tokens: half the text's windows (the other half keeps the draw a random one), at
      most SAMPLE_MAX_TOKENS.

    The one rule of `lmsat init` (the workflow's config), `lmsat analyse --text` and
    lmsat.SaturationCallback: the same text and model give the same sample in all
    three. A given value that the text or the model cannot serve is a CorpusError naming
    it as the user sets it (`options`: "n_tokens" and "seq_len" -> the option's spelling
    with {} for a value: "n_tokens={}", "--n-tokens {}", "sample.n_tokens: {}")."""
    def option(name, value):
        return options[name].format(value)

    limit = context[1] if context else None
    stated = f" ({context[0]}={context[1]})" if context else ""
    if seq_len is not None:
        if seq_len < 2:
            raise CorpusError(f"a sequence length of {seq_len} tokens predicts nothing. Fix: {option('seq_len', 2)} or more")
        if limit and seq_len > limit:
            raise CorpusError(
                f"{option('seq_len', seq_len)} exceeds the context of {model}{stated}: positions past it would give "
                f"wrong losses, without an error. Fix: {option('seq_len', limit)} or less"
            )
    if n_tokens is not None and n_tokens < 1:
        raise CorpusError(f"{option('n_tokens', n_tokens)}: a sample needs at least one token. Fix: "
                          f"{option('n_tokens', 1)} or more, or leave it out")
    text_tokens = pool_tokens(lengths, pool_factor * SAMPLE_MAX_TOKENS)
    how, chosen = [], []
    if seq_len is None:
        chosen.append(option("seq_len", "L"))
        seq_len = min(SAMPLE_MAX_SEQ_LEN, limit or SAMPLE_MAX_SEQ_LEN)
        how.append(f"sequences of {seq_len}: the paper's 2048" if seq_len == SAMPLE_MAX_SEQ_LEN else
                   f"sequences of {seq_len}: the paper's 2048 capped at the context of {model}{stated}")
        longest = seq_len
        while seq_len > SAMPLE_MIN_SEQ_LEN and text_tokens // seq_len < 4:
            seq_len //= 2
        if seq_len < longest:
            how[-1] = f"sequences of {seq_len}: the longest of which the text gives 4 windows"
        shorter = ""
    else:
        how.append(f"sequences of {seq_len}: {option('seq_len', seq_len)}")
        shorter = f", or shorter sequences ({option('seq_len', max(2, text_tokens // 2))} or less)"
    windows = text_tokens // seq_len
    if windows < 2:
        raise CorpusError(
            f"{where} gives {text_tokens:,} tokens, too few for an eval sample of two {seq_len}-token sequences "
            f"(the verdict compares sequences: it needs two at least). Fix: give more text{shorter}"
        )
    default = min(SAMPLE_MAX_TOKENS, (windows // 2) * seq_len)
    if n_tokens is None:
        chosen.insert(0, option("n_tokens", "N"))
        n_tokens, drawn = default, pool_tokens(lengths, pool_factor * default)
        how.append(f"{n_tokens:,} tokens: the paper's 50,000" if n_tokens == SAMPLE_MAX_TOKENS else
                   f"{n_tokens:,} tokens: half the text's {windows} windows (at most 50,000)")
    else:
        drawn = pool_tokens(lengths, pool_factor * n_tokens)
        if drawn // seq_len < math.ceil(n_tokens / seq_len):
            raise CorpusError(
                f"{where} gives {drawn:,} tokens: {drawn // seq_len} windows of {seq_len}, fewer than the "
                f"{math.ceil(n_tokens / seq_len)} sequences that {option('n_tokens', n_tokens)} needs. Fix: "
                f"{option('n_tokens', default)} or less (left out, the sample is {default:,} tokens: half the text's "
                "windows), or more text"
            )
        how.append(f"{n_tokens:,} tokens: {option('n_tokens', n_tokens)}")
    if chosen:
        how.append(f"{' and '.join(chosen)} {'set' if len(chosen) > 1 else 'sets'} another")
    return SampleSize(n_tokens, seq_len, drawn, drawn // seq_len, "; ".join(how))


def text_sample_size(files, tokenizer, context: tuple[str, int] | None, *, n_tokens: int | None = None,
                     seq_len: int | None = None, pool_factor: int = SAMPLE_POOL_FACTOR, options: dict = CONFIG_OPTIONS,
                     model: str = "the model", max_document_bytes: int = MAX_DOCUMENT_BYTES) -> SampleSize:
    """choose_sample_size on text files (.txt a document per line, .jsonl its "text" field, as
    a `text_files` corpus reads them) tokenized by `tokenizer` (a transformers tokenizer).
    Reads pool_factor x (the largest sample it could choose or is asked) tokens at most."""
    spec = dict(type="text_files", files=[str(f) for f in files], text_field="text",
                max_document_bytes=max_document_bytes)
    n_pool = pool_factor * max(SAMPLE_MAX_TOKENS, n_tokens or 0)
    lengths = document_lengths(iter_documents(spec, "text"), tokenizer, n_pool)
    where = f"the text {', '.join(str(f) for f in files)}"
    if not len(lengths):
        raise CorpusError(f"{where} has no documents (no line with text). Fix: give a file of text, one document a line")
    return choose_sample_size(lengths, context, n_tokens=n_tokens, seq_len=seq_len, pool_factor=pool_factor,
                              options=options, where=where, model=model)
