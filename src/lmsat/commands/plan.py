"""`python -m lmsat plan`: what a config's run costs before it is submitted, from its DAG alone.

    python -m lmsat plan --configfile config/pythia.yaml
    python -m lmsat plan --configfile config/paper.yaml --profile profiles/slurm --gpus 8 --disk-mb 110000

The DAG is Snakemake's dry run (`snakemake -n`, with the profile if given, in --directory:
jobs already done there are not planned again). It says, per job, its rule, wildcards,
resources and benchmark file; from those and the validated config this command reports:

- jobs by kind (network staging: the rules of lmsat.planning.staging.STAGING_RULES; GPU: gpu >= 1;
  local: `localrule`s on the submitting node; CPU: the rest) and by rule;
- bytes to download: each fetch job's checkpoint, estimated parameters x the bytes a
  parameter of its suite's stored dtype takes (fetch.stored_dtype, else fetch.bytes_per_param);
- disk at peak, as the sum it is: the checkpoints on disk at once under the fetch settings
  (each term printed) + the results (hidden-state caches, rank-head training caches);
- GPU, CPU and staging hours: each job's measured time where the run has benchmark files of
  its rule (benchmarks/out/<run>/<rule>/..., Snakemake's `s` column: the same model's mean, else
  the rule's mean scaled by parameters), else its rule's time model (lmsat.planning.job_times:
  every rule has one, a function of the job's shapes, its source printed in one line beside
  the rule's hours); beside each kind's estimate, the sum of its jobs' runtime limits as an
  upper bound. A job of a local run forked by the warm interpreter (lmsat.runtime.warm) did
  not pay its interpreter's start-up, which a cluster job does: measured on a laptop, a
  cluster's hours come out low by that much.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the workflow beside this library (src/lmsat/commands)

FETCH_RULES = ("fetch_checkpoint", "fetch_best_checkpoint")


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


def limit_seconds(job: Job) -> float:
    try:
        return 60 * float(job.resources.get("runtime", 0))
    except ValueError:
        return 0.0


@dataclass
class Estimate:
    """The plan's numbers (what `render` prints): each printed total is the sum of the parts
    printed beside it."""

    run: str
    by_kind: Counter
    by_rule: dict  # rule -> (kind, jobs)
    download_bytes: float
    downloads: int
    pending: list  # checkpoint rules whose later jobs the dry run cannot list yet
    weights_kept_bytes: float  # the checkpoints on disk at once
    weights_how: str  # the arithmetic of weights_kept_bytes
    cache_bytes: float
    head_cache_bytes: float
    hours: dict  # "GPU" / "CPU" / "network staging" -> {"measured": h, "model": h, "limit": h, "jobs": n, "unmodelled": n}
    rule_hours: dict  # rule -> {"kind", "jobs", "hours", "measured_jobs", "source"}
    measured_rules: dict  # rule -> number of jobs whose time was measured
    best_fetches: int = 0  # fetches of best revisions for lm-eval (after the checkpoint)
    unmodelled_rules: tuple = ()  # rules with neither a measured time nor a time model

    @property
    def results_bytes(self) -> float:
        return self.cache_bytes + self.head_cache_bytes

    @property
    def peak_bytes(self) -> float:
        """Disk at peak: the checkpoints on disk at once + the results."""
        return self.weights_kept_bytes + self.results_bytes


def weights_at_peak(sizes: list[float], disk_mbs: list[int], finals: list[float], fetch: dict, gpus: int,
                    disk_mb: float | None) -> tuple[float, str]:
    """(bytes, its arithmetic in words) of the checkpoints on disk at once. `sizes`: each
    fetch's bytes; `disk_mbs`: each fetch's disk_mb request; `finals`: the final revisions
    that wait for their lm-eval. Never more than every checkpoint downloaded."""
    n, download = len(sizes), sum(sizes)
    if not n:
        return 0.0, "no checkpoint to fetch"
    if not fetch["remove_after_use"]:
        return download, f"all {n:,} downloaded: fetch.remove_after_use false keeps every one"
    largest_mb = max(disk_mbs)
    at_once = max(1, int(disk_mb // largest_mb)) if disk_mb else gpus
    fetching = (f"{at_once:,} being fetched (--disk-mb {disk_mb:.0f} over the largest's disk_mb {largest_mb:,})" if disk_mb
                else f"{at_once:,} being fetched (no --disk-mb: one per GPU)")
    reading = f"{gpus:,} being read (--gpus {gpus})"
    if at_once + gpus >= n:
        return download, f"all {n:,} at once, as {fetching} + {reading} is at least the {n:,} to fetch"
    largest = max(sizes)
    bound = (at_once + gpus) * largest + sum(finals)
    how = f"({fetching} + {reading}) x the largest ({size(largest)}) = {size((at_once + gpus) * largest)}"
    if finals:
        how += f" + {len(finals):,} final revisions awaiting lm-eval ({size(sum(finals))})"
    if bound >= download:
        return download, f"all {n:,}, fewer than {how}"
    return bound, how


def estimate(jobs: list[Job], plan, directory: Path, gpus: int, disk_mb: float | None) -> Estimate:
    """The plan's costs from its jobs and the validated config (`plan`: lmsat.core.plan.Plan)."""
    from lmsat.checkpoints.fetch import checkpoint_disk_mb, estimated_parameters, stored_bytes_per_param
    from lmsat.planning.job_times import JobContext, head_cache_bytes, time_model
    from lmsat.planning.staging import STAGING_RULES

    config, models = plan.config, plan.models
    context = JobContext(config, models, jobs)
    by_kind = Counter(kind(job, STAGING_RULES) for job in jobs)
    by_rule: dict = {}
    for job in jobs:
        label, count = by_rule.get(job.rule, (kind(job, STAGING_RULES), 0))
        by_rule[job.rule] = (label, count + 1)
    fetches = [job for job in jobs if job.rule in FETCH_RULES]
    fetched = [context.stored_bytes(models[job.wildcards["model"]]) for job in fetches]
    pending = [job.rule for job in jobs if job.rule == "select_checkpoints"]
    # lm-eval of a hub model's best revision reads a copy of its own, fetched once the loss
    # table exists (after checkpoint select_checkpoints): counted here, at most one per model
    fetched_models = {job.wildcards["model"] for job in fetches}
    best_models = sorted({job.wildcards["model"] for job in jobs if job.rule == "evaluate_checkpoint"
                          and job.wildcards.get("kind") == "best" and job.wildcards["model"] in fetched_models})
    best_bytes = [context.stored_bytes(models[m]) for m in best_models]
    disk_mbs = [checkpoint_disk_mb(models[job.wildcards["model"]], stored_bytes_per_param(models[job.wildcards["model"]],
                                                                                        config["fetch"])) for job in fetches]
    # the final revisions of the evaluated models wait for their lm-eval: as large as their best ones
    kept, how = weights_at_peak(fetched, disk_mbs, best_bytes, config["fetch"], gpus, disk_mb)
    caches = sum(context.shape(models[job.wildcards["model"]]).bytes for job in jobs if job.rule == "analyse_checkpoint")
    heads = sum(head_cache_bytes(models[job.wildcards["model"]], config["bottleneck"])
                for job in jobs if job.rule == "build_head_cache")

    measured = measured_seconds(directory, plan.run)
    hours = {label: {"measured": 0.0, "model": 0.0, "limit": 0.0, "jobs": 0, "unmodelled": 0}
             for label in ("GPU", "CPU", "network staging")}
    rule_hours: dict = {}
    used: Counter = Counter()
    for job in jobs:
        label = {"local": "CPU"}.get(kind(job, STAGING_RULES), kind(job, STAGING_RULES))
        model = models.get(job.wildcards.get("model", ""))
        found = time_model(job.rule)
        row = rule_hours.setdefault(job.rule, {"kind": label, "jobs": 0, "hours": 0.0, "measured_jobs": 0,
                                               "source": found.source if found else ""})
        row["jobs"] += 1
        hours[label]["jobs"] += 1
        hours[label]["limit"] += limit_seconds(job) / 3600
        times = measured.get(job.rule, {})
        same = times.get(job.wildcards.get("model", ""), []) or times.get("", [])
        scaled = [] if same or model is None else [  # the rule measured on other models: scaled by parameters
            sum(v) / len(v) * estimated_parameters(model) / estimated_parameters(models[m]) for m, v in times.items() if m in models]
        if same or scaled:
            seconds = sum(same) / len(same) if same else sum(scaled) / len(scaled)
            hours[label]["measured"] += seconds / 3600
            row["measured_jobs"] += 1
            used[job.rule] += 1
        elif found:
            seconds = found.seconds(job, context)
            hours[label]["model"] += seconds / 3600
        else:
            seconds = 0.0
            hours[label]["unmodelled"] += 1
        row["hours"] += seconds / 3600
    return Estimate(
        run=plan.run, by_kind=by_kind, by_rule=by_rule, download_bytes=sum(fetched) + sum(best_bytes),
        downloads=len(fetched) + len(best_bytes), pending=sorted(set(pending)), weights_kept_bytes=kept, weights_how=how,
        cache_bytes=caches, head_cache_bytes=heads, hours=hours, rule_hours=rule_hours, measured_rules=dict(used),
        best_fetches=len(best_bytes), unmodelled_rules=tuple(sorted(r for r, row in rule_hours.items() if not row["source"]
                                                                   and row["measured_jobs"] < row["jobs"])),
    )


