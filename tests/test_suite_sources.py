"""Every shipped schedule expanded, and a handful of its revision names compared with the
public sources each suite config's header cites (no hub is reachable: the sources are
quoted here, with where they were read).

The planning itself (`snakemake -n` for each suite config) is tests/test_suites.py's.
"""

from __future__ import annotations

import re

import pytest

from lmsat import schedules
from lmsat.config import ConfigError, load_plan, load_yaml

from conftest import ROOT, SCHEMA, shipped_configs

OLMO_TEMPLATE = "stage1-step{step}-tokens{tokens_b}B"

# config -> model -> revision names its sources give (each must be planned), with the source.
SOURCES = {
    # EleutherAI/pythia README.md (a19eecb): "154 checkpoints ... steps 0 (initialization), 1,
    # 2, 4, ..., 512, 1000, and then every 1,000"; its quickstart loads pythia-70m-deduped
    # at step3000.
    "pythia": {"pythia-160m": ["step0", "step1", "step512", "step1000", "step3000", "step143000"]},
    "paper": {"pythia-12b": ["step0", "step2", "step64", "step50000", "step143000"], "gpt2": ["main"]},
    "pythia-deduped": {
        "pythia-70m-deduped": ["step0", "step4", "step3000", "step143000"],
        "pythia-14m-deduped": ["step0", "step143000"],  # the card's "same checkpoint schedule"
    },
    # the same README: seeds 1-9, e.g. huggingface.co/EleutherAI/pythia-160m-seed7
    "polypythia": {"pythia-160m-seed7": ["step0", "step143000"], "pythia-410m-seed9": ["step0", "step143000"]},
    # allenai/OLMo README.md (59a53e3): the final stage-1 branch; the model card: step140000
    "olmo2": {"OLMo-2-0425-1B": ["stage1-step1907359-tokens4001B", "stage1-step140000-tokens294B"]},
    # the repository's card: step-240000 and "every 240000 steps"; huggingface/smollm
    # text/pretraining/smollm2/config_smollm2_135M.yaml (dc52ac1): train_steps 2000000
    "smollm2": {"SmolLM2-135M": ["step-240000", "step-1920000"]},
}

SMOLLM2_135M_TRAIN_STEPS = 2_000_000  # config_smollm2_135M.yaml's train_steps
SMOLLM2_135M_TOKENS_PER_STEP = 64 * 8 * 1 * 2048  # dp x micro_batch_size x accumulation x sequence_length
OLMO2_1B_TOKENS_PER_STEP = 512 * 4096  # OLMo2-1B-stage1.yaml: global_train_batch_size x max_sequence_length

# Configs whose revisions are not a schedule: local-example discovers a user's run folder
# (tests/test_rundir.py plans real ones); published reads EleutherAI's published record, no
# checkpoint (tests/test_published_run.py checks it against the packaged CSV).
NOT_SCHEDULES = {"local-example", "published"}


def plan(name, edit=None):
    config = load_yaml(ROOT / "config" / f"{name}.yaml")
    if edit:
        edit(config)
    return load_plan(config, SCHEMA)


# git's tracked configs: a user's own config/mine.yaml (README) is not shipped
SHIPPED = sorted(p.stem for p in shipped_configs() if p.stem not in NOT_SCHEDULES)


def test_every_shipped_config_is_checked_here():
    if not SHIPPED:
        pytest.skip("not a git checkout: git ls-files says which configs are shipped")
    assert set(SOURCES) | {"config", "pythia-local"} == set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_schedule_expands_in_training_order(name):
    models = plan(name).models
    assert models, name
    for model in models.values():
        assert model.revisions and len(set(model.revisions)) == len(model.revisions), model.name
        assert list(model.steps) == sorted(model.steps) and len(model.steps) == len(model.revisions), model.name
        assert model.final_revision == model.revisions[-1], model.name
        if model.source == "hub":  # nothing known to be missing upstream is planned
            assert not set(schedules.missing_weights(model.id)) & set(model.revisions), model.name
    for model_name, names in SOURCES.get(name, {}).items():
        missing = [r for r in names if r not in models[model_name].revisions]
        assert not missing, f"{name}: {model_name} lacks {missing}"


def test_pythia_schedules_are_the_154_released_steps():
    for name in ("pythia", "paper", "pythia-deduped"):
        for model in plan(name).models.values():
            if model.revisions != ("main",):
                assert len(model.revisions) == 154 and model.steps == tuple(schedules.pythia_steps()), model.name
    toy = plan("config")  # the toy suite's schedule is its own (no upstream)
    expected = tuple(schedules.toy_steps(toy.config["toy"]["max_steps"], base=toy.config["toy"]["log_base"]))
    assert toy.models and all(m.steps == expected for m in toy.models.values())


