"""Every shipped schedule expanded, and a handful of its revision names compared with the
public sources each suite config's header cites (no hub is reachable: the sources are
quoted here, with where they were read).

The planning itself (`snakemake -n` for each suite config) is tests/test_suites.py's.
"""

from __future__ import annotations

import re

import pytest

from lmsat.core import schedules
from lmsat.errors import ConfigError
from lmsat.planning.config_files import load_yaml
from lmsat.planning.load import load_plan

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
    # the model card's "naming convention is step1000-tokens4B"; public scripts loading
    # allenai/OLMo-1B-hf (the final branch in several)
    "olmo1": {"OLMo-1B-hf": ["step1000-tokens4B", "step10000-tokens41B", "step738020-tokens3094B"]},
    # allenai/DataDecide release/model_card.md (68abc49): "step69369-seed-default"
    "datadecide": {"DataDecide-dolma1_7-1B": ["step69369-seed-default"], "DataDecide-dolma1_7-4M": ["step0-seed-default"]},
    # LLM360/Amber's card: ckpt_000 .. ckpt_358, ckpt_359 (the final) on main; its example loads ckpt_356
    "amber": {"Amber": ["ckpt_000", "main"]},
    # huggingface.co/TinyLlama/tinyLLaMA-v1.1-checkpoints/tree/step-300000 ("add checkpoint step-300000")
    "tinyllama": {"tinyLLaMA-v1.1": ["step-300000", "step-980000"]},
    # config/pins/*.csv: the hub's tree pages at those commits (each row's source)
    "pico": {"pico-decoder-tiny": ["step0", "step17000", "step125000"], "pico-decoder-small": ["step0", "step33000"]},
    # public scripts loading HuggingFaceTB/SmolLM3-3B-checkpoints at these three branches
    "smollm3": {"SmolLM3-3B": ["stage1-step-3440000", "stage2-step-4200000", "stage3-step-4720000"]},
    "cross-suite": {"pythia-14m": ["step0", "step143000"], "DataDecide-dolma1_7-4M": ["step5725-seed-default"],
                    "pico-decoder-tiny": ["step125000"], "OLMo-1B-hf": ["step738020-tokens3094B"]},
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
    return load_plan(config, SCHEMA, config_dir=ROOT / "config")  # pins files beside the config


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


# ------------------------------------------------------------------ suites released since the paper
# Each fact below is quoted from the source its config's header names; the tests expand the
# shipped configs and compare.

OLMO1_1B_TOKENS_PER_STEP = 2048 * 2048  # configs/official/OLMo-1B.yaml: global_train_batch_size x max_sequence_length
# checkpoints/official/OLMo-1B.csv (allenai/OLMo c513a574919a): the last step before the gap and the first after
# it (allenai/OLMo#879), and the last one
OLMO1_1B_GAP, OLMO1_1B_LAST = (117850, 330000), 738020

# allenai/DataDecide release/model_card.md (68abc49), "Hyperparameters": size -> (batch size, hidden dim,
# layers, training steps, model size in M)
DATADECIDE_CARD = {
    "4M": (32, 64, 8, 5725, 3.7), "6M": (32, 96, 8, 9182, 6.0), "8M": (32, 128, 8, 13039, 8.5),
    "10M": (32, 144, 8, 15117, 9.9), "14M": (32, 192, 8, 21953, 14.4), "16M": (32, 208, 8, 24432, 16.0),
    "20M": (64, 192, 16, 14584, 19.1), "60M": (96, 384, 16, 29042, 57.1), "90M": (160, 528, 16, 29901, 97.9),
    "150M": (192, 768, 12, 38157, 151.9), "300M": (320, 1024, 16, 45787, 320.0), "530M": (448, 1344, 16, 57786, 530.1),
    "750M": (576, 1536, 16, 63589, 681.3), "1B": (704, 2048, 16, 69369, 1176.8),
}
# checkpoints/weka_paths.jsonl (same commit): checkpoint directories of each default-seed run, by
# size -> (every, count up to the card's last step); 530M's last directory is step57776
DATADECIDE_CHECKPOINTS = {
    "4M": (1250, 6), "6M": (1250, 9), "8M": (1250, 12), "10M": (1250, 14), "14M": (1250, 19), "16M": (1250, 21),
    "20M": (1250, 13), "60M": (1250, 25), "90M": (1250, 25), "150M": (1250, 32), "300M": (1250, 38),
    "530M": (1250, 48), "750M": (1250, 52), "1B": (2500, 29),
}
DATADECIDE_VOCAB = 50304  # the card's totals are 16 L d^2 + 50304 d (one 50304 x d matrix)
# allenai/OLMo, branch DataDecide (7094aab0) scripts/ladder.py: MODEL_CONFIG_150M, weight_tying=False, the
# other sizes update_with(d_model, n_heads, n_layers, mlp_ratio) of it; its hard-coded sizes (4M: 3_744_832 =
# 16 L d^2 + 50304 d + 17 d of norm weights) are the card's, with one 50304 x d matrix: not the head
DATADECIDE_TIED = False

