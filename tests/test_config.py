"""Config validation: defaults, schedules, and errors that name the key and the fix."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from dataclasses import asdict

import pytest
import yaml

from lmsat.core import schedules
from lmsat.errors import ConfigError
from lmsat.planning.config_files import load_yaml
from lmsat.planning.load import load_plan

from conftest import ROOT, SCHEMA, clone_like


def plan(config):
    return load_plan(config, SCHEMA)


def test_default_config_expands_to_toy_checkpoints(default_config):
    p = plan(default_config)
    assert list(p.models) == ["toy-d16", "toy-d32", "toy-d64", "toy-d128"]
    toy = p.models["toy-d16"]
    assert toy.revisions[0] == "step0" and toy.final_revision == f"step{default_config['toy']['max_steps']}"
    assert toy.id == "lmsat-toy/toy-d16" and toy.pretrained_source("step0")[1]["local_files_only"]
    assert p.config["extraction"]["dtype"] == "float32"  # a default filled in


def test_pythia_config_has_154_revisions_per_model():
    p = plan(load_yaml(ROOT / "config" / "pythia.yaml"))
    assert len(p.models) == 10
    for model in p.models.values():
        assert len(model.revisions) == 154
        assert model.revisions[:4] == ("step0", "step1", "step2", "step4")
        assert model.final_revision == "step143000"
    assert p.models["pythia-12b"].vocab_size == 50688
    assert p.models["pythia-160m"].id == "EleutherAI/pythia-160m"


def test_pythia_schedule():
    steps = schedules.pythia_steps()
    assert len(steps) == 154 and steps[:12] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    assert steps[-1] == 143000 and all(b > a for a, b in zip(steps, steps[1:]))


def test_explicit_revision_lists_of_other_suites(default_config):
    default_config["suites"]["olmo"] = {
        "tokenizer": "toy",
        "tokens_per_step": 4194304,
        "revisions": {"schedule": "list", "list": ["stage1-step2000-tokens9B", "stage1-step1000-tokens5B"]},
        "models": [{"name": "olmo-1b", "id": "allenai/OLMo-2-0425-1B", "hidden_size": 2048}],
    }
    default_config["suites"]["amber"] = {
        "tokenizer": "toy",
        "revisions": {"schedule": "list", "list": ["ckpt_000", "ckpt_359"], "step_regex": "ckpt_(\\d+)"},
        "models": [{"name": "amber", "id": "LLM360/Amber", "hidden_size": 4096}],
    }
    p = plan(default_config)
    assert p.models["olmo-1b"].revisions == ("stage1-step1000-tokens5B", "stage1-step2000-tokens9B")
    assert p.models["olmo-1b"].steps == (1000, 2000)
    assert p.models["amber"].steps == (0, 359)


def test_revision_template_with_tokens():
    # 4.19B tokens: rounded up, as OLMo names its branches (tests/test_suite_sources.py)
    assert schedules.render_revision("stage1-step{step}-tokens{tokens_b}B", 1000, 4194304) == "stage1-step1000-tokens5B"


def test_log_subsample_keeps_ends():
    steps = schedules.pythia_steps()
    kept = schedules.log_subsample(steps, 20)
    assert kept[0] == 0 and kept[-1] == 143000 and 15 <= len(kept) <= 21


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c.update(bogus=1), "bogus"),
        (lambda c: c["sample"].update(n_tokens=-5), "sample.n_tokens"),
        (lambda c: c["toy"].update(train_tokens=-1), "toy.train_tokens"),
        (lambda c: c["suites"]["toy"]["models"][1].update(hidden_size=0), "suites.toy.models[1].hidden_size"),
        (lambda c: c["suites"]["toy"]["models"][0].update(colour="red"), "suites.toy.models[0].colour"),
        (lambda c: c["sample"].update(corpus="pile"), "sample.corpus"),
        (lambda c: c.update(metrics=["loss", "nonsense"]), "metrics[1]"),
        (lambda c: c["suites"]["toy"]["models"][0].update(tokenizer="gpt2"), "suites.toy.models[0].tokenizer"),
        (lambda c: c.update(bottleneck={"models": ["toy-d32"], "ranks": [8, 64]}), "bottleneck.ranks[1]"),
        (lambda c: c.update(bottleneck={"models": ["toy-d999"], "ranks": [8]}), "bottleneck.models[0]"),
        (
            lambda c: c["suites"]["toy"]["models"].append(
                {"name": "mine", "source": "local", "id": "/nonexistent/m", "hidden_size": 8, "revisions": {"list": ["step1"]}}
            ),
            "suites.toy.models[4].id",
        ),
        (
            lambda c: c["suites"]["toy"]["models"].append({"name": "toy-d16", "source": "toy", "hidden_size": 8}),
            "suites.toy.models[4].name",
        ),
        (lambda c: c["corpora"].update(mine={"type": "text_files", "files": ["/nonexistent.txt"]}), "corpora.mine.files[0]"),
    ],
)
def test_bad_config_names_the_key(default_config, mutate, key):
    mutate(default_config)
    with pytest.raises(ConfigError) as error:
        plan(default_config)
    assert error.value.key == key
    assert f"'{key}'" in str(error.value) and "Fix:" in str(error.value)


def test_rank_error_names_model_and_hidden_size(default_config):
    default_config["bottleneck"] = {"models": ["toy-d32"], "ranks": [64]}
    with pytest.raises(ConfigError, match="exceeds the hidden size d=32 of model toy-d32"):
        plan(default_config)


def test_local_model_without_weights(tmp_path, default_config):
    (tmp_path / "step1").mkdir()
    (tmp_path / "step1" / "config.json").write_text("{}")
    (tmp_path / "step1" / "pytorch_model.bin").write_bytes(b"pickle")
    default_config["suites"]["toy"]["models"].append(
        {"name": "mine", "source": "local", "id": str(tmp_path), "hidden_size": 8, "revisions": {"list": ["step1"]}}
    )
    with pytest.raises(ConfigError, match="allow_pickle"):
        plan(default_config)
    default_config["suites"]["toy"]["models"][-1]["allow_pickle"] = True
    assert plan(default_config).models["mine"].revisions == ("step1",)


def _snakemake(workdir, *args):
    """Snakemake on this checkout's workflow in `workdir`, laid out as a fresh clone (never in
    the checkout itself, whose results/ and .snakemake/ are the user's)."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(clone_like(workdir)),
         *args],
        capture_output=True, text=True, timeout=300,
    )


