"""Rank-constrained heads: chunked CE, HDF5 reader, training on a known teacher, resume."""

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmsat.bottleneck.head_loss import LowRankHead, chunked_cross_entropy
from lmsat.bottleneck.rank_heads import HeadTrainConfig, _lr_factor, full_head_eval, train_head
from lmsat.bottleneck.representation_cache import ShardedRepresentations
from lmsat.core.integrity import hdf5_checksums

D, V = 16, 64


@pytest.fixture(autouse=True, scope="module")  # module scope: also covers `trained`
def _single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _teacher(seed=0):
    """Full-rank linear-softmax teacher W* (V, d) with a spread-out spectrum."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(V, D)))
    v, _ = np.linalg.qr(rng.normal(size=(D, D)))
    singular_values = np.geomspace(12.0, 2.0, D)
    return (u * singular_values) @ v.T  # (V, d)


def _write_shards(directory, name, teacher, n_tokens, n_shards, seed):
    """Hidden ~ N(0, I); targets sampled from softmax(W* h); split over HDF5 shards."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(n_tokens, D)).astype(np.float32)
    logits = hidden.astype(np.float64) @ teacher.T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    targets = (probs.cumsum(axis=1) > rng.random((n_tokens, 1))).argmax(axis=1)
    paths = []
    for i, (h, t) in enumerate(
        zip(np.array_split(hidden, n_shards), np.array_split(targets, n_shards))
    ):
        path = directory / f"{name}-{i}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("hidden", data=h.astype(np.float16))  # caches may be fp16
            f.create_dataset("targets", data=t.astype(np.int64))
            f.attrs["checksums"] = hdf5_checksums({"hidden": h.astype(np.float16), "targets": t.astype(np.int64)})
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def teacher_data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cache")
    teacher = _teacher()
    train = _write_shards(directory, "train", teacher, 48000, 3, seed=1)
    evaluation = _write_shards(directory, "eval", teacher, 4000, 2, seed=2)
    return teacher, train, evaluation


def _cfg(**overrides):
    base = dict(
        peak_lr=3e-2,
        batch_size=8,
        seq_len=64,
        n_steps=300,
        eval_every=100,
        save_every=50,
        chunk_tokens=100,
        seed=0,
    )
    return HeadTrainConfig(**{**base, **overrides})


# ---------------------------------------------------------------- chunked cross-entropy


