"""`python -m lmsat plan`: the jobs, downloads, disk and hours of a config's plan, from its
real dry run (Snakemake on the workflow, in a temp directory; no hub is reached)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from lmsat.checkpoints.fetch import estimated_parameters
from lmsat.commands.plan import dry_run, estimate, load, render

from conftest import ROOT, small_toy_config


@pytest.fixture(scope="module")
def pythia(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pythia_plan")
    configfile = str(ROOT / "config" / "pythia.yaml")
    plan = load(configfile)
    jobs = dry_run(configfile, None, directory)
    return plan, jobs, estimate(jobs, plan, directory, gpus=8, disk_mb=110000)


def test_the_pythia_plan_adds_up(pythia):
    plan, jobs, found = pythia
    assert sum(found.by_kind.values()) == len(jobs)
    assert found.by_rule["analyse_checkpoint"] == ("GPU", sum(len(m.revisions) for m in plan.models.values()))
    assert found.by_kind["GPU"] == sum(1 for job in jobs if job.gpus >= 1)
    fetches = [job for job in jobs if job.rule == "fetch_checkpoint"]
    assert found.by_kind["network staging"] >= len(fetches) == 1540  # 10 models x 154 revisions
    one_each = sum(estimated_parameters(m) * 2 for m in plan.models.values())  # float16
    evaluated = {job.wildcards["model"] for job in jobs if job.rule == "evaluate_checkpoint"}
    assert len(evaluated) == 10 and found.best_fetches == 10  # each one's best revision, fetched again
    best = sum(estimated_parameters(plan.models[m]) * 2 for m in evaluated)
    assert found.download_bytes == pytest.approx(154 * one_each + best)
    assert 45e9 < one_each < 55e9  # one revision of the ten models: 49 GB on the hub
    assert found.hours["GPU"]["model"] > 0 and found.hours["GPU"]["measured"] == 0  # nothing measured there


def test_every_job_of_the_pythia_plan_has_a_time_and_each_kind_an_estimate_beside_its_bound(pythia):
    """Issue 50: `CPU hours: no estimate ... at most 3,852.7` and `GPU hours: 17.7 estimated ... + for
    the other 163, at most 1,144.0`: lm-eval, the rank heads and every CPU rule had no time model."""
    plan, jobs, found = pythia
    assert found.unmodelled_rules == ()
    lines = {line.split(" hours: ")[0]: line for line in render(found).splitlines() if " hours: " in line}
    for label in ("GPU", "CPU", "network staging"):
        part = found.hours[label]
        assert part["unmodelled"] == 0 and part["jobs"] > 0 and part["model"] > 0, label
        assert part["model"] < part["limit"], label  # an estimate, beside the bound the runtime limits give
        assert lines[label] == (f"{label} hours: {part['model']:,.1f} estimated for {part['jobs']:,} of {part['jobs']:,} jobs "
                                f"(measured 0.0 + model {part['model']:,.1f}); at most {part['limit']:,.1f} at their "
                                "runtime limits")
    for rule in ("evaluate_checkpoint", "train_rank_head", "compare_checkpoint_caches", "compute_checkpoint_metric"):
        assert found.rule_hours[rule]["hours"] > 0 and found.rule_hours[rule]["source"], rule
    rendered = render(found)
    assert "NO TIME MODEL" not in rendered and "no estimate" not in rendered


def test_a_run_with_measured_job_times_uses_them(tmp_path):
    config = small_toy_config()
    configfile = tmp_path / "small.yaml"
    configfile.write_text(yaml.safe_dump(config))
    plan = load(str(configfile))
    jobs = dry_run(str(configfile), None, tmp_path)
    before = estimate(jobs, plan, tmp_path, gpus=1, disk_mb=None)
    assert before.measured_rules == {} and before.hours["CPU"]["measured"] == 0
    # measured times of one model's per-checkpoint jobs (Snakemake benchmark files)
    analysed = [job for job in jobs if job.rule == "analyse_checkpoint"]
    measured = [job for job in analysed if job.wildcards["model"] == "toy-d16"]
    for index, job in enumerate(measured):
        path = tmp_path / "benchmarks" / "out" / plan.run / "analyse_checkpoint" / "toy-d16" / f"step{index}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("s\th:m:s\tmax_rss\n" f"{300 + 100 * index}\t0:05:00\t100\n")
    mean = sum(300 + 100 * i for i in range(len(measured))) / len(measured)
    after = estimate(jobs, plan, tmp_path, gpus=1, disk_mb=None)
    assert after.measured_rules == {"analyse_checkpoint": len(analysed)}
    ratio = {job.wildcards["model"]: estimated_parameters(plan.models[job.wildcards["model"]]) /
             estimated_parameters(plan.models["toy-d16"]) for job in analysed}
    expected = sum(mean * ratio[job.wildcards["model"]] for job in analysed) / 3600  # other models: scaled
    assert after.hours["CPU"]["measured"] == pytest.approx(expected)
    assert after.hours["CPU"]["model"] < before.hours["CPU"]["model"]  # the model no longer counts them
    assert f"measured: benchmarks/out/{plan.run}/: analyse_checkpoint ({len(analysed)} jobs)" in render(after)


def test_the_command_prints_the_plan(tmp_path):
    config = small_toy_config(models=("toy-d16",))
    configfile = tmp_path / "one.yaml"
    configfile.write_text(yaml.safe_dump(config))
    result = subprocess.run([sys.executable, "-m", "lmsat", "plan", "--configfile", str(configfile), "--directory",
                             str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"plan of run {config['run'] or 'one'}: ") and "GPU hours: none (no GPU job)" in result.stdout
    assert "analyse_checkpoint (CPU)" in result.stdout


def test_a_profile_with_job_groups_counts_each_job_once(tmp_path):
    """profiles/slurm groups the metric jobs; its dry run lists some members in two groups."""
    from collections import Counter

    configfile = tmp_path / "small.yaml"
    configfile.write_text(yaml.safe_dump(small_toy_config()))
    plain = dry_run(str(configfile), None, tmp_path)
    grouped = dry_run(str(configfile), str(ROOT / "profiles" / "slurm"), tmp_path)
    assert Counter(job.rule for job in grouped) == Counter(job.rule for job in plain)
    assert len({job.jobid for job in grouped}) == len(grouped)


def lmsat(*args, cwd) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "lmsat", *map(str, args)], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env=env)


@pytest.mark.parametrize("argument", [("--gpus", "-1"), ("--gpus", "0"), ("--disk-mb", "-5"), ("--disk-mb", "0")])
def test_non_positive_gpus_or_disk_are_refused_before_any_work(tmp_path, argument):
    """Issue 31, case 2: `plan --gpus -1 --disk-mb -5` printed a peak disk of a seventh of the real one."""
    done = lmsat("plan", *argument, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"argument {argument[0]}: {argument[1]} is not positive; fix: give a number above 0" in done.stderr
    assert not done.stdout  # nothing planned


def test_a_missing_config_file_and_a_bad_config_are_named_without_a_traceback(tmp_path):
    done = lmsat("plan", "--configfile", tmp_path / "nothere.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "FileNotFoundError" not in done.stderr, done.stderr
    assert f"--configfile {tmp_path / 'nothere.yaml'}: no such file. Fix:" in done.stderr
    config = small_toy_config(models=("toy-d16",))
    config["sample"]["n_tokens"] = -3
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    done = lmsat("plan", "--configfile", tmp_path / "bad.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("lmsat plan: ConfigError: config key 'sample.n_tokens'"), done.stderr
    for debug in (["--debug", "plan"], ["plan", "--debug"]):  # --debug keeps the traceback, before or after the command
        done = lmsat(*debug, "--configfile", tmp_path / "bad.yaml", cwd=tmp_path)
        assert done.returncode != 0 and "Traceback" in done.stderr and "config key 'sample.n_tokens'" in done.stderr


def test_init_names_a_config_error_without_a_traceback(tmp_path):
    """`lmsat init` on a folder without checkpoints: its named error only; --debug adds the traceback."""
    (tmp_path / "run" / "notes").mkdir(parents=True)
    done = lmsat("init", tmp_path / "run", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "holds no checkpoint directory" in done.stderr
    done = lmsat("init", tmp_path / "run", "--debug", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" in done.stderr and "holds no checkpoint directory" in done.stderr


def test_a_directory_that_does_not_exist_is_refused_and_nothing_is_created(tmp_path):
    """Issue 46, case 6: `lmsat plan --directory /nonexistent` printed a plan in which nothing was
    done yet, with rc 0, and created /nonexistent/.snakemake/."""
    missing = tmp_path / "nonexistent"
    for config in ([], ["--configfile", ROOT / "config" / "config.yaml"]):
        done = lmsat("plan", *config, "--directory", missing, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr and not done.stdout, done.stderr
        assert f"--directory {missing}: no such directory. Fix: give the directory the run is in" in done.stderr
        assert not missing.exists()
    (tmp_path / "a_file").write_text("")
    done = lmsat("plan", "--directory", tmp_path / "a_file", cwd=tmp_path)
    assert done.returncode == 2 and f"--directory {tmp_path / 'a_file'}: not a directory" in done.stderr


def test_the_default_config_plans_in_another_directory_as_run_default(tmp_path):
    """Without --configfile, the plan is config/config.yaml's (run `default`, as Snakemake names it),
    wherever --directory points (Snakemake looked for config/config.yaml there)."""
    done = lmsat("plan", "--directory", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("plan of run default: 296 jobs"), done.stdout[:300]
    named = lmsat("plan", "--configfile", ROOT / "config" / "config.yaml", "--directory", tmp_path, cwd=tmp_path)
    assert named.stdout.startswith("plan of run default: 296 jobs"), named.stdout[:300]  # not `config`


def test_a_binary_file_given_as_config_is_named_without_a_traceback(tmp_path):
    """Issue 46, case 13: `lmsat plan --configfile model.safetensors` gave a UnicodeDecodeError traceback."""
    import torch
    from safetensors.torch import save_file

    save_file({"embed_out.weight": torch.randn(64, 16)}, tmp_path / "model.safetensors")
    done = lmsat("plan", "--configfile", "model.safetensors", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and not done.stdout, done.stderr
    assert done.stderr.startswith("lmsat plan: ConfigFileError: config file model.safetensors: a binary file, not a "
                                  "YAML config (byte "), done.stderr
    assert "Fix: give a YAML config file" in done.stderr and not (tmp_path / ".snakemake").exists()


# ------------------------------------------------------------------ time models (issue 50, item 1)


def test_every_rule_of_the_workflow_has_a_time_model(tmp_path):
    """Every rule Snakemake lists for the workflow (each config plans a subset of them) has a
    time model; the named targets lmsat.planning.job_times knows are the workflow's."""
    from lmsat.planning.job_times import TIME_MODELS, section_targets, time_model

    result = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules", "-s", str(ROOT / "Snakefile"), "--directory",
                             str(tmp_path), "--configfile", str(ROOT / "config" / "config.yaml")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rules = set(result.stdout.split())
    assert {"analyse_checkpoint", "evaluate_checkpoint", "train_rank_head", "all", "fig1a"} <= rules
    assert sorted(rule for rule in rules if time_model(rule) is None) == []
    assert set(TIME_MODELS) | section_targets() <= rules | {"all", "summary", "stage_all"}


