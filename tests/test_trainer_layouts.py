"""Other trainers' saved steps (issue 51): each read as the transformers model of the same
maths, offline, writing nothing, never running pickled code; bad input refused by name
before compute.

Every reader is checked on a checkpoint written to its trainer's layout (tests/trainer_fixtures.py
mirrors each trainer's save) against a float64 forward from that trainer's formulas on the
weights as it stores them (fused, stacked, interleaved): a wrong split, permutation or norm
placement moves logits by O(1). transformers computes RoPE's angles and Llama's, OLMo 2's
and NanoChat's RMSNorm in float32 whatever the model's dtype (lmsat.checkpoints.formats), so
a float64 model agrees to float32 rounding: TOLERANCE float32 epsilons of the largest logit
(measured: at most 4; benchmarks/trainer_formats.py checks the frameworks' own forwards).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lmsat
from lmsat.checkpoints import trainer_runs
from lmsat.checkpoints.native_models import TrainerConfigMissing, UnsupportedArchitecture
from lmsat.checkpoints.pickles import CorruptCheckpointFile, UnsafePickle
from lmsat.checkpoints.single_file import nanochat_meta
from lmsat.checkpoints.trainer_layouts import CheckpointMismatch
from lmsat.core.names import checkpoint_path, revision_name
from lmsat.errors import ModelLoadError

import trainer_fixtures as fx
from conftest import ROOT

TOLERANCE = 64  # float32 epsilons (2^-24) of the largest |logit|; measured at most 4 (see the module docstring)


def ids(vocab=fx.VOCAB, n=20):
    return torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(7))


def agree(lm, reference, tokens):
    with torch.no_grad():
        ours = lm(tokens).logits.double()
    difference = float((ours - reference).abs().max())
    scale = float(reference.abs().max())
    assert difference <= TOLERANCE * 2**-24 * scale, f"max |dlogit| {difference:.3e} ({difference / scale / 2**-24:.1f} f32 eps)"
    return difference


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- each trainer, against its formulas


def tokens_of(trainer: str):
    return ids(fx.NANOCHAT_CONFIG["vocab_size"]) if trainer == "nanochat" else ids()


def make(trainer: str, root: Path, seed: int = 0):
    """(saved step path, its weights, its float64 reference logits on tokens_of(trainer)) of a fixture."""
    g = generator(seed)
    tokens = tokens_of(trainer)
    if trainer in ("olmo-core-olmo2", "olmo-core-llama"):
        olmo2 = trainer.endswith("olmo2")
        weights = fx.olmo_core_weights(g, olmo2)
        fx.write_olmo_core(root / "step4", weights, fx.olmo_core_config(olmo2))
        return root / "step4", weights, fx.olmo_core_logits(weights, tokens, olmo2)
    if trainer == "torchtitan":
        weights = fx.torchtitan_weights(g)
        step = fx.write_torchtitan(root / "dump", 4, weights, fx.torchtitan_job_config())
        return step, weights, fx.torchtitan_logits(weights, tokens)
    if trainer == "megatron":
        weights = fx.megatron_weights(g)
        fx.write_megatron(root / "iter_0000004", weights, fx.megatron_args())
        return root / "iter_0000004", weights, fx.megatron_logits(weights, tokens)
    if trainer in ("nanogpt", "nanogpt-nobias"):
        bias = trainer == "nanogpt"
        weights = fx.nanogpt_weights(g, bias)
        root.mkdir(parents=True, exist_ok=True)
        fx.write_nanogpt(root / "ckpt.pt", weights, 4, bias)
        return root / "ckpt.pt", weights, fx.nanogpt_logits(weights, tokens, bias)
    if trainer == "nanochat":
        weights = fx.nanochat_weights(g)
        path = fx.write_nanochat(root, 4, weights)
        return path, weights, fx.nanochat_logits(weights, tokens)
    if trainer in ("litgpt-pythia", "litgpt-llama"):
        family = trainer.split("-")[1]
        weights = fx.litgpt_weights(g, family)
        fx.write_litgpt(root / "step-00000004", weights, family)
        return root / "step-00000004", weights, fx.litgpt_logits(weights, tokens, family)
    if trainer == "lightning":
        path = root / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=4.ckpt"
        model = fx.lightning_module_and_file(path, g)
        with torch.no_grad():
            return path, None, model(tokens).logits.double()
    raise ValueError(trainer)


CLASSES = {"olmo-core-olmo2": "Olmo2ForCausalLM", "olmo-core-llama": "LlamaForCausalLM", "torchtitan": "LlamaForCausalLM",
           "megatron": "LlamaForCausalLM", "nanogpt": "GPT2LMHeadModel", "nanogpt-nobias": "GPT2LMHeadModel",
           "nanochat": "NanoChatForCausalLM", "litgpt-pythia": "GPTNeoXForCausalLM", "litgpt-llama": "LlamaForCausalLM",
           "lightning": "GPT2LMHeadModel"}


@pytest.mark.parametrize("trainer", list(CLASSES))
def test_each_trainer_s_saved_step_computes_its_trainer_s_logits(trainer, tmp_path):
    path, _, reference = make(trainer, tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    lm, info = lmsat.load_saved_step(path, dtype="auto", output_loading_info=True)
    assert type(lm).__name__ == CLASSES[trainer] and info["converted"].endswith(CLASSES[trainer])
    assert next(lm.parameters()).dtype == torch.float64  # "auto": as stored
    agree(lm, reference, tokens_of(trainer))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_wrong_conversion_is_caught_by_the_reference(tmp_path):
    """The check can fail: torchtitan's q/k rows read without RoPE's pair permutation, or
    Megatron's fused qkv split as [q; k; v] instead of per query group, move the logits by O(1)."""
    path, weights, reference = make("torchtitan", tmp_path / "titan")
    lm = lmsat.load_saved_step(path, dtype="auto")
    with torch.no_grad():
        for i in range(fx.LAYERS):
            lm.model.layers[i].self_attn.q_proj.weight.copy_(weights[f"layers.{i}.attention.qkv_linear.wq.weight"])
        with pytest.raises(AssertionError, match="f32 eps"):
            agree(lm, reference, ids())
    path, weights, reference = make("megatron", tmp_path / "mega")
    lm = lmsat.load_saved_step(path, dtype="auto")
    with torch.no_grad():
        for i in range(fx.LAYERS):
            q = weights["decoder.layers.self_attention.linear_qkv.weight"][i][: fx.D]
            lm.model.layers[i].self_attn.q_proj.weight.copy_(q)
        with pytest.raises(AssertionError, match="f32 eps"):
            agree(lm, reference, ids())