class _RowCountingHead(torch.nn.Module):
    """A linear head that remembers the largest number of rows it was ever given."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(D, V)
        self.max_rows = 0

    def forward(self, hidden):
        self.max_rows = max(self.max_rows, hidden.shape[0])
        return self.linear(hidden)


def test_chunked_cross_entropy_equals_plain_cross_entropy_with_gradients():
    torch.manual_seed(0)
    head = _RowCountingHead()
    hidden = torch.randn(103, D, requires_grad=True)
    targets = torch.randint(0, V, (103,))

    loss_sum, n_correct = chunked_cross_entropy(hidden, head, targets, chunk=10)
    loss_sum.backward()
    chunked_grads = [hidden.grad.clone(), head.linear.weight.grad.clone()]
    assert head.max_rows == 10  # never more than one chunk of logits at a time

    hidden.grad = None
    head.zero_grad()
    logits = head.linear(hidden)
    reference = F.cross_entropy(logits, targets, reduction="sum")
    reference.backward()
    assert float(loss_sum.detach()) == pytest.approx(float(reference.detach()), rel=1e-6)
    assert n_correct == int((logits.argmax(-1) == targets).sum())
    torch.testing.assert_close(chunked_grads[0], hidden.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(chunked_grads[1], head.linear.weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["low_rank", "linear"])
def test_fused_path_equals_plain_cross_entropy_with_gradients(kind):
    torch.manual_seed(1)
    if kind == "low_rank":
        head = LowRankHead(D, V, 5)
    else:
        head = torch.nn.Linear(D, V, bias=False)
    hidden = torch.randn(77, D, requires_grad=True)
    targets = torch.randint(0, V, (77,))

    loss_sum, n_correct = chunked_cross_entropy(hidden, head, targets, chunk=16)
    (2.5 * loss_sum).backward()  # the upstream gradient is applied in the backward
    fused = [hidden.grad.clone()] + [p.grad.clone() for p in head.parameters()]

    hidden.grad = None
    head.zero_grad()
    logits = head(hidden)
    reference = F.cross_entropy(logits, targets, reduction="sum")
    (2.5 * reference).backward()
    reference_grads = [hidden.grad] + [p.grad for p in head.parameters()]
    assert float(loss_sum.detach()) == pytest.approx(float(reference.detach()), rel=1e-6)
    assert n_correct == int((logits.argmax(-1) == targets).sum())
    for got, expected in zip(fused, reference_grads):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_full_head_eval_equals_mean_cross_entropy():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(V, D))
    hidden = rng.normal(size=(50, D))
    targets = rng.integers(0, V, size=50)
    result = full_head_eval(hidden, targets, W, chunk=7)
    logits = torch.as_tensor(hidden @ W.T)
    expected = F.cross_entropy(logits, torch.as_tensor(targets))
    assert result["eval_loss"] == pytest.approx(float(expected), rel=1e-10)
    assert result["eval_acc"] == pytest.approx(float((logits.argmax(-1).numpy() == targets).mean()))
    with pytest.raises(ValueError, match="do not match"):
        full_head_eval(hidden[:, :3], targets, W)


# -------------------------------------------------------------------------- the head


def test_low_rank_head_shapes_rank_and_init_scale():
    head = LowRankHead(D, V, 3, generator=torch.Generator().manual_seed(0))
    assert head(torch.randn(5, D)).shape == (5, V)
    assert torch.linalg.matrix_rank(head.full_weight()) == 3
    # scaled init: logits ~ N(0, 1) for unit-variance hidden, whatever r
    for rank in (1, D):
        head = LowRankHead(D, 4096, rank, generator=torch.Generator().manual_seed(1))
        std = head(torch.randn(64, D)).std().item()
        assert 0.6 < std < 1.5
    paper = LowRankHead(D, 4096, D, init="paper", generator=torch.Generator().manual_seed(1))
    assert paper(torch.randn(64, D)).std().item() > 8  # ~sqrt(r d) = 16


def test_rank_above_hidden_size_is_rejected():
    with pytest.raises(ValueError, match=r"r=17.*d=16"):
        LowRankHead(D, V, D + 1)
    with pytest.raises(ValueError, match="r=0"):
        LowRankHead(D, V, 0)


def test_lr_grid_and_schedule():
    from lmsat.bottleneck.rank_grid import lr_grid

    assert lr_grid() == pytest.approx([1e-3, 1e-3 * 50 ** (1 / 3), 1e-3 * 50 ** (2 / 3), 5e-2])
    cfg = HeadTrainConfig(n_steps=200)  # 2 warmup steps
    factors = [_lr_factor(s, cfg) for s in range(200)]
    assert factors[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert factors[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(factors[1:], factors[2:]))


# ----------------------------------------------------------------------- the reader


def test_reader_reads_every_token_once_and_samples_reproducibly(teacher_data):
    _, train_paths, _ = teacher_data
    with ShardedRepresentations(train_paths, seq_len=8) as reader:
        assert reader.n_tokens == 48000 and reader.d == D
        all_targets = np.concatenate([t for _, t in reader.iter_batches(777)])
        expected = np.concatenate([h5py.File(p)["targets"][:] for p in train_paths])
        np.testing.assert_array_equal(all_targets, expected)

        hidden_a, targets_a = reader.sample_batch(5, np.random.default_rng(3))
        hidden_b, targets_b = reader.sample_batch(5, np.random.default_rng(3))
        assert hidden_a.shape == (40, D) and hidden_a.dtype == np.float32
        np.testing.assert_array_equal(hidden_a, hidden_b)
        np.testing.assert_array_equal(targets_a, targets_b)
        # each sequence is 8 consecutive cached positions of one shard
        flat = np.concatenate([h5py.File(p)["hidden"][:] for p in train_paths])
        for seq in hidden_a.reshape(5, 8, D):
            start = int(np.flatnonzero((flat == seq[0].astype(np.float16)).all(axis=1))[0])
            np.testing.assert_array_equal(flat[start : start + 8], seq)


def test_reader_errors_name_the_shard(tmp_path):
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f.create_dataset("hidden", data=np.zeros((4, D), np.float32))
    with pytest.raises(ValueError, match=r"bad\.h5 has no dataset 'targets'"):
        ShardedRepresentations([bad])
    mismatched = tmp_path / "mismatched.h5"
    with h5py.File(mismatched, "w") as f:
        f.create_dataset("hidden", data=np.zeros((4, D), np.float32))
        f.create_dataset("targets", data=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"mismatched\.h5 has hidden"):
        ShardedRepresentations([mismatched])
    with pytest.raises(ValueError, match="does not exist"):
        ShardedRepresentations([tmp_path / "missing.h5"])


# ------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def trained(teacher_data):
    """Eval losses of heads of rank 1, 4, 16 trained on the teacher's data (one run each)."""
    _, train_paths, eval_paths = teacher_data
    with (
        ShardedRepresentations(train_paths, seq_len=64) as train,
        ShardedRepresentations(eval_paths) as evaluation,
    ):
        return {r: train_head(train, evaluation, D, V, r, _cfg()) for r in (1, 4, D)}


