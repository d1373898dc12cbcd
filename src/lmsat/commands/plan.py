"""`python -m lmsat plan`: what a config's run costs before it is submitted, from its DAG alone.

    python -m lmsat plan --configfile config/pythia.yaml
    python -m lmsat plan --configfile config/paper.yaml --profile profiles/slurm --gpus 8 --disk-mb 110000

The DAG is Snakemake's dry run (`snakemake -n`, with the profile if given, in --directory:
jobs already done there are not planned again). It says, per job, its rule, wildcards,
resources and benchmark file; from those and the validated config this command reports:

- jobs by kind (network staging: the rules of lmsat.planning.staging.STAGING_RULES; GPU: gpu >= 1;
  local: `localrule`s on the submitting node; CPU: the rest) and by rule;
- bytes to download: each fetch job's checkpoint, estimated_parameters x fetch.bytes_per_param;
- disk at peak under the fetch settings, and the results' final size (hidden-state caches,
  rank-head training caches);
- GPU, CPU and staging hours: a job's measured time where the run has benchmark files of its
  rule (benchmarks/out/<run>/<rule>/..., Snakemake's `s` column: the same model's mean, else
  the rule's mean scaled by parameters), else the stated model below, else the rule's
  runtime limit (an upper bound, said so). Each line says for how many of its jobs the
  estimate is, and a kind none of whose jobs has a time gets no estimate, said so (not 0.0). A job of a local run forked by the warm
  interpreter (lmsat.runtime.warm) did not pay its interpreter's start-up, which a cluster job does
  (TIME_MODEL's start_s): measured on a laptop, a cluster's hours come out low by that much.

The stated model of a per-checkpoint GPU job (and of the head-cache forward) is the physical
limit benchmarks/checkpoint_job.py measures a job against (its `limit` row: start Python with
torch, read the checkpoint, one forward over the sample, write the cache), with the constants of
TIME_MODEL: assumptions until that benchmark has been run on the cluster's GPU, after which a
run's own measured times replace them. A fetch takes its bytes at TIME_MODEL's hub bandwidth.
Other rules (lm-eval, rank-head training, n-gram counting, the metric jobs) have no model: they
are counted at their runtime limits, as an upper bound, until measured.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the workflow beside this library (src/lmsat/commands)

# The model of a per-checkpoint job's seconds (benchmarks/checkpoint_job.py's limit terms).
TIME_MODEL = dict(
    start_s=30.0,  # Python + torch import + CUDA init + the script (the benchmark's `import`)
    read_bytes_per_s=1.0e9,  # checkpoint read from a cluster filesystem
    write_bytes_per_s=1.0e9,  # cache write
    gpu_flops=1.0e14,  # effective bf16 forward throughput of one data-centre GPU (~1/4 to 1/10 of an H100/H200's peak)
    cpu_flops=1.0e11,  # effective float32 forward throughput of one CPU job (a few cores)
    fetch_bytes_per_s=1.0e8,  # one checkpoint download from the hub (docs/cluster.md's ~100 MB/s)
)
# Rules whose time the model covers: a forward of `tokens` through the model after loading it.
FORWARD_RULES = ("analyse_checkpoint", "build_head_cache")
FETCH_RULES = ("fetch_checkpoint", "fetch_best_checkpoint")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass
class Job:
    """One job of the dry run."""

    rule: str
    local: bool = False
    wildcards: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)
    benchmark: str = ""
    jobid: str = ""

    @property
    def gpus(self) -> int:
        try:
            return int(float(self.resources.get("gpu", 0)))
        except ValueError:
            return 0


def dry_run(configfile: str | None, profile: str | None, directory: Path, snakefile: Path = ROOT / "Snakefile",
            extra: list[str] | None = None) -> list[Job]:
    """The jobs `snakemake -n` plans (its listing, parsed). Raises RuntimeError with
    Snakemake's message when it cannot plan."""
    command = [sys.executable, "-m", "snakemake", "-n", "-s", str(snakefile), "--directory", str(directory)]
    command += ["--configfile", str(Path(configfile).resolve())] if configfile else []
    command += ["--profile", str(Path(profile).resolve())] if profile else []
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    result = subprocess.run(command + (extra or []), capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"snakemake -n failed:\n{(result.stdout + result.stderr)[-4000:]}")
    return parse_dry_run(result.stdout + result.stderr)