AMBER_CHUNKS = 360  # LLM360/amber-train main.py: N_CHUNKS
AMBER_SEQUENCES_PER_CHUNK = 1_706_976  # TRAIN_EXAMPLES_PER_CHUNK
AMBER_TOTAL_TOKENS_B = 1259.13  # the README's data mix total

# pico-lm/pico-train (f0bfdf4): configs/pico-decoder-{size}.yaml d_model; BATCH_SIZE x MAX_SEQ_LEN;
# save_every_n_steps; each repository's main: "trained to 125k steps"
PICO_D = {"tiny": 96, "small": 384, "medium": 768, "large": 1536}
PICO_TOKENS_PER_STEP, PICO_EVERY, PICO_LAST = 1024 * 2048, 1000, 125000

# the SmolLM3-3B-checkpoints card: every 40,000 steps; stage ends and checkpoint counts
SMOLLM3_EVERY = 40000
SMOLLM3_STAGES = {"stage1": (0, 3_450_000, 86), "stage2": (3_450_000, 4_200_000, 19), "stage3": (4_200_000, 4_720_000, 13)}
SMOLLM3_TOKENS_PER_STEP = 192 * 3 * 4096  # stage1_8T.yaml: dp x micro_batch_size x sequence_length; the card's GBS


def test_olmo1_branches_follow_the_csv_and_the_tokens_rule_of_the_hf_copy():
    olmo = plan("olmo1").models["OLMo-1B-hf"]
    assert olmo.tokens_per_step == OLMO1_1B_TOKENS_PER_STEP == 4_194_304  # the issue's ~4.2M
    assert (olmo.hidden_size, olmo.num_layers, olmo.vocab_size, olmo.tied_head) == (2048, 16, 50304, True)
    assert olmo.final_revision == f"step{OLMO1_1B_LAST}-tokens3094B" and len(olmo.revisions) == 11
    for revision, step in zip(olmo.revisions, olmo.steps):
        assert not OLMO1_1B_GAP[0] < step < OLMO1_1B_GAP[1], revision  # nothing was kept in the gap
        tokens_b = int(re.search(r"tokens(\d+)B", revision).group(1))
        floor = step * olmo.tokens_per_step // 10**9
        # rounded down up to the gap; after the restart about 0.6B lower (step425000: 1782.6B -> 1781)
        assert tokens_b == floor if step <= OLMO1_1B_GAP[0] else floor - 1 <= tokens_b <= floor, revision