def test_full_rank_head_reaches_the_teacher_loss(teacher_data, trained):
    teacher, _, eval_paths = teacher_data
    with ShardedRepresentations(eval_paths) as evaluation:
        hidden, targets = map(np.concatenate, zip(*evaluation.iter_batches(10_000)))
    teacher_loss = full_head_eval(hidden, targets, teacher)["eval_loss"]
    result = trained[D]
    assert result["finished"] and result["step"] == 300
    assert [h["step"] for h in result["history"]] == [100, 200, 300]
    initial_loss = np.log(V) + 0.5
    assert result["history"][0]["eval_loss"] < initial_loss
    # 48k training tokens for 1024 weights: ~0.01 nats of estimation error is expected
    assert result["eval_loss"] < teacher_loss + 0.04, (result["eval_loss"], teacher_loss)
    assert result["eval_loss"] > teacher_loss - 0.04  # cannot beat the true distribution


def test_loss_decreases_with_rank(trained):
    losses = [trained[r]["eval_loss"] for r in (1, 4, D)]
    assert losses[0] > losses[1] + 0.1 > losses[2] + 0.2, losses


def test_killed_and_resumed_run_matches_uninterrupted_run(teacher_data, tmp_path):
    _, train_paths, eval_paths = teacher_data
    cfg = _cfg(n_steps=40, eval_every=10, save_every=10)
    with (
        ShardedRepresentations(train_paths, seq_len=64) as train,
        ShardedRepresentations(eval_paths) as evaluation,
    ):
        uninterrupted = train_head(train, evaluation, D, V, 4, cfg)

        state = tmp_path / "state.pt"
        first = train_head(train, evaluation, D, V, 4, cfg, state, max_steps_this_call=13)
        assert not first["finished"] and first["eval_loss"] is None and first["step"] == 13
        second = train_head(train, evaluation, D, V, 4, cfg, state, max_steps_this_call=14)
        assert second["step"] == 27
        resumed = train_head(train, evaluation, D, V, 4, cfg, state)
        again = train_head(train, evaluation, D, V, 4, cfg, state)  # finished: no retraining

        with pytest.raises(ValueError, match="different run"):
            train_head(train, evaluation, D, V, 4, _cfg(n_steps=40, peak_lr=1e-3), state)

    assert resumed["finished"] and resumed["step"] == 40
    assert abs(resumed["eval_loss"] - uninterrupted["eval_loss"]) < 1e-6
    assert again["eval_loss"] == resumed["eval_loss"]
    assert [h["step"] for h in resumed["history"]] == [10, 20, 30, 40]
    for a, b in zip(resumed["history"], uninterrupted["history"]):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], abs=1e-6)
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == [
        "state.pt"
    ]  # atomic writes leave no temporary files


def test_bad_runs_are_rejected_with_the_culprit(teacher_data):
    _, train_paths, _ = teacher_data
    with ShardedRepresentations(train_paths, seq_len=4) as train:
        with pytest.raises(ValueError, match="seq_len"):
            train_head(train, train, D, V, 4, _cfg())
    with ShardedRepresentations(train_paths, seq_len=64) as train:
        with pytest.raises(ValueError, match=r"outside \[0, V=8\)"):
            train_head(train, train, D, 8, 4, _cfg())
