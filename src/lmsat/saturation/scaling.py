"""Saturation measured against a Chinchilla-style scaling law (Godey et al. 2024, section 3).

    L(N, T) = A / N^alpha + B / T^beta + E

with the data terms fixed to Hoffmann et al.'s values (B = 410.7, beta = 0.28, E = 1.69)
and only the model terms A, alpha fitted, on checkpoints of the larger models (the paper
uses Pythia >= 410M and finds A = 119.09, alpha = 0.246). Smaller models are then compared
with the extrapolation: `shortfall` is how far (in %) their loss sits above it.

    fit = fit_scaling_law(points, min_params=3e8)       # columns n_params, tokens, loss
    predicted = fit.predict(points["n_params"], points["tokens"])
    gap = shortfall(points["loss"], predicted)          # % above the law, > 0 = worse
    n = count_parameters(GPTNeoXConfig.from_pretrained(...), kind="non_embedding")
    fit_row, table = scaling_tables(best_final, sizes, config["scaling"])   # Fig. 1b's tables
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.stats

# Hoffmann et al. (2022), eq. (10): the data-dependent constants the paper keeps fixed.
HOFFMANN_B = 410.7
HOFFMANN_BETA = 0.28
HOFFMANN_E = 1.69
# Pythia-410M has 302M non-embedding / 405M total parameters and Pythia-160M 85M / 162M:
# 3e8 keeps 410M and drops 160M whichever count is used.
DEFAULT_MIN_PARAMS = 3e8
REQUIRED_COLUMNS = ("n_params", "tokens", "loss")


@dataclass(frozen=True)
class ScalingFit:
    A: float  # fitted model-size coefficient
    alpha: float  # fitted model-size exponent
    A_se: float  # standard error of A (delta method from log A); nan with only 2 points
    alpha_se: float  # standard error of alpha; nan with only 2 points
    A_ci: tuple[float, float]  # 95% CI of A: exp(log A +- t * se(log A)), from the Jacobian
    alpha_ci: tuple[float, float]  # 95% CI of alpha (Student t, n - 2 degrees of freedom)
    B: float  # fixed data coefficient used in the fit
    beta: float  # fixed data exponent used in the fit
    E: float  # fixed irreducible loss used in the fit
    min_params: float  # points with n_params >= min_params entered the fit
    n_points: int  # number of points fitted
    n_sizes: int  # number of distinct model sizes among them
    n_params: np.ndarray  # (n_points,) N of the fitted points
    tokens: np.ndarray  # (n_points,) T of the fitted points
    residuals: np.ndarray  # (n_points,) observed - predicted loss of the fitted points
    log_residuals: np.ndarray  # (n_points,) residuals of the fit itself: log excess - model
    cov_log: np.ndarray  # (2, 2) covariance of (log A, alpha)
    bootstrap_A_ci: tuple[float, float] | None = None  # 95% percentile CI over resampled sizes
    bootstrap_alpha_ci: tuple[float, float] | None = None  # idem for alpha
    n_bootstrap: int = 0  # bootstrap resamples that were fitted (0 = no bootstrap)

    def predict(self, n_params, tokens) -> np.ndarray:
        """Loss the law predicts for models of n_params parameters after `tokens` tokens."""
        return predict(n_params, tokens, A=self.A, alpha=self.alpha, B=self.B, beta=self.beta, E=self.E)


def predict(n_params, tokens, *, A: float, alpha: float, B: float = HOFFMANN_B,
            beta: float = HOFFMANN_BETA, E: float = HOFFMANN_E) -> np.ndarray:
    """L(N, T) = A / N^alpha + B / T^beta + E, elementwise (broadcasting N against T)."""
    n_params = np.asarray(n_params, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    return A / n_params**alpha + B / tokens**beta + E


def shortfall(loss, predicted) -> np.ndarray:
    """How far the observed loss sits above the prediction, in % of the prediction."""
    loss = np.asarray(loss, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    return (loss - predicted) / predicted * 100.0


def _as_frame(points) -> pd.DataFrame:
    frame = pd.DataFrame(points)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"points: missing column(s) {missing}; expected columns {list(REQUIRED_COLUMNS)}")
    return frame.reset_index(drop=True)


def _rows(frame: pd.DataFrame, mask: np.ndarray, limit: int = 5) -> str:
    """A few offending rows, spelled out so the message names the culprit."""
    bad = frame.loc[mask, list(REQUIRED_COLUMNS)]
    listed = "; ".join(
        f"row {i} (n_params={r.n_params:.4g}, tokens={r.tokens:.4g}, loss={r.loss:.4g})"
        for i, r in zip(bad.index[:limit], bad.itertuples())
    )
    more = f" and {len(bad) - limit} more" if len(bad) > limit else ""
    return listed + more


def _validate(frame: pd.DataFrame, min_params: float, B: float, beta: float, E: float) -> np.ndarray:
    """Check every row, select the fit rows, and return their excess loss (n_fit,)."""
    n_params = frame["n_params"].to_numpy(np.float64)
    tokens = frame["tokens"].to_numpy(np.float64)
    loss = frame["loss"].to_numpy(np.float64)
    bad_n = ~(np.isfinite(n_params) & (n_params > 0))
    if bad_n.any():
        raise ValueError(f"points: n_params must be finite and > 0; bad: {_rows(frame, bad_n)}")
    bad_t = ~(np.isfinite(tokens) & (tokens > 0))
    if bad_t.any():
        raise ValueError(
            f"points: tokens must be finite and > 0 (drop step-0 checkpoints); bad: {_rows(frame, bad_t)}"
        )
    bad_loss = ~np.isfinite(loss)
    if bad_loss.any():
        raise ValueError(f"points: loss must be finite; bad: {_rows(frame, bad_loss)}")
    selected = n_params >= min_params
    sizes = np.unique(n_params[selected])
    if len(sizes) < 2:
        raise ValueError(
            f"points: need at least two distinct model sizes with n_params >= min_params={min_params:.4g} "
            f"to fit A and alpha, found {len(sizes)} ({sizes.tolist()}); lower min_params or add models"
        )
    excess = loss - B / tokens**beta - E
    bad_excess = selected & ~(excess > 0)
    if bad_excess.any():
        raise ValueError(
            f"points: loss - B/T^beta - E must be > 0 to fit A/N^alpha (B={B}, beta={beta}, E={E}); "
            f"non-positive for {_rows(frame, bad_excess)}; drop these points or check the fixed constants"
        )
    return selected


def _fit_log(log_n: np.ndarray, log_excess: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares of log excess = log A - alpha log N; returns theta=(log A, alpha), residuals, cov."""
    # Why log space: the excess loss A/N^alpha spans a factor ~3 over Pythia's sizes and its
    # noise grows with it, so relative (log) residuals weigh small and large models alike;
    # the model is also linear in (log A, alpha), so the fit is convex with a unique optimum,
    # the Jacobian is exact, and the CI of A (via log A) stays positive.
    design = np.stack([np.ones_like(log_n), -log_n], axis=1)  # (n, 2) d residual / d theta
    start, *_ = np.linalg.lstsq(design, log_excess, rcond=None)

    def residual(theta):
        return design @ theta - log_excess

    result = scipy.optimize.least_squares(residual, start, jac=lambda theta: design, method="lm")
    theta, res = result.x, result.fun
    dof = len(log_n) - 2
    if dof > 0:
        sigma2 = float(res @ res) / dof
        cov = sigma2 * np.linalg.inv(result.jac.T @ result.jac)
    else:
        cov = np.full((2, 2), np.nan)
    return theta, res, cov


