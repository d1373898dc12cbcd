"""lmsat as a `module` of another workflow, the way the Snakemake workflow catalog deploys
it: `module lmsat: snakefile: <checkout>/workflow/Snakefile, config: config` and
`use rule * from lmsat as lmsat_*`, in a directory of its own, with a decoy `lmsat` package
first on PYTHONPATH (one that records its import and raises). The module must plan the
config it is passed, write only under that config's run in the deploying directory, and
import its own lmsat (src/ beside the workflow) in the planner and in every job.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmsat.planning.config_files import load_yaml
from lmsat.planning.schema_doc import SchemaDocError, config_readme

from conftest import ROOT, SCHEMA, small_toy_config

MODULE = """
module lmsat:
    snakefile:
        "{snakefile}"
    config:
        {config}


use rule * from lmsat as lmsat_*
"""


def module_config(run: str) -> dict:
    """Two toy models x 2 revisions, the loss metric only, no heads, n-grams or Table 1."""
    config = small_toy_config(("toy-d16", "toy-d32"), n_seq=16, chunk=4)
    config.update(run=run, metrics=["loss"])
    config["bottleneck"]["models"] = []
    config["evaluation"]["tasks"] = []
    config["ngrams"]["corpora"] = []
    config["ngrams"]["ground_truth"]["sample_sizes"] = []
    return config


def decoy(tmp_path: Path) -> tuple[Path, Path]:
    """A package named lmsat that appends to `marker` whenever it is imported, then raises."""
    directory, marker = tmp_path / "decoy", tmp_path / "decoy-imported.txt"
    (directory / "lmsat").mkdir(parents=True)
    (directory / "lmsat" / "__init__.py").write_text(textwrap.dedent(f"""
        import sys
        with open({str(marker)!r}, "a") as handle:
            handle.write(" ".join(sys.argv) + "\\n")
        raise ImportError("the decoy lmsat was imported")
    """))
    return directory, marker


def deploy(workdir: Path, snakefile_head: str, config: str) -> None:
    """The deploying workflow: `snakefile_head` (its own config), then the module statement."""
    module = MODULE.format(snakefile=ROOT / "workflow" / "Snakefile", config=config)
    (workdir / "workflow").mkdir(parents=True, exist_ok=True)
    (workdir / "workflow" / "Snakefile").write_text(snakefile_head + module)


def snakemake(workdir: Path, decoy_dir: Path, *args, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(decoy_dir), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=workdir, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
    )


def planned_runs_and_metrics(output: str) -> tuple[set, set]:
    """The runs (results/<run>/) and per-checkpoint metrics a dry run's jobs write."""
    outputs = " ".join(re.findall(r"^\s+output: (.*)$", output, re.M))
    return set(re.findall(r"results/([^/\s]+)/", outputs)), set(re.findall(r"results/[^/]+/metrics/([^/]+)/", outputs))


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def test_the_module_plans_the_config_it_is_passed_not_the_deploying_files(tmp_path):
    """`{**config, run: ..., metrics: [loss]}` plans results/from_module with loss only,
    though the deploying config file names another run and every metric; the deploying
    workflow's own config dict is left as it was."""
    decoy_dir, marker = decoy(tmp_path)
    workdir = tmp_path / "deployer"
    config = module_config("deployer")
    config["metrics"] = None  # every registered metric
    write_config(workdir, config)
    head = 'import copy\n\n\nconfigfile: "config/config.yaml"\n\n\nORIGINAL = copy.deepcopy(config)\n'
    deploy(workdir, head, '{**config, "run": "from_module", "metrics": ["loss"]}')
    snakefile = workdir / "workflow" / "Snakefile"
    snakefile.write_text(snakefile.read_text() + '\n\nassert config == ORIGINAL, "the module changed config"\n')
    result = snakemake(workdir, decoy_dir, "-n")
    assert result.returncode == 0, result.stdout[-4000:]
    assert planned_runs_and_metrics(result.stdout) == ({"from_module"}, {"loss"})
    assert not marker.exists(), marker.read_text()