def test_datadecide_sizes_batches_and_checkpoints_match_its_card_and_directories():
    models = plan("datadecide").models
    assert len(models) == 14 and sum(len(m.revisions) for m in models.values()) == 343
    for size, (batch, d, layers, last, total_m) in DATADECIDE_CARD.items():
        model = models[f"DataDecide-dolma1_7-{size}"]
        assert model.id == f"allenai/DataDecide-dolma1_7-{size}"
        assert (model.hidden_size, model.num_layers, model.tokens_per_step) == (d, layers, batch * 2048), size
        # N = 16 L d^2 non-embedding; with one 50304 x d matrix it is the card's model size, which is
        # rounded to 0.1M (and may count norm weights, at most 2 x 33 x d = 0.14M). That matrix is the
        # embedding alone: the head is untied (DATADECIDE_TIED), so the card's sizes leave it out
        assert model.n_params == 16 * layers * d * d and model.tied_head is DATADECIDE_TIED, size
        assert abs((model.n_params + DATADECIDE_VOCAB * d) / 1e6 - total_m) <= 0.05 + 66 * d / 1e6, size
        every, count = DATADECIDE_CHECKPOINTS[size]
        final = 57776 if size == "530M" else last
        assert model.steps == tuple(range(0, final, every)) + (final,) and len(model.steps) == count, size
        assert model.revisions == tuple(f"step{s}-seed-default" for s in model.steps)
    assert min(m.hidden_size for m in models.values()) == 64  # the "~64"
    assert models["DataDecide-dolma1_7-4M"].tokens_per_step == 65_536 and models["DataDecide-dolma1_7-1B"].tokens_per_step == 1_441_792


def test_amber_revisions_are_chunks_with_their_tokens():
    amber = plan("amber").models["Amber"]
    assert (amber.hidden_size, amber.num_layers, amber.vocab_size, amber.tied_head) == (4096, 32, 32000, False)
    assert amber.tokens_per_step == AMBER_SEQUENCES_PER_CHUNK * 2048
    # 360 chunks of 1,706,976 sequences of 2049 token ids are the README's 1259.13B tokens
    assert abs(AMBER_CHUNKS * AMBER_SEQUENCES_PER_CHUNK * 2049 / 1e9 - AMBER_TOTAL_TOKENS_B) < 0.01
    for revision, step in zip(amber.revisions, amber.steps):  # ckpt_N is saved after chunk N (0-based)
        assert revision == ("main" if step == AMBER_CHUNKS else f"ckpt_{step - 1:03d}"), revision
    assert amber.final_revision == "main" and amber.steps[0] == 1 and len(amber.revisions) == 18


def test_tinyllama_v11_branches():
    tiny = plan("tinyllama").models["tinyLLaMA-v1.1"]
    assert tiny.id == "TinyLlama/tinyLLaMA-v1.1-checkpoints" and tiny.allow_pickle
    assert tiny.revisions == tuple(f"step-{s}" for s in tiny.steps) and len(tiny.revisions) == 7
    assert tiny.tokens_per_step == 1_800_000  # the v1.1 card's "approximately 1.8M", not v1's 2048 x 1024
    assert (tiny.hidden_size, tiny.num_layers, tiny.vocab_size) == (2048, 22, 32000)


def test_pico_pins_are_full_commits_at_checkpoint_steps():
    models = plan("pico").models
    assert sorted(models) == sorted(f"pico-decoder-{s}" for s in PICO_D)
    for size, d in PICO_D.items():
        model = models[f"pico-decoder-{size}"]
        # custom code on the hub, converted at load (lmsat.checkpoints.formats): none of it is fetched or run
        assert model.id == f"pico-lm/pico-decoder-{size}" and model.hidden_size == d and not model.trust_remote_code
        assert model.tokens_per_step == PICO_TOKENS_PER_STEP and model.tied_head is False
        assert len(model.commits) == len(model.revisions) and all(re.fullmatch("[0-9a-f]{40}", c) for c in model.commits)
        assert all(s % PICO_EVERY == 0 and s <= PICO_LAST for s in model.steps), size
        assert model.revisions == tuple(f"step{s}" for s in model.steps)
    assert models["pico-decoder-tiny"].final_revision == f"step{PICO_LAST}"
    spec = load_yaml(ROOT / "config" / "pico.yaml")["suites"]["pico"]["revisions"]
    assert spec["branch"].format(model="pico-decoder-tiny") == "pico-decoder-tiny-1"  # pico-train's run_name
    assert spec["commit_regex"] == "Saving HF Model -- Step (\\d+)"  # its push_to_hub commit_message


