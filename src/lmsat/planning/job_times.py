"""Time models: the seconds of each rule's job from its shapes, for `lmsat plan`.

Every rule of the workflow has one (`TIME_MODELS`; tests/test_plan.py fails on a rule without
one): the job's start (its interpreter, Snakemake's preamble, what its script imports) plus
its work, counted in what the job does (bytes read and hashed, flops of its products and
eigendecompositions, tokens scored) at rates measured on a stated machine or taken from a
stated source. Each model's `source` says in one line where its constants come from and
what is extrapolated; `lmsat plan` prints it beside the rule's hours. A run's own benchmark
files (benchmarks/out/<run>/) replace a model where they exist (lmsat.commands.plan).

    seconds = TIME_MODELS[job.rule].seconds(job, JobContext(plan_config, models, jobs))

The figures behind the constants: docs/performance.md, "What a plan's hours are made of".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from lmsat.checkpoints.fetch import DTYPE_BYTES, estimated_parameters, stored_bytes_per_param
from lmsat.core.plan import ModelEntry

# ---------------------------------------------------------------- rates (each stated where it comes from)
# A job's start on a cluster node: Python, Snakemake's preamble and the script's imports. The
# cold toy-scale job of each rule on an idle 2-core Xeon (docs/performance.md, "The default run,
# before and after", cold medians: their work is milliseconds, so the start is most of them).
COLD_START_S = dict(
    compute_checkpoint_metric=0.43, tabulate_metric=0.93, render_table=0.79, plot_figure=2.63,
    count_model_parameters=5.60, evaluate_checkpoint=4.29, train_toy_model=27.67,
)
SMALL_JOB_S = 2.6  # each of "the 12 other rules (1 job each)" of that table: 31.0 s together
GPU_START_S = 30.0  # torch + transformers (5.5-6 s idle, ibid.) + CUDA init, on a cluster filesystem: assumed
FETCH_START_S = 5.0  # Python + huggingface_hub before the first byte: assumed
READ_BYTES_PER_S = 1.0e9  # a checkpoint or cache read from a cluster filesystem: assumed
WRITE_BYTES_PER_S = 1.0e9  # a cache written to it: assumed
HUB_BYTES_PER_S = 1.0e8  # one download from the hub (docs/cluster.md's ~100 MB/s)
TOKENS_PER_S = 1.0e6  # a fast (Rust BPE) tokenizer on one core: assumed
# One forward's throughput on a GPU by dtype: an H200's, a Pythia-1.4b-shaped forward of 51,200
# tokens (/work/shared/NOTES.md: 0.36 s bf16, 2.82 s float32, TF32 off); on a CPU job (a few
# cores): ~50 GFLOP/s a thread at 160m (docs/performance.md, the gradient bottleneck) x 2.
FORWARD_FLOPS = {("cuda", "bfloat16"): 3.98e14, ("cuda", "float16"): 3.98e14, ("cuda", "float32"): 5.1e13}
CPU_FORWARD_FLOPS = 1.0e11
GPU_FLOAT32_FLOPS = 5.1e13  # the rank-r heads, the gradient bottleneck's GEMMs: float32 as above
GPU_BYTES_PER_S = 3.0e12  # an H100/H200's memory bandwidth (3.35 / 4.8 TB/s), for the heads' softmax passes
# Float64 Grams and eigendecompositions of the weight analyses, seconds per unit of V d^2 + L d^3
# (head Gram + per-layer Grams): 7.3 s at Pythia-160m's shape on one CPU thread (docs/performance.md:
# weight diagnostics 6.24 s, the head's spectrum 1.08 s); a GPU taken as 50 threads' worth: assumed.
WEIGHT_S_PER_UNIT_CPU = 7.3 / (50304 * 768**2 + 12 * 768**3)
GPU_OVER_CPU_THREAD = 50.0
GRADIENT_CPU_FLOPS = 4.5e10  # the gradient bottleneck on one CPU thread: 35-56 GFLOP/s (docs/performance.md)
EIGH_FLOPS = {"cuda": 5.0e12, "cpu": 5.0e10}  # float64 eigvalsh of a V x V Gram (n-grams): assumed
# benchmarks/job_times.py on this project's shared 2-core Xeon (load 10-22), CPU seconds of one
# thread at Pythia 14m, 70m, 160m and 410m shapes (docs/performance.md has the table), each taken
# at the widest shape's rate (per unit of work, costs grew with d: wider models may take longer):
# a cache's checksums verified at 0.54-1.1 GB/s (0.54 at 410m); loss 0.00 s; anisotropy 1.65e-8 s
# a unit; effective_rank 1.1e-11 s a unit (160m and 410m alike); representation_similarity 2.0e-11
# s a counted flop (0.7, 1.1, 1.4, 2.0 e-11 from 14m to 410m).
SHA256_BYTES_PER_S = 0.54e9
CACHE_METRIC_S = dict(loss=(0.01, 0.0), anisotropy=(0.0, 1.65e-8), effective_rank=(0.0, 1.1e-11))  # (s, s per unit)
SIMILARITY_S_PER_FLOP = 2.0e-11
TABLE_FILE_S = 0.005  # one record read and checked by a table job: assumed from the toy run (36 in ~0.5 s)
# lm-eval: every document of each task (or `limit`), its context and continuation scored by one
# forward at a third of the forward's rate (batches padded to their longest request): assumed.
# Documents: the tasks' test splits; tokens a document: typical lengths (assumed).
TASK_DOCS = dict(lambada_openai=5153, wikitext=62, sciq=1000, arc_easy=2376, arc_challenge=1172, piqa=1838,
                 storycloze_2016=1871, winogrande=1267, hellaswag=10042)
TASK_TOKENS_PER_DOC = dict(lambada_openai=85, wikitext=4800, sciq=4 * 130, arc_easy=4 * 35, arc_challenge=4 * 40,
                           piqa=2 * 40, storycloze_2016=2 * 60, winogrande=2 * 30, hellaswag=4 * 80)
UNKNOWN_TASK_TOKENS = 5.0e5
LMEVAL_EFFICIENCY = 1 / 3
# lm-eval's bootstrap of a perplexity's stderr (lambada, wikitext): seconds per iteration x document,
# lm_eval.api.metrics.bootstrap_stderr on this project's 2 shared cores (2,000 x 5,153 in 3.1 s).
BOOTSTRAP_S = 3.0e-7
BOOTSTRAPPED_TASKS = ("lambada_openai", "wikitext")


# ---------------------------------------------------------------- shapes


@dataclass(frozen=True)
class CacheShape:
    """The datasets of one hidden-state cache (lmsat.data.hidden_states's layout)."""

    n_seq: int
    seq_len: int
    layer_sample: int  # k tokens of every hidden state
    states: int  # hidden states: the layers + the embeddings
    d: int
    width: int  # bytes of a stored value (extraction.storage_dtype)

    @property
    def n_tokens(self) -> int:
        return self.n_seq * self.seq_len

    @property
    def bytes(self) -> int:
        """Per-token losses (float32), the last layer's states and every state's sample."""
        return 4 * self.n_seq * (self.seq_len - 1) + self.width * self.d * (self.n_tokens + self.states * self.layer_sample)


def cache_shape(d: int, num_layers: int, sample: dict, extraction: dict) -> CacheShape:
    """The cache of a model of width d and `num_layers` blocks (0: guessed, max(6, d / 64))."""
    return CacheShape(n_seq=math.ceil(sample["n_tokens"] / sample["seq_len"]), seq_len=sample["seq_len"],
                      layer_sample=extraction["layer_sample"], states=(num_layers or max(6, d // 64)) + 1, d=d,
                      width=DTYPE_BYTES[extraction["storage_dtype"]])


def metric_work(metric: str, shape: CacheShape) -> float:
    """Work units of a cache metric's compute (CACHE_METRIC_S): loss reads the losses;
    anisotropy is O(n d) over every sampled state and the last layer; effective_rank builds
    the float64 Gram of the last layer (2 n d^2) and takes two eigendecompositions."""
    n, d = shape.n_tokens, shape.d
    if metric == "loss":
        return float(n)
    if metric == "anisotropy":
        return float(shape.states * shape.layer_sample * d + n * d)
    return float(2 * n * d * d + 3 * d**3)


def comparison_work(shape: CacheShape, references: int) -> float:
    """Flops of representation_similarity: per hidden state, the principal bases (an SVD of a
    k x d matrix, 6 k d m with m = min(k, d)) of this cache's and each reference's states, and
    each pair's linear CKA (feature and sample Grams)."""
    k, d = shape.layer_sample, shape.d
    per_state = (1 + references) * 6 * k * d * min(k, d) + references * (6 * k * d * d + 6 * k * k * d)
    return float(shape.states * per_state)


def head_cache_bytes(model: ModelEntry, bottleneck: dict) -> int:
    """Bytes of a model's rank-head training and eval pairs (lmsat.bottleneck.representation_cache): hidden
    states in the storage dtype and int64 targets, for train_tokens + eval_tokens."""
    tokens = bottleneck["train_tokens"] + bottleneck["eval_tokens"]
    return tokens * (DTYPE_BYTES[bottleneck["storage_dtype"]] * model.hidden_size + 8)


@dataclass
class JobContext:
    """What a model reads besides its job: the validated config, the models, the plan's jobs."""

    config: dict
    models: dict[str, ModelEntry]
    jobs: list = field(default_factory=list)

    def __post_init__(self):
        self.by_rule = Counter(job.rule for job in self.jobs)
        self.checkpoints = sum(len(m.revisions) for m in self.models.values())

    def model(self, job) -> ModelEntry | None:
        return self.models.get(job.wildcards.get("model", ""))

    def device(self, job) -> str:
        return "cuda" if job.gpus >= 1 else "cpu"

    def shape(self, model: ModelEntry) -> CacheShape:
        return cache_shape(model.hidden_size, model.num_layers, self.config["sample"], self.config["extraction"])

    def stored_bytes(self, model: ModelEntry) -> float:
        return estimated_parameters(model) * stored_bytes_per_param(model, self.config["fetch"])


@dataclass(frozen=True)
class TimeModel:
    """A rule's seconds per job, and in one line where its constants come from."""

    seconds: Callable[[object, JobContext], float]
    source: str


# ---------------------------------------------------------------- the per-checkpoint jobs


def forward_seconds(flops: float, device: str, dtype: str) -> float:
    return flops / (FORWARD_FLOPS.get((device, dtype), FORWARD_FLOPS[("cuda", "float32")]) if device == "cuda"
                    else CPU_FORWARD_FLOPS)


def weight_analysis_seconds(model: ModelEntry, device: str, threads: int) -> float:
    d, layers = model.hidden_size, model.num_layers or max(6, model.hidden_size // 64)
    units = (model.vocab_size or 65536) * d * d + layers * d**3
    return units * WEIGHT_S_PER_UNIT_CPU / (GPU_OVER_CPU_THREAD if device == "cuda" else max(1, threads))


def analyse_checkpoint(job, ctx: JobContext) -> float:
    model, device, config = ctx.model(job), ctx.device(job), ctx.config
    shape = ctx.shape(model)
    params = estimated_parameters(model)
    seconds = (GPU_START_S + ctx.stored_bytes(model) / READ_BYTES_PER_S
               + forward_seconds(2 * params * shape.n_tokens, device, config["extraction"]["dtype"])
               + shape.bytes / WRITE_BYTES_PER_S)
    metrics = _planned_metrics(config)
    if {"spectra", "attention", "weight_diagnostics"} & metrics:
        seconds += weight_analysis_seconds(model, device, config["threads"])
    if "gradient_bottleneck" in metrics:
        flops = 4 * (model.vocab_size or 65536) * model.hidden_size * shape.n_tokens
        seconds += flops / (GPU_FLOAT32_FLOPS if device == "cuda" else GRADIENT_CPU_FLOPS * max(1, config["threads"]))
    return seconds


def _planned_metrics(config: dict) -> set:
    from lmsat.products.metrics import METRICS

    return set(config["metrics"] or METRICS)


def compute_checkpoint_metric(job, ctx: JobContext) -> float:
    shape = ctx.shape(ctx.model(job))
    metric = job.wildcards.get("metric", "effective_rank")
    fixed, rate = CACHE_METRIC_S.get(metric, CACHE_METRIC_S["effective_rank"])  # another metric: as the costliest
    return (COLD_START_S["compute_checkpoint_metric"] + shape.bytes / SHA256_BYTES_PER_S + fixed
            + rate * metric_work(metric, shape))


def compare_checkpoint_caches(job, ctx: JobContext) -> float:
    shape = ctx.shape(ctx.model(job))
    return (COLD_START_S["compute_checkpoint_metric"] + 3 * shape.bytes / SHA256_BYTES_PER_S
            + SIMILARITY_S_PER_FLOP * comparison_work(shape, references=2))


def fetch_checkpoint(job, ctx: JobContext) -> float:
    return FETCH_START_S + ctx.stored_bytes(ctx.model(job)) / HUB_BYTES_PER_S


def record_weights(job, ctx: JobContext) -> float:
    model = ctx.model(job)
    return SMALL_JOB_S + (ctx.stored_bytes(model) / SHA256_BYTES_PER_S if model else 0.0)


# ---------------------------------------------------------------- Table 1, the bottleneck, the n-grams


def task_tokens(task: str, evaluation: dict) -> float:
    docs = TASK_DOCS.get(task)
    if docs is None:
        return UNKNOWN_TASK_TOKENS
    limit = evaluation["limit"]
    if limit is not None:
        docs = min(docs, limit if limit >= 1 else math.ceil(limit * docs))
    return docs * TASK_TOKENS_PER_DOC[task]


def evaluate_checkpoint(job, ctx: JobContext) -> float:
    model, device, evaluation = ctx.model(job), ctx.device(job), ctx.config["evaluation"]
    task = job.wildcards.get("task", "")
    if task == "storycloze_2016" and not evaluation["storycloze_dir"]:
        return COLD_START_S["evaluate_checkpoint"]  # skipped: recorded as missing, no model loaded
    params = estimated_parameters(model)
    scored = 2 * params * task_tokens(task, evaluation)
    seconds = (GPU_START_S + ctx.stored_bytes(model) / READ_BYTES_PER_S
               + forward_seconds(scored, device, evaluation["dtype"]) / LMEVAL_EFFICIENCY)
    if task in BOOTSTRAPPED_TASKS:
        seconds += BOOTSTRAP_S * evaluation["bootstrap_iters"] * TASK_DOCS[task]
    return seconds


def build_head_cache(job, ctx: JobContext) -> float:
    model, device, config = ctx.model(job), ctx.device(job), ctx.config
    bottleneck = config["bottleneck"]
    tokens = bottleneck["train_tokens"] + bottleneck["eval_tokens"]
    return (GPU_START_S + ctx.stored_bytes(model) / READ_BYTES_PER_S + bottleneck["pool_factor"] * tokens / TOKENS_PER_S
            + forward_seconds(2 * estimated_parameters(model) * tokens, device, config["extraction"]["dtype"])
            + head_cache_bytes(model, bottleneck) / WRITE_BYTES_PER_S)


def train_rank_head(job, ctx: JobContext) -> float:
    """Steps x batch tokens through a rank-r head, forward and backward (6 r (d + V) flops a
    token), the softmax's passes over V logits a token, the cached pairs read as they are
    trained on, and an evaluation every eval_every steps."""
    model, bottleneck = ctx.model(job), ctx.config["bottleneck"]
    rank, d, vocab = int(job.wildcards.get("rank", model.hidden_size)), model.hidden_size, model.vocab_size or 65536
    trained = bottleneck["steps"] * bottleneck["batch_sequences"] * bottleneck["seq_len"]
    evaluated = (bottleneck["steps"] // max(1, bottleneck["eval_every"]) + 1) * bottleneck["eval_tokens"]
    read = trained * (DTYPE_BYTES[bottleneck["storage_dtype"]] * d + 8)
    if ctx.device(job) == "cuda":
        flops, passes = GPU_FLOAT32_FLOPS, GPU_BYTES_PER_S
    else:
        flops, passes = CPU_FORWARD_FLOPS, 1.0e10
    return (GPU_START_S + read / READ_BYTES_PER_S + (6 * trained + 2 * evaluated) * rank * (d + vocab) / flops
            + 12 * vocab * (trained + evaluated) / passes)


def count_corpus_ngrams(job, ctx: JobContext) -> float:
    """Tokenising and counting max_tokens tokens, and the float64 eigenvalues of the V x V Gram."""
    ngrams = ctx.config["ngrams"]
    tokens = ngrams["max_tokens"] or 1.0e8
    tokenizer = ctx.config["tokenizers"].get(job.wildcards.get("tokenizer", ""), {})
    vocab = max((m.vocab_size for m in ctx.models.values() if m.tokenizer == job.wildcards.get("tokenizer")),
                default=0) or (50304 if tokenizer.get("source") != "toy" else 256)
    return GPU_START_S + 2 * tokens / TOKENS_PER_S + 4 / 3 * vocab**3 / EIGH_FLOPS[ctx.device(job)]


def sample_eval_tokens(job, ctx: JobContext) -> float:
    sample = ctx.config["sample"]
    return SMALL_JOB_S + sample["pool_factor"] * sample["n_tokens"] / TOKENS_PER_S


def tabulate_metric(job, ctx: JobContext) -> float:
    return COLD_START_S["tabulate_metric"] + TABLE_FILE_S * ctx.checkpoints


def checkpoints_scaled(rule: str):
    """The toy run's job of `rule` (36 checkpoints), its rows grown with the plan's checkpoints."""
    def seconds(job, ctx: JobContext) -> float:
        return COLD_START_S[rule] + TABLE_FILE_S * ctx.checkpoints
    return seconds


def stage_corpus(job, ctx: JobContext) -> float:
    """The documents every reader of the corpus needs, downloaded (~4 bytes a token) and
    tokenised with each reader's tokenizer (lmsat.planning.staging's budgets)."""
    config = ctx.config
    tokens = config["sample"]["pool_factor"] * config["sample"]["n_tokens"] * max(1, len({m.tokenizer for m in ctx.models.values()}))
    if job.wildcards.get("corpus") in config["ngrams"]["corpora"]:
        tokens += (config["ngrams"]["max_tokens"] or 1.0e8) * max(1, len(config["ngrams"]["tokenizers"]))
    if config["bottleneck"]["models"]:
        bottleneck = config["bottleneck"]
        tokens += bottleneck["pool_factor"] * (bottleneck["train_tokens"] + bottleneck["eval_tokens"])
    return FETCH_START_S + 4 * tokens / HUB_BYTES_PER_S + tokens / TOKENS_PER_S


def constant(value: float):
    return lambda job, ctx: value


# ---------------------------------------------------------------- the registry

_START = "start: the rule's cold toy job (performance.md, measured)"
_GPU = "start 30 s, I/O 1 GB/s (assumed); forward at an H200's measured rate (NOTES.md; H100s, small shapes: extrapolated)"
_JOB_TIMES = "benchmarks/job_times.py at Pythia 14m-410m shapes, 1 thread (measured; wider: extrapolated by the counts)"
TIME_MODELS: dict[str, TimeModel] = {
    "analyse_checkpoint": TimeModel(analyse_checkpoint, _GPU + "; weight analyses: 160m on a CPU thread (performance.md), "
                                    "a GPU as 50 threads (assumed)"),
    "build_head_cache": TimeModel(build_head_cache, _GPU + "; tokenising at 1M tokens/s (assumed)"),
    "evaluate_checkpoint": TimeModel(evaluate_checkpoint, _GPU + ", a third of it for lm-eval's batches and task sizes "
                                     "(assumed); perplexity bootstraps (lm-eval's, measured here)"),
    "train_rank_head": TimeModel(train_rank_head, "start 30 s, reads 1 GB/s (assumed); 6 r (d + V) flops a token at the H200's "
                                 "float32 rate (NOTES.md); softmax passes at 3 TB/s (assumed)"),
    "count_corpus_ngrams": TimeModel(count_corpus_ngrams, "start 30 s, 1M tokens/s, a V x V float64 eigensolve at 5 TFLOP/s "
                                     "on a GPU, 50 GFLOP/s on a CPU (all assumed)"),
    "compute_checkpoint_metric": TimeModel(compute_checkpoint_metric, f"{_START}; checksums and the metric: {_JOB_TIMES}"),
    "compare_checkpoint_caches": TimeModel(compare_checkpoint_caches, f"{_START}; three caches' checksums and the "
                                           f"similarities: {_JOB_TIMES}"),
    "fetch_checkpoint": TimeModel(fetch_checkpoint, "start 5 s (assumed); the stored bytes at the hub's ~100 MB/s "
                                  "(docs/cluster.md)"),
    "fetch_best_checkpoint": TimeModel(fetch_checkpoint, "as fetch_checkpoint"),
    "record_weights": TimeModel(record_weights, f"{_START}; the checkpoint hashed at the checksum rate benchmarks/job_times.py measured"),
    "stage_corpus": TimeModel(stage_corpus, "start 5 s; every reader's tokens downloaded (~4 bytes each, ~100 MB/s) and "
                              "tokenised at 1M/s (assumed)"),
    "stage_tokenizer": TimeModel(constant(10.0), "a tokenizer's few MB from the hub: 10 s (assumed)"),
    "stage_lmeval_task": TimeModel(constant(30.0), "a task's datasets (tens of MB) from the hub: 30 s (assumed)"),
    "sample_eval_tokens": TimeModel(sample_eval_tokens, f"{_START}; pool_factor x n_tokens tokenised at 1M/s (assumed)"),
    "tabulate_metric": TimeModel(tabulate_metric, f"{_START}; 5 ms a checkpoint's record (assumed)"),
    "render_table": TimeModel(checkpoints_scaled("render_table"), f"{_START}; 5 ms a checkpoint's rows (assumed)"),
    "plot_figure": TimeModel(checkpoints_scaled("plot_figure"), f"{_START}; 5 ms a checkpoint's points (assumed)"),
    "count_model_parameters": TimeModel(constant(COLD_START_S["count_model_parameters"]), f"{_START}: a config.json read"),
    "train_toy_model": TimeModel(constant(COLD_START_S["train_toy_model"]), "the toy training's cold job (performance.md, "
                                 "measured)"),
    **{rule: TimeModel(constant(SMALL_JOB_S), f"{_START}: a job of seconds")
       for rule in ("select_checkpoints", "fit_scaling_law", "make_table1", "summarize_run", "tabulate_bottleneck",
                    "tabulate_ngrams", "ngram_ground_truth", "summarize_published", "build_offline_tasks",
                    "write_storycloze_task", "build_synthetic_language")},
}
# Rules that only name files: Snakemake runs no job for them.
TARGET_RULES = ("all", "summary", "stage_all")
_TARGET = TimeModel(constant(0.0), "a target: no job runs")


def time_model(rule: str) -> TimeModel | None:
    """The rule's model; a target (`all`, `summary`, `stage_all`, a report section's named
    target such as `fig1a`) runs nothing. None: a rule without a model."""
    if rule in TIME_MODELS:
        return TIME_MODELS[rule]
    return _TARGET if rule in TARGET_RULES or rule in section_targets() else None


def section_targets() -> set[str]:
    """The named target rules of the report's sections (workflow/rules/report.smk): each
    figure's target, and the sections of tables no figure draws."""
    from lmsat.figures import FIGURES

    return {figure.target for figure in FIGURES.values()} | {"table1", "published_table1"}