def fit_scaling_law(
    points,
    *,
    min_params: float = DEFAULT_MIN_PARAMS,
    B: float = HOFFMANN_B,
    beta: float = HOFFMANN_BETA,
    E: float = HOFFMANN_E,
    bootstrap: int = 0,
    seed: int = 0,
) -> ScalingFit:
    """Fit A and alpha of L = A/N^alpha + B/T^beta + E on the points with n_params >= min_params.

    points: DataFrame-like with columns n_params (N), tokens (T) and loss (nats/token).
    bootstrap: number of resamples of the model sizes (with replacement, each size bringing
    all its points, since checkpoints of one model are not independent); 0 = none.
    """
    frame = _as_frame(points)
    selected = _validate(frame, min_params, B, beta, E)
    fit_rows = frame.loc[selected]
    n_params = fit_rows["n_params"].to_numpy(np.float64)
    tokens = fit_rows["tokens"].to_numpy(np.float64)
    loss = fit_rows["loss"].to_numpy(np.float64)
    log_n = np.log(n_params)
    log_excess = np.log(loss - B / tokens**beta - E)

    theta, log_res, cov = _fit_log(log_n, log_excess)
    log_a, alpha = float(theta[0]), float(theta[1])
    A = float(np.exp(log_a))
    dof = len(n_params) - 2
    se_log_a, alpha_se = np.sqrt(np.diag(cov))  # nan with 2 points (no residual dof)
    t_quantile = scipy.stats.t.ppf(0.975, dof) if dof > 0 else np.nan
    A_ci = (float(np.exp(log_a - t_quantile * se_log_a)), float(np.exp(log_a + t_quantile * se_log_a)))
    alpha_ci = (float(alpha - t_quantile * alpha_se), float(alpha + t_quantile * alpha_se))

    boot_A_ci = boot_alpha_ci = None
    n_boot = 0
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        sizes = np.unique(n_params)
        estimates = []
        for _ in range(bootstrap):
            drawn = rng.choice(sizes, size=len(sizes), replace=True)
            if len(np.unique(drawn)) < 2:
                continue  # alpha is not identifiable from a single size
            index = np.concatenate([np.flatnonzero(n_params == size) for size in drawn])
            boot_theta, _, _ = _fit_log(log_n[index], log_excess[index])
            estimates.append(boot_theta)
        if estimates:
            estimates = np.asarray(estimates)  # (n_boot, 2)
            n_boot = len(estimates)
            low, high = np.percentile(estimates, [2.5, 97.5], axis=0)
            boot_A_ci = (float(np.exp(low[0])), float(np.exp(high[0])))
            boot_alpha_ci = (float(low[1]), float(high[1]))

    predicted = predict(n_params, tokens, A=A, alpha=alpha, B=B, beta=beta, E=E)
    return ScalingFit(
        A=A,
        alpha=alpha,
        A_se=float(A * se_log_a),
        alpha_se=float(alpha_se),
        A_ci=A_ci,
        alpha_ci=alpha_ci,
        B=B,
        beta=beta,
        E=E,
        min_params=min_params,
        n_points=len(n_params),
        n_sizes=len(np.unique(n_params)),
        n_params=n_params,
        tokens=tokens,
        residuals=loss - predicted,
        log_residuals=log_res,
        cov_log=cov,
        bootstrap_A_ci=boot_A_ci,
        bootstrap_alpha_ci=boot_alpha_ci,
        n_bootstrap=n_boot,
    )


