"""The documentation's relative links resolve: every `[text](path)` and `[text](path#anchor)`
of the README, docs/, config/README.md and CHANGELOG.md names an existing file, and every
anchor a heading of that file (GitHub's slugs). The README's test command is CI's. Every plan
the docs quote (`lmsat plan`'s output, its numbers in the prose) is the current plan."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, shipped_configs

DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", re.M)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


def prose(text: str) -> str:
    """`text` without its code (fenced blocks and inline spans), where links are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, lower case, punctuation dropped (not
    '-' or '_'), each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links of `path` that name a missing file or a missing heading."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(prose(text)):
        if EXTERNAL.match(target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target} (no file {linked})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading #{anchor} in {linked.name})")
    return broken


def test_every_relative_link_resolves():
    assert len(DOCS) >= 8, [p.name for p in DOCS]  # README, CHANGELOG, config/README and docs/
    broken = {str(p.relative_to(ROOT)): b for p in DOCS if (b := broken_links(p))}
    assert not broken, broken


def test_a_broken_file_or_anchor_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "faults.md").write_text("# Faults\n\n## The per-checkpoint job\n\n## `run`\n\n## Disk\n\n## Disk\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n## Two commands\n\n"
        "[ok](docs/faults.md) [ok](docs/faults.md#the-per-checkpoint-job) [ok](docs/faults.md#run)\n"
        "[ok](docs/faults.md#disk-1) [ok](#two-commands) [ok](docs/) [web](https://example.org/x.md)\n"
        "[gone](docs/missing.md) [no heading](docs/faults.md#no-such-heading) [no own](#gone)\n"
        "[third disk](docs/faults.md#disk-2)\n"
        "`[in code](docs/missing.md)`\n\n```\n[in a block](docs/missing.md)\n```\n"
    )
    assert [b.split(" (")[0] for b in broken_links(readme)] == [
        "docs/missing.md",
        "docs/faults.md#no-such-heading",
        "#gone",
        "docs/faults.md#disk-2",
    ]


def test_slugs_are_githubs():
    assert slug("The paper's setup: Pythia") == "the-papers-setup-pythia"
    assert slug("What lands in `results/<run>/`") == "what-lands-in-resultsrun"
    assert slug("Faults, hub access and disk") == "faults-hub-access-and-disk"
    assert slug("`fit_scaling_law` and [a link](x.md)") == "fit_scaling_law-and-a-link"
    assert slug("The whole paper: `config/paper.yaml`") == "the-whole-paper-configpaperyaml"


def test_ci_runs_the_readmes_test_command():
    """The README's two set-up commands are make targets, and .ci/run runs the test one."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"], commands
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands[1] in ci, ".ci/run no longer runs the README's test command"


def test_the_readmes_pythia_dry_run_lists_jobs_per_rule_as_make_dry_run_pythia_does():
    """Issue 44: without --quiet rules, the Pythia dry run prints 85,501 lines."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^dry-run-pythia:.*\n\t(.*)$", makefile, re.M).group(1)
    command = recipe.replace("$(VENV)/bin/", "")
    assert "--quiet rules" in command
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert command in readme, command
    dry_runs = [line for line in readme.splitlines() if line.startswith("snakemake -n --configfile config/pythia")]
    assert dry_runs and all("--quiet rules" in line for line in dry_runs), dry_runs


