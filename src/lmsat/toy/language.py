"""A synthetic language whose next-token distributions are known exactly and have high rank.

The default pipeline trains its own tiny model suite on this language, so that it runs on a
laptop with no GPU and no network, and so that the quantities the paper can only estimate
(the true next-token matrix, its rank, the entropy rate) are known here.

The language is a Markov chain on *context buckets*. With V words, order k and G groups,
the bucket at position t is

    c_t = x_{t-1} + V * (g(x_{t-2}) + G * g(x_{t-3}) + ... + G^(k-2) * g(x_{t-k}))

so there are C = V * G^(k-1) buckets, and c_{t+1} is a function of (c_t, x_t). Each bucket
has its own sparse Zipf-weighted distribution over `support` tokens (a row of the C x V
matrix `transitions`), drawn with a global Zipf popularity, so the unigram distribution is
Zipf-like too while the matrix has rank ~V. The bucket chain's stationary distribution and
the entropy rate are computed exactly.

    lang = build_language(LanguageSpec())
    tokens, nll = lang.sample(100_000, np.random.default_rng(0))
    nll.mean(), lang.entropy_rate   # close
    write_corpus(lang, "corpus.txt", n_tokens=2_000_000, doc_tokens=256, seed=0)
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

FILE_FORMAT = "lmsat.toy.language.Language"
FILE_VERSION = 1
STATIONARY_TOL = 1e-12  # L1 residual ||pi T - pi||_1 at which power iteration stops
CONSONANTS = "bdfghjklmnprstvz"
VOWELS = "aeiou"


@dataclass(frozen=True)
class LanguageSpec:
    # Defaults tuned with benchmarks/toy_suite.py: C = 512 * 4 = 2048 contexts, true matrix
    # rank 512 >> d = 16..128 (a rank-16 softmax cannot get within 0.5 nat of the entropy
    # rate), yet 2-layer models learn it in ~2 CPU-minutes for the four of them.
    vocab_size: int = 512  # V pseudo-words (token ids 0..V-1, most popular first)
    order: int = 2  # k: the next-token distribution depends on the previous k tokens
    groups: int = 4  # G: tokens older than x_{t-1} enter only through their group id
    support: int = 32  # s: non-zero next tokens per context
    zipf_exponent: float = 1.1  # a: weights within a support ~ rank^-a; also global popularity
    seed: int = 0  # seeds words, groups, supports and weights

    def __post_init__(self):
        checks = [
            ("vocab_size", self.vocab_size >= 2, "at least 2"),
            ("order", self.order >= 1, "at least 1"),
            ("groups", 1 <= self.groups <= self.vocab_size, "between 1 and vocab_size"),
            ("support", 1 <= self.support <= self.vocab_size, "between 1 and vocab_size"),
            ("zipf_exponent", self.zipf_exponent >= 0, "non-negative"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"LanguageSpec.{name}={getattr(self, name)!r}: must be {want}")

    @property
    def n_contexts(self) -> int:
        """C = V * G^(k-1): the number of context buckets."""
        return self.vocab_size * self.n_histories

    @property
    def n_histories(self) -> int:
        """G^(k-1): the number of group histories (older tokens) per last token."""
        return self.groups ** (self.order - 1)


@dataclass(eq=False)
class Language:
    spec: LanguageSpec
    words: list[str]  # (V,) the word of each token id
    group: np.ndarray  # (V,) int64 group id of each token
    transitions: scipy.sparse.csr_matrix  # (C, V) float64, row c = P(x_t | c_t = c)
    stationary: np.ndarray  # (C,) stationary distribution of the bucket chain
    entropy_rate: float  # nats/token = sum_c pi_c H(P_c)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def n_contexts(self) -> int:
        return self.spec.n_contexts

    def next_bucket(self, bucket, token):
        """Bucket after emitting `token` from `bucket` (arrays broadcast)."""
        return _next_bucket(np.asarray(bucket), np.asarray(token), self.group, self.spec)

    def contexts(self, tokens) -> np.ndarray:
        """Bucket ids predicting tokens[k:], i.e. c_t for t = k..n-1; shape (n - k,).

        `transitions[contexts(tokens), tokens[k:]]` are the true probabilities.
        """
        tokens = np.asarray(tokens, dtype=np.int64)
        k, V, G = self.spec.order, self.spec.vocab_size, self.spec.groups
        n = len(tokens)
        if n <= k:
            return np.zeros(0, dtype=np.int64)
        buckets = tokens[k - 1 : n - 1].copy()  # x_{t-1}
        scale = V
        for lag in range(2, k + 1):  # x_{t-lag} enters through its group
            buckets += scale * self.group[tokens[k - lag : n - lag]]
            scale *= G
        return buckets

    def token_nll(self, buckets, tokens) -> np.ndarray:
        """True -log P(token | bucket), elementwise (inf where the probability is 0)."""
        probs = np.asarray(self.transitions[np.asarray(buckets), np.asarray(tokens)]).ravel()
        with np.errstate(divide="ignore"):
            return -np.log(probs)

    def sample(self, n_tokens: int, rng: np.random.Generator, start: int | None = None):
        """One chain of n_tokens tokens: (tokens int32 (n,), nll float64 (n,)).

        The chain starts in bucket `start`, or in a bucket drawn from the stationary
        distribution; nll[t] = -log P(x_t | c_t), the true loss of each token.
        """
        if start is None:
            start = int(rng.choice(self.n_contexts, p=self.stationary))
        if not 0 <= start < self.n_contexts:
            raise ValueError(f"start={start}: must be a bucket id in [0, {self.n_contexts})")
        cdf_rows, next_rows = self._row_lists
        uniforms = rng.random(n_tokens).tolist()
        buckets = [0] * n_tokens
        slots = [0] * n_tokens
        bucket = start
        for t, u in enumerate(uniforms):  # sequential by nature; kept to C-level calls
            slot = bisect.bisect_right(cdf_rows[bucket], u)
            buckets[t] = bucket
            slots[t] = slot
            bucket = next_rows[bucket][slot]
        flat = self.transitions.indptr[np.asarray(buckets)] + np.asarray(slots)
        tokens = self.transitions.indices[flat].astype(np.int32)
        nll = -np.log(self.transitions.data[flat])
        return tokens, nll

    def sample_chains(self, n_chains: int, n_tokens: int, rng: np.random.Generator):
        """n_chains independent stationary chains: (tokens int32 (m, n), nll float64 (m, n))."""
        cdf, tok, logp = self._padded_rows
        bucket = rng.choice(self.n_contexts, size=n_chains, p=self.stationary)  # (m,)
        tokens = np.empty((n_chains, n_tokens), dtype=np.int32)
        nll = np.empty((n_chains, n_tokens), dtype=np.float64)
        for t in range(n_tokens):  # vectorised across chains
            u = rng.random(n_chains)
            slot = (cdf[bucket] <= u[:, None]).sum(axis=1)  # bisect_right, as in sample()
            tokens[:, t] = tok[bucket, slot]
            nll[:, t] = -logp[bucket, slot]
            bucket = self.next_bucket(bucket, tokens[:, t].astype(np.int64))
        return tokens, nll

    @property
    def _row_lists(self):
        """Per-bucket cumulative probabilities and next buckets, as Python lists."""
        if "rows" not in self._cache:
            P = self.transitions
            cdf, nxt = [], []
            for c in range(P.shape[0]):
                lo, hi = P.indptr[c], P.indptr[c + 1]
                cum = np.cumsum(P.data[lo:hi])
                cum[-1] = 1.0  # u < 1 never falls past the last slot
                cdf.append(cum.tolist())
                nxt.append(self.next_bucket(c, P.indices[lo:hi].astype(np.int64)).tolist())
            self._cache["rows"] = (cdf, nxt)
        return self._cache["rows"]

    @property
    def _padded_rows(self):
        """(C, s_max) cdf (padded with 2.0), tokens, log-probs, for vectorised sampling."""
        if "padded" not in self._cache:
            P = self.transitions
            lengths = np.diff(P.indptr)
            width = int(lengths.max())
            cdf = np.full((P.shape[0], width), 2.0)
            tok = np.zeros((P.shape[0], width), dtype=np.int64)
            logp = np.zeros((P.shape[0], width))
            cdf_rows, _ = self._row_lists
            for c in range(P.shape[0]):
                lo, hi = P.indptr[c], P.indptr[c + 1]
                cdf[c, : hi - lo] = cdf_rows[c]
                tok[c, : hi - lo] = P.indices[lo:hi]
                logp[c, : hi - lo] = np.log(P.data[lo:hi])
            self._cache["padded"] = (cdf, tok, logp)
        return self._cache["padded"]


def _next_bucket(bucket, token, group, spec: LanguageSpec):
    V, G, M = spec.vocab_size, spec.groups, spec.n_histories
    history = (group[bucket % V] + G * (bucket // V)) % M  # shift in g(x_{t-1}), drop oldest
    return token + V * history


def make_words(vocab_size: int, rng: np.random.Generator) -> list[str]:
    """Unique lowercase CV-syllable pseudo-words; earlier (more popular) ids are shorter."""
    syllables = [c + v for c in CONSONANTS for v in VOWELS]  # 80
    words: list[str] = []
    n_syll = 1
    while len(words) < vocab_size:
        population = len(syllables) ** n_syll
        need = min(vocab_size - len(words), population)
        if population <= 1_000_000:
            codes = rng.permutation(population)[:need]
        else:  # too many to enumerate: draw codes until enough are distinct
            codes = np.zeros(0, dtype=np.int64)
            while len(codes) < need:
                extra = rng.integers(0, population, size=2 * need)
                codes = np.unique(np.concatenate([codes, extra]))
            codes = rng.permutation(codes)[:need]
        for code in codes.tolist():
            parts = []
            for _ in range(n_syll):
                code, digit = divmod(code, len(syllables))
                parts.append(syllables[digit])
            words.append("".join(parts))
        n_syll += 1
    return words


def _supports(spec: LanguageSpec, group: np.ndarray, rng: np.random.Generator):
    """(C, s) token ids of each context's support, in decreasing weight order.

    Tokens are drawn without replacement with probability ~ popularity (Gumbel top-k), which
    makes the unigram distribution Zipf-like. To make every bucket reachable, each context
    first gets a "coverage" token: for every history class h (the group history a bucket
    gets after leaving this context), the V tokens are dealt out over the contexts of class
    h, so each bucket (x, h) has an incoming edge.
    """
    V, s, C = spec.vocab_size, spec.support, spec.n_contexts
    contexts = np.arange(C)
    history_class = _next_bucket(contexts, np.zeros(C, dtype=np.int64), group, spec) // V
    forced = [[] for _ in range(C)]
    for h in range(spec.n_histories):
        members = rng.permutation(np.flatnonzero(history_class == h))
        for i, token in enumerate(rng.permutation(V).tolist()):
            forced[members[i % len(members)]].append(token)
    if max(len(f) for f in forced) > s:
        raise ValueError(
            f"LanguageSpec.support={s} is too small to reach every bucket: it must be at "
            f"least {max(len(f) for f in forced)} (or use more groups)"
        )
    log_popularity = -spec.zipf_exponent * np.log(np.arange(1, V + 1))  # (V,)
    supports = np.empty((C, s), dtype=np.int64)
    chunk = max(1, 4_000_000 // V)
    for lo in range(0, C, chunk):
        hi = min(C, lo + chunk)
        keys = log_popularity + rng.gumbel(size=(hi - lo, V))  # (chunk, V)
        chosen = keys.copy()
        for c in range(lo, hi):
            chosen[c - lo, forced[c]] = np.inf  # always selected ...
        top = np.argpartition(-chosen, s - 1, axis=1)[:, :s]  # (chunk, s)
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)  # ... ranked by key
        supports[lo:hi] = np.take_along_axis(top, order, axis=1)
    return supports


def _stationary(transitions: scipy.sparse.csr_matrix, spec: LanguageSpec, group: np.ndarray):
    """Exact stationary distribution of the bucket chain (raises if it is not ergodic)."""
    C = spec.n_contexts
    rows = np.repeat(np.arange(C), np.diff(transitions.indptr))
    cols = _next_bucket(rows, transitions.indices.astype(np.int64), group, spec)
    chain = scipy.sparse.csr_matrix((transitions.data, (rows, cols)), shape=(C, C))  # (C, C)
    n_comp, _ = scipy.sparse.csgraph.connected_components(chain, connection="strong")
    if n_comp != 1:
        raise ValueError(
            f"{spec}: the bucket chain has {n_comp} strongly connected components, so it "
            "is not ergodic; use a larger support or another seed"
        )
    if _period(chain) != 1:
        raise ValueError(f"{spec}: the bucket chain is periodic; use another seed")
    chain_t = chain.T.tocsr()
    pi = np.full(C, 1.0 / C)
    for _ in range(100_000):
        new = chain_t @ pi
        new /= new.sum()
        residual = np.abs(new - pi).sum()
        pi = new
        if residual < STATIONARY_TOL:
            return pi
    raise ValueError(f"{spec}: power iteration did not converge (residual {residual:.2e})")


def _period(chain: scipy.sparse.csr_matrix) -> int:
    """Period of an irreducible chain: gcd over edges u->v of level(u) + 1 - level(v)."""
    levels, pred = scipy.sparse.csgraph.breadth_first_order(chain, 0, return_predecessors=True)
    depth = np.zeros(chain.shape[0], dtype=np.int64)
    for node in levels[1:]:
        depth[node] = depth[pred[node]] + 1
    coo = chain.tocoo()
    return int(np.gcd.reduce(np.abs(depth[coo.row] + 1 - depth[coo.col])))


def _entropy_rate(transitions: scipy.sparse.csr_matrix, stationary: np.ndarray) -> float:
    P = transitions
    plogp = P.data * np.log(P.data)
    rows = np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
    row_entropy = -np.bincount(rows, weights=plogp, minlength=P.shape[0])  # (C,)
    return float(stationary @ row_entropy)


def build_language(spec: LanguageSpec = LanguageSpec()) -> Language:
    """Draw the language of `spec` (deterministic given spec.seed)."""
    rng = np.random.default_rng(spec.seed)
    V, s, C = spec.vocab_size, spec.support, spec.n_contexts
    words = make_words(V, rng)
    group = rng.permutation(V) % spec.groups  # balanced groups, (V,)
    supports = _supports(spec, group, rng)  # (C, s)
    # Each context its own Zipf exponent (a * U(0.5, 1.5)), so row entropies differ and the
    # entropy rate depends on the stationary distribution.
    exponents = spec.zipf_exponent * rng.uniform(0.5, 1.5, size=(C, 1))
    weights = np.arange(1, s + 1) ** -exponents  # (C, s)
    weights /= weights.sum(axis=1, keepdims=True)
    order = np.argsort(supports, axis=1)  # CSR wants sorted column indices
    indices = np.take_along_axis(supports, order, axis=1)
    data = np.take_along_axis(weights, order, axis=1)
    transitions = scipy.sparse.csr_matrix(
        (data.ravel(), indices.ravel().astype(np.int32), np.arange(0, C * s + 1, s)),
        shape=(C, V),
    )
    stationary = _stationary(transitions, spec, group)
    return Language(
        spec=spec,
        words=words,
        group=group.astype(np.int64),
        transitions=transitions,
        stationary=stationary,
        entropy_rate=_entropy_rate(transitions, stationary),
    )


def save_language(lang: Language, path) -> None:
    """Write `lang` to an HDF5 file (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FILE_FORMAT
            f.attrs["version"] = FILE_VERSION
            for key, value in dataclasses.asdict(lang.spec).items():
                f.attrs[f"spec.{key}"] = value
            f.attrs["entropy_rate"] = lang.entropy_rate
            f.create_dataset("words", data=np.array(lang.words, dtype=h5py.string_dtype("ascii")))
            f.create_dataset("group", data=lang.group)
            f.create_dataset("transitions/data", data=lang.transitions.data)
            f.create_dataset("transitions/indices", data=lang.transitions.indices)
            f.create_dataset("transitions/indptr", data=lang.transitions.indptr)
            f["transitions"].attrs["shape"] = lang.transitions.shape
            f.create_dataset("stationary", data=lang.stationary)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_language(path, spec: LanguageSpec | None = None) -> Language:
    """Read a language written by save_language; if `spec` is given, the file must match it."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FILE_FORMAT:
                raise ValueError(f"{path}: not an lmsat synthetic language file")
            if f.attrs.get("version") != FILE_VERSION:
                raise ValueError(
                    f"{path}: format version {f.attrs.get('version')}, expected "
                    f"{FILE_VERSION}; rebuild it with build_language + save_language"
                )
            stored = LanguageSpec(
                **{
                    fld.name: (float if fld.type == "float" else int)(f.attrs[f"spec.{fld.name}"])
                    for fld in dataclasses.fields(LanguageSpec)
                }
            )
            words = [w.decode() if isinstance(w, bytes) else w for w in f["words"][()]]
            group = f["group"][()].astype(np.int64)
            transitions = scipy.sparse.csr_matrix(
                (
                    f["transitions/data"][()],
                    f["transitions/indices"][()],
                    f["transitions/indptr"][()],
                ),
                shape=tuple(f["transitions"].attrs["shape"]),
            )
            stationary = f["stationary"][()]
            entropy_rate = float(f.attrs["entropy_rate"])
    except (OSError, KeyError, TypeError) as err:
        raise ValueError(
            f"{path}: unreadable or corrupt language file ({err}); delete it and rebuild it "
            "with build_language + save_language"
        ) from err
    if spec is not None and stored != spec:
        diffs = [
            f"{fld.name}={getattr(stored, fld.name)!r} (wanted {getattr(spec, fld.name)!r})"
            for fld in dataclasses.fields(LanguageSpec)
            if getattr(stored, fld.name) != getattr(spec, fld.name)
        ]
        raise ValueError(f"{path}: built from another spec: {', '.join(diffs)}; rebuild it")
    C, V = stored.n_contexts, stored.vocab_size
    consistent = (
        len(words) == V
        and group.shape == (V,)
        and transitions.shape == (C, V)
        and stationary.shape == (C,)
        and np.allclose(np.asarray(transitions.sum(axis=1)).ravel(), 1.0)
    )
    if not consistent:
        raise ValueError(f"{path}: arrays inconsistent with its spec {stored}; rebuild it")
    return Language(stored, words, group, transitions, stationary, entropy_rate)


def write_corpus(lang: Language, path, n_tokens: int, doc_tokens: int, seed: int) -> dict:
    """Write ceil(n_tokens / doc_tokens) documents, one per line, words separated by spaces.

    Each document is an independent stationary chain run of doc_tokens tokens. Returns
    {"n_docs", "n_tokens", "mean_nll"} (mean true nll of the written tokens, nats).
    """
    if n_tokens < 1 or doc_tokens < 1:
        raise ValueError(f"n_tokens={n_tokens}, doc_tokens={doc_tokens}: both must be >= 1")
    path = Path(path)
    n_docs = -(-n_tokens // doc_tokens)
    rng = np.random.default_rng(seed)
    tokens, nll = lang.sample_chains(n_docs, doc_tokens, rng)  # (n_docs, doc_tokens)
    words = np.array(lang.words, dtype=object)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as out:
            for doc in tokens:
                out.write(" ".join(words[doc]) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"n_docs": n_docs, "n_tokens": int(tokens.size), "mean_nll": float(nll.mean())}


def entropy_rate_of(language_path) -> float | None:
    """The synthetic language's entropy rate, or None without a language file."""
    if not language_path:
        return None
    return float(load_language(language_path).entropy_rate)