def _gpt_neox_counts(config) -> tuple[int, int]:
    """(non-embedding, embedding) parameter counts of a GPT-NeoX config, from its shapes."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    model_type = get("model_type")
    if model_type != "gpt_neox":
        raise ValueError(
            f"count_parameters: config has model_type={model_type!r}; only the families of "
            f"FAMILY_COUNTS ({', '.join(sorted(FAMILY_COUNTS))}) are counted from their shapes, pass the model itself for "
            "other families"
        )
    h, n_layers = get("hidden_size"), get("num_hidden_layers")
    inner, vocab = get("intermediate_size"), get("vocab_size")
    bias = 1 if get("attention_bias", True) else 0  # HF GPT-NeoX: query_key_value and dense biases
    attention = (h * 3 * h + bias * 3 * h) + (h * h + bias * h)
    mlp = (h * inner + inner) + (inner * h + h)
    layer_norms = 2 * (2 * h)  # input_layernorm, post_attention_layernorm: weight + bias
    non_embedding = n_layers * (attention + mlp + layer_norms) + 2 * h  # + final_layer_norm
    tied = bool(get("tie_word_embeddings", False))
    embedding = vocab * h * (1 if tied else 2)  # embed_in (+ embed_out when untied, no bias)
    return non_embedding, embedding


def _separate_projection_counts(get, family: str) -> tuple[int, int]:
    """(non-embedding, embedding) of the Llama-style families (llama, mistral, qwen2, gemma,
    olmo, olmo2, smollm3: its layers without RoPE hold the same matrices): q/k/v/o projections
    (grouped-query k/v), a gated MLP (3 matrices), their norms and the final norm, from the
    config's shapes."""
    h, n_layers, inner, vocab = get("hidden_size"), get("num_hidden_layers"), get("intermediate_size"), get("vocab_size")
    n_heads = get("num_attention_heads")
    n_kv = get("num_key_value_heads") or n_heads
    d_head = get("head_dim") or h // n_heads
    q, kv = n_heads * d_head, n_kv * d_head
    attention = h * q + 2 * h * kv + q * h
    if family == "qwen2":
        attention += q + 2 * kv  # q, k, v biases (no o bias)
    elif get("attention_bias", False):
        attention += q + 2 * kv + h
    mlp = 3 * h * inner + (2 * inner + h if get("mlp_bias", False) else 0)
    norms = {"olmo": 0, "olmo2": 2 * h + q + kv}.get(family, 2 * h)  # olmo: LayerNorm without weights; olmo2: + q/k norms
    final = 0 if family == "olmo" else h
    tied = bool(get("tie_word_embeddings", family == "gemma"))
    return n_layers * (attention + mlp + norms) + final, vocab * h * (1 if tied else 2)


