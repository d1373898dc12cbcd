"""Data integrity (issue 22): every file the pipeline writes and reads back carries a
checksum of its data, verified when read, and values the truth bounds are checked.

Each fault is made to happen on the real files of one small finished run (one toy model,
two revisions, its head cache): bytes zeroed on disk, a hand edit, an attribute or a
checksum column deleted, a file swapped with another checkpoint's, NaN/Inf written in,
and a hostile edit that recomputes the checksum to get an impossible value past it. Each
must give a named error saying which file is corrupt, to delete it, and which rule makes it
again, never a number in a table.

1. caches           zeroed loss bytes, a deleted or swapped checksum attribute, a resumed
                    extraction whose marked chunk never reached the disk
2. head cache       half of an eval shard zeroed
3. weight files     NaN singular values, Inf in an attention file (checksum recomputed too)
4. metric records   loss NaN, null, missing, "3.1", negative; checksum field deleted
5. tables           best_final.csv with an unknown revision, a valid revision that is not the
                    loss table's best, a removed checksum column; loss.csv edited
6. corpus files     a directory, a FIFO, /dev/zero
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

import lmsat.data.hidden_states as cache_module
from lmsat.bottleneck.representation_cache import ShardedRepresentations
from lmsat.core.integrity import (
    CHECKSUM_ATTR,
    TABLE_COLUMN,
    IntegrityError,
    csv_with_checksum,
    hdf5_checksums,
    selected_revision,
    verify_csv,
    with_record_checksum,
)
from lmsat.data.hidden_states import CacheChecksumError, CacheError, ExtractionSettings, extract_to_cache, open_cache
from lmsat.degeneration.weight_files import read_attention, read_spectrum
from lmsat.errors import ConfigError
from lmsat.planning.load import load_plan
from lmsat.products.degeneration_tables import spectra_tables
from lmsat.products.saturation_tables import loss_from_records
from lmsat.products.table_files import read_table, write_csv

from conftest import ROOT, SCHEMA, small_toy_config

slow = pytest.mark.slow  # one Snakemake run, shared by the module
RUN = "results/default"
MODEL = "toy-d16"
TARGETS = [
    f"{RUN}/tables/loss.csv",
    f"{RUN}/tables/best_final.csv",
    f"{RUN}/tables/spectra.csv",
    f"{RUN}/tables/attention_lowrank.csv",
    f"{RUN}/bottleneck/cache/{MODEL}/manifest.json",
]


def run_config() -> dict:
    config = small_toy_config((MODEL,), n_seq=16, chunk=4)
    config["bottleneck"].update(models=[MODEL], ranks=[1])
    return config


def snakemake(workdir, *args, timeout=900):
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(run_config(), sort_keys=False))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(configfile), "--cores", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The finished run (its working directory); tests corrupt copies of its files."""
    workdir = tmp_path_factory.mktemp("finished")
    result = snakemake(workdir, *TARGETS)
    assert result.returncode == 0, result.stdout[-4000:]
    return workdir


@pytest.fixture
def copy_of(finished, tmp_path):
    """copy_of(relative path) -> a copy of the run's file at the same relative path under a
    fresh tree (so what its path promises still holds)."""

    def copy(relative):
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(finished / relative, target)
        return target

    return copy


def revisions(finished):
    table = read_table(finished / RUN / "tables" / "loss.csv")
    return list(table.loc[table["model"] == MODEL, "revision"])


def zero_bytes_on_disk(path, dataset: str, fraction: float = 0.5):
    """Zero the first `fraction` of a contiguous dataset's bytes in the file itself (not via
    HDF5): what a bad disk or a torn copy does. The file keeps its shape and opens fine."""
    with h5py.File(path, "r") as f:
        offset, size = f[dataset].id.get_offset(), f[dataset].id.get_storage_size()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"\0" * int(size * fraction))


def recompute_checksums(path):
    """What a hostile user does next: rewrite the `checksums` attribute to fit the edited data."""
    with h5py.File(path, "a") as f:
        names = json.loads(f.attrs[CHECKSUM_ATTR])
        f.attrs[CHECKSUM_ATTR] = hdf5_checksums({name: f[name][...] for name in names})