def test_bad_config_fails_before_any_job(tmp_path, default_config):
    default_config["bottleneck"] = {"models": ["toy-d16"], "ranks": [4, 32]}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(default_config))
    result = _snakemake(tmp_path, "-n", "--configfile", str(bad))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "bottleneck.ranks[1]" in output and "exceeds the hidden size" in output
    assert "Job stats" not in output


def test_pythia_plan_is_offline_and_complete(tmp_path):
    result = _snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config" / "pythia.yaml"), "-q", "rules")
    assert result.returncode == 0, result.stderr[-2000:]
    counts = dict(
        line.split()[:2] for line in result.stdout.splitlines() if line.strip() and line.split()[-1].isdigit() and len(line.split()) == 2
    )
    assert counts["analyse_checkpoint"] == str(10 * 154)
    assert "train_toy_model" not in counts  # --configfile replaces the toy default
    # and Snakemake says so (issue 44: it said "is extended by additional config")
    assert "Config file config/config.yaml is replaced by additional config" in result.stdout + result.stderr
    assert "is extended by" not in result.stdout + result.stderr


def test_snakemake_lists_only_the_configfile_given_as_its_config_files(tmp_path):
    """Issue 50, item 11: with --configfile, Snakemake's header listed config/config.yaml among
    the config files ("Config file(s): [.../published.yaml, 'config/config.yaml']") while the
    README says a --configfile replaces the default: it lists the file given alone; without
    one, the default."""
    given = _snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config" / "published.yaml"), "-q", "rules")
    assert given.returncode == 0, given.stderr[-2000:]
    listed = re.search(r"Config file\(s\): (.*)", given.stdout + given.stderr).group(1)
    assert "published.yaml" in listed and "config.yaml'" not in listed, listed
    default = _snakemake(tmp_path, "-n", "-q", "rules")
    assert default.returncode == 0, default.stderr[-2000:]
    assert re.search(r"Config file\(s\): \['config/config.yaml'\]", default.stdout + default.stderr)