def _gpt2_counts(get) -> tuple[int, int]:
    """GPT-2: fused c_attn (Conv1D, biased), learned positions (wpe, counted as non-embedding,
    as `count_parameters(model)` does: only the token embedding and the head are embeddings)."""
    h, n_layers, vocab, positions = get("n_embd"), get("n_layer"), get("vocab_size"), get("n_positions")
    inner = get("n_inner") or 4 * h
    layer = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * inner + inner) + (inner * h + h)
    tied = bool(get("tie_word_embeddings", True))
    return n_layers * layer + 2 * h + positions * h, vocab * h * (1 if tied else 2)


def _opt_counts(get) -> tuple[int, int]:
    """OPT: biased q/k/v/out and fc1/fc2, learned positions (with OPT's offset of 2), the
    word-embedding projections when word_embed_proj_dim differs from hidden_size."""
    h, n_layers, inner, vocab = get("hidden_size"), get("num_hidden_layers"), get("ffn_dim"), get("vocab_size")
    embed = get("word_embed_proj_dim") or h
    bias = 1 if get("enable_bias", True) else 0
    norm = 2 * h if get("layer_norm_elementwise_affine", True) else 0
    layer = 4 * (h * h + bias * h) + (h * inner + bias * inner) + (inner * h + bias * h) + 2 * norm
    final = norm if get("do_layer_norm_before", True) and not get("_remove_final_layer_norm", False) else 0
    projections = 2 * h * embed if embed != h else 0
    positions = (get("max_position_embeddings") + 2) * h
    tied = bool(get("tie_word_embeddings", True))
    return n_layers * layer + final + projections + positions, vocab * embed * (1 if tied else 2)