# ------------------------------------------------------------ 1. caches


@slow
def test_a_cache_with_half_its_loss_bytes_zeroed_is_named(finished, copy_of):
    final = revisions(finished)[-1]
    path = copy_of(f"{RUN}/cache/{MODEL}/{final}.h5")
    with open_cache(path, expect={"revision": final}) as f:  # the untouched copy reads fine
        true_loss = float(f["loss"][...].mean())
    zero_bytes_on_disk(path, "loss")
    with h5py.File(path, "r") as f:  # the shape-preserving fault: a lower, plausible-looking loss
        assert f["loss"].shape[0] == 16 and float(f["loss"][...].mean()) < 0.6 * true_loss
    with pytest.raises(CacheChecksumError, match=rf"cache {path} is corrupt: dataset 'loss' does not match its "
                       rf"checksum in 2 of 4 blocks .*Fix: delete {path} .*rule analyse_checkpoint"):
        open_cache(path, expect={"revision": final})


@slow
def test_a_cache_without_or_with_another_files_checksums_is_refused(finished, copy_of):
    first, final = revisions(finished)[0], revisions(finished)[-1]
    path = copy_of(f"{RUN}/cache/{MODEL}/{final}.h5")
    other = copy_of(f"{RUN}/cache/{MODEL}/{first}.h5")
    with h5py.File(other, "r") as f:
        foreign = f.attrs[CHECKSUM_ATTR]
    with h5py.File(path, "a") as f:
        f.attrs[CHECKSUM_ATTR] = foreign  # the step0 file's checksums on the final file's data
    with pytest.raises(CacheChecksumError, match="does not match its checksum"):
        open_cache(path)
    with h5py.File(path, "a") as f:  # the zeroed dataset's entry dropped from the attribute
        f.attrs[CHECKSUM_ATTR] = json.dumps({k: v for k, v in json.loads(foreign).items() if k != "loss"})
    with pytest.raises(CacheChecksumError, match=r"dataset 'loss' has no recorded checksum"):
        open_cache(path)
    with h5py.File(path, "a") as f:
        f.attrs[CHECKSUM_ATTR] = "{not json"
    with pytest.raises(CacheChecksumError, match=r"its `checksums` attribute is not JSON"):
        open_cache(path)
    with h5py.File(path, "a") as f:
        del f.attrs[CHECKSUM_ATTR]
    with pytest.raises(CacheChecksumError, match=rf"{path} is corrupt: it has no `checksums` attribute"):
        open_cache(path)
    # the whole file swapped with another checkpoint's: its identity says so
    shutil.copyfile(other, path)
    with pytest.raises(CacheError, match=rf"made with revision='{first}', expected '{final}'"):
        open_cache(path, expect={"revision": final})


