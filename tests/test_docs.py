"""The documentation's relative links resolve: every `[text](path)` and `[text](path#anchor)`
of the README, docs/, config/README.md and CHANGELOG.md names an existing file, and every
anchor a heading of that file (GitHub's slugs). The README's test command is CI's."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

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
