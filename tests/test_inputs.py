"""Inputs that would become wrong paths, wrong results or raw Python errors (issue 13):
each is refused with a named error (the config key or the file and line, and the fix)
before any expensive work. Config-level and library-level only, so these run in seconds."""

from __future__ import annotations

import pytest

from lmsat.core import schedules
from lmsat.core.names import PATH_NAME_PATTERN, check_path_name
from lmsat.errors import ConfigError
from lmsat.planning.config_files import load_yaml
from lmsat.planning.load import load_plan

from conftest import SCHEMA, plan_refused

BAD_NAMES = ["..", "../../../ESCAPED", "a/b", "/abs/path", ".hidden", "", "x\n"]


def plan(config):
    return load_plan(config, SCHEMA)


refused = plan_refused


# ------------------------------------------------------------ names that become path components


def test_the_path_name_pattern_accepts_the_suites_revision_names():
    for name in ("step0", "step143000", "stage1-step1000-tokens5B", "ckpt_359", "step-2000", "main",
                 "pythia-1.4b", "toy-d16", "checkpoint-400", "step1000-seed-default"):
        assert check_path_name("k", name) == name
    assert PATH_NAME_PATTERN.startswith("^") and PATH_NAME_PATTERN.endswith("$")  # usable as a schema pattern


@pytest.mark.parametrize("name", BAD_NAMES)
def test_check_path_name_refuses_escapes(name):
    with pytest.raises(ConfigError, match=r"config key 'run.name': .* cannot be a path component.*Fix: use"):
        check_path_name("run.name", name, "run name")


def with_name(default_config, kind: str, name: str):
    """default_config with one name of `kind` replaced by `name`; the config key it must name."""
    config = default_config
    if kind == "suite":
        config["suites"][name] = config["suites"].pop("toy")
        return f"suites.{name}"
    if kind == "model":
        config["suites"]["toy"]["models"][0]["name"] = name
        return "suites.toy.models[0].name"
    if kind == "revision_list":
        config["suites"]["toy"]["revisions"] = {"schedule": "list", "list": ["step1", name]}
        return "suites.toy.revisions.list[1]"
    if kind == "revision_template":
        config["suites"]["toy"]["revisions"] = {"schedule": "toy", "template": name + "{step}"}
        return "suites.toy.revisions.template"
    if kind == "tokenizer":
        config["tokenizers"][name] = config["tokenizers"].pop("toy")
        config["suites"]["toy"]["tokenizer"] = name
        return f"tokenizers.{name}"
    if kind == "corpus":
        config["corpora"][name] = config["corpora"].pop("synthetic")
        config["sample"]["corpus"] = name
        return f"corpora.{name}"
    if kind == "metric":
        config["metrics"] = ["loss", name]
        return "metrics[1]"
    raise AssertionError(kind)


KINDS = ["suite", "model", "revision_list", "revision_template", "tokenizer", "corpus", "metric"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["..", "../../../ESCAPED", "a/b", "/abs/path"])
def test_every_name_that_becomes_a_path_is_checked_before_planning(default_config, kind, name):
    if kind == "revision_template" and name == "..":
        name = "../"  # "..{step}" renders "..0", a harmless name; "../{step}" does not
    key = with_name(default_config, kind, name)
    message = refused(default_config, key, "cannot be a path component")
    assert "'/'" in message and "'..'" in message  # the fix says what is allowed


# ------------------------------------------------------------ revision specs and seeds