def test_a_marked_chunk_that_never_reached_the_disk_is_caught_after_resuming(tiny_neox, tmp_path, monkeypatch):
    """A power cut after a marker but before its data (what fsync before the marker prevents):
    the resumed file's checksums, taken from memory when each chunk was computed, see it."""
    tokens = np.random.default_rng(0).integers(0, 40, size=(10, 12))
    settings = ExtractionSettings(batch_size=3, chunk_sequences=4, layer_sample=50, seed=1)
    identity = dict(model="tiny", revision="step1", model_id="local/tiny", sample_sha256="abc")
    out = tmp_path / "c.h5"
    real_chunk, calls = cache_module._extract_chunk, []

    def dying_chunk(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        calls.append(1)
        return real_chunk(*args, **kwargs)

    monkeypatch.setattr(cache_module, "_extract_chunk", dying_chunk)
    with pytest.raises(KeyboardInterrupt):
        extract_to_cache(tiny_neox, tokens, out, identity=identity, settings=settings)
    partial = tmp_path / "c.h5.parts" / "cache.h5"
    with h5py.File(partial, "a") as f:  # chunk 0 marked done, its bytes lost
        f["loss"][0:4] = 0.0
    monkeypatch.setattr(cache_module, "_extract_chunk", real_chunk)
    extract_to_cache(tiny_neox, tokens, out, identity=identity, settings=settings)
    with pytest.raises(CacheChecksumError, match=r"dataset 'hidden' does not match|dataset 'loss' does not match"):
        open_cache(out)
    # a marker of an earlier version (empty, no checksums) is not trusted: its chunk is recomputed
    with pytest.raises(KeyboardInterrupt):
        calls.clear()
        monkeypatch.setattr(cache_module, "_extract_chunk", dying_chunk)
        extract_to_cache(tiny_neox, tokens, tmp_path / "d.h5", identity=identity, settings=settings)
    (tmp_path / "d.h5.parts" / "chunk_0000000.done").write_text("")
    calls.clear()
    monkeypatch.setattr(cache_module, "_extract_chunk", lambda *a, **k: calls.append(1) or real_chunk(*a, **k))
    extract_to_cache(tiny_neox, tokens, tmp_path / "d.h5", identity=identity, settings=settings)
    assert len(calls) == 2  # chunk 0 again, and the missing third one
    with open_cache(tmp_path / "d.h5") as f:
        assert np.isfinite(f["loss"][...]).all()


# ------------------------------------------------------------ 2. head cache


@slow
def test_a_head_cache_eval_shard_half_zeroed_is_named(finished, copy_of):
    path = copy_of(f"{RUN}/bottleneck/cache/{MODEL}/eval_0000.h5")
    with ShardedRepresentations([path]) as reader:
        assert reader.n_tokens > 0
    with h5py.File(path, "a") as f:
        f["hidden"][: f["hidden"].shape[0] // 2] = 0
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: dataset 'hidden' does not match its checksum"
                       r".*rule build_head_cache makes it again"):
        ShardedRepresentations([path])
    # a shard whose targets were replaced by a shorter dataset (and hidden cut to match)
    with h5py.File(path, "a") as f:
        n = f["targets"].shape[0] // 2
        hidden = f["hidden"][:n]
        del f["targets"], f["hidden"]
        f["hidden"], f["targets"] = hidden, np.zeros(n, dtype=np.int32)
    with pytest.raises(IntegrityError, match=r"dataset 'hidden' has shape .* not the one it was written with"):
        ShardedRepresentations([path])


# ------------------------------------------------------------ 3. weight files


@slow
def test_nan_singular_values_in_a_spectra_file_name_the_file(finished, copy_of):
    final = revisions(finished)[-1]
    path = copy_of(f"{RUN}/spectra/{MODEL}/{final}.h5")
    with h5py.File(path, "a") as f:
        f["singular_values"][0] = np.nan
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: dataset 'singular_values' does not match"):
        read_spectrum(path)
    recompute_checksums(path)  # past the checksum, the values themselves are refused
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: {MODEL}@{final}: `singular_values` holds NaN"
                       r".*rule analyse_checkpoint"):
        spectra_tables([path])
    with h5py.File(path, "a") as f:
        f["singular_values"][0] = -1.0
    recompute_checksums(path)
    with pytest.raises(IntegrityError, match=r"`singular_values` is outside \[0.0, inf\]"):
        read_spectrum(path)


@slow
def test_inf_in_an_attention_file_is_named(finished, copy_of):
    final = revisions(finished)[-1]
    path = copy_of(f"{RUN}/attention/{MODEL}/{final}.h5")
    read_attention(path)
    with h5py.File(path, "a") as f:
        f["qk/nuclear_norm"][0, 0] = np.inf
    with pytest.raises(IntegrityError, match=r"dataset 'qk/nuclear_norm' does not match its checksum"):
        read_attention(path)
    recompute_checksums(path)
    with pytest.raises(IntegrityError, match=rf"{MODEL}@{final}: `qk/nuclear_norm` holds NaN or Inf"):
        read_attention(path)


# ------------------------------------------------------------ 4. metric records