def test_time_models_grow_with_their_jobs_shapes():
    """A wider model's per-checkpoint jobs take longer; a longer download or lm-eval task too."""
    from lmsat.commands.plan import Job
    from lmsat.planning.job_times import JobContext, time_model

    plan = load(str(ROOT / "config" / "pythia.yaml"))
    context = JobContext(plan.config, plan.models)
    rules = {"analyse_checkpoint": "cuda", "compute_checkpoint_metric": "", "compare_checkpoint_caches": "",
             "fetch_checkpoint": "", "evaluate_checkpoint": "cuda", "train_rank_head": "cuda"}
    for rule, device in rules.items():
        times = []
        for model in ("pythia-14m", "pythia-410m", "pythia-12b"):
            job = Job(rule=rule, wildcards=dict(model=model, revision="step1000", metric="effective_rank", task="sciq",
                                                rank="64"), resources=dict(gpu="1" if device else "0"))
            times.append(time_model(rule).seconds(job, context))
        assert 0 < times[0] < times[1] < times[2], (rule, times)


@pytest.mark.parametrize("name", ["config", "pythia-local", "published"])
def test_every_job_of_the_smaller_shipped_plans_has_a_time(tmp_path, name):
    """The suites' plans are estimated in tests/test_suites.py, Pythia's above."""
    configfile = str(ROOT / "config" / f"{name}.yaml")
    found = estimate(dry_run(configfile, None, tmp_path), load(configfile), tmp_path, gpus=1, disk_mb=None)
    assert found.unmodelled_rules == () and all(part["unmodelled"] == 0 for part in found.hours.values())
    assert sum(part["model"] for part in found.hours.values()) > 0