@pytest.mark.parametrize("revisions, key, fragment", [
    ({"schedule": "toy", "subsample": 1}, "suites.toy.revisions.subsample", "use 0 (all revisions) or at least 2"),
    ({"schedule": "list", "list": ["ckpt_1"], "step_regex": "ckpt_(\\d+"}, "suites.toy.revisions.step_regex",
     "is not a regular expression"),
    ({"schedule": "list", "list": ["ckpt_1"], "step_regex": "ckpt_\\d+"}, "suites.toy.revisions.step_regex", "has no group"),
    ({"schedule": "list", "list": ["ckpt_a1"], "step_regex": "ckpt_(\\w)"}, "suites.toy.revisions.step_regex",
     "not a step number"),
    ({"schedule": "list", "list": ["ckpt_1"], "step_regex": "ckpt_(x)?(\\d)"}, "suites.toy.revisions.step_regex",
     "gives None"),
    ({"schedule": "toy", "template": "step{foo}"}, "suites.toy.revisions.template", "KeyError"),
    ({"schedule": "toy", "template": "step{0}"}, "suites.toy.revisions.template", "IndexError"),
    ({"schedule": "toy", "template": "step{step"}, "suites.toy.revisions.template", "ValueError"),
])
def test_revision_specs_fail_as_named_errors_not_raw_python_ones(default_config, revisions, key, fragment):
    default_config["suites"]["toy"]["revisions"] = revisions
    refused(default_config, key, fragment)


def test_a_models_own_revisions_are_named_by_the_models_key(default_config):
    default_config["suites"]["toy"]["models"][1]["revisions"] = {"schedule": "toy", "subsample": 1}
    refused(default_config, "suites.toy.models[1].revisions.subsample")


def test_log_subsample_refuses_one_and_keeps_the_ends_from_two():
    with pytest.raises(ValueError, match="n must be 0"):
        schedules.log_subsample(list(range(10)), 1)
    assert schedules.log_subsample(list(range(10)), 2) == [0, 9]


@pytest.mark.parametrize("where, key", [
    (lambda c: c, "seed"),
    (lambda c: c["toy"]["language"], "toy.language.seed"),
])
def test_a_negative_seed_is_refused_at_planning(default_config, where, key):
    where(default_config)["seed"] = -1
    refused(default_config, key, "-1 is less than the minimum of 0")


# ------------------------------------------------------------ duplicate keys in config files


