"""Check: saved steps written by the trainers' own code, loaded through lmsat, give the trainers' own logits.

lmsat reads the checkpoints of OLMo-core, torchtitan, Megatron (torch_dist), nanoGPT, litgpt
and Lightning as the transformers class of the same maths (lmsat.checkpoints.trainer_layouts).
`make TRAINER` trains a tiny model a few steps with that trainer and saves it with the
trainer's own code (in a venv of its own: the frameworks are not lmsat's dependencies), then
writes reference.pt beside the run: token ids, the trainer's own forward's float32 logits
of the last saved step, and the framework's version. `check` (lmsat's venv) loads that step
through lmsat.load_saved_step and prints the largest logit difference. nanochat has no
installable training code (PyPI `nanochat` 0.1.2 is its Rust tokenizer alone, an sdist that
needs crates.io): tests/test_trainer_layouts.py checks it on a fixture written as its
checkpoint_manager writes, against a float64 forward of its formulas.

    # one venv per framework, torch first (the CPU wheel lmsat's lock pins), so pip cannot replace it
    echo torch==2.13.0 > /tmp/c.txt
    for spec in "olmocore ai2-olmo-core==3.0.0" "torchtitan torchtitan==0.3.0 triton" \
                "megatron megatron-core==0.16.1 psutil" "litgpt litgpt==0.5.13" \
                "lightning lightning==2.6.6 transformers==5.24.0" "nanogpt numpy"; do
        set -- $spec; python3 -m venv /tmp/tfv/$1
        /tmp/tfv/$1/bin/pip install torch==2.13.0 numpy; shift; /tmp/tfv/$1/bin/pip install -c /tmp/c.txt "$@"
    done
    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT    # read at 3adf61e1

    /tmp/tfv/olmocore/bin/python benchmarks/trainer_formats.py make olmo-core --out /tmp/trainers
    /tmp/tfv/torchtitan/bin/python benchmarks/trainer_formats.py make torchtitan --out /tmp/trainers
    /tmp/tfv/megatron/bin/python benchmarks/trainer_formats.py make megatron --out /tmp/trainers
    /tmp/tfv/litgpt/bin/python benchmarks/trainer_formats.py make litgpt --out /tmp/trainers
    /tmp/tfv/lightning/bin/python benchmarks/trainer_formats.py make lightning --out /tmp/trainers
    /tmp/tfv/nanogpt/bin/python benchmarks/trainer_formats.py make nanogpt --out /tmp/trainers --nanogpt /tmp/nanoGPT
    .venv/bin/python benchmarks/trainer_formats.py check --out /tmp/trainers

Variants: OLMo-core's OLMo 2 (olmo2_30M's blocks: norms after attention and MLP, q/k
RMSNorm) and Llama-like (llama2_271M's), each shrunk; torchtitan's llama3 debugmodel (Llama
3 RoPE scaling, complex RoPE); Megatron's GPT with the local (no Transformer Engine) layer
spec, RMSNorm, SwiGLU, RoPE, grouped-query attention; nanoGPT's train.py itself (with the
docs' two-line patch that keeps one file per eval; torch.compile on, so its keys carry
`_orig_mod.`), with and without biases; litgpt's Pythia (GPT-NeoX) and Llama configs saved
by litgpt.pretrain.save_checkpoint; Lightning's Trainer with a ModelCheckpoint every 2 steps
around a transformers GPT-2. Megatron's forward needs CUDA for a causal mask, the rotary
table's device and its RNG tracker (no dropout in eval): `make megatron` moves those three
to the CPU; the maths is untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

SEED, BATCH, SEQ = 0, 2, 24


def _save_reference(folder: Path, ids, logits, framework: str, step_path: Path) -> None:
    import torch

    torch.save({"ids": ids, "logits": logits.detach().float(), "framework": framework,
                "version": importlib.metadata.version(framework), "step": str(step_path)}, folder / "reference.pt")
    print(f"{folder.name}: {framework} {importlib.metadata.version(framework)}, saved step {step_path}")


def _single_process_group(port: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)


# ---------------------------------------------------------------- OLMo-core


def make_olmo_core(out: Path) -> None:
    import numpy as np
    import torch
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.distributed.checkpoint import load_model_and_optim_state
    from olmo_core.nn.transformer import TransformerConfig
    from olmo_core.optim import AdamWConfig
    from olmo_core.train import Duration, TrainerConfig, prepare_training_environment
    from olmo_core.train.callbacks import CheckpointerCallback, ConfigSaverCallback
    from olmo_core.train.train_module import TransformerTrainModuleConfig
    from olmo_core.utils import seed_all

    vocab = 128
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29541", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    prepare_training_environment(backend="gloo")
    for name, factory in (("olmo-core-olmo2", TransformerConfig.olmo2_30M), ("olmo-core-llama", TransformerConfig.llama2_271M)):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        np.random.default_rng(SEED).integers(1, vocab, size=64 * 400).astype(np.uint16).tofile(folder / "tokens.npy")
        model_config = factory(vocab_size=vocab)
        model_config.d_model, model_config.n_layers = 64, 2
        model_config.block.sequence_mixer.n_heads = 4
        model_config.block.sequence_mixer.n_kv_heads = 2
        model_config.block.feed_forward.hidden_size = 96
        tokenizer = TokenizerConfig(vocab_size=vocab, eos_token_id=0, pad_token_id=0)
        dataset = NumpyFSLDatasetConfig(paths=[str(folder / "tokens.npy")], sequence_length=32, tokenizer=tokenizer,
                                        work_dir=str(folder / "work")).build()
        seed_all(SEED)
        model = model_config.build(init_device="cpu")
        module = TransformerTrainModuleConfig(rank_microbatch_size=4 * 32, max_sequence_length=32,
                                              optim=AdamWConfig(lr=3e-3)).build(model)
        loader = NumpyDataLoaderConfig(global_batch_size=4 * 32, seed=SEED, num_workers=0).build(
            dataset, dp_process_group=module.dp_process_group)
        trainer = (TrainerConfig(save_folder=str(folder / "run"), save_overwrite=True, max_duration=Duration.steps(4),
                                 metrics_collect_interval=1, cancel_check_interval=1, work_dir=str(folder / "work"))
                   .with_callback("checkpointer", CheckpointerCallback(save_interval=2, ephemeral_save_interval=None,
                                                                       save_async=False))
                   .with_callback("config_saver", ConfigSaverCallback())).build(module, loader)
        trainer.callbacks["config_saver"].config = {"model": model_config.as_config_dict(),
                                                    "train_module": {"max_sequence_length": 32}}
        trainer.fit()
        step = folder / "run" / "step4"
        fresh = model_config.build(init_device="cpu")
        load_model_and_optim_state(str(step / "model_and_optim"), fresh)  # OLMo-core's own reading of its checkpoint
        ids = torch.randint(1, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
        with torch.no_grad():
            logits = fresh.eval()(ids)
        _save_reference(folder, ids, logits, "ai2-olmo-core", step)


# ---------------------------------------------------------------- torchtitan


def _causal_sdpa(self, q, k, v, attention_masks=None, scale=None, enable_gqa=False, **kwargs):
    """torchtitan's inner attention for training on the CPU, where FlexAttention has no
    backward: one document per row, so its block-causal mask is the causal one. (B, L, N, H)."""
    import torch

    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=True, scale=scale, enable_gqa=enable_gqa)
    return out.transpose(1, 2)


def _torchtitan_forward(model, tokens):
    """torchtitan's forward as its Trainer calls it: per-document positions (one document per
    row here) and the block-causal masks built from them."""
    import torch

    positions = torch.arange(tokens.shape[1])[None].expand(tokens.shape[0], -1)
    return model(tokens, positions=positions, attention_masks=model.get_attention_masks(positions=positions))


def make_torchtitan(out: Path) -> None:
    import torch
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    folder = out / "torchtitan"
    folder.mkdir(parents=True, exist_ok=True)
    _single_process_group(29542)
    config = llama3_debugmodel()
    config.dump_folder = str(folder / "dump")
    config.checkpoint.interval, config.checkpoint.folder = 2, "checkpoint"
    config.checkpoint.enable = True
    torch.manual_seed(SEED)
    model = config.model_spec.model.build()
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    optimizers = config.optimizer.build(model_parts=[model])
    schedulers = config.lr_scheduler.build(optimizers=optimizers, training_steps=4)

    class TrainState:  # the Trainer's own train_state entry: step and tokens seen
        step = 0

        def state_dict(self):
            return {"step": torch.tensor(self.step), "ntokens_seen": torch.tensor(0)}

        def load_state_dict(self, state):
            self.step = int(state["step"])

    state = TrainState()
    checkpointer = config.checkpoint.build(dataloader=None, model_parts=[model], optimizers=optimizers,
                                           lr_schedulers=schedulers, states={"train_state": state}, sd_adapter=None,
                                           base_folder=config.dump_folder)
    vocab = config.model_spec.model.vocab_size
    data = torch.randint(0, vocab, (4, 8, 65), generator=torch.Generator().manual_seed(SEED))
    from torchtitan.models.common.attention import FlexAttention

    flex_forward, FlexAttention.forward = FlexAttention.forward, _causal_sdpa  # training only: see _causal_sdpa
    for step in range(1, 5):
        state.step = step
        tokens = data[step - 1]
        logits = _torchtitan_forward(model, tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        optimizers.step()
        optimizers.zero_grad()
        schedulers.step()
        checkpointer.save(step, last_step=step == 4)
    checkpointer.close()
    FlexAttention.forward = flex_forward  # the reference: torchtitan's own attention
    # what --debug.save_config_file job_config.json writes (Trainer.Config.maybe_log)
    (Path(config.dump_folder) / "job_config.json").write_text(json.dumps(config.to_dict(), indent=2))
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
    with torch.no_grad():
        logits = _torchtitan_forward(model.eval(), ids)
    _save_reference(folder, ids, logits, "torchtitan", Path(config.dump_folder) / "checkpoint" / "step-4")


# ---------------------------------------------------------------- Megatron


def _megatron_on_cpu():
    """megatron-core's GPT forward places a causal mask and the rotary table on CUDA and
    forks a CUDA RNG tracker (for dropout): the same operations on the CPU."""
    import megatron.core.fusions.fused_softmax as fused_softmax
    import megatron.core.tensor_parallel.random as tp_random
    import megatron.core.transformer.utils as transformer_utils
    import torch

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *args, **kwargs: None
    mask = lambda sq: torch.triu(torch.ones(sq, sq), diagonal=1).bool()  # noqa: E731
    transformer_utils.get_default_causal_mask = fused_softmax.get_default_causal_mask = mask
    tp_random.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()


def make_megatron(out: Path) -> None:
    import argparse as ap

    import torch
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    folder = out / "megatron"
    folder.mkdir(parents=True, exist_ok=True)
    _single_process_group(29543)
    parallel_state.initialize_model_parallel(1, 1)
    _megatron_on_cpu()
    layers, d, heads, groups, ffn, vocab, eps, base = 2, 64, 4, 2, 160, 128, 1e-5, 10000
    config = TransformerConfig(num_layers=layers, hidden_size=d, num_attention_heads=heads, num_query_groups=groups,
                               ffn_hidden_size=ffn, normalization="RMSNorm", layernorm_epsilon=eps, gated_linear_unit=True,
                               activation_func=torch.nn.functional.silu, add_bias_linear=False, hidden_dropout=0.0,
                               attention_dropout=0.0, use_cpu_initialization=True, bias_activation_fusion=False,
                               bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
                               gradient_accumulation_fusion=False, apply_rope_fusion=False)
    torch.manual_seed(SEED)
    model = GPTModel(config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=vocab,
                     max_sequence_length=64, position_embedding_type="rope", rotary_base=base,
                     share_embeddings_and_output_weights=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, vocab, (4, 4, 33), generator=torch.Generator().manual_seed(SEED))
    # the args Megatron-LM's training saves (megatron/training/arguments.py names), for this model
    args = ap.Namespace(num_layers=layers, hidden_size=d, num_attention_heads=heads, group_query_attention=True,
                        num_query_groups=groups, ffn_hidden_size=ffn, kv_channels=d // heads, normalization="RMSNorm",
                        norm_epsilon=eps, swiglu=True, position_embedding_type="rope", rotary_base=base, rotary_percent=1.0,
                        rotary_interleaved=False, use_rope_scaling=False, add_bias_linear=False, add_qkv_bias=False,
                        qk_layernorm=False, untie_embeddings_and_output_weights=True, padded_vocab_size=vocab,
                        max_position_embeddings=64, seq_length=32, apply_residual_connection_post_layernorm=False,
                        num_experts=None, multi_latent_attention=False, window_size=None, params_dtype=torch.float32,
                        heterogeneous_layers_config_path=None, attention_backend=AttnBackend.auto,
                        ckpt_format="torch_dist")
    for step in range(1, 5):
        tokens = data[step - 1]
        position = torch.arange(32)[None].expand(4, -1)
        loss = model(tokens[:, :-1], position, None, labels=tokens[:, 1:]).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 2 == 0:  # Megatron-LM's layout: iter_NNNNNNN/ with the model's sharded state and common.pt
            target = folder / "run" / f"iter_{step:07d}"
            target.mkdir(parents=True, exist_ok=True)
            state = {"model": model.sharded_state_dict(), "args": args, "iteration": step, "checkpoint_version": 3.0}
            dist_checkpointing.save(state, str(target))
            (folder / "run" / "latest_checkpointed_iteration.txt").write_text(str(step))
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
    with torch.no_grad():
        logits = model.eval()(ids, torch.arange(SEQ)[None].expand(BATCH, -1), None)
    _save_reference(folder, ids, logits, "megatron-core", folder / "run" / "iter_0000004")


# ---------------------------------------------------------------- litgpt


def make_litgpt(out: Path) -> None:
    import lightning as L
    import torch
    from litgpt import GPT, Config
    from litgpt.pretrain import save_checkpoint

    fabric = L.Fabric(devices=1, accelerator="cpu")
    for name, base in (("litgpt-pythia", "pythia-14m"), ("litgpt-llama", "tiny-llama-1.1b")):
        folder = out / name
        overrides = dict(n_layer=2, n_embd=64, n_head=4, block_size=64, padded_vocab_size=128, vocab_size=120)
        overrides.update(intermediate_size=256 if "pythia" in name else 160)
        if "llama" in name:
            overrides.update(n_query_groups=2)
        config = Config.from_name(base, **overrides)
        torch.manual_seed(SEED)
        model = fabric.setup(GPT(config))
        optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=3e-3))
        data = torch.randint(0, 120, (4, 4, 33), generator=torch.Generator().manual_seed(SEED))
        for step in range(1, 5):
            tokens = data[step - 1]
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if step % 2 == 0:  # litgpt pretrain's own save: out_dir/step-{N:08d}/lit_model.pth + model_config.yaml
                state = {"model": model, "optimizer": optimizer, "iter_num": step, "step_count": step}
                # it records the command line as `litgpt pretrain`'s hyperparameters.yaml: the one this run would have
                argv, sys.argv = sys.argv, [sys.argv[0], "pretrain", base, "--out_dir", str(folder / "out")]
                try:
                    save_checkpoint(fabric, state, None, folder / "out" / f"step-{step:08d}" / "lit_model.pth")
                finally:
                    sys.argv = argv
        ids = torch.randint(0, 120, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
        with torch.no_grad():
            logits = model.eval()(ids)
        _save_reference(folder, ids, logits, "litgpt", folder / "out" / "step-00000004")


# ---------------------------------------------------------------- Lightning


def make_lightning(out: Path) -> None:
    import lightning as L
    import torch
    import transformers
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Module(L.LightningModule):
        def __init__(self, config: dict):
            super().__init__()
            self.save_hyperparameters()
            self.model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))

        def training_step(self, batch, index):
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    folder = out / "lightning"
    torch.manual_seed(SEED)
    module = Module(dict(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0))
    checkpoints = folder / "lightning_logs" / "version_0" / "checkpoints"
    data = torch.utils.data.DataLoader(torch.randint(0, 128, (16, 32), generator=torch.Generator().manual_seed(SEED)),
                                       batch_size=4)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_progress_bar=False,
                        callbacks=[ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=2, save_top_k=-1)])
    trainer.fit(module, data)
    module.model.config.save_pretrained(checkpoints.parent)  # the module's transformers config, beside its checkpoints
    ids = torch.randint(0, 128, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
    with torch.no_grad():
        logits = module.model.eval()(ids).logits
    _save_reference(folder, ids, logits, "lightning", checkpoints / "epoch=0-step=4.ckpt")


# ---------------------------------------------------------------- nanoGPT

# docs/trainers.md's patch of nanoGPT's train.py: one file per eval besides ckpt.pt
NANOGPT_SAVE = "                torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))\n"
NANOGPT_PATCH = NANOGPT_SAVE + (
    "                torch.save({k: checkpoint[k] for k in ('model', 'model_args', 'iter_num')},\n"
    "                           os.path.join(out_dir, f'ckpt_{iter_num:07d}.pt'))  # lmsat: one per eval\n")


def make_nanogpt(out: Path, nanogpt: Path) -> None:
    import pickle

    import numpy as np
    import torch

    for name, bias in (("nanogpt", True), ("nanogpt-nobias", False)):
        folder = out / name
        (folder / "data" / "tiny").mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(SEED)
        for split in ("train", "val"):
            rng.integers(0, 96, size=20_000).astype(np.uint16).tofile(folder / "data" / "tiny" / f"{split}.bin")
        (folder / "data" / "tiny" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 96}))
        source = (nanogpt / "train.py").read_text()
        assert NANOGPT_SAVE in source, "nanoGPT's train.py changed: its checkpoint line is not where docs/trainers.md says"
        (folder / "train.py").write_text(source.replace(NANOGPT_SAVE, NANOGPT_PATCH))
        for module in ("model.py", "configurator.py"):
            (folder / module).write_text((nanogpt / module).read_text())
        command = [sys.executable, "train.py", "--dataset=tiny", "--device=cpu", "--dtype=float32", "--compile=True",
                   "--n_layer=2", "--n_head=4", "--n_embd=64", "--block_size=32", "--batch_size=4", f"--bias={bias}",
                   "--max_iters=4", "--eval_interval=2", "--eval_iters=1", "--log_interval=1", "--out_dir=out",
                   "--always_save_checkpoint=True", "--gradient_accumulation_steps=1", "--warmup_iters=1"]
        subprocess.run(command, cwd=folder, check=True)
        sys.path.insert(0, str(folder))
        from model import GPT, GPTConfig

        saved = torch.load(folder / "out" / "ckpt_0000004.pt", weights_only=True)
        model = GPT(GPTConfig(**saved["model_args"]))
        model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in saved["model"].items()})
        ids = torch.randint(0, 96, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 1))
        with torch.no_grad():
            logits, _ = model.eval()(ids, targets=ids)  # targets: the logits of every position
        sys.path.remove(str(folder))
        del sys.modules["model"]
        commit = subprocess.run(["git", "-C", str(nanogpt), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "a copy"
        torch.save({"ids": ids, "logits": logits.float(), "framework": "nanoGPT", "version": f"git {commit}",
                    "step": str(folder / "out" / "ckpt_0000004.pt")}, folder / "reference.pt")
        print(f"{name}: nanoGPT train.py ({commit}), saved step {folder / 'out' / 'ckpt_0000004.pt'}")


# ---------------------------------------------------------------- check (lmsat's venv)


def check(out: Path) -> int:
    import torch

    import lmsat

    rows, worst = [], 0.0
    for reference_path in sorted(out.glob("*/reference.pt")):
        reference = torch.load(reference_path, weights_only=True)
        lm, info = lmsat.load_saved_step(reference["step"], dtype="float32", output_loading_info=True)
        with torch.no_grad():
            logits = lm(reference["ids"]).logits.float()
        ours, theirs = logits[..., : reference["logits"].shape[-1]], reference["logits"]
        difference = float((ours - theirs).abs().max())
        scale = float(theirs.abs().max())
        rows.append((reference_path.parent.name, f"{reference['framework']} {reference['version']}", info["converted"],
                     difference, difference / scale / 2**-24))
        worst = max(worst, difference / scale)
    print(f"{'variant':18} {'framework':26} {'loaded as':42} {'max |dlogit|':>12} {'f32 eps':>8}")
    for name, framework, converted, difference, eps in rows:
        print(f"{name:18} {framework:26} {converted:42} {difference:12.3e} {eps:8.1f}")
    return 0 if rows and worst < 1e-4 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make")
    make.add_argument("trainer", choices=("olmo-core", "torchtitan", "megatron", "litgpt", "lightning", "nanogpt"))
    make.add_argument("--out", type=Path, required=True)
    make.add_argument("--nanogpt", type=Path, help="a clone of karpathy/nanoGPT (model.py, train.py, configurator.py)")
    checking = sub.add_parser("check")
    checking.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "check":
        return check(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.trainer == "nanogpt":
        make_nanogpt(args.out, args.nanogpt)
    else:
        {"olmo-core": make_olmo_core, "torchtitan": make_torchtitan, "megatron": make_megatron, "litgpt": make_litgpt,
         "lightning": make_lightning}[args.trainer](args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