def test_ci_takes_the_readmes_steps_in_order_before_make_test():
    """Issue 44's acceptance: `make run`, then config/mine.yaml written as the README's own-run
    section says (`lmsat init ... -o config/mine.yaml`), then `make test`, in one checkout."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    own = readme.split("## Your own training run", 1)[1].split("\n## ", 1)[0]
    init = next(line.split("#")[0].split() for line in own.splitlines() if "lmsat init" in line)
    assert init[init.index("-o") + 1] == "config/mine.yaml", init
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    at = {step: next((i for i, line in enumerate(ci) if test(line)), None) for step, test in (
        ("make run", lambda line: line == "make run"),
        ("init", lambda line: "-m lmsat init" in line and line.endswith("-o config/mine.yaml")),
        ("own run", lambda line: "snakemake --configfile config/mine.yaml" in line),
        ("make test", lambda line: line == "make test"))}
    assert None not in at.values(), at
    assert at["make run"] < at["init"] < at["own run"] < at["make test"], at


# ---------------------------------------------------------------- lists of the registered metrics
# issue 50, item 9: the lists in config comments, in the config `lmsat init` writes and in
# `lmsat --help` named five metrics after three more were registered, and docs/callback.md wrote
# the callback's metrics as `(..., "weight_diagnostics")`. Each list is generated from the
# registry (lmsat.products.metrics) or, in a static file, checked against it here.

METRIC_TUPLE = re.compile(r"\((\s*\"[a-z_]+\"(?:\s*,\s*\"[a-z_]+\")+\s*,?\s*)\)")
REGISTERED_LIST = re.compile(r"every registered metric(?: \([^)\n]*\))?:\s*([a-z_ ]+(?:,\s*[a-z_ ]+)*)")


def listed(text: str) -> list[str]:
    return [name.strip() for name in text.replace(" and ", ", ").split(",") if name.strip()]


def static_files() -> list[Path]:
    """The docs and configs a user reads for what is (the CHANGELOG records what was): the shipped
    configs only, never a user's own (config/mine.yaml, which .ci/run writes before `make test`)."""
    return [*(path for path in DOCS if path.name != "CHANGELOG.md"), *shipped_configs(),
            ROOT / "workflow" / "schemas" / "config.schema.yaml"]


def test_every_list_of_metrics_in_docs_and_configs_is_the_registrys_or_the_callbacks():
    """A list after "every registered metric:" names the registry's metrics; a tuple of metric
    names (the callback's `metrics=`) is the callback's defaults, with or without
    weight_diagnostics; none is elided with `...`."""
    from lmsat.products.metrics import METRICS
    from lmsat.standalone.monitor import DEFAULT_METRICS, WATCHABLE

    found = 0
    for path in static_files():
        text = path.read_text(encoding="utf-8")
        for names in REGISTERED_LIST.findall(text):
            found += 1
            assert listed(names) == list(METRICS), (path.name, names)
        for names in METRIC_TUPLE.findall(text):
            names = tuple(re.findall(r"\"([a-z_]+)\"", names))
            if len(names) >= 3 and set(names) <= set(METRICS):
                found += 1
                assert names in (DEFAULT_METRICS, WATCHABLE), (path.name, names)
        assert not re.search(r"metrics=\(\s*\.\.\.", text), f"{path.name}: an elided list of metrics"
    assert found >= 2  # callback.md's tuples at least


def test_the_lists_lmsat_prints_and_writes_are_the_registrys(capsys):
    """`lmsat analyse --help` names every registered metric; `lmsat --help` names none of them
    (it points to analyse's); `lmsat init` writes every one above `metrics: null`; the config
    README lists every one."""
    from lmsat.cli import main
    from lmsat.commands.init import metrics_comment
    from lmsat.products.metrics import METRICS

    def help_of(*argv):
        try:
            main([*argv, "--help"])
        except SystemExit:
            pass
        return " ".join(capsys.readouterr().out.split())

    names = re.search(r"registered metrics: ([a-z_, ]+) \(default", help_of("analyse")).group(1)
    assert listed(names) == list(METRICS)
    top = help_of()
    assert not any(re.search(rf"\b{name}\b", top) for name in METRICS), top
    comment = " ".join(line.lstrip("# ") for line in metrics_comment().splitlines())
    assert listed(REGISTERED_LIST.search(comment).group(1).rstrip(".")) == list(METRICS)
    readme = (ROOT / "config" / "README.md").read_text(encoding="utf-8")
    assert re.findall(r"^\| `([a-z_]+)` \| (?:cache|weights|cache_pairs) \|", readme, re.M) == list(METRICS)
# ------------------------------------------------------------------ quoted plans (issue 50, item 4)
# Every output of `lmsat plan` the docs quote is the current plan's: a quoted block is the
# command's output (or lines of it, in order, "..." where it skips), and each number the prose
# quotes of a plan (its jobs, a rule's jobs, its download, a checkpoint's disk_mb) is the plan's.

PLAN_BLOCK = re.compile(r"^\$ python -m lmsat plan ([^\n]*)\n(.*?)\n```", re.S | re.M)