def test_a_key_given_twice_in_a_config_file_names_file_key_and_lines(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("seed: 1\nsample:\n  n_tokens: 100\n  seq_len: 8\n  n_tokens: 200\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    message = str(info.value)
    assert message.startswith("config key 'sample.n_tokens'") and str(path) in message
    assert "lines 3 and 5" in message and "Fix: keep one" in message
    path.write_text("seed: 1\nsample:\n  n_tokens: 100\nother:\n  n_tokens: 200\n")  # same key, other mappings
    assert load_yaml(path)["other"]["n_tokens"] == 200
    path.write_text("suites:\n  s:\n    models:\n      - name: a\n        hidden_size: 8\n      - {name: b, name: c}\n")
    with pytest.raises(ConfigError, match=r"config key 'suites.s.models\[1\].name': given twice .* lines 6 and 6"):
        load_yaml(path)


def test_snakemake_refuses_a_config_file_with_a_key_given_twice(tmp_path):
    """Through the workflow: common.smk reads every config file with the strict loader."""
    import subprocess
    import sys

    from conftest import ROOT

    configfile = tmp_path / "run.yaml"
    configfile.write_text("seed: 1\ndevice: cpu\nseed: 2\n")
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(configfile), "-n", "--cores", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert f"config key 'seed': given twice in {configfile}, lines 1 and 3" in result.stdout
    assert "Job stats" not in result.stdout


# ------------------------------------------------------------ files that are no config (issue 46, case 13)


def no_configs(tmp_path) -> dict[str, tuple]:
    """Real files a user can hand to --configfile by mistake -> what the named error says."""
    import json

    import torch
    from safetensors.torch import save_file

    save_file({"embed_out.weight": torch.randn(64, 16)}, tmp_path / "model.safetensors")
    (tmp_path / "loss.csv").write_text("model,revision,step,loss\ntoy-d16,step0,0,5.5\n")
    (tmp_path / "step0.json").write_text(json.dumps({"model": "toy-d16", "revision": "step0", "loss": 5.5}))
    (tmp_path / "tabs.yaml").write_text("seed: 1\nsample:\n\tn_tokens: 8\n")
    return {
        "model.safetensors": ("a binary file, not a YAML config (byte", "give a YAML config file"),
        "loss.csv": ("holds a YAML str ('model,revision,step,loss'), not a mapping of config keys", "give a YAML config"),
        "step0.json": ("none of its keys (loss, model, revision) is a config key", "give a YAML config file"),
        "tabs.yaml": ("not valid YAML (line 3, column 1)", "correct the YAML there (indent with spaces, never tabs)"),
    }


def test_a_file_that_is_no_config_is_named_with_its_problem(tmp_path):
    """`lmsat plan --configfile model.safetensors` gave a UnicodeDecodeError traceback."""
    from lmsat.errors import ConfigFileError
    from lmsat.planning.config_files import read_config_files

    schema = load_yaml(SCHEMA)
    for name, (problem, fix) in no_configs(tmp_path).items():
        with pytest.raises(ConfigFileError) as info:
            read_config_files([tmp_path / name], schema, targets=False)
        message = str(info.value)
        assert message.startswith(f"config file {tmp_path / name}: {problem}") and f"Fix: {fix}" in message, message
    (tmp_path / "mine.yaml").write_text("seed: 3\n")
    assert read_config_files([tmp_path / "mine.yaml"], schema) == {str(tmp_path / "mine.yaml"): {"seed": 3}}


def test_snakemake_names_a_target_written_after_configfile_and_says_to_write_dashes(tmp_path):
    """--configfile takes every argument after it: `snakemake --configfile mine.yaml results/...json`
    read the target as a config file. A target Snakemake itself can read (a JSON record; a
    binary or missing target stops Snakemake's own command line, before the workflow) is named,
    with the fix; with `--` before it, the target is planned as one."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "mine.yaml")
    target = "results/mine/metrics/loss/toy-d16/step0.json"
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text('{"model": "toy-d16", "revision": "step0", "loss": 5.5}')
    command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n",
               "--cores", "1", "--configfile", "mine.yaml"]
    result = subprocess.run(command + [target], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                            cwd=tmp_path)
    out = " ".join(result.stdout.split())
    assert result.returncode != 0 and "Job stats" not in out
    assert (f"config file {target}: none of its keys (loss, model, revision) is a config key" in out
            and f"Fix: if {target} is a target, write `--` before the targets" in out
            and f"(snakemake --configfile mine.yaml -- {target})" in out), out[-3000:]
    (tmp_path / target).unlink()  # (a finished output without its run's claim would be refused: case 7)
    result = subprocess.run(command + ["--", target], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0 and "rule compute_checkpoint_metric" in result.stdout, result.stdout[-3000:]


# ------------------------------------------------------------ corpus files


def text_corpus(files, **extra) -> dict:
    return dict(type="text_files", path="", name="", split="train", text_field="text", streaming=True,
                max_documents=0, data_files=[], files=[str(f) for f in files], **extra)


def read_all(spec):
    from lmsat.data.corpus import iter_documents

    return list(iter_documents(spec, "mine"))


def test_invalid_utf8_names_file_and_line(tmp_path):
    from lmsat.data.corpus import CorpusError

    path = tmp_path / "latin1.txt"
    path.write_bytes("first line\nna\u00efve caf\u00e9\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=rf"{path}:2: not valid UTF-8 .*Fix: re-encode the file as UTF-8"):
        read_all(text_corpus([path]))


@pytest.mark.parametrize("value, kind", [(None, "NoneType"), (["a", "b"], "list"), (3, "int")])
def test_jsonl_text_that_is_not_a_string_names_file_and_line(tmp_path, value, kind):
    import json

    from lmsat.data.corpus import CorpusError

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"text": "a b"}) + "\n\n" + json.dumps({"text": value}) + "\n")
    with pytest.raises(CorpusError, match=rf"{path}:3: field 'text' holds {kind} .*not a string.*Fix:"):
        read_all(text_corpus([path]))
    path.write_text(json.dumps(["text"]) + "\n")  # a line that is not an object
    with pytest.raises(CorpusError, match=rf"{path}:1: not a JSON object with field 'text' \(TypeError"):
        read_all(text_corpus([path]))


def test_a_document_longer_than_the_limit_is_refused_without_reading_it_whole(tmp_path):
    import tracemalloc

    from lmsat.data.corpus import CorpusError

    path = tmp_path / "long.txt"
    with open(path, "wb") as handle:
        handle.write(b"short doc\n")
        for _ in range(64):  # one 64 MB line
            handle.write(b"w " * 2**19)
        handle.write(b"\nafter\n")
    tracemalloc.start()
    with pytest.raises(CorpusError, match=rf"{path}:2: a document longer than 1000000 bytes "
                                          r"\(corpora.mine.max_document_bytes\).*Fix: split"):
        read_all(text_corpus([path], max_document_bytes=1_000_000))
    peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert peak_mb < 8, f"reading a 64 MB line peaked at {peak_mb:.0f} MB"
    # at the limit exactly, a line is read (the newline does not count)
    path.write_bytes(b"x" * 1000 + b"\n" + b"y" * 1001 + b"\n")
    with pytest.raises(CorpusError, match=rf"{path}:2: a document longer than 1000 bytes"):
        read_all(text_corpus([path], max_document_bytes=1000))
    assert read_all(text_corpus([path], max_document_bytes=1001))[1] == "y" * 1001


def test_the_schema_fills_the_document_limit(default_config):
    assert plan(default_config).config["corpora"]["synthetic"]["max_document_bytes"] == 16_000_000


# ------------------------------------------------------------ inputs of tables vs their paths


def loss_record(model, revision, step, loss=3.0):
    return dict(suite="toy", model=model, revision=revision, step=step, tokens=10 * step, metric="loss",
                loss=loss, loss_sem=0.01)


def tabulate_loss_job(tmp_path, paths):
    """Rule tabulate_metric's job for the loss table."""
    from types import SimpleNamespace

    from snakemake.iocontainers import Namedlist

    return SimpleNamespace(input=Namedlist(fromdict={"files": [str(p) for p in paths]}), output=[str(tmp_path / "loss.csv")],
                           log=[str(tmp_path / "loss.log")], wildcards=SimpleNamespace(table="loss"),
                           params=SimpleNamespace(metric="loss", config_sha256="0" * 64, models=["m"], options={}, gone=[]))


def test_a_metric_record_copied_from_another_revision_fails_its_table(tmp_path):
    from lmsat.core.io import IdentityError, write_json

    from conftest import script

    paths = []
    for revision, step in (("step0", 0), ("step400", 400), ("step800", 800)):
        paths.append(tmp_path / "metrics" / "loss" / "m" / f"{revision}.json")
        write_json(paths[-1], loss_record("m", revision, step))
    job = tabulate_loss_job(tmp_path, paths)
    script("tabulate_metric").main(job)  # the right files tabulate
    assert (tmp_path / "loss.csv").read_text().count("toy,m,step") == 3
    (tmp_path / "loss.csv").unlink()
    paths[2].write_text(paths[1].read_text())  # step400's record copied over step800's
    with pytest.raises(IdentityError, match=rf"{paths[2]} was made for metric='loss', model='m', revision='step400', "
                                            rf"but its path promises metric='loss', model='m', revision='step800'"):
        script("tabulate_metric").main(job)
    assert not (tmp_path / "loss.csv").exists()  # no table from it


def test_bottleneck_inputs_are_checked_against_their_paths(tmp_path):
    import numpy as np

    from lmsat.bottleneck.rank_grid import lr_label
    from lmsat.core.io import IdentityError, write_json
    from lmsat.degeneration.weight_files import write_spectrum
    from lmsat.products.bottleneck_tables import read_head_inputs

    def run(path, **fields):
        write_json(path, dict(dict(model="m", rank=4, peak_lr=0.001, eval_loss=3.0, eval_acc=0.1, train_loss=3.0),
                              **fields))
        return path

    runs = [run(tmp_path / "runs/m/r4" / f"lr{lr_label(0.001)}.json"),
            run(tmp_path / "runs/m/r8" / f"lr{lr_label(0.001)}.json", rank=8)]
    manifest = tmp_path / "cache/m/manifest.json"
    reference = dict(eval_loss=2.9, eval_acc=0.2, n_tokens=1000, loss_sem=0.01)
    write_json(manifest, dict(model="m", revision="step800", hidden_size=16, vocab_size=40, reference=reference))
    spectrum = dict(singular_values=np.array([2.0, 1.0]), head_sha256="h", embedding_sha256="e", n_rows=40,
                    n_valid_rows=37, hidden_size=16, head_dtype="float32")
    final = tmp_path / "spectra/m/step800.h5"
    write_spectrum(final, spectrum, dict(suite="s", model="m", revision="step800", step=800, tokens=1), 37)
    got_runs, manifests, spectra = read_head_inputs(runs, [manifest], [final])
    assert [r["rank"] for r in got_runs] == [4, 8] and list(spectra) == ["m"] and manifests["m"]["revision"] == "step800"
    from types import SimpleNamespace

    from conftest import script

    job = SimpleNamespace(
        input=SimpleNamespace(runs=[str(p) for p in runs], manifests=[str(manifest)], spectra=[str(final)]),
        output=SimpleNamespace(heads=str(tmp_path / "heads.csv"), search=str(tmp_path / "search.csv")),
        log=[str(tmp_path / "tab.log")],
        params=SimpleNamespace(rise_tolerance=0.01, config_sha256="0" * 64, models=["m"]))
    script("tabulate_bottleneck").main(job)  # the rule's script reads its inputs through the checks
    assert (tmp_path / "heads.csv").read_text().count("\nm,step800,") == 3  # ranks 4, 8 and the own head

    runs[1].write_text(runs[0].read_text())  # rank 4's run copied over rank 8's
    with pytest.raises(IdentityError, match=r"r8/lr0.001.json was made for model='m', rank=4, .*promises .*rank='8'"):
        read_head_inputs(runs, [manifest], [final])
    run(runs[1], rank=8)
    write_json(manifest, dict(model="m", revision="step400", hidden_size=16, vocab_size=40))  # pairs of another head
    with pytest.raises(IdentityError, match=r"step800.h5 was made for model='m', revision='step800', but its path "
                                            r"promises model='m', revision='step400'"):
        read_head_inputs(runs, [manifest], [final])
    other = tmp_path / "cache/other/manifest.json"
    write_json(other, dict(model="m", revision="step800", hidden_size=16, vocab_size=40))
    with pytest.raises(IdentityError, match=r"other/manifest.json was made for model='m'"):
        read_head_inputs(runs, [other], [final])


# ------------------------------------------------------------ sequences longer than the context


def test_a_sample_longer_than_the_toy_context_is_refused_at_planning(default_config):
    default_config["sample"]["seq_len"] = default_config["toy"]["seq_len"] + 1
    refused(default_config, "sample.seq_len", "65 tokens per sequence exceed the context of toy model toy-d16"
                                              ", built with toy.seq_len (max_position_embeddings=64)", "at most 64")
    default_config["sample"]["seq_len"] = default_config["toy"]["seq_len"]
    plan(default_config)


def test_a_sample_longer_than_a_local_models_context_is_refused_at_planning(default_config, tmp_path, tiny_neox):
    tiny_neox.save_pretrained(tmp_path / "tiny" / "step1")  # max_position_embeddings=64
    default_config["suites"]["toy"]["models"].append(
        {"name": "mine", "source": "local", "id": str(tmp_path / "tiny"), "hidden_size": 16,
         "revisions": {"list": ["step1"]}})
    default_config["sample"]["seq_len"] = 64
    plan(default_config)
    default_config["toy"]["seq_len"] = 128  # the toy models' context is no limit here
    default_config["sample"]["seq_len"] = 100
    refused(default_config, "sample.seq_len", f"model mine ({tmp_path / 'tiny' / 'step1' / 'config.json'}) "
                                              "(max_position_embeddings=64)")


def test_the_job_refuses_a_sample_longer_than_the_loaded_checkpoints_context(tiny_neox):
    from lmsat.checkpoints.loading import check_sequence_length, context_length
    from lmsat.core.plan import ModelEntry

    entry = ModelEntry(name="tiny", suite="s", source="hub", id="org/tiny", hidden_size=16, vocab_size=40, n_params=0,
                       tokenizer="w", tokens_per_step=1, revisions=("step1",), steps=(1,), allow_pickle=False,
                       trust_remote_code=False, key="suites.s.models[0]")
    check_sequence_length(tiny_neox, entry, "step1", 64)
    with pytest.raises(ConfigError, match=r"config key 'sample.seq_len': 65 tokens per sequence exceed the context "
                                          r"of model tiny \(org/tiny\) at step1 \(max_position_embeddings=64\).*"
                                          r"Fix: set sample.seq_len to at most 64"):
        check_sequence_length(tiny_neox, entry, "step1", 65)
    assert context_length({"n_positions": 1024, "n_embd": 768}) == ("n_positions", 1024)  # GPT-2
    assert context_length({"text_config": {"max_position_embeddings": 8192}}) == ("max_position_embeddings", 8192)
    assert context_length({"hidden_size": 8}) is None


# ------------------------------------------------------------ head-cache shards


def test_a_truncated_head_cache_shard_is_named_with_the_fix(tmp_path):
    import h5py
    import numpy as np

    from lmsat.bottleneck.representation_cache import ShardedRepresentations, ShardError
    from lmsat.core.integrity import hdf5_checksums

    paths = []
    for i in range(2):
        paths.append(tmp_path / "m" / f"train_{i:04d}.h5")
        paths[-1].parent.mkdir(exist_ok=True)
        with h5py.File(paths[-1], "w") as f:  # contiguous datasets, so data sits at the file's end
            f.create_dataset("hidden", data=np.ones((4096, 16), dtype=np.float32))
            f.create_dataset("targets", data=np.zeros(4096, dtype=np.int64))
            f.attrs["checksums"] = hdf5_checksums({name: f[name][...] for name in ("hidden", "targets")})
    whole = paths[1].read_bytes()
    paths[1].write_bytes(whole[: len(whole) // 2])  # a shard cut short (a full disk, a killed copy)
    with pytest.raises(ShardError, match=rf"head-cache shard {paths[1]} is unreadable or truncated .*"
                                         rf"Fix: delete {paths[1].parent} .* rerun"):
        ShardedRepresentations(paths)
    # a shard whose header is intact but whose compressed chunk is damaged fails when read
    with h5py.File(paths[1], "w") as f:
        f.create_dataset("hidden", data=np.ones((4096, 16), dtype=np.float32), chunks=(1024, 16), compression="gzip")
        f.create_dataset("targets", data=np.zeros(4096, dtype=np.int64))
        f.attrs["checksums"] = hdf5_checksums({name: f[name][...] for name in ("hidden", "targets")})
        chunk = f["hidden"].id.get_chunk_info(2)
    with open(paths[1], "r+b") as handle:
        handle.seek(chunk.byte_offset)
        handle.write(b"\xff" * chunk.size)
    with pytest.raises(ShardError, match=rf"shard {paths[1]} is unreadable"):
        ShardedRepresentations(paths)  # verifying its checksums reads every chunk
    # without that check (verify=False), the reads themselves name the shard
    with ShardedRepresentations(paths, verify=False) as reader, pytest.raises(ShardError, match=rf"shard {paths[1]} is unreadable"):
        list(reader.iter_batches(1024))
    rng = np.random.default_rng(0)
    with ShardedRepresentations(paths, seq_len=4096, verify=False) as reader, pytest.raises(ShardError, match=rf"shard {paths[1]}"):
        for _ in range(20):  # one window per shard: a draw hits the damaged one with probability 1/2
            reader.sample_batch(1, rng)


# ------------------------------------------------------------ a full disk


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 1 MiB filesystem (tmpfs; needs root), so writes fail with a real ENOSPC."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}): run as root to test a real full disk")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_names_the_output_being_written(tiny_disk):
    import numpy as np

    from lmsat.core.io import DiskFullError, write_json
    from lmsat.data.corpus import write_sample

    sample = tiny_disk / "results/samples/pile/pythia.h5"  # h5py reports ENOSPC in its message only
    with pytest.raises(DiskFullError, match=rf"(?s)no space left on the disk of {sample} while writing it .*Fix: free space"):
        write_sample(sample, np.ones((512, 1024), dtype=np.int32), np.arange(512), {"corpus": "pile"})
    record = tiny_disk / "results/metrics/loss/m/step0.json"  # a plain write: OSError errno 28
    with pytest.raises(DiskFullError, match=rf"{record}") as info:
        write_json(record, {"values": list(range(300_000))})
    assert info.value.errno == 28
    leftovers = [p.relative_to(tiny_disk) for p in tiny_disk.rglob("*") if p.is_file()]
    assert leftovers == []  # neither the outputs nor their temp files remain


# ------------------------------------------------------------ the conda environment of the jobs


def _lock():
    """envs/lock.txt as {canonical name: version}."""
    from packaging.utils import canonicalize_name

    from conftest import ROOT

    pins = {}
    for line in (ROOT / "envs" / "lock.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"envs/lock.txt: {line!r} is not an exact pin (name==version)"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_requirement_within_pyprojects_ranges():
    """`make` installs with envs/lock.txt as constraints: each requirement of pyproject (every
    extra included: test, cloud) pinned there, to a version its range admits (else pip refuses)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    from conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _lock()
    assert "lmsat" not in pins  # the checkout itself is installed editable, never pinned
    extras = [line for lines in project["optional-dependencies"].values() for line in lines]
    for line in project["dependencies"] + extras:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"envs/lock.txt pins no {name}: run `make lock`"
        assert Version(pins[name]) in requirement.specifier, f"envs/lock.txt: {name}=={pins[name]} is outside pyproject's {line!r}"


def test_the_conda_env_pins_the_requirements_of_pyproject_as_the_lock_does():
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from conftest import ROOT

    conda_names = {"pytorch": "torch", "matplotlib-base": "matplotlib"}  # conda-forge's names
    outside_jobs = {"snakemake", "snakemake-executor-plugin-slurm"}  # run the jobs, not in them
    wanted = set()
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        name = canonicalize_name(Requirement(line).name)
        if name not in outside_jobs:
            wanted.add(name)
    env = load_yaml(ROOT / "envs" / "lmsat.yaml")
    listed = {}
    for entry in env["dependencies"]:
        for item in entry["pip"] if isinstance(entry, dict) else [entry]:
            assert not item.startswith(("-e", ".", "/")), f"envs/lmsat.yaml installs a local path: {item}"
            name, _, spec = item.partition(" ")
            if name in ("python", "pip"):
                continue
            assert spec.startswith("=="), f"envs/lmsat.yaml: {item!r} is not pinned (==version, as in envs/lock.txt)"
            listed[canonicalize_name(conda_names.get(name, name))] = spec.removeprefix("==")
    assert set(listed) == wanted
    pins = _lock()
    assert {name: pins[name] for name in listed} == listed  # the versions CI tested
    python = next(item for item in env["dependencies"] if isinstance(item, str) and item.startswith("python "))
    assert python == "python =3.11"  # the lock's Python (numpy 2.4 needs 3.11+)


def test_scripts_import_lmsat_from_the_workflows_own_src_first(tmp_path):
    """Where lmsat is not installed (a job's conda env), the shim alone makes it importable:
    `python -S` leaves out every site-packages, the editable install included."""
    import ast
    import subprocess
    import sys

    from conftest import ROOT

    scripts = ROOT / "workflow" / "scripts"
    for path in sorted(scripts.glob("*.py")):
        if path.name == "_lmsat_src.py":
            continue
        body = ast.parse(path.read_text()).body
        first = next(node for node in body if isinstance(node, (ast.Import, ast.ImportFrom)))
        assert isinstance(first, ast.Import) and first.names[0].name == "_lmsat_src", f"{path.name}: import _lmsat_src first"
    code = "import sys; sys.path.append(sys.argv[1]); import _lmsat_src, lmsat.core.io; print(lmsat.core.io.__file__)"
    env = {"PATH": "/usr/bin:/bin"}  # no PYTHONPATH
    result = subprocess.run([sys.executable, "-S", "-c", "import lmsat"], capture_output=True, text=True, env=env)
    assert result.returncode != 0  # without the shim it is not importable here
    result = subprocess.run([sys.executable, "-S", "-c", code, str(scripts)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(ROOT / "src" / "lmsat" / "core" / "io.py")  # lmsat.core.io needs only the stdlib

    # Another checkout's lmsat ahead on sys.path (an editable install of it), and this src/
    # appended behind it, as Snakemake's script preamble does: the shim still wins.
    other = tmp_path / "other" / "lmsat"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise ImportError('the other checkout')\n")
    code = (
        "import sys; sys.path[:0] = [sys.argv[2]]; sys.path += [sys.argv[1], sys.argv[3]]; "
        "import _lmsat_src, lmsat.core.io; print(lmsat.core.io.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code, str(scripts), str(other.parent), str(ROOT / "src")],
        capture_output=True, text=True, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(ROOT / "src" / "lmsat" / "core" / "io.py")


def test_pytest_imports_this_checkouts_lmsat_before_any_other(tmp_path):
    """pyproject's pytest `pythonpath = ["src"]`: a test imports this checkout's lmsat even
    with another lmsat first on PYTHONPATH (as a venv's editable install of another clone is)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    decoy = tmp_path / "decoy" / "lmsat"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the decoy lmsat')\n")
    probe = tmp_path / "test_probe.py"
    probe.write_text(f"import lmsat\n\ndef test_probe():\n    assert lmsat.__file__ == {str(ROOT / 'src' / 'lmsat' / '__init__.py')!r}\n")
    env = {**os.environ, "PYTHONPATH": str(decoy.parent)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT)]
    result = subprocess.run([*command, str(probe)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    result = subprocess.run([*command, "-o", "pythonpath=", str(probe)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode != 0 and "the decoy lmsat" in result.stdout  # without the setting, the decoy wins


def test_a_parameter_count_copied_from_another_model_is_refused(tmp_path):
    from lmsat.core.io import IdentityError, read_record, write_json

    counts = tmp_path / "params" / "pythia-160m.json"
    write_json(counts, dict(model="pythia-70m", id="EleutherAI/pythia-70m", non_embedding=1, total=2))
    with pytest.raises(IdentityError, match=r"pythia-160m.json was made for model='pythia-70m', but its path "
                                            r"promises model='pythia-160m'"):
        read_record(counts, "model")
    write_json(counts, dict(model="pythia-160m", id="EleutherAI/pythia-160m", non_embedding=1, total=2))
    assert read_record(counts, "model")["total"] == 2


def test_hub_dataset_rows_with_a_non_string_or_over_long_text_are_named(tmp_path, monkeypatch):
    import json

    from lmsat.data.corpus import CorpusError

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = tmp_path / "rows.jsonl"
    rows = [{"body": "w1 w2"}, {"body": "x" * 5000}, {"body": "w3"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = dict(type="hf", path="json", name="", split="train", text_field="body", streaming=True,
                data_files=[str(data)], files=[], max_documents=0, max_document_bytes=4096)
    with pytest.raises(CorpusError, match=r"corpus mine: row 1 of json: a document longer than 4096 bytes "
                                          r"\(corpora.mine.max_document_bytes\)"):
        read_all(spec)
    data.write_text("".join(json.dumps(row) + "\n" for row in [{"body": "w1"}, {"body": 7}]))
    with pytest.raises(CorpusError, match=r"corpus mine: row 1 of json: field 'body' holds int, not a string"):
        read_all(dict(spec, max_document_bytes=16_000_000))


def test_a_download_that_fills_the_disk_names_the_checkpoints_directory(tiny_disk):
    from lmsat.checkpoints.fetch import RetryPolicy, _fix, is_transient
    from lmsat.core.plan import ModelEntry

    cache_dir = tiny_disk / "results/weights/m/step1"
    cache_dir.mkdir(parents=True)
    try:  # a real ENOSPC, as a download writing a shard meets it
        (cache_dir / "model.safetensors").write_bytes(b"\0" * 2**21)
    except OSError as error:
        full = error
    assert full.errno == 28 and not is_transient(full)  # not retried: waiting does not free the disk
    entry = ModelEntry(name="m", suite="s", source="hub", id="org/m", hidden_size=8, vocab_size=0, n_params=0,
                       tokenizer="t", tokens_per_step=1, revisions=("step1",), steps=(1,), allow_pickle=False,
                       trust_remote_code=False, key="suites.s.models[0]")
    assert _fix(full, entry, "step1", cache_dir, RetryPolicy()).startswith(f"the disk of {cache_dir} filled up")