def test_a_distributed_checkpoint_is_read_without_its_optimizer_state(tmp_path):
    """OLMo-core's step folder holds the optimizer's moments beside the model's tensors: every
    one of their byte ranges zero-filled, the step still loads and computes its logits, so
    they were never read (torch.load of a zeroed blob fails)."""
    from lmsat.checkpoints.distributed import open_distributed

    path, _, reference = make("olmo-core-olmo2", tmp_path)
    checkpoint = open_distributed(path / "model_and_optim")
    optimizer = [k for k in checkpoint.tensors if k.startswith("optim.")]
    assert len(optimizer) > 2 * len(checkpoint.tensors) / 3
    for key in optimizer:
        for _, _, info in checkpoint.chunks[key]:
            with open(path / "model_and_optim" / info.relative_path, "r+b") as handle:
                handle.seek(info.offset)
                handle.write(bytes(info.length))
    agree(lmsat.load_saved_step(path, dtype="auto"), reference, ids())


# ---------------------------------------------------------------- no pickle runs code


class Payload:
    """What a crafted pickle carries: unpickling it runs a shell command that creates a file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_ckpt_pt_is_refused_and_its_code_does_not_run(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "ckpt.pt"
    weights = fx.nanogpt_weights(generator())
    torch.save({"model": {k: v for k, v in weights.items()}, "model_args": dict(fx.NANOGPT_ARGS), "iter_num": 4,
                "config": Payload(marker)}, path)
    with pytest.raises(UnsafePickle, match=r"ckpt\.pt.*(posix|os)\.system"):
        lmsat.load_saved_step(path)
    assert not marker.exists()
    # the same payload in a distributed checkpoint's index (torch's own reader would run it)
    step = tmp_path / "dump" / "checkpoint" / "step-2"
    fx.write_torchtitan(tmp_path / "dump", 2, fx.torchtitan_weights(generator()), fx.torchtitan_job_config())
    index = pickle.loads((step / ".metadata").read_bytes())
    index.planner_data = {"hook": Payload(marker)}
    (step / ".metadata").write_bytes(pickle.dumps(index))
    with pytest.raises(UnsafePickle, match=r"\.metadata.*(posix|os)\.system"):
        lmsat.load_saved_step(step)
    assert not marker.exists()
    # and in a chunk's blob: the index points a model tensor at a torch.save of the payload
    fx.write_torchtitan(tmp_path / "dump", 2, fx.torchtitan_weights(generator()), fx.torchtitan_job_config())
    index = pickle.loads((step / ".metadata").read_bytes())
    located = next(i for i in index.storage_data if i.fqn == "norm.weight")
    with open(step / index.storage_data[located].relative_path, "ab") as handle:
        start = handle.tell()
        torch.save(Payload(marker), handle)
        index.storage_data[located].offset, index.storage_data[located].length = start, handle.tell() - start
    (step / ".metadata").write_bytes(pickle.dumps(index))
    with pytest.raises(UnsafePickle, match=r"the chunk of norm\.weight.*(posix|os)\.system"):
        lmsat.load_saved_step(step)
    assert not marker.exists()
    # and through the command: a named error, exit 2, nothing run, nothing written
    done = subprocess.run([sys.executable, "-m", "lmsat", "analyse", str(path), "--json", "--metrics", "spectra"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 2 and "UnsafePickle" in done.stderr and not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "dump"]


def test_pickles_of_plain_values_with_a_framework_s_enum_are_read_as_text(tmp_path):
    """Megatron-LM's args hold an enum of megatron.core (attention_backend): read as an inert
    stand-in, megatron never imported, the architecture from the other args."""
    path, _, reference = make("megatron", tmp_path)
    assert "megatron" not in sys.modules
    agree(lmsat.load_saved_step(path, dtype="auto"), reference, ids())
    assert "megatron" not in sys.modules


# ---------------------------------------------------------------- bad input: named, before compute


def shard_holding(folder: Path, key: str) -> Path:
    from lmsat.checkpoints.distributed import open_distributed

    return folder / open_distributed(folder).chunks[key][0][2].relative_path


@pytest.mark.parametrize("damage", ["missing", "truncated", "zero-filled"])
def test_a_damaged_shard_is_refused_naming_it(damage, tmp_path):
    path, _, _ = make("megatron", tmp_path)
    shard = shard_holding(path, "output_layer.weight")
    if damage == "missing":
        shard.unlink()
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    else:
        shard.write_bytes(bytes(shard.stat().st_size))
    with pytest.raises(CorruptCheckpointFile, match={"missing": "is missing", "truncated": "is truncated",
                                                     "zero-filled": "zero-filled"}[damage]) as error:
        lmsat.load_saved_step(path)
    assert str(shard) in str(error.value)


def test_a_zero_filled_pickle_and_a_zeroed_matrix_are_refused(tmp_path):
    path, _, _ = make("nanogpt", tmp_path / "a")
    path.write_bytes(bytes(path.stat().st_size))
    with pytest.raises(CorruptCheckpointFile, match=r"ckpt\.pt.*truncated or not a torch\.save file"):
        lmsat.load_saved_step(path)
    # a matrix's bytes zeroed (the index intact): refused as the workflow refuses a zero-filled safetensors file
    path, weights, _ = make("olmo-core-llama", tmp_path / "b")
    weights["blocks.1.feed_forward.w2.weight"].zero_()
    fx.write_olmo_core(path, weights, fx.olmo_core_config(False))
    with pytest.raises(ModelLoadError, match=r"all-zero matrix: model\.blocks\.1\.feed_forward\.w2\.weight"):
        lmsat.load_saved_step(path)


def test_keys_and_shapes_that_disagree_with_the_architecture_are_named(tmp_path):
    g = generator()
    weights = fx.olmo_core_weights(g)
    del weights["blocks.1.attention.w_v.weight"]
    weights["blocks.0.attention.extra.weight"] = torch.zeros(2, 2, dtype=torch.float64)
    fx.write_olmo_core(tmp_path / "step4", weights, fx.olmo_core_config())
    with pytest.raises(CheckpointMismatch, match=r"missing from the files: model\.blocks\.1\.attention\.w_v\.weight.*not in "
                                                 r"the model its architecture describes: model\.blocks\.0\.attention\.extra"):
        lmsat.load_saved_step(tmp_path / "step4")
    config = fx.olmo_core_config()
    config["block"]["feed_forward"]["hidden_size"] = 40
    fx.write_olmo_core(tmp_path / "step6", fx.olmo_core_weights(g), config)
    with pytest.raises(CheckpointMismatch, match=r"w1\.weight \(stored \(48, 32\), architecture \(40, 32\)\)"):
        lmsat.load_saved_step(tmp_path / "step6")


MISSING = {
    "olmo-core-olmo2": (lambda p: (p / "config.json").unlink(), "ConfigSaverCallback"),
    "torchtitan": (lambda p: (p.parent.parent / "job_config.json").unlink(), "save_config_file"),
    "megatron": (lambda p: fx.write_megatron(p, fx.megatron_weights(generator()), None), "holds no 'args'"),
    "litgpt-llama": (lambda p: (p / "model_config.yaml").unlink(), "model_config.yaml"),
    "nanochat": (lambda p: nanochat_meta(p).unlink(), "meta_000004.json"),
    "lightning": (lambda p: (p.parent.parent / "config.json").unlink(), "save_pretrained"),
}


@pytest.mark.parametrize("trainer", list(MISSING))
def test_a_run_without_its_architecture_file_is_refused_saying_what_to_pass(trainer, tmp_path):
    path, _, reference = make(trainer, tmp_path)
    remove, says = MISSING[trainer]
    remove(path)
    with pytest.raises(TrainerConfigMissing, match=says) as error:
        lmsat.load_saved_step(path)
    assert "config=" in str(error.value)


def test_the_architecture_can_be_passed(tmp_path):
    path, _, reference = make("olmo-core-llama", tmp_path)
    (path / "config.json").unlink()
    agree(lmsat.load_saved_step(path, dtype="auto", config={"model": fx.olmo_core_config(False)}), reference, ids())


def test_architectures_no_conversion_maps_are_refused_by_name(tmp_path):
    path, _, _ = make("torchtitan", tmp_path / "t")
    (path.parent.parent / "job_config.json").write_text(json.dumps(fx.torchtitan_job_config(name="qwen3")))
    with pytest.raises(UnsupportedArchitecture, match="model_spec.name='qwen3'.*no key map"):
        lmsat.load_saved_step(path)
    path, _, _ = make("olmo-core-llama", tmp_path / "o")
    config = fx.olmo_core_config(False)
    config["block"]["sequence_mixer"]["sliding_window"] = {"pattern": [64]}
    (path / "config.json").write_text(json.dumps({"model": config}))
    with pytest.raises(UnsupportedArchitecture, match=r"sliding_window"):
        lmsat.load_saved_step(path)
    path, weights, _ = make("nanochat", tmp_path / "n")
    weights["resid_lambdas"] = torch.ones(fx.LAYERS, dtype=torch.float64)
    fx.write_nanochat(tmp_path / "n", 4, weights)
    with pytest.raises(UnsupportedArchitecture, match="resid_lambdas.*2026"):
        lmsat.load_saved_step(path)
    sharded = tmp_path / "l" / "epoch=0-step=4.ckpt"
    fx.write_distributed(sharded, {"model.w": torch.zeros(2, 2)})
    with pytest.raises(UnsupportedArchitecture, match="sharded Lightning checkpoint"):
        lmsat.load_saved_step(sharded)


# ---------------------------------------------------------------- layouts recognised, steps named


def run_folder(trainer: str, root: Path) -> Path:
    """A run folder of two saved steps (2 and 4) of `trainer`, as it lays them out."""
    g = generator()
    if trainer == "olmo-core":
        for step in (2, 4):
            fx.write_olmo_core(root / f"step{step}", fx.olmo_core_weights(g), fx.olmo_core_config())
        return root
    if trainer == "torchtitan":
        for step in (2, 4):
            fx.write_torchtitan(root, step, fx.torchtitan_weights(g), fx.torchtitan_job_config())
        return root / "checkpoint"
    if trainer == "megatron":
        for step in (2, 4):
            fx.write_megatron(root / f"iter_{step:07d}", fx.megatron_weights(g), fx.megatron_args())
        (root / "latest_checkpointed_iteration.txt").write_text("4")
        return root
    if trainer == "litgpt":
        for step in (2, 4):
            fx.write_litgpt(root / f"step-{step:08d}", fx.litgpt_weights(g, "llama"), "llama")
        return root
    if trainer == "nanochat":
        for step in (2, 4):
            fx.write_nanochat(root, step, fx.nanochat_weights(g))
        return root
    if trainer == "nanogpt":
        root.mkdir(parents=True)
        for step in (2, 4):  # train.py's ckpt.pt and the patch's file per eval
            weights = fx.nanogpt_weights(g)
            fx.write_nanogpt(root / "ckpt.pt", weights, step)
            fx.write_nanogpt(root / f"ckpt_{step:07d}.pt", weights, step, full=False)
        return root
    if trainer == "lightning":
        for step in (2, 4):
            fx.lightning_module_and_file(root / "version_0" / "checkpoints" / f"epoch=0-step={step}.ckpt", g, step)
        torch.save({"state_dict": {}}, root / "version_0" / "checkpoints" / "last.ckpt")
        return root / "version_0" / "checkpoints"
    raise ValueError(trainer)


LAYOUTS = {"olmo-core": ("step*", ["step2", "step4"]), "torchtitan": ("step-*", ["step-2", "step-4"]),
           "megatron": ("iter_*", ["iter_0000002", "iter_0000004"]),
           "litgpt": ("step-*", ["step-00000002", "step-00000004"]),
           "nanochat": ("model_*.pt", ["model_000002.pt", "model_000004.pt"]),
           "nanogpt": ("ckpt_*.pt", ["ckpt_0000002.pt", "ckpt_0000004.pt"]),
           "lightning": ("*step*.ckpt", ["epoch-0-step-2.ckpt", "epoch-0-step-4.ckpt"])}


@pytest.mark.parametrize("trainer", list(LAYOUTS))
def test_init_recognises_each_trainer_s_layout_and_reads_its_steps(trainer, tmp_path):
    from lmsat.commands.init import checkpoint_glob, discover

    folder = run_folder(trainer, tmp_path / trainer)
    glob, names = LAYOUTS[trainer]
    assert checkpoint_glob(folder) == (glob, 2)
    found = discover(folder, glob)
    assert [name for name, _ in found.revisions] == names and [s for _, s in found.revisions] == [2, 4]
    assert {kind for kind, _ in found.layouts} == {trainer}
    last = checkpoint_path(folder, names[-1])
    assert last.exists() and revision_name(last.name) == names[-1]
    stated = trainer_runs.architecture(trainer_runs.read_config(last))
    assert stated["hidden_size"] == fx.D and stated["num_layers"] == fx.LAYERS


def test_a_folder_of_two_trainers_formats_is_refused(tmp_path):
    from lmsat.commands.init import InitError, checkpoint_glob

    folder = run_folder("litgpt", tmp_path)
    fx.write_torchtitan(tmp_path / "dump", 6, fx.torchtitan_weights(generator()), fx.torchtitan_job_config())
    shutil.move(tmp_path / "dump" / "checkpoint" / "step-6", folder / "step-6")
    shutil.move(tmp_path / "dump" / "job_config.json", tmp_path.parent / "job_config.json")
    with pytest.raises(InitError, match=r"2 formats \(litgpt: step-00000002.*torchtitan: step-6\)"):
        checkpoint_glob(folder)


def test_lmsat_analyse_takes_a_saved_step_and_gives_the_numbers_of_its_save_pretrained_copy(tmp_path):
    """`lmsat analyse` on a torchtitan step folder and on the same weights saved with save_pretrained."""
    from test_own_run import train_tokenizer, write_text

    text = write_text(tmp_path / "eval.txt", 120, seed=1)
    tokenizer = train_tokenizer(text)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    vocab = len(tokenizer) + 4
    weights = fx.torchtitan_weights(generator(), vocab)
    step = fx.write_torchtitan(tmp_path / "titan", 4, weights, fx.torchtitan_job_config(vocab=vocab))
    copy = tmp_path / "hf" / "checkpoint-4"
    lmsat.load_saved_step(step, dtype="auto").save_pretrained(copy)
    reports = []
    for target in (step, copy):
        done = subprocess.run([sys.executable, "-m", "lmsat", "analyse", str(target), "--text", str(text), "--tokenizer",
                               str(tmp_path / "tokenizer"), "--json", "--metrics", "loss", "anisotropy", "spectra"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                              cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        reports.append(json.loads(done.stdout))
    ours, theirs = (r["metrics"] for r in reports)
    assert ours.keys() == theirs.keys()
    for metric in ours:
        for key, value in ours[metric].items():
            if isinstance(value, float):
                assert value == pytest.approx(theirs[metric][key], rel=1e-6, abs=1e-9), (metric, key)
