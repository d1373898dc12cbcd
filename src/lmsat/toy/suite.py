"""Tokenizer and tiny GPT-NeoX models trained on the synthetic language (the toy suite).

The default pipeline's "model suite" is built here: a WordLevel tokenizer whose token ids
are the language's word ids, and 2-layer GPT-NeoX models of widths d = 16..128 trained with
Pythia's recipe, with checkpoints at Pythia-like steps (0, 1, 2, 4, ..., then evenly spaced).

    tok = build_tokenizer(lang.words)
    train = tokenize_corpus(tok, "corpus.txt")
    spec = ToyModelSpec(hidden_size=32, vocab_size=len(tok))
    log = train_toy_model(train, spec, TrainSpec(), schedules.toy_steps(TrainSpec().max_steps),
                          on_checkpoint=lambda step, model: publish_revision(...))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import tokenizers
import torch
import torch.nn.functional as F
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"  # id V: end of document, also bos (as in Pythia)
UNK_TOKEN = "<unk>"  # id V + 1


def build_tokenizer(words: list[str], out_dir=None) -> PreTrainedTokenizerFast:
    """WordLevel tokenizer with token id == word id; EOS = V, UNK = V + 1."""
    if len(set(words)) != len(words) or any((not w) or (" " in w) for w in words):
        raise ValueError("words: must be distinct, non-empty and contain no spaces")
    vocab = {word: i for i, word in enumerate(words)}
    vocab[EOS_TOKEN] = len(words)
    vocab[UNK_TOKEN] = len(words) + 1
    backend = tokenizers.Tokenizer(WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = WhitespaceSplit()
    backend.add_special_tokens([EOS_TOKEN, UNK_TOKEN])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        bos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        clean_up_tokenization_spaces=False,
    )
    if out_dir is not None:
        tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def tokenize_corpus(tokenizer, path) -> np.ndarray:
    """Token ids of a one-document-per-line corpus, documents joined by EOS; int32 (n,)."""
    path = Path(path)
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path}: no documents (expected one document per line)")
    encodings = tokenizer.backend_tokenizer.encode_batch(lines, add_special_tokens=False)
    eos = np.array([tokenizer.eos_token_id], dtype=np.int32)
    pieces = []
    for i, enc in enumerate(encodings):
        if i:
            pieces.append(eos)
        pieces.append(np.asarray(enc.ids, dtype=np.int32))
    return np.concatenate(pieces)


@dataclass(frozen=True)
class ToyModelSpec:
    hidden_size: int  # d, the width the softmax bottleneck is about
    vocab_size: int  # tokenizer size (V + 2 specials); the head is padded above it
    num_layers: int = 2  # 2 layers: enough for order-2 dependencies, fast on one CPU
    num_heads: int | None = None  # None -> max(1, d // 32) (Pythia-14m: d=128, 4 heads)
    seq_len: int = 64  # training context length (tokens)
    pad_multiple: int = 8  # head rows padded to a multiple of this, like Pythia's 50304
    tied_head: bool = False  # head = input embedding (GPT-2, OPT); Pythia's is untied

    @property
    def padded_vocab_size(self) -> int:
        return -(-self.vocab_size // self.pad_multiple) * self.pad_multiple

    @property
    def heads(self) -> int:
        return self.num_heads or max(1, self.hidden_size // 32)

    def config(self) -> GPTNeoXConfig:
        """GPT-NeoX config in Pythia's shape: untied head, partial rotary, parallel residual."""
        if self.hidden_size % self.heads:
            raise ValueError(
                f"ToyModelSpec: hidden_size={self.hidden_size} not divisible by "
                f"num_heads={self.heads}"
            )
        return GPTNeoXConfig(
            vocab_size=self.padded_vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.heads,
            intermediate_size=4 * self.hidden_size,
            max_position_embeddings=self.seq_len,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
            },
            use_parallel_residual=True,
            tie_word_embeddings=self.tied_head,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            initializer_range=0.02,
            bos_token_id=self.vocab_size - 2,
            eos_token_id=self.vocab_size - 2,
        )


@dataclass(frozen=True)
class TrainSpec:
    max_steps: int = 800  # optimizer steps: ~2 min of CPU for the 4 default models, 1 thread
    batch_size: int = 16  # sequences per step; larger batches learned no faster per CPU-second
    lr: float | None = None  # peak learning rate; None -> default_lr(d) (per width, tuned)
    warmup_fraction: float = 0.01  # linear warmup over 1% of steps (Pythia)
    min_lr_ratio: float = 0.1  # cosine decay to 0.1 x peak (Pythia)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW (Pythia)
    eps: float = 1e-8  # AdamW (Pythia)
    weight_decay: float = 0.1  # on matrices only, not biases/LayerNorms (Pythia)
    grad_clip: float = 1.0  # global gradient-norm clip (Pythia)
    seed: int = 0  # model init and batch sampling
    # "random": windows at random offsets (may overlap and repeat); "sequential": window i
    # is tokens[i*(T+1) : (i+1)*(T+1)], each token used once, never repeated (an error if
    # the corpus is shorter than max_steps * batch_size * (T + 1) tokens)
    windows: str = "random"

    def __post_init__(self):
        if self.windows not in ("random", "sequential"):
            raise ValueError(f"TrainSpec.windows={self.windows!r}: must be random or sequential")

    def peak_lr(self, hidden_size: int) -> float:
        return self.lr if self.lr is not None else default_lr(hidden_size)

    def lr_at(self, step: int, hidden_size: int) -> float:
        """Learning rate used for update number `step` (0-based) of a width-d model."""
        peak = self.peak_lr(hidden_size)
        warmup = max(1, round(self.warmup_fraction * self.max_steps))
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, self.max_steps - warmup))
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return peak * (self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine)


