"""Names that become path components: one pattern, one check, in a leaf.

Suites, models, revisions, tokenizers, corpora, metrics and runs are written into paths
under results/ and logs/ (by the workflow), so each is checked once, where config is
loaded (lmsat.planning), and the schema uses the same pattern (`lmsat init`).
"""

from __future__ import annotations

import re

from lmsat.errors import ConfigError

# One pattern for every name that becomes a path component (suite, model, revision,
# tokenizer, corpus, metric; a run name): no '/', no '..', never absolute, no leading dot.
PATH_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
_PATH_NAME = re.compile(PATH_NAME_PATTERN)




def check_path_name(key: str, name, what: str = "name") -> str:
    """`name` if it is safe as one path component (PATH_NAME_PATTERN), else ConfigError at `key`.

    Names of suites, models, revisions, tokenizers, corpora and metrics become directories
    and file names under results/ and logs/: `../x` or `/abs` would write outside them.
    """
    if not isinstance(name, str) or not _PATH_NAME.fullmatch(name):
        raise ConfigError(
            key,
            f"{what} {name!r} cannot be a path component (it becomes a directory or file name under results/)",
            "use 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit (no '/', '..' or absolute path)",
        )
    return name


# A trainer that saves one file per step names it as it likes (Lightning: `epoch=0-step=500.ckpt`):
# its revision is the file name with every character a path component may not hold made '-',
# and the file is found again by that name (checkpoint_path).
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")


def revision_name(entry: str) -> str:
    """The revision name of a checkpoint folder or file named `entry` in a run folder:
    `entry` itself when it is a path component (PATH_NAME_PATTERN), else with each other
    character made '-' (`epoch=0-step=500.ckpt` -> `epoch-0-step-500.ckpt`)."""
    if _PATH_NAME.fullmatch(entry):
        return entry
    name = _NOT_IN_NAME.sub("-", entry)[:200]
    return name if _PATH_NAME.fullmatch(name) else ("r" + name)[:200]


def checkpoint_path(folder, revision: str):
    """The checkpoint of revision `revision` in the run folder `folder` (a pathlib.Path): the
    entry of that name, else the one entry whose revision_name it is (else folder/revision)."""
    from pathlib import Path

    path = Path(folder) / revision
    if path.exists() or not Path(folder).is_dir():
        return path
    found = [entry for entry in Path(folder).iterdir() if entry.name != revision and revision_name(entry.name) == revision]
    return found[0] if len(found) == 1 else path