@functools.cache
def plan_output(arguments: str) -> str:
    """What `python -m lmsat plan ARGUMENTS` prints, run from the checkout on a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="lmsat-quoted-plan-") as directory:
        result = subprocess.run([sys.executable, "-m", "lmsat", "plan", *shlex.split(arguments), "--directory", directory],
                                cwd=ROOT, capture_output=True, text=True, timeout=1200,
                                env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.rstrip("\n")


def quoted_plans() -> list[tuple[str, str, str]]:
    """(doc, arguments, quoted text) of every `$ python -m lmsat plan ...` block of the docs."""
    return [(str(path.relative_to(ROOT)), found.group(1), found.group(2))
            for path in DOCS for found in PLAN_BLOCK.finditer(path.read_text(encoding="utf-8"))]


def test_the_docs_quote_plans():
    quoted = {(doc, arguments) for doc, arguments, _ in quoted_plans()}
    assert {("README.md", "--configfile config/pythia.yaml --gpus 8 --disk-mb 110000"),
            ("docs/paper.md", "--configfile config/pythia.yaml --gpus 8 --disk-mb 110000"),
            ("docs/paper.md", "--configfile config/cross-suite.yaml --gpus 8 --disk-mb 110000")} <= quoted, quoted


@pytest.mark.parametrize("doc, arguments, text", quoted_plans(), ids=lambda value: value if "\n" not in value else "")
def test_every_quoted_plan_is_the_current_plan(doc, arguments, text):
    """Issue 50: docs/paper.md quoted the cross-suite plan as 6,962 jobs; it was 8,357."""
    printed = plan_output(arguments).splitlines()
    quoted = text.splitlines()
    if "..." not in quoted:
        assert quoted == printed, f"{doc} quotes another plan of `lmsat plan {arguments}`"
        return
    excerpt = [line for line in quoted if line != "..."]
    at = [printed.index(line) if line in printed else None for line in excerpt]
    assert None not in at, [line for line, where in zip(excerpt, at) if where is None]
    assert at == sorted(at) and len(excerpt) >= 4


def plan_numbers(configfile: str) -> dict:
    """A plan's jobs (in all and by rule) and its download, as `lmsat plan` prints them."""
    printed = plan_output(f"--configfile {configfile} --gpus 8 --disk-mb 110000")
    return dict(jobs=re.search(r"^plan of run \S+: ([\d,]+) jobs", printed, re.M).group(1),
                rules=dict((rule, n) for n, rule in re.findall(r"^ +([\d,]+)  (\w+) \(", printed, re.M)),
                download=re.search(r"^download: ([\d.]+ [kMGT]B)", printed, re.M).group(1))


def test_the_plan_numbers_the_prose_quotes_are_the_current_plans():
    text = {path: (ROOT / path).read_text(encoding="utf-8") for path in ("README.md", "docs/paper.md",
                                                                         "docs/performance.md", "config/README.md")}
    default = re.search(r"runs the default pipeline end to end \(([\d,]+) jobs", text["README.md"]).group(1)
    assert default == plan_numbers("config/config.yaml")["jobs"]
    found = re.search(r"`python -m lmsat plan --configfile (config/[\w-]+\.yaml)` lists its ([\d,]+) jobs, "
                      r"downloads \(([\d.]+ [kMGT]B)\)", text["docs/paper.md"])
    numbers = plan_numbers(found.group(1))
    assert (found.group(2), found.group(3)) == (numbers["jobs"], numbers["download"])
    rule, jobs = re.search(r"Rule `(\w+)` is the expensive unit \(([\d,]+) jobs for the paper's Pythia plan\)",
                           text["docs/performance.md"]).groups()
    pythia = plan_numbers("config/pythia.yaml")
    assert pythia["rules"][rule] == jobs
    whole = re.search(r"all 154 revisions of the ten Pythia models take ~([\d.]+ TB)", text["config/README.md"]).group(1)
    assert whole == pythia["download"]


def test_the_disk_mb_the_docs_quote_is_a_fetch_jobs():
    from lmsat.checkpoints.fetch import checkpoint_disk_mb, stored_bytes_per_param
    from lmsat.commands.plan import load

    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    gb, stored = re.search(r"(\d+) GB for Pythia-12b, whose\s+checkpoints take ([\d.]+) GB", text).groups()
    plan = load(str(ROOT / "config" / "pythia.yaml"))
    model = plan.models["pythia-12b"]
    assert round(checkpoint_disk_mb(model, stored_bytes_per_param(model, plan.config["fetch"])) / 1000) == int(gb)
    assert float(stored) == 23.7  # the hub's files (tests/test_suites.py STORED)