JOB_HEADER = re.compile(r"^(local)?(?:rule|checkpoint) (\w+):$")


def parse_dry_run(text: str) -> list[Job]:
    """The jobs of a `snakemake -n` listing: each `rule X:` / `localrule X:` / `checkpoint X:`
    block with its wildcards, resources and benchmark, once per jobid (a profile's job groups
    list some member jobs in more than one group listing)."""
    jobs = []
    for line in text.splitlines():
        line = line.strip()
        if match := JOB_HEADER.match(line):
            jobs.append(Job(rule=match.group(2), local=bool(match.group(1))))
        elif jobs and line.startswith("wildcards: "):
            jobs[-1].wildcards = dict(part.split("=", 1) for part in line[len("wildcards: "):].split(", "))
        elif jobs and line.startswith("resources: "):
            jobs[-1].resources = dict(part.split("=", 1) for part in line[len("resources: "):].split(", ") if "=" in part)
        elif jobs and line.startswith("benchmark: "):
            jobs[-1].benchmark = line[len("benchmark: "):]
        elif jobs and line.startswith("jobid: "):
            jobs[-1].jobid = line[len("jobid: "):]
    unique = {}
    for index, job in enumerate(jobs):
        unique.setdefault(job.jobid or f"#{index}", job)
    return list(unique.values())


def kind(job: Job, staging_rules) -> str:
    if job.rule in staging_rules:
        return "network staging"
    if job.gpus >= 1:
        return "GPU"
    return "local" if job.local else "CPU"


def measured_seconds(directory: Path, run: str) -> dict[str, dict[str, list[float]]]:
    """rule -> model (or '' when the rule has no model wildcard) -> wall seconds of every
    benchmark file of `run` (benchmarks/out/<run>/<rule>/[<model>/]...tsv, column `s`)."""
    found: dict = defaultdict(lambda: defaultdict(list))
    base = Path(directory) / "benchmarks" / "out" / run
    for path in sorted(base.glob("*/**/*.tsv")):
        parts = path.relative_to(base).parts
        rule, model = parts[0], (parts[1] if len(parts) > 2 else "")
        lines = path.read_text().splitlines()
        if len(lines) < 2:
            continue
        header = lines[0].split("\t")
        if "s" not in header:
            continue
        values = [float(row.split("\t")[header.index("s")]) for row in lines[1:] if row.strip()]
        found[rule][model].extend(values)
    return found


