"""Pinned revisions: checkpoints that are commits on one branch, not branches of their own.

Most suites publish each checkpoint as a hub branch (`step1000`, `stage1-step10000-tokens21B`,
`ckpt_010`). Pico's trainer (pico-lm/pico-train) pushes every checkpoint as new commits on
one branch, `pico-decoder-{size}-1`: the commit titled "Saving HF Model -- Step N" holds
step N's weights, and no ref names it. Such a suite's config cites a pins file, one row per
step with the commit that holds it, and planning reads it, offline:

    repo,step,commit,source
    pico-lm/pico-decoder-tiny,17000,0c185c53b84e9a90ae85661d24996c29aa38b0f5,<where the commit was read>

Its revisions are named from the step (the spec's `template`, `step17000`); the commit is
what reaches the hub (`snapshot_download(..., revision=commit)`) and the hub cache
(`from_pretrained(id, revision=commit, local_files_only=True)` finds snapshots/<commit>).
The file is written where a network is, by listing the branch's commits:

    python -m lmsat pin-revisions --configfile config/pico.yaml
    python -m lmsat pin-revisions --configfile config/pico.yaml --clone pico-decoder-tiny=DIR  # a git clone, offline

    >>> steps_of_commits([("c2", "Saving HF Model -- Step 1000"), ("e1", "Saving Evaluation Results -- Step 0"),
    ...                   ("c1", "Saving HF Model -- Step 0")], r"Saving HF Model -- Step (\\d+)")
    {0: ('c1', 'Saving HF Model -- Step 0'), 1000: ('c2', 'Saving HF Model -- Step 1000')}
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import subprocess
import tempfile
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from lmsat.errors import ConfigError

COLUMNS = ("repo", "step", "commit", "source")
COMMIT = re.compile(r"[0-9a-f]{40}")  # a full commit hash: what the hub and its cache resolve
# pico-train's title of the commit that uploads step N's model (src/checkpointing/training.py)
PICO_COMMIT_REGEX = r"Saving HF Model -- Step (\d+)"


@dataclass(frozen=True)
class Pin:
    step: int
    commit: str  # 40 hex digits
    source: str  # where the commit was read (its title on the branch, or a page)


# The directory a config's relative `pins` paths are read from: its config file's own (set by
# lmsat.planning.load.load_plan(config_dir=...) while it plans, and by pin-revisions while it writes);
# None, for a config that is no file (a module's `config: config`), is the working directory.
PINS_BASE: ContextVar[Path | None] = ContextVar("pins_base", default=None)


@contextlib.contextmanager
def relative_to(config_dir):
    """Within it, relative `pins` paths are read from (and written to) `config_dir`."""
    token = PINS_BASE.set(Path(config_dir) if config_dir else None)
    try:
        yield
    finally:
        PINS_BASE.reset(token)


def pins_path(spec: dict, model: str) -> Path:
    """The pins file a revisions spec names for `model` (`{model}` in it is the model's name);
    a relative path is relative to the config file's directory (PINS_BASE), so
    `pins: pins/{model}.csv` in config/pico.yaml is config/pins/<model>.csv from anywhere."""
    path = Path(spec["pins"].format(model=model))
    base = PINS_BASE.get()
    return path if path.is_absolute() or base is None else base / path


def how_to_pin(configfile: str = "<your config>") -> str:
    return (f"write it where the hub is reachable: python -m lmsat pin-revisions --configfile {configfile} "
            "(it lists the commits of the spec's `branch` and keeps those whose title matches `commit_regex`); "
            "offline, from a git clone of the model repository: add --clone MODEL=DIR")


def read_pins(path: Path, repo_id: str, key: str) -> list[Pin]:
    """The pins of `repo_id` in `path`, by step; ConfigError naming `key`, the file and the row."""
    if not path.is_file():
        raise ConfigError(key, f"pins file {path} does not exist (the commits that hold {repo_id}'s checkpoints)",
                          how_to_pin())
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(key, f"pins file {path} is unreadable ({error})", how_to_pin()) from None
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in numbered)))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ConfigError(key, f"pins file {path} has columns {reader.fieldnames}, not {list(COLUMNS)}",
                          "restore its header line, or " + how_to_pin())
    pins: dict[int, Pin] = {}
    lines: dict[str, int] = {}  # commit -> the line pinning it
    for index, row in enumerate(reader, start=1):
        where = f"pins file {path}, line {numbered[index][0]}"
        if row["repo"] != repo_id:
            raise ConfigError(key, f"{where} pins repository {row['repo']!r}, not the model's {repo_id!r}",
                              "point the spec at this model's own pins file (a {model} in its path is the model name)")
        if not (row["step"] or "").isdigit():
            raise ConfigError(key, f"{where}: step {row['step']!r} is not a whole number", "fix the row")
        if not COMMIT.fullmatch(row["commit"] or ""):
            raise ConfigError(key, f"{where}: commit {row['commit']!r} is not a full 40-digit commit hash",
                              "give the full hash (the hub resolves no abbreviated one)")
        step = int(row["step"])
        if step in pins:
            raise ConfigError(key, f"{where}: step {step} is pinned twice", "keep one commit per step")
        if row["commit"] in lines:  # a pasted row, half edited: one checkpoint tabulated at two steps
            other = next(p.step for p in pins.values() if p.commit == row["commit"])
            raise ConfigError(key, f"{where}: commit {row['commit']} is pinned for step {step} and, on line "
                              f"{lines[row['commit']]}, for step {other}; one commit holds one step's weights",
                              "give each step the commit that holds it, or " + how_to_pin())
        pins[step] = Pin(step, row["commit"], row["source"] or "")
        lines[row["commit"]] = numbered[index][0]
    if not pins:
        raise ConfigError(key, f"pins file {path} pins no commit", how_to_pin())
    return [pins[step] for step in sorted(pins)]


def steps_of_commits(commits, commit_regex: str) -> dict[int, tuple[str, str]]:
    """step -> (commit, title) of the commits (newest first, as the hub and `git log` list
    them: (commit, title) pairs) whose title matches `commit_regex` (first group = the step).
    A step pushed twice (a resumed run) is pinned at its newest commit, the one the branch
    went on from."""
    pattern = re.compile(commit_regex)
    found: dict[int, tuple[str, str]] = {}
    for commit, title in commits:
        match = pattern.search(title)
        if match and int(match.group(1)) not in found:
            found[int(match.group(1))] = (commit, title)
    return dict(sorted(found.items()))


def hub_commits(repo_id: str, branch: str) -> list[tuple[str, str]]:
    """(commit, title) of every commit of `branch` of hub model `repo_id`, newest first (network)."""
    from huggingface_hub import HfApi

    return [(c.commit_id, c.title) for c in HfApi().list_repo_commits(repo_id, revision=branch)]


def clone_commits(clone: Path, branch: str) -> list[tuple[str, str]]:
    """(commit, title) of every commit of `branch` in a git clone of the model repository, newest first."""
    result = subprocess.run(["git", "-C", str(clone), "log", "--format=%H%x1f%s", branch],
                            capture_output=True, text=True)
    if result.returncode:
        raise ConfigError("--clone", f"git log {branch} in {clone} failed: {result.stderr.strip()}",
                          "clone the model repository (GIT_LFS_SKIP_SMUDGE=1 skips the weights) and fetch the branch")
    return [tuple(line.split("\x1f", 1)) for line in result.stdout.splitlines() if "\x1f" in line]


def write_pins(path: Path, repo_id: str, found: dict[int, tuple[str, str]], provenance: str) -> None:
    """The pins file of `repo_id` (found: step -> (commit, title)), written whole or not at all."""
    lines = [f"# the commit holding each checkpoint of {repo_id}: {provenance}",
             "# written by python -m lmsat pin-revisions (lmsat.checkpoints.pins); planning reads it offline"]
    body = io.StringIO()
    writer = csv.writer(body, lineterminator="\n")
    writer.writerow(COLUMNS)
    for step, (commit, title) in found.items():
        writer.writerow((repo_id, step, commit, title))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n" + body.getvalue())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