def size(n_bytes: float) -> str:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB")):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes / 1e3:.1f} kB"


def hours_line(label: str, parts: dict) -> str:
    """One kind's hours: the estimate (measured times and time models) and, beside it, the
    sum of its jobs' runtime limits as an upper bound."""
    jobs = parts["jobs"]
    if not jobs:
        return f"{label} hours: none (no {label} job)"
    estimated = parts["measured"] + parts["model"]
    line = (f"{label} hours: {estimated:,.1f} estimated for {jobs - parts['unmodelled']:,} of {jobs:,} jobs "
            f"(measured {parts['measured']:,.1f} + model {parts['model']:,.1f}); at most {parts['limit']:,.1f} "
            "at their runtime limits")
    if parts["unmodelled"]:
        line += f"; {parts['unmodelled']:,} jobs of rules without a time model are not in the estimate"
    return line


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
                 f"(estimated parameters x the bytes of their suite's fetch.stored_dtype; {plan.best_fetches} of them each "
                 "evaluated model's best revision, fetched again for lm-eval once known)")
    lines.append(f"disk at peak: {size(plan.peak_bytes)} = {size(plan.weights_kept_bytes)} of checkpoints "
                 f"({plan.weights_how}) + {size(plan.results_bytes)} of results; a fetch waits while it would leave less "
                 "than fetch.min_free_mb free")
    lines.append(f"results' final size: {size(plan.results_bytes)} "
                 f"(hidden-state caches {size(plan.cache_bytes)} + rank-head caches {size(plan.head_cache_bytes)})")
    for label in ("GPU", "CPU", "network staging"):
        lines.append(hours_line(label, plan.hours[label]))
    measured = ", ".join(f"{rule} ({n:,} jobs)" for rule, n in sorted(plan.measured_rules.items()))
    lines.append(f"  measured: benchmarks/out/{plan.run}/: " + (measured or "none"))
    lines.append("  hours by rule, and where each rule's time model comes from (lmsat.planning.job_times):")
    for rule, row in sorted(plan.rule_hours.items(), key=lambda item: (-item[1]["hours"], item[0])):
        measured_jobs = f", {row['measured_jobs']:,} measured" if row["measured_jobs"] else ""
        source = row["source"] or "NO TIME MODEL"
        jobs = f"{row['jobs']:,} job{'s' if row['jobs'] > 1 else ''}"
        lines.append(f"    {row['hours']:>9,.1f} h  {rule} ({jobs}{measured_jobs}): {source}")
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
    from lmsat.commands.plan_storage import storage_line, storage_traffic  # a storage run's traffic (issue 52)
    from lmsat.planning.job_times import JobContext

    print(storage_line(storage_traffic(jobs, JobContext(plan.config, plan.models, jobs)), size))
    for note in plan.notes:
        print(f"note: {note}")
    return 0