@slow
@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda r: r.update(loss=float("nan")), "`loss` holds NaN or Inf"),
        (lambda r: r.update(loss=None), r"`loss` is None \(NoneType\), not a number"),
        (lambda r: r.pop("loss"), "the record has no `loss`"),
        (lambda r: r.update(loss="3.1"), r"`loss` is '3.1' \(str\), not a number"),
        (lambda r: r.update(loss=-0.5), r"`loss` is outside \[0.0, inf\]"),
        (lambda r: r.update(loss_sem=True), r"`loss_sem` is True \(bool\)"),
    ],
)
def test_a_metric_record_with_an_impossible_loss_is_named(finished, copy_of, edit, problem):
    final = revisions(finished)[-1]
    path = copy_of(f"{RUN}/metrics/loss/{MODEL}/{final}.json")
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))  # a hand edit: the checksum no longer fits
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: its fields do not match their checksum"):
        loss_from_records([path], {}, None)
    path.write_text(json.dumps(with_record_checksum(record)))  # and with the checksum recomputed
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: {MODEL}@{final}: {problem}.*"
                       r"rule compute_checkpoint_metric makes it again"):
        loss_from_records([path], {}, None)


@slow
def test_a_metric_record_without_its_checksum_is_refused(finished, copy_of):
    final = revisions(finished)[-1]
    path = copy_of(f"{RUN}/metrics/loss/{MODEL}/{final}.json")
    assert loss_from_records([path], {}, None)["loss"].between(0, 10).all()
    record = json.loads(path.read_text())
    del record["record_sha256"]
    path.write_text(json.dumps(record))
    with pytest.raises(IntegrityError, match=r"it has no `record_sha256` field"):
        loss_from_records([path], {}, None)


# ------------------------------------------------------------ 5. tables


def _edit_csv(path, model, kind, column, value, keep_checksum: bool):
    """Set `column` of the (model, kind) row; the checksum column is kept as it was (a hand
    edit), or recomputed to fit (keep_checksum: a hostile edit)."""
    old_digest = path.read_text().split("\n")[1][-64:]
    table = pd.read_csv(path).drop(columns=TABLE_COLUMN)  # as found, even after an earlier edit
    table.loc[(table["model"] == model) & (table["kind"] == kind), column] = value
    text = csv_with_checksum(table.to_csv(index=False, lineterminator="\n"))
    path.write_text(text if keep_checksum else text.replace(text.split("\n")[1][-64:], old_digest))


@slow
def test_best_final_with_a_wrong_revision_is_named(finished, copy_of):
    names = revisions(finished)
    loss = copy_of(f"{RUN}/tables/loss.csv")
    selection = copy_of(f"{RUN}/tables/best_final.csv")
    best = selected_revision(selection, loss, MODEL, "best", names)
    assert best in names
    other = next(name for name in names if name != best)
    _edit_csv(selection, MODEL, "best", "revision", other, keep_checksum=False)
    with pytest.raises(IntegrityError, match=rf"{selection} is corrupt: its rows do not match their checksum"
                       r".*rule select_checkpoints makes it again"):
        selected_revision(selection, loss, MODEL, "best", names)
    _edit_csv(selection, MODEL, "best", "revision", other, keep_checksum=True)
    with pytest.raises(IntegrityError, match=rf"its best revision of model {MODEL} is '{other}', but the loss "
                       rf"table {loss} flags \['{best}'\] as best"):
        selected_revision(selection, loss, MODEL, "best", names)
    _edit_csv(selection, MODEL, "best", "revision", "step-9", keep_checksum=True)
    with pytest.raises(IntegrityError, match=rf"its best revision of model {MODEL} is 'step-9', not one of"):
        selected_revision(selection, loss, MODEL, "best", names)
    selection.write_text("".join(line.rsplit(",", 1)[0] + "\n" for line in selection.read_text().splitlines()))
    with pytest.raises(IntegrityError, match=rf"it has no last column `{TABLE_COLUMN}`"):
        selected_revision(selection, loss, MODEL, "best", names)


@slow
def test_an_edited_loss_table_is_refused_by_its_readers(finished, copy_of):
    path = copy_of(f"{RUN}/tables/loss.csv")
    verify_csv(path)
    path.write_text(path.read_text().replace(",True,", ",False,", 1))  # is_best moved by hand
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: its rows do not match.*rule tabulate_metric"):
        read_table(path)


@slow
def test_a_loss_table_emptied_to_its_header_is_refused(finished, copy_of):
    """Deleting every row leaves no row to carry the checksum: the header says the table had rows."""
    path = copy_of(f"{RUN}/tables/loss.csv")
    path.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: it has a header and no rows.*rule tabulate_metric"):
        read_table(path)