# ------------------------------------------------------------------ disk at peak (issue 50, item 2)

SIZE = re.compile(r"([\d.]+) (kB|MB|GB|TB)")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def test_disk_at_peak_is_the_sum_it_prints(tmp_path):
    """Issue 50: OLMo 1 printed `disk at peak: 29.7 GB (115.3 GB of checkpoints: ... (48 checkpoints
    being fetched ...` for a run of 12: the explanation was larger than the total it explained."""
    configfile = str(ROOT / "config" / "olmo1.yaml")
    plan = load(configfile)
    jobs = dry_run(configfile, None, tmp_path)
    found = estimate(jobs, plan, tmp_path, gpus=8, disk_mb=110000)
    fetched = sum(1 for job in jobs if job.rule == "fetch_checkpoint")
    assert found.peak_bytes == found.weights_kept_bytes + found.cache_bytes + found.head_cache_bytes
    assert found.weights_kept_bytes <= found.download_bytes
    line = next(line for line in render(found).splitlines() if line.startswith("disk at peak: "))
    total, checkpoints, *_, results = [float(n) * UNITS[u] for n, u in SIZE.findall(line)]
    assert line.startswith(f"disk at peak: {total / UNITS[SIZE.search(line).group(2)]:.1f}")
    assert abs(total - (checkpoints + results)) <= 0.051 * UNITS[SIZE.search(line).group(2)]  # printed to 0.1
    assert f"all {fetched} at once" in line and fetched == 11  # every checkpoint fits: none counted twice