def test_model_entries_do_not_depend_on_the_order_of_the_models(default_config):
    """Entries reach jobs as params (a rerun trigger): reordering the models must not change them."""
    shuffled = copy.deepcopy(default_config)
    shuffled["suites"]["toy"]["models"].reverse()
    before, after = load_plan(default_config, SCHEMA).models, load_plan(shuffled, SCHEMA).models
    assert before.keys() == after.keys()
    for name in before:
        assert asdict(before[name]) == asdict(after[name]), name
    assert before["toy-d32"].key == "suites.toy.models[name=toy-d32]"


def test_models_are_planned_by_size_not_by_name(default_config):
    """The plan's order is every table's and figure's: Pythia by size (1b before 1.4b, which
    share d = 2048), whatever order the config lists the models in."""
    pythia = load_yaml(ROOT / "config" / "pythia.yaml")
    by_size = ["14m", "31m", "70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b"]
    models = pythia["suites"]["pythia"]["models"]
    models.sort(key=lambda m: m["name"])  # 1.4b, 12b, 14m, 160m, ...
    assert [m["name"] for m in models][:3] == ["pythia-1.4b", "pythia-12b", "pythia-14m"]
    assert list(plan(pythia).models) == [f"pythia-{size}" for size in by_size]
    default_config["suites"]["toy"]["models"].sort(key=lambda m: m["name"])
    assert list(plan(default_config).models) == ["toy-d16", "toy-d32", "toy-d64", "toy-d128"]


def test_select_cuts_the_plan_to_models_and_revisions(default_config):
    default_config["select"] = {"models": ["toy-d32", "toy-d64"], "revisions": ["step0", "step800"]}
    default_config["bottleneck"]["models"] = ["toy-d16", "toy-d32"]
    p = plan(default_config)
    assert list(p.models) == ["toy-d32", "toy-d64"]
    assert all(m.revisions == ("step0", "step800") and m.steps == (0, 800) for m in p.models.values())
    assert p.config["bottleneck"]["models"] == ["toy-d32"]


@pytest.mark.parametrize("select, key", [
    ({"models": ["toy-d1024"]}, "select.models[0]"),
    ({"revisions": ["step999999"]}, "select.revisions"),
])
def test_select_of_what_the_config_lacks_names_the_key(default_config, select, key):
    default_config["select"] = select
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        plan(default_config)


def test_command_line_strings_get_their_schema_types(default_config):
    """`snakemake --config toy='{max_steps: 16}'` gives '16' (YAML BaseLoader): typed here."""
    default_config["toy"]["max_steps"] = "16"
    default_config["scaling"]["B"] = "4.5"
    default_config["suites"]["toy"]["models"][0]["hidden_size"] = "8"
    default_config["bottleneck"]["full_rank"] = "false"
    p = plan(default_config)
    assert p.config["toy"]["max_steps"] == 16 and p.config["scaling"]["B"] == 4.5
    assert p.models["toy-d16"].hidden_size == 8 and p.config["bottleneck"]["full_rank"] is False
    default_config["toy"]["max_steps"] = "many"
    with pytest.raises(ConfigError, match="toy.max_steps"):
        plan(default_config)


def test_select_from_the_command_line_reaches_the_plan(tmp_path):
    """The documented way to run a slice: a typed --config value, no config file."""
    result = _snakemake(tmp_path, "-n", "--quiet", "rules", "--config", "select={models: [toy-d32], revisions: [step0, step800]}",
                        "toy={max_steps: 800}", "--", "fig1a")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = dict(line.split()[:2] for line in result.stdout.splitlines() if len(line.split()) == 2 and line.split()[-1].isdigit())
    assert counts["train_toy_model"] == "1" and counts["compute_checkpoint_metric"] == "2", result.stdout
    # --config items alone extend the default config/config.yaml (no --configfile to replace it)
    assert "Config file config/config.yaml is extended by additional config" in result.stdout + result.stderr


def test_a_target_the_config_turns_off_says_which_targets_it_makes(tmp_path):
    result = _snakemake(tmp_path, "-n", "--config", "ngrams={corpora: []}", "--", "fig7")
    assert result.returncode != 0
    output = result.stdout + result.stderr  # Snakemake prints planning errors to stdout
    assert "target fig7: this config makes no fig7" in output and "fig1a, fig1b" in output