def cache_bytes(model, sample: dict, extraction: dict) -> int:
    """Bytes of one hidden-state cache (lmsat.data.hidden_states's layout): per-token losses (float32),
    the last layer's states and a `layer_sample` of every layer's, in the storage dtype."""
    n_seq = math.ceil(sample["n_tokens"] / sample["seq_len"])
    tokens = n_seq * sample["seq_len"]
    width = DTYPE_BYTES[extraction["storage_dtype"]]
    layers = (model.num_layers or max(6, model.hidden_size // 64)) + 1
    return 4 * n_seq * (sample["seq_len"] - 1) + width * model.hidden_size * (tokens + layers * extraction["layer_sample"])


def head_cache_bytes(model, bottleneck: dict) -> int:
    """Bytes of a model's rank-head training and eval pairs (lmsat.bottleneck.representation_cache): hidden states
    in the storage dtype and int64 targets, for train_tokens + eval_tokens."""
    tokens = bottleneck["train_tokens"] + bottleneck["eval_tokens"]
    return tokens * (DTYPE_BYTES[bottleneck["storage_dtype"]] * model.hidden_size + 8)


def model_seconds(job: Job, model, config: dict) -> float | None:
    """TIME_MODEL's seconds for a forward rule's or a fetch's job (None for other rules)."""
    if model is None or job.rule not in FORWARD_RULES + FETCH_RULES:
        return None
    from lmsat.checkpoints.fetch import estimated_parameters

    params = estimated_parameters(model)
    if job.rule in FETCH_RULES:
        return params * config["fetch"]["bytes_per_param"] / TIME_MODEL["fetch_bytes_per_s"]
    if job.rule == "analyse_checkpoint":
        tokens = config["sample"]["n_tokens"]
        written = cache_bytes(model, config["sample"], config["extraction"])
    else:
        tokens = config["bottleneck"]["train_tokens"] + config["bottleneck"]["eval_tokens"]
        written = head_cache_bytes(model, config["bottleneck"])
    flops = TIME_MODEL["gpu_flops"] if job.gpus >= 1 else TIME_MODEL["cpu_flops"]
    read = params * config["fetch"]["bytes_per_param"]
    return (TIME_MODEL["start_s"] + read / TIME_MODEL["read_bytes_per_s"] + 2 * params * tokens / flops
            + written / TIME_MODEL["write_bytes_per_s"])


def limit_seconds(job: Job) -> float:
    try:
        return 60 * float(job.resources.get("runtime", 0))
    except ValueError:
        return 0.0


@dataclass
class Estimate:
    """The plan's numbers (what `render` prints)."""

    run: str
    by_kind: Counter
    by_rule: dict  # rule -> (kind, jobs)
    download_bytes: float
    downloads: int
    pending: list  # checkpoint rules whose later jobs the dry run cannot list yet
    peak_bytes: float
    peak_how: str
    weights_kept_bytes: float
    cache_bytes: float
    head_cache_bytes: float
    hours: dict  # "GPU" / "CPU" / ... -> {"measured": h, "model": h, "limit": h, "jobs": n, "estimated_jobs": n}
    measured_rules: dict  # rule -> number of benchmark files used
    best_fetches: int = 0  # fetches of best revisions for lm-eval (after the checkpoint)
    limited_rules: tuple = ()  # rules counted at their runtime limits


def estimate(jobs: list[Job], plan, directory: Path, gpus: int, disk_mb: float | None) -> Estimate:
    """The plan's costs from its jobs and the validated config (`plan`: lmsat.core.plan.Plan)."""
    from lmsat.checkpoints.fetch import checkpoint_disk_mb, estimated_parameters
    from lmsat.planning.staging import STAGING_RULES

    config, models = plan.config, plan.models
    by_kind = Counter(kind(job, STAGING_RULES) for job in jobs)
    by_rule: dict = {}
    for job in jobs:
        label, count = by_rule.get(job.rule, (kind(job, STAGING_RULES), 0))
        by_rule[job.rule] = (label, count + 1)
    bytes_per_param = config["fetch"]["bytes_per_param"]
    fetches = [job for job in jobs if job.rule in FETCH_RULES]
    fetched = [estimated_parameters(models[job.wildcards["model"]]) * bytes_per_param for job in fetches]
    pending = [job.rule for job in jobs if job.rule == "select_checkpoints"]
    # lm-eval of a hub model's best revision reads a copy of its own, fetched once the loss
    # table exists (after checkpoint select_checkpoints): counted here, at most one per model
    fetched_models = {job.wildcards["model"] for job in fetches}
    best_models = sorted({job.wildcards["model"] for job in jobs if job.rule == "evaluate_checkpoint"
                          and job.wildcards.get("kind") == "best" and job.wildcards["model"] in fetched_models})
    best_bytes = [estimated_parameters(models[m]) * bytes_per_param for m in best_models]
    download = sum(fetched) + sum(best_bytes)

    caches = sum(cache_bytes(models[job.wildcards["model"]], config["sample"], config["extraction"])
                 for job in jobs if job.rule == "analyse_checkpoint")
    heads = sum(head_cache_bytes(models[job.wildcards["model"]], config["bottleneck"])
                for job in jobs if job.rule == "build_head_cache")
    results = caches + heads
    if not fetches:
        peak, how, kept = results, "no checkpoint to fetch", 0.0
    elif not config["fetch"]["remove_after_use"]:
        kept = download
        peak, how = download + results, "fetch.remove_after_use: false keeps every checkpoint"
    else:
        largest = max(fetched)
        largest_disk_mb = max(checkpoint_disk_mb(models[job.wildcards["model"]], bytes_per_param) for job in fetches)
        at_once = max(1, int(disk_mb // largest_disk_mb)) if disk_mb else gpus
        finals = sum(best_bytes)  # the final revisions of the evaluated models wait for their lm-eval
        kept = (at_once + gpus) * largest + finals
        peak = min(kept, download) + results
        how = (f"fetch.remove_after_use: ({at_once} checkpoints being fetched"
               f"{f' (--disk-mb {disk_mb:.0f})' if disk_mb else ' (no --disk-mb: one per GPU)'} + {gpus} being read"
               f" (--gpus {gpus})) x the largest ({largest / 1e9:.1f} GB)"
               + (f" + {len(best_models)} final revisions awaiting lm-eval" if best_models else "")
               + "; never more than the disk minus fetch.min_free_mb")

    measured = measured_seconds(directory, plan.run)
    hours = {label: {"measured": 0.0, "model": 0.0, "limit": 0.0, "jobs": 0, "estimated_jobs": 0}
             for label in ("GPU", "CPU", "network staging")}
    used: Counter = Counter()
    limited: set = set()
    for job in jobs:
        label = {"local": "CPU"}.get(kind(job, STAGING_RULES), kind(job, STAGING_RULES))
        model = models.get(job.wildcards.get("model", ""))
        hours[label]["jobs"] += 1
        times = measured.get(job.rule, {})
        same = times.get(job.wildcards.get("model", ""), []) or times.get("", [])
        if same:
            hours[label]["measured"] += sum(same) / len(same) / 3600
            hours[label]["estimated_jobs"] += 1
            used[job.rule] += 1
            continue
        if times and model is not None:  # the rule measured on other models: scaled by parameters
            scaled = [sum(v) / len(v) * estimated_parameters(model) / estimated_parameters(models[m])
                      for m, v in times.items() if m in models]
            if scaled:
                hours[label]["measured"] += sum(scaled) / len(scaled) / 3600
                hours[label]["estimated_jobs"] += 1
                used[job.rule] += 1
                continue
        seconds = model_seconds(job, model, config)
        if seconds is not None:
            hours[label]["model"] += seconds / 3600
            hours[label]["estimated_jobs"] += 1
        else:
            hours[label]["limit"] += limit_seconds(job) / 3600
            if limit_seconds(job) > 0:
                limited.add(job.rule)
    return Estimate(
        run=plan.run, by_kind=by_kind, by_rule=by_rule, download_bytes=download, downloads=len(fetched) + len(best_bytes),
        pending=sorted(set(pending)), peak_bytes=peak, peak_how=how, weights_kept_bytes=kept, cache_bytes=caches,
        head_cache_bytes=heads, hours=hours, measured_rules=dict(used), best_fetches=len(best_bytes),
        limited_rules=tuple(sorted(limited)),
    )


def size(n_bytes: float) -> str:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB")):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes / 1e3:.1f} kB"


def hours_line(label: str, parts: dict, run: str) -> str:
    """One kind's hours: the estimate of the jobs that have one (a measured time or the time
    model), and at most the runtime limits of the others; no estimate, and why, when none has."""
    jobs, estimated = parts["jobs"], parts["estimated_jobs"]
    unestimated = jobs - estimated
    limits = (f"at most {parts['limit']:,.1f} (their runtime limits, an upper bound)" if parts["limit"] > 0
              else "no runtime limit to bound them")
    if not jobs:
        return f"{label} hours: none (no {label} job)"
    if not estimated:
        return (f"{label} hours: no estimate: none of its {jobs:,} jobs has a measured time "
                f"(benchmarks/out/{run}/) or a time model; {limits}")
    line = (f"{label} hours: {parts['measured'] + parts['model']:,.1f} estimated for {estimated:,} of {jobs:,} jobs "
            f"(measured {parts['measured']:,.1f} + model {parts['model']:,.1f})")
    return line + (f", + for the other {unestimated:,}, {limits}" if unestimated else "")


def render(plan: Estimate) -> str:
    """The plan as the command prints it."""
    lines = [f"plan of run {plan.run}: {sum(plan.by_kind.values()):,} jobs"]
    lines.append("  by kind: " + ", ".join(f"{label} {plan.by_kind.get(label, 0):,}"
                                           for label in ("network staging", "GPU", "CPU", "local")))
    if not plan.by_kind.get("local"):
        lines.append("  (local: the localrules on the submitting node, listed as such under a cluster profile)")
    if plan.pending:
        lines.append(f"  + the jobs after checkpoint {', '.join(plan.pending)} (lm-eval of each model's best "
                     "revision and its fetch), planned once the loss table exists")
    lines.append("  by rule:")
    for rule, (label, count) in sorted(plan.by_rule.items(), key=lambda item: (-item[1][1], item[0])):
        lines.append(f"    {count:>6,}  {rule} ({label})")
    lines.append(f"download: {size(plan.download_bytes)} in {plan.downloads:,} checkpoints "
                 f"(estimated parameters x fetch.bytes_per_param; {plan.best_fetches} of them each evaluated model's "
                 "best revision, fetched again for lm-eval once known)")
    lines.append(f"disk at peak: {size(plan.peak_bytes)} ({size(plan.weights_kept_bytes)} of checkpoints: "
                 f"{plan.peak_how}; + the results)")
    lines.append(f"results' final size: {size(plan.cache_bytes + plan.head_cache_bytes)} "
                 f"(hidden-state caches {size(plan.cache_bytes)}, rank-head caches {size(plan.head_cache_bytes)})")
    for label in ("GPU", "CPU", "network staging"):
        lines.append(hours_line(label, plan.hours[label], plan.run))
    measured = ", ".join(f"{rule} ({n:,} jobs)" for rule, n in sorted(plan.measured_rules.items()))
    lines.append(f"  measured: benchmarks/out/{plan.run}/: " + (measured or "none"))
    lines.append("  model: benchmarks/checkpoint_job.py's limit terms, " + ", ".join(
        f"{key} {value:g}" for key, value in TIME_MODEL.items()) + " (lmsat.commands.plan.TIME_MODEL)")
    limited = ", ".join(sorted(plan.limited_rules))
    lines.append(f"  runtime limits: {limited or 'none'}")
    return "\n".join(lines)


class PlanError(Exception):
    """A bad argument of `lmsat plan`, or a plan Snakemake cannot make; names the fix."""


def positive(kind):
    """An argparse type: a number of `kind` (int, float) above 0, else the argument's error and fix."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} is not positive; fix: give a number above 0 (the count or size "
                                             "of what the run really has)")
        return value
    return parse


def add_arguments(parser) -> None:
    parser.add_argument("--configfile", help="the run's config (default: config/config.yaml)")
    parser.add_argument("--profile", help="the Snakemake profile the run will use (its resources shape the DAG)")
    parser.add_argument("--directory", type=Path, default=Path.cwd(),
                        help="where the run is (jobs done there are not planned; its benchmarks/out/<run>/ times are used)")
    parser.add_argument("--gpus", type=positive(int), default=8, help="GPUs reading checkpoints at once (peak disk; default 8)")
    parser.add_argument("--disk-mb", type=positive(float), help="the run's --resources disk_mb (checkpoints being fetched at once)")


DEFAULT_CONFIG = ROOT / "config" / "config.yaml"


def load(configfile: str | None):
    """The validated plan of `configfile`, as common.smk loads it (an unnamed run named after
    the file, the default config's `default`); a file that is no config is a ConfigFileError."""
    from lmsat.planning.config_files import load_yaml, read_config_files
    from lmsat.planning.load import load_plan
    from lmsat.planning.slicing import run_of_config_file

    path = str(configfile or DEFAULT_CONFIG)
    schema = load_yaml(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    config = read_config_files([path], schema, targets=False)[path]
    return load_plan(config, schema, default_run=run_of_config_file(path, DEFAULT_CONFIG),
                     config_dir=Path(path).resolve().parent)  # its pins files are read from beside it


def run(args) -> int:
    from lmsat.errors import ConfigError

    try:
        if args.configfile and not Path(args.configfile).is_file():
            raise PlanError(f"--configfile {args.configfile}: no such file. Fix: give the path of the run's config "
                            "(e.g. config/pythia.yaml), or leave --configfile out for config/config.yaml")
        if not args.directory.is_dir():  # Snakemake's --directory would create it, and plan an empty run there
            raise PlanError(f"--directory {args.directory}: {'not a directory' if args.directory.exists() else 'no such directory'}. "
                            "Fix: give the directory the run is in (where its results/ and .snakemake/ are), or leave "
                            "--directory out for the current one")
        plan = load(args.configfile)
        try:
            jobs = dry_run(args.configfile or str(DEFAULT_CONFIG), args.profile, args.directory)
        except RuntimeError as error:
            raise PlanError(str(error)) from error
    except (PlanError, ConfigError) as error:
        if getattr(args, "debug", False):
            raise
        print(f"lmsat plan: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    print(render(estimate(jobs, plan, args.directory, args.gpus, args.disk_mb)))
    for note in plan.notes:
        print(f"note: {note}")
    return 0