# model_type -> (non-embedding, embedding) from a config's shapes: every family of
# lmsat.checkpoints.adapters.ADAPTERS (tests/test_scaling.py checks each against an instantiated model).
FAMILY_COUNTS = {
    "gpt_neox": _gpt_neox_counts,
    "gpt2": lambda config: _gpt2_counts(_getter(config)),
    "opt": lambda config: _opt_counts(_getter(config)),
    **{family: (lambda config, family=family: _separate_projection_counts(_getter(config), family))
       for family in ("llama", "mistral", "qwen2", "gemma", "olmo", "olmo2", "smollm3")},
}


def _getter(config):
    """config.get for a config.json dict (its text config, if nested) or a PretrainedConfig."""
    if isinstance(config, dict):
        config = config.get("text_config") or config
        return config.get
    return lambda key, default=None: getattr(config, key, default)


def config_parameter_counts(config) -> dict[str, int] | None:
    """{"non_embedding", "total"} of a config.json (dict) or PretrainedConfig of a family
    FAMILY_COUNTS knows, from its shapes alone (no torch); None for another family."""
    counter = FAMILY_COUNTS.get(_getter(config)("model_type"))
    if counter is None:
        return None
    try:
        non_embedding, embedding = counter(config)
    except TypeError:  # a shape the family needs is missing (None)
        raise ValueError(f"count_parameters: a {_getter(config)('model_type')!r} config without the shapes of its family "
                         "(hidden size, layers, heads, vocabulary, ...): not a config.json transformers wrote") from None
    return {"non_embedding": int(non_embedding), "total": int(non_embedding + embedding)}


def count_parameters(config_or_model, kind: str = "non_embedding") -> int:
    """Parameter count of a config (dict or PretrainedConfig) of a family FAMILY_COUNTS
    knows, or of any HF model.

    kind: "non_embedding" leaves out the input embedding and the LM head (Pythia's
    embed_in and embed_out, the latter named lm_head by transformers >= 5; as in Pythia's
    reported non-embedding counts; a model's are found as get_input/output_embeddings()), "total" counts
    every parameter once (a tied head is not counted twice).
    """
    if kind not in ("non_embedding", "total"):
        raise ValueError(f"count_parameters: kind={kind!r}; use 'non_embedding' or 'total'")
    if hasattr(config_or_model, "named_parameters"):
        model = config_or_model
        embedding_ids = set()
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):
            if module is not None:
                embedding_ids.update(id(p) for p in module.parameters())
        unique = {id(p): p for p in model.parameters()}  # parameters() already dedups tied ones
        return int(sum(p.numel() for key, p in unique.items() if kind == "total" or key not in embedding_ids))
    counts = config_parameter_counts(config_or_model)
    if counts is None:
        _gpt_neox_counts(config_or_model)  # raises, naming the model_type
    return counts[kind]


PARAMETER_KINDS = ("non_embedding", "total")


def count_model_parameters(model) -> dict:
    """{kind: count} of a ModelEntry's final revision, plus where the config came from."""
    from lmsat.checkpoints.formats import load_config

    revision = model.final_revision
    target, kwargs = model.pretrained_source(revision)
    try:  # a format converted at load (hf_olmo, pico_decoder) is counted as the converted model
        config = load_config(target, trust_remote_code=model.trust_remote_code, **kwargs)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"cannot read the config of model {model.name} ({model.id}) at {revision}: {error}; "
            f"or set {model.key}.n_params in the config"
        ) from error
    if config.model_type in FAMILY_COUNTS:
        counts = config_parameter_counts(config)
    else:
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):  # shapes only, no memory
            lm = AutoModelForCausalLM.from_config(config, trust_remote_code=model.trust_remote_code)
        counts = {kind: count_parameters(lm, kind) for kind in PARAMETER_KINDS}
    return dict(model=model.name, id=model.id, revision=revision, model_type=config.model_type, **counts)