def test_render_revision_rounds_up_as_olmo_names_its_branches():
    olmo = plan("olmo2").models["OLMo-2-0425-1B"]
    assert olmo.tokens_per_step == OLMO2_1B_TOKENS_PER_STEP
    # allenai/OLMo README.md: 1907359 x 2,097,152 = 4000.02B tokens -> tokens4001B
    assert schedules.render_revision(OLMO_TEMPLATE, 1907359, olmo.tokens_per_step) == "stage1-step1907359-tokens4001B"
    # 2097.152B -> tokens2098B (a public script loads this branch)
    assert schedules.render_revision(OLMO_TEMPLATE, 1000000, olmo.tokens_per_step) == "stage1-step1000000-tokens2098B"
    # rounding to nearest gave names that do not exist (tokens629B for tokens630B)
    assert schedules.render_revision(OLMO_TEMPLATE, 300000, olmo.tokens_per_step) == "stage1-step300000-tokens630B"
    assert schedules.render_revision(OLMO_TEMPLATE, 1700000, olmo.tokens_per_step) == "stage1-step1700000-tokens3566B"
    assert schedules.render_revision(OLMO_TEMPLATE, 0, olmo.tokens_per_step) == "stage1-step0-tokens0B"
    # the stage-2 ingredients' 23852 steps: 50.02B -> tokens51B (the same README)
    assert schedules.render_revision("stage2-ingredient1-step{step}-tokens{tokens_b}B", 23852, olmo.tokens_per_step) \
        == "stage2-ingredient1-step23852-tokens51B"
    # every listed branch is the one the rule names for its step
    for revision, step in zip(olmo.revisions, olmo.steps):
        assert schedules.render_revision(OLMO_TEMPLATE, step, olmo.tokens_per_step) == revision
    assert olmo.final_revision == "stage1-step1907359-tokens4001B"


def test_a_template_schedule_names_olmo_branches_that_exist():
    """A named schedule rendered with the template gives upstream's names (tokens rounded up)."""
    def as_template(config):
        config["suites"]["olmo2"]["revisions"] = {"schedule": "pythia", "template": OLMO_TEMPLATE}

    olmo = plan("olmo2", as_template).models["OLMo-2-0425-1B"]
    named = dict(zip(olmo.steps, olmo.revisions))
    assert named[143000] == "stage1-step143000-tokens300B" and named[1000] == "stage1-step1000-tokens3B"
    assert named[0] == "stage1-step0-tokens0B"


def test_smollm2_list_ends_where_the_evidence_says():
    smol = plan("smollm2").models["SmolLM2-135M"]
    assert smol.tokens_per_step == SMOLLM2_135M_TOKENS_PER_STEP == 1_048_576
    every = 240000  # the card's spacing
    last = SMOLLM2_135M_TRAIN_STEPS // every * every
    assert last == 1_920_000 and last + every > SMOLLM2_135M_TRAIN_STEPS
    assert smol.steps == tuple(range(every, last + 1, every))
    assert smol.revisions == tuple(f"step-{n}" for n in smol.steps)
    assert smol.final_revision == "step-1920000"
    assert (smol.hidden_size, smol.num_layers, smol.vocab_size, smol.tied_head) == (576, 30, 49152, True)


def test_polypythia_full_schedule_plans_around_the_missing_weights_of_202():
    def full(config):
        config["suites"]["polypythia"]["revisions"]["subsample"] = 0

    polypythia = plan("polypythia", full)
    models = polypythia.models
    left_out = {}
    for name, model in models.items():
        absent = [s for s in schedules.pythia_steps() if f"step{s}" not in model.revisions]
        if absent:
            left_out[name] = absent
    assert left_out == {"pythia-410m-seed9": [40000], "pythia-410m-seed6": [88000], "pythia-410m-seed2": [111000]}
    for name, (step,) in left_out.items():  # each named in the library with the issue
        assert schedules.missing_weights(models[name].id) == {f"step{step}": "EleutherAI/pythia#202"}
        assert len(models[name].revisions) == 153
    assert "step40000" in models["pythia-410m-seed8"].revisions  # only the reported branches
    # the plan says so (printed by `lmsat plan` and logged at planning)
    assert [n for n in polypythia.notes if "#202" in n] == [
        f"model {name} (EleutherAI/{name}): revision step{step} holds no weights upstream (EleutherAI/pythia#202); "
        "the plan leaves it out" for name, (step,) in sorted(left_out.items(), key=lambda kv: list(models).index(kv[0]))
    ]


def test_a_list_naming_a_missing_polypythia_branch_is_refused_naming_202():
    def listed(config):
        model = next(m for m in config["suites"]["polypythia"]["models"] if m["name"] == "pythia-410m-seed6")
        model["revisions"] = {"list": ["step0", "step87000", "step88000", "step143000"]}

    with pytest.raises(ConfigError) as error:
        plan("polypythia", listed)
    message = str(error.value)
    assert "models[41].revisions.list[2]" in message and "'step88000'" in message
    assert "EleutherAI/pythia#202" in message and "remove it from the list" in message


def test_selecting_a_missing_polypythia_branch_plans_it_only_where_it_exists():
    def select(config):
        config["suites"]["polypythia"]["revisions"]["subsample"] = 0
        config["select"] = {"models": ["pythia-410m-seed8", "pythia-410m-seed9"], "revisions": ["step40000", "step41000"]}

    models = plan("polypythia", select).models
    assert models["pythia-410m-seed8"].revisions == ("step40000", "step41000")
    assert models["pythia-410m-seed9"].revisions == ("step41000",)


def test_config_headers_cite_their_sources():
    """Each newer suite's header says where its facts come from, commit included."""
    cited = {
        "smollm2": ["huggingface/smollm", "config_smollm2_135M.yaml", "dc52ac1", "train_steps 2000000"],
        "olmo2": ["allenai/OLMo", "59a53e3", "configs/official-0425/OLMo2-1B-stage1.yaml", "OLMo-2-0425-1B.csv"],
        "polypythia": ["EleutherAI/pythia README.md", "a19eecb", "EleutherAI/pythia#202"],
        "pythia-deduped": ["EleutherAI/pythia README.md", "a19eecb", "pythia-14m-deduped", "could not be checked"],
    }
    for name, needles in cited.items():
        header = re.match(r"(?:#.*\n)+", (ROOT / "config" / f"{name}.yaml").read_text()).group(0)
        assert "Sources" in header, name
        for needle in needles:
            assert needle in header, (name, needle)