def test_the_checkpoints_on_disk_are_their_arithmetic_and_never_more_than_the_download():
    from lmsat.commands.plan import weights_at_peak

    fetch = dict(remove_after_use=True)
    sizes = [1e9] * 10 + [4e9] * 10
    kept, how = weights_at_peak(sizes, [4500] * 20, [], fetch, gpus=2, disk_mb=9000)  # 2 being fetched + 2 being read
    assert kept == 4 * 4e9 and how == ("(2 being fetched (--disk-mb 9000 over the largest's disk_mb 4,500) + 2 being read "
                                       "(--gpus 2)) x the largest (4.0 GB) = 16.0 GB")
    kept, how = weights_at_peak(sizes, [4500] * 20, [4e9, 4e9], fetch, gpus=2, disk_mb=9000)
    assert kept == 6 * 4e9 and how.endswith("+ 2 final revisions awaiting lm-eval (8.0 GB)")
    kept, how = weights_at_peak(sizes[:3], [4500] * 3, [], fetch, gpus=8, disk_mb=None)  # 8 + 8 >= 3
    assert kept == 3e9 and how.startswith("all 3 at once")
    kept, how = weights_at_peak([1e9] * 5 + [50e9], [55050] * 6, [], fetch, gpus=2, disk_mb=60000)  # 3 x 50 GB > all
    assert kept == 55e9 and how.startswith("all 6, fewer than (1 being fetched")
    kept, how = weights_at_peak(sizes, [4500] * 20, [], dict(remove_after_use=False), gpus=2, disk_mb=9000)
    assert kept == sum(sizes) and "keeps every one" in how
    assert weights_at_peak([], [], [], fetch, gpus=2, disk_mb=None) == (0.0, "no checkpoint to fetch")