def default_lr(hidden_size: int) -> float:
    """Peak LR 2e-2 * (16 / d)^(2/3): 2e-2 at d=16 ... 5e-3 at d=128, the best of a sweep at
    the default budget (wider models want smaller steps, as in Pythia's 1e-3 ... 1.2e-4)."""
    return 2e-2 * (16 / hidden_size) ** (2 / 3)


def build_model(model_spec: ToyModelSpec, seed: int) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(model_spec.config())


def _optimizer(model: torch.nn.Module, spec: TrainSpec) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.ndim >= 2 and "layernorm" not in name.lower() else no_decay).append(param)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": spec.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=0.0,  # set every step from the schedule
        betas=spec.betas,
        eps=spec.eps,
    )


def next_token_loss(model, windows: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of windows[:, 1:] given windows[:, :-1]; windows (B, T + 1)."""
    logits = model(input_ids=windows[:, :-1]).logits  # (B, T, V_padded)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))


def train_toy_model(
    train_tokens: np.ndarray,
    model_spec: ToyModelSpec,
    train_spec: TrainSpec,
    schedule: list[int],
    on_checkpoint: Callable[[int, GPTNeoXForCausalLM], None],
) -> list[dict]:
    """Train from scratch; call on_checkpoint(step, model) after `step` updates for each
    step in `schedule` (0 = the initialisation). Returns the log [{step, loss, lr}].

    Batches are windows of seq_len + 1 tokens, at random offsets or (train_spec.windows
    "sequential") consecutive and never repeated. Same seed => bit-identical weights
    on the same machine and thread count.
    """
    tokens = torch.as_tensor(np.asarray(train_tokens, dtype=np.int64))  # (n,)
    window = model_spec.seq_len + 1
    if len(tokens) < window:
        raise ValueError(f"train_tokens: {len(tokens)} tokens, need at least {window}")
    if tokens.max() >= model_spec.vocab_size or tokens.min() < 0:
        raise ValueError(f"train_tokens: ids outside [0, {model_spec.vocab_size})")
    bad = [s for s in schedule if not 0 <= s <= train_spec.max_steps]
    if bad:
        raise ValueError(f"schedule: steps {bad} outside [0, max_steps={train_spec.max_steps}]")
    needed = train_spec.max_steps * train_spec.batch_size * window
    if train_spec.windows == "sequential" and len(tokens) < needed:
        raise ValueError(
            f"train_tokens: {len(tokens)} tokens, sequential windows need max_steps x "
            f"batch_size x (seq_len + 1) = {needed} (or windows='random', which repeats data)"
        )
    checkpoints = set(schedule)
    model = build_model(model_spec, train_spec.seed)
    optimizer = _optimizer(model, train_spec)
    rng = np.random.default_rng(train_spec.seed)
    offsets = torch.arange(window)
    log = []

    def checkpoint(step):
        if step in checkpoints:
            model.eval()
            on_checkpoint(step, model)
            model.train()

    model.train()
    checkpoint(0)
    for step in range(train_spec.max_steps):
        lr = train_spec.lr_at(step, model_spec.hidden_size)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if train_spec.windows == "sequential":
            starts = (step * train_spec.batch_size + torch.arange(train_spec.batch_size)) * window
        else:
            starts = torch.as_tensor(
                rng.integers(0, len(tokens) - window + 1, size=train_spec.batch_size)
            )
        loss = next_token_loss(model, tokens[starts[:, None] + offsets])  # (B, T + 1) windows
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_spec.grad_clip)
        optimizer.step()
        log.append({"step": step + 1, "loss": loss.item(), "lr": lr})
        checkpoint(step + 1)
    return log


@torch.no_grad()
def evaluate_loss(model, tokens: np.ndarray, seq_len: int, batch_size: int = 64) -> float:
    """Mean next-token loss over consecutive windows of seq_len + 1 tokens (nats/token)."""
    tokens = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    n_windows = (len(tokens) - 1) // seq_len
    if n_windows < 1:
        raise ValueError(f"tokens: {len(tokens)} tokens, need at least {seq_len + 1}")
    starts = torch.arange(n_windows) * seq_len
    offsets = torch.arange(seq_len + 1)
    was_training = model.training
    model.eval()
    total = 0.0
    for lo in range(0, n_windows, batch_size):
        windows = tokens[starts[lo : lo + batch_size, None] + offsets]  # (b, T + 1)
        total += float(next_token_loss(model, windows)) * len(windows)
    model.train(was_training)
    return total / n_windows
