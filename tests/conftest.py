"""Shared fixtures: the repository root, the schema, and a tiny saved GPT-NeoX."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from lmsat.config import load_yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def default_config() -> dict:
    return copy.deepcopy(load_yaml(ROOT / "config" / "config.yaml"))


@pytest.fixture(scope="session")
def tiny_neox():
    """A tiny randomly initialised GPT-NeoX (d=16, 2 layers, V=40 incl. padding rows)."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return GPTNeoXForCausalLM(config).eval()


def word_tokenizer(words):
    """A real `tokenizers` WordLevel tokenizer over `words` (id = index), eos = <|endoftext|>."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(words)}
    vocab["<|endoftext|>"] = len(words)
    vocab["<unk>"] = len(words) + 1
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<unk>")