def test_a_table_written_with_no_rows_reads_back_empty(tmp_path):
    """identical_weights.csv is empty when no two checkpoints share weights: that is no fault."""
    path = tmp_path / "identical_weights.csv"
    write_csv(pd.DataFrame(columns=["model", "revision", "same_as"]), path)
    back = read_table(path)
    assert back.empty and list(back.columns) == ["model", "revision", "same_as"]
    path.write_text(path.read_text() + "toy-d16,step0,toy-d32\n")  # a row added by hand: no checksum
    with pytest.raises(IntegrityError, match="it has no last column `table_sha256`"):
        read_table(path)


@slow
def test_the_workflow_refuses_an_edited_best_final_before_planning_table1(finished):
    """The DAG reads best_final.csv to plan Table 1's best jobs: an edit stops the plan there."""
    names = revisions(finished)
    selection = finished / RUN / "tables" / "best_final.csv"
    original = selection.read_text()
    best = read_table(selection).query("kind == 'best'")["revision"].iloc[0]
    try:
        _edit_csv(selection, MODEL, "best", "revision", next(n for n in names if n != best), keep_checksum=True)
        result = snakemake(finished, "-n", f"{RUN}/tables/table1.csv")
        assert result.returncode != 0
        assert "best_final.csv is corrupt: its best revision of model toy-d16" in result.stdout
        assert "rule select_checkpoints makes it again" in result.stdout
    finally:
        selection.write_text(original)


def test_an_unknown_revision_names_model_and_revision(default_config):
    entry = next(iter(load_plan(default_config, SCHEMA).models.values()))
    with pytest.raises(ValueError, match=rf"model {entry.name}: revision 'step-9' is not one of its revisions"):
        entry.step("step-9")


# ------------------------------------------------------------ 6. corpus files


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_a_corpus_file_that_is_not_a_file_says_what_it_is(tmp_path, default_config, kind):
    if kind == "directory":
        path, said = tmp_path / "docs", "a directory"
        path.mkdir()
    elif kind == "fifo":
        path, said = tmp_path / "docs.txt", r"a FIFO \(named pipe\)"
        os.mkfifo(path)
    else:
        path, said = "/dev/zero", "a character device"
    default_config["corpora"]["mine"] = {"type": "text_files", "files": [str(path)]}
    with pytest.raises(ConfigError, match=rf"corpora.mine.files\[0\]'.*{path} is {said}, not a regular file"):
        load_plan(default_config, SCHEMA)
    missing = tmp_path / "absent.txt"
    default_config["corpora"]["mine"] = {"type": "text_files", "files": [str(missing)]}
    with pytest.raises(ConfigError, match="does not exist"):
        load_plan(default_config, SCHEMA)


def test_a_head_run_with_an_accuracy_above_one_is_named(tmp_path):
    """A rank-head record (rule train_rank_head's layout and writer) with eval_acc 1.5."""
    from lmsat.bottleneck.rank_grid import lr_label
    from lmsat.core.io import write_json
    from lmsat.products.bottleneck_tables import read_head_inputs

    path = tmp_path / RUN / "bottleneck" / "runs" / MODEL / "r1" / f"lr{lr_label(0.01)}.json"
    record = dict(model=MODEL, revision="step16", rank=1, peak_lr=0.01, eval_loss=3.2, eval_acc=1.5)
    write_json(path, record)
    with pytest.raises(IntegrityError, match=rf"{path} is corrupt: {MODEL} rank 1 lr 0.01: `eval_acc` is outside "
                       r"\[0.0, 1.0\].*rule train_rank_head makes it again"):
        read_head_inputs([path], [], [])
    write_json(path, dict(record, eval_acc=0.5, eval_loss=float("nan")))
    with pytest.raises(IntegrityError, match=r"`eval_loss` holds NaN or Inf"):
        read_head_inputs([path], [], [])
    write_json(path, dict(record, eval_acc=0.5))
    runs, _, _ = read_head_inputs([path], [], [])
    assert runs[0]["eval_acc"] == 0.5