def test_the_documented_example_plans_the_loss_alone_with_the_shipped_config(tmp_path):
    """docs/module.md's example, verbatim, with the shipped config/config.yaml (as snakedeploy
    copies it): it was refused ("spectra is not planned"); now the loss alone is planned in
    results/mine/, and the bottleneck section is left out with a note (issue 31, case 7)."""
    text = (ROOT / "docs" / "module.md").read_text()
    (example,) = re.findall(r"`config: (\{\*\*config, [^`]*\})`", text)
    decoy_dir, marker = decoy(tmp_path)
    workdir = tmp_path / "deployer"
    (workdir / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", workdir / "config" / "config.yaml")
    deploy(workdir, 'configfile: "config/config.yaml"\n\n', example)
    result = snakemake(workdir, decoy_dir, "-n")
    assert result.returncode == 0, result.stdout[-4000:]
    runs, metrics = planned_runs_and_metrics(result.stdout)
    assert (runs, metrics) == ({"mine"}, {"loss"})
    assert "lmsat: note: the bottleneck section (rank-constrained heads of toy-d32, toy-d64" in result.stdout
    assert "train_rank_head" not in result.stdout and "build_head_cache" not in result.stdout
    assert not marker.exists(), marker.read_text()


def test_a_dict_only_config_plans_without_any_config_file(tmp_path):
    decoy_dir, marker = decoy(tmp_path)
    workdir = tmp_path / "deployer"
    deploy(workdir, "", repr(module_config("dict_only")))
    result = snakemake(workdir, decoy_dir, "-n")
    assert result.returncode == 0, result.stdout[-4000:]
    assert planned_runs_and_metrics(result.stdout) == ({"dict_only"}, {"loss"})
    assert not marker.exists(), marker.read_text()


def test_a_key_given_twice_in_the_deploying_config_file_is_refused(tmp_path):
    """The strict loader reads every config file Snakemake read, the deploying one too."""
    decoy_dir, _ = decoy(tmp_path)
    workdir = tmp_path / "deployer"
    write_config(workdir, module_config("twice"))
    configfile = workdir / "config" / "config.yaml"
    configfile.write_text(configfile.read_text() + "seed: 3\n")  # `seed` is already there
    deploy(workdir, 'configfile: "config/config.yaml"\n', "config")
    result = snakemake(workdir, decoy_dir, "-n")
    assert result.returncode != 0
    assert "config key 'seed': given twice in config/config.yaml" in result.stdout, result.stdout[-3000:]
    assert "Job stats" not in result.stdout


def test_the_deploying_workflows_own_config_and_a_module_runs_unclaimed_outputs_plan(tmp_path):
    """The deploying workflow's own config file holds no lmsat key, and a module's run writes no
    claim (results/<run>/run_config.json): neither is refused as the main workflow refuses a
    file that is no config, or finished outputs without a claim (issue 46, cases 7 and 13)."""
    decoy_dir, _ = decoy(tmp_path)
    workdir = tmp_path / "deployer"
    (workdir / "config").mkdir(parents=True)
    (workdir / "config" / "samples.yaml").write_text("samples: [a, b]\nreference: hg38\n")
    deploy(workdir, 'configfile: "config/samples.yaml"\n\n', repr(module_config("unclaimed")))
    interrupted = workdir / "results" / "unclaimed" / "toy" / "tokenizer" / "tokenizer.json"
    interrupted.parent.mkdir(parents=True)
    interrupted.write_text("{}")  # what an interrupted module run left, before any table
    result = snakemake(workdir, decoy_dir, "-n")
    assert result.returncode == 0, result.stdout[-4000:]
    assert planned_runs_and_metrics(result.stdout) == ({"unclaimed"}, {"loss"})


@pytest.mark.slow
def test_a_deployed_module_runs_to_the_end_with_its_own_lmsat(tmp_path):
    """The whole module run (two toy models, the loss metric, the scaling fit, the report
    pages): outputs only under the module config's run, no import of the decoy anywhere,
    and every table stamped with the source hash of the lmsat beside the workflow."""
    decoy_dir, marker = decoy(tmp_path)
    workdir = tmp_path / "deployer"
    write_config(workdir, module_config("from_module"))
    deploy(workdir, 'configfile: "config/config.yaml"\n', "config")
    result = snakemake(workdir, decoy_dir, timeout=1500)
    assert result.returncode == 0, result.stdout[-5000:]
    assert not marker.exists(), marker.read_text()

    assert sorted(p.name for p in (workdir / "results").iterdir()) == ["from_module"]
    assert sorted(p.name for p in (workdir / "logs").iterdir()) == ["from_module"]
    for directory in ("results", "logs", "benchmarks/out"):  # nothing written into the checkout
        assert not (ROOT / directory / "from_module").exists(), directory
    tables = workdir / "results" / "from_module" / "tables"
    assert (tables / "loss.csv").exists() and (workdir / "results/from_module/report/summary.html").exists()
    assert not (tables / "anisotropy_training.csv").exists()  # not a planned metric
    assert sorted(p.name for p in (workdir / "results" / "from_module" / "metrics").iterdir()) == ["loss"]

    own = subprocess.run(  # the hash of the module's own src/, computed away from any install
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from lmsat.core.io import source_sha256; print(source_sha256())", str(ROOT / "src")],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
    )
    assert own.returncode == 0, own.stderr
    loss = pd.read_csv(tables / "loss.csv")
    assert len(loss) == 4 and set(loss["model"]) == {"toy-d16", "toy-d32"}
    assert (loss["lmsat_source_sha256"] == own.stdout.strip()).all()
    assert (loss["row_lmsat_source"] == own.stdout.strip()).all()


# ------------------------------------------------------------ what the catalog shows


def test_config_readme_is_the_one_the_schema_generates():
    """config/README.md is generated from the schema (python -m lmsat.planning.schema_doc); a schema
    edit without regenerating it fails here."""
    schema = load_yaml(SCHEMA)
    assert (ROOT / "config" / "README.md").read_text() == config_readme(schema), (
        "config/README.md is stale: python -m lmsat.planning.schema_doc workflow/schemas/config.schema.yaml > config/README.md"
    )
    readme = config_readme(schema)
    for key in schema["properties"]:
        assert f"## `{key}`" in readme, key
    for key in schema["properties"]["sample"]["properties"]:
        assert f"| `sample.{key}` |" in readme, key
    schema["properties"]["sample"]["properties"]["n_tokens"]["default"] = 123  # a real drift
    assert "| `sample.n_tokens` | integer | `123` |" in config_readme(schema)


def test_a_schema_key_without_a_description_is_refused():
    schema = load_yaml(SCHEMA)
    del schema["properties"]["sample"]["properties"]["seq_len"]["description"]
    with pytest.raises(SchemaDocError, match="'sample.seq_len' has no description"):
        config_readme(schema)
    schema = load_yaml(SCHEMA)
    del schema["$defs"]["model"]["properties"]["hidden_size"]["description"]
    with pytest.raises(SchemaDocError, match="'hidden_size' has no description"):
        config_readme(schema)


def test_the_catalog_file_describes_the_standardized_usage():
    catalog = load_yaml(ROOT / ".snakemake-workflow-catalog.yml")
    usage = catalog["usage"]
    assert usage["software-stack-deployment"]["conda"] is True and usage["report"] is True
    assert (ROOT / "workflow" / "Snakefile").exists() and (ROOT / "config" / "README.md").exists()
