"""Compute jobs never reach the network: `import lmsat.runtime.offline` first in every non-staging script.

huggingface_hub, datasets and transformers read HF_HUB_OFFLINE / HF_DATASETS_OFFLINE once,
when they are imported, so this module (which imports nothing heavy) must come before them.
Everything a compute job reads from the hub or a dataset server was put on disk by a staging
rule (workflow/rules/staging.smk: checkpoints, tokenizers, corpus prefixes, lm-eval task
data); a job whose staged file is missing then fails in seconds naming that file, instead
of timing out on a node without internet (lmsat.errors.StagingMissing).
"""

import os

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")

for _name in OFFLINE_VARIABLES:
    os.environ[_name] = "1"
