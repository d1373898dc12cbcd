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

README_COMMAND = "python -m lmsat plan --configfile config/pythia.yaml --gpus 8 --disk-mb 110000"


def quoted_plan(path) -> str:
    """The plan output `path` quotes (the fenced block after `$ README_COMMAND`)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(re.escape("$ " + README_COMMAND) + r"\n(.*?)\n```", text, re.S)
    assert found, f"{path.relative_to(ROOT)} quotes no output of `{README_COMMAND}`"
    return found.group(1)


@pytest.fixture(scope="module")
def pythia(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pythia_plan")
    configfile = str(ROOT / "config" / "pythia.yaml")
    plan = load(configfile)
    jobs = dry_run(configfile, None, directory)
    return plan, jobs, estimate(jobs, plan, directory, gpus=8, disk_mb=110000)


def test_the_docs_quote_the_pythia_plan(pythia):
    assert render(pythia[2]) == quoted_plan(ROOT / "docs" / "paper.md")


def test_the_readme_quotes_lines_of_the_pythia_plan(pythia):
    """The README's excerpt: lines of the plan's output, in its order, `...` where it skips."""
    rendered = render(pythia[2]).splitlines()
    excerpt = [line for line in quoted_plan(ROOT / "README.md").splitlines() if line != "..."]
    assert len(excerpt) >= 4
    positions = [rendered.index(line) if line in rendered else None for line in excerpt]
    assert None not in positions, [line for line, at in zip(excerpt, positions) if at is None]
    assert positions == sorted(positions)


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


def test_a_kind_with_no_job_time_gets_no_estimate_and_says_why(pythia):
    """Issue 44: "CPU hours: 0.0 estimated (... model 0.0), + at most 772.7" for 4,673 CPU jobs."""
    plan, jobs, found = pythia
    lines = {line.split(" hours: ")[0]: line for line in render(found).splitlines() if " hours: " in line}
    cpu = found.hours["CPU"]
    assert cpu["jobs"] == found.by_kind["CPU"] + found.by_kind["local"] > 1000 and cpu["estimated_jobs"] == 0
    assert lines["CPU"] == (f"CPU hours: no estimate: none of its {cpu['jobs']:,} jobs has a measured time "
                            f"(benchmarks/out/pythia/) or a time model; at most {cpu['limit']:,.1f} (their runtime "
                            "limits, an upper bound)")
    gpu = found.hours["GPU"]
    assert 0 < gpu["estimated_jobs"] < gpu["jobs"] == found.by_kind["GPU"]  # analyse_checkpoint has the model
    assert f"estimated for {gpu['estimated_jobs']:,} of {gpu['jobs']:,} jobs" in lines["GPU"]
    assert "0.0 estimated" not in render(found)


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
    assert done.stdout.startswith("plan of run default: 291 jobs"), done.stdout[:300]
    named = lmsat("plan", "--configfile", ROOT / "config" / "config.yaml", "--directory", tmp_path, cwd=tmp_path)
    assert named.stdout.startswith("plan of run default: 291 jobs"), named.stdout[:300]  # not `config`


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