def test_smollm3_branches_lie_on_the_cards_grid_in_their_stage():
    smol = plan("smollm3").models["SmolLM3-3B"]
    assert smol.tokens_per_step == SMOLLM3_TOKENS_PER_STEP == 2_359_296
    assert (smol.hidden_size, smol.num_layers, smol.vocab_size, smol.tied_head) == (2048, 36, 128256, True)
    grid = {stage: [n for n in range(SMOLLM3_EVERY, end + 1, SMOLLM3_EVERY) if n > start]
            for stage, (start, end, _) in SMOLLM3_STAGES.items()}
    assert {stage: len(steps) for stage, steps in grid.items()} == {s: c for s, (_, _, c) in SMOLLM3_STAGES.items()}
    for revision, step in zip(smol.revisions, smol.steps):
        stage = revision.split("-")[0]
        assert revision == f"{stage}-step-{step}" and step in grid[stage], revision
    assert smol.final_revision == "stage3-step-4720000"


def test_cross_suite_models_are_their_suite_configs_models():
    """Every model of the cross-suite config is its suite config's (same repository, widths,
    tokens a step, pins; revisions a subset of its config's schedule), and every model of
    d < 1000 of those configs is in it."""
    cross = plan("cross-suite").models
    own = {}
    for name in ("pythia", "pythia-deduped", "polypythia", "smollm2", "datadecide", "pico", "olmo1", "tinyllama", "smollm3"):
        full = plan(name, lambda c: [s["revisions"].update(subsample=0) for s in c["suites"].values()
                                      if s.get("revisions", {}).get("schedule") == "pythia"])
        own.update({m: (name, entry) for m, entry in full.models.items()})
    small = {m for m, (_, entry) in own.items() if entry.hidden_size < 1000}
    assert small <= set(cross)
    for model, entry in cross.items():
        suite, reference = own[model]
        assert entry.suite == suite, model
        for field in ("id", "hidden_size", "num_layers", "vocab_size", "tokens_per_step", "tied_head", "allow_pickle",
                      "trust_remote_code", "n_params"):
            assert getattr(entry, field) == getattr(reference, field), (model, field)
        assert set(entry.revisions) <= set(reference.revisions), model
        for revision in entry.revisions:
            assert entry.step(revision) == reference.step(revision)
            assert entry.hub_revision(revision) == reference.hub_revision(revision), (model, revision)
    controls = {m for m, entry in cross.items() if entry.hidden_size >= 1000}
    assert {"pythia-410m", "pico-decoder-large", "OLMo-1B-hf", "tinyLLaMA-v1.1", "SmolLM3-3B"} <= controls
    scaled = plan("cross-suite").config["scaling"]["models"]
    assert set(scaled) == {m for m, e in cross.items() if e.suite == "datadecide"}


def test_suites_since_the_paper_cite_their_sources():
    """Each new suite's header says where its facts come from, commit included."""
    cited = {
        "olmo1": ["allenai/OLMo", "c513a574919a", "checkpoints/official/OLMo-1B.csv", "allenai/OLMo#879", "list_repo_refs"],
        "datadecide": ["allenai/DataDecide", "68abc496587935b7211e9894206e78f15d535832", "weka_paths.jsonl",
                       "upload_checkpoints.py", "hf_olmo"],
        "amber": ["LLM360/amber-train", "64bc595600324ebb7d6d559af76a8702f0872776", "TRAIN_EXAMPLES_PER_CHUNK"],
        "tinyllama": ["jzhang38/TinyLlama", "bf122247c486b6b897050e98cbb7bedae8eeba73", "approximately 1.8M"],
        "pico": ["pico-lm/pico-train", "f0bfdf437c515b2a5cb4ef368ca594efeb6fb2ba", "Saving HF Model -- Step",
                 "pin-revisions", "could not be checked"],
        "smollm3": ["huggingface/smollm", "a041759883ec7152d18fb985ea49be641a0bceef", "2,359,296", "inferred"],
        "cross-suite": ["docs/paper.md", "saturation_verdicts.csv", "scaling.models"],
    }
    for name, needles in cited.items():
        header = re.match(r"(?:#.*\n)+", (ROOT / "config" / f"{name}.yaml").read_text()).group(0)
        for needle in needles:
            assert needle in header, (name, needle)
