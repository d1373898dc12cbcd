"""A rank-r LM head and its cross-entropy in chunks (Godey et al. 2024, 5.1).

    W = A B,  A (V x r), B (r x d),  logits = A (B h)    # O(r (d + V)) per token

  * `LowRankHead(d, V, r)`: Linear(d -> r) then Linear(r -> V), no bias (Pythia's
    `embed_out` has none).
  * `chunked_cross_entropy`: CE over tokens in chunks, so at most (chunk x V) logits exist
    at a time, in the forward AND the backward pass (a fused linear + cross-entropy for
    LowRankHead, activation checkpointing per chunk for any other head)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

# --------------------------------------------------------------------------- the head


class LowRankHead(nn.Module):
    """LM head of rank <= r: logits = A (B h), A (V, r) = up.weight, B (r, d) = down.weight.

    Initialisation: the paper draws A and B from N(0, 1). With unit-variance hidden
    coordinates that makes each logit N(0, r d): std 2048 for Pythia-1B at r = d = 2048,
    a softmax saturated on one token and a loss of thousands of nats at step 0. We keep the
    Gaussian shape but scale it by 1/sqrt(fan_in) (B ~ N(0, 1/d), A ~ N(0, 1/r)), so each
    logit starts ~N(0, ||h||^2 / d), i.e. ~N(0, 1) after a unit-gain LayerNorm, whatever r: the
    initial loss is ~ln V + 1/2, and since AdamW's step size does not depend on the
    weights' scale, one learning-rate grid serves every r. `init="paper"` gives the
    paper's plain N(0, 1).
    """

    def __init__(
        self,
        d: int,
        vocab_size: int,
        rank: int,
        init: str = "scaled",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if not 1 <= rank <= d:
            raise ValueError(
                f"LowRankHead: rank r={rank} must be in [1, d={d}]: a head of rank above the "
                f"hidden size d is no constraint; pass r <= d"
            )
        if init not in ("scaled", "paper"):
            raise ValueError(f"LowRankHead: init={init!r}; use 'scaled' or 'paper'")
        self.d, self.vocab_size, self.rank = d, vocab_size, rank
        self.down = nn.Linear(d, rank, bias=False)  # B (r, d)
        self.up = nn.Linear(rank, vocab_size, bias=False)  # A (V, r)
        with torch.no_grad():
            for layer, fan_in in ((self.down, d), (self.up, rank)):
                layer.weight.normal_(0.0, 1.0, generator=generator)
                if init == "scaled":
                    layer.weight.mul_(1.0 / math.sqrt(fan_in))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (n, d) -> (n, V)
        return self.up(self.down(hidden))

    def full_weight(self) -> torch.Tensor:
        """W = A B, (V, d): for spectra / W-error comparisons."""
        return self.up.weight @ self.down.weight


def _chunk_loss(head, hidden: torch.Tensor, targets: torch.Tensor):
    logits = head(hidden)  # (chunk, V)
    if logits.dtype in (torch.float16, torch.bfloat16):  # softmax in at least float32
        logits = logits.float()
    loss_sum = F.cross_entropy(logits, targets, reduction="sum")
    n_correct = (logits.argmax(dim=-1) == targets).sum()
    return loss_sum, n_correct


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """sum_i CE(features_i @ weight^T, target_i) for the last linear layer of a head.

    Gradients are computed chunk by chunk during the forward (softmax - onehot, then two
    matmuls) and only scaled in the backward: peak memory is one (chunk, V) buffer, and
    unlike activation checkpointing no logits are computed twice (~1.4x faster).
    """

    @staticmethod
    def forward(ctx, features, weight, targets, chunk):  # (N, k), (V, k), (N,)
        compute_dtype = torch.float32 if weight.dtype in (torch.float16, torch.bfloat16) else None
        grad_features = torch.empty_like(features)  # (N, k)
        grad_weight = torch.zeros(
            weight.shape, dtype=compute_dtype or weight.dtype, device=weight.device
        )  # (V, k)
        loss_sum = torch.zeros((), dtype=torch.float64, device=features.device)
        n_correct = torch.zeros((), dtype=torch.int64, device=features.device)
        for start in range(0, features.shape[0], chunk):
            feats = features[start : start + chunk]  # (c, k)
            tgts = targets[start : start + chunk]  # (c,)
            logits = feats @ weight.T  # (c, V)
            if compute_dtype is not None:
                logits = logits.to(compute_dtype)
            rows = torch.arange(tgts.shape[0], device=tgts.device)
            target_logits = logits[rows, tgts]  # (c,)
            max_logits, predictions = logits.max(dim=1)  # (c,), (c,): one pass for both
            n_correct += (predictions == tgts).sum()
            # Softmax in place with a single exp pass: the logits buffer becomes d loss/d logits.
            grad_logits = logits.sub_(max_logits[:, None]).exp_()  # (c, V)
            partition = grad_logits.sum(dim=1)  # (c,)
            log_normaliser = max_logits + partition.log()  # (c,) logsumexp
            loss_sum += (log_normaliser - target_logits).sum(dtype=torch.float64)
            grad_logits.div_(partition[:, None])
            grad_logits[rows, tgts] -= 1.0
            grad_features[start : start + chunk] = (grad_logits @ weight.to(grad_logits.dtype)).to(
                features.dtype
            )
            grad_weight.addmm_(grad_logits.T, feats.to(grad_logits.dtype))
        ctx.save_for_backward(grad_features, grad_weight.to(weight.dtype))
        ctx.mark_non_differentiable(n_correct)
        return loss_sum, n_correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grad_features, grad_weight = ctx.saved_tensors
        return (
            grad_features * grad_loss.to(grad_features.dtype),
            grad_weight * grad_loss.to(grad_weight.dtype),
            None,
            None,
        )


def _as_features_and_output_weight(head, hidden):
    """(features (N, k), weight (V, k)) if head(hidden) == features @ weight.T, else None."""
    if isinstance(head, LowRankHead):
        return head.down(hidden), head.up.weight
    if isinstance(head, nn.Linear) and head.bias is None:
        return hidden, head.weight
    return None


def chunked_cross_entropy(
    hidden: torch.Tensor, head, targets: torch.Tensor, chunk: int = 8192
) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy and number of correct argmax predictions over (N, d) hidden.

    `head` maps (n, d) -> (n, V) logits (a module or any callable). Tokens are processed
    `chunk` at a time, so at most (chunk, V) logits exist at once, backward included:
    for a LowRankHead (or a bias-free nn.Linear) by a fused linear + cross-entropy that
    computes the gradients chunk by chunk in the forward; for any other module by
    checkpointing each chunk (backward recomputes its logits).
    Returns (loss_sum, a float64 0-d tensor that carries gradients; n_correct, an int).
    """
    if hidden.ndim != 2 or targets.ndim != 1 or hidden.shape[0] != targets.shape[0]:
        raise ValueError(
            f"chunked_cross_entropy: need hidden (N, d) and targets (N,), got "
            f"{tuple(hidden.shape)} and {tuple(targets.shape)}"
        )
    if chunk < 1:
        raise ValueError(f"chunked_cross_entropy: chunk={chunk} must be >= 1")
    needs_grad = torch.is_grad_enabled() and (
        hidden.requires_grad
        or (isinstance(head, nn.Module) and any(p.requires_grad for p in head.parameters()))
    )
    if needs_grad:
        linear = _as_features_and_output_weight(head, hidden)
        if linear is not None:
            loss_sum, n_correct = _FusedLinearCrossEntropy.apply(*linear, targets, chunk)
            return loss_sum, int(n_correct.item())
    loss_sum = torch.zeros((), dtype=torch.float64, device=hidden.device)
    n_correct = torch.zeros((), dtype=torch.int64, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk):
        hidden_chunk = hidden[start : start + chunk]  # (chunk, d)
        targets_chunk = targets[start : start + chunk]  # (chunk,)
        if needs_grad:
            chunk_loss, chunk_correct = torch.utils.checkpoint.checkpoint(
                _chunk_loss, head, hidden_chunk, targets_chunk, use_reentrant=False
            )
        else:
            chunk_loss, chunk_correct = _chunk_loss(head, hidden_chunk, targets_chunk)
        loss_sum = loss_sum + chunk_loss.double()
        n_correct = n_correct + chunk_correct
    return loss_sum, int(n_correct.item())
