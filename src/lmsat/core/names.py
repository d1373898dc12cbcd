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
