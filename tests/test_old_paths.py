"""Issue 40: the module paths of lmsat 0.1 still import, warn where a name lives now, and give
the same objects as the new paths (lmsat.compat)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from lmsat import compat

# old path, a name it had -> (new module, name there)
SAMPLES = {
    ("lmsat.callbacks", "SaturationCallback"): ("lmsat.standalone.callback", "SaturationCallback"),
    ("lmsat.callbacks", "monitor"): ("lmsat.standalone.monitor", "monitor"),
    ("lmsat.callbacks", "write_evaluation"): ("lmsat.standalone.callback_files", "write_evaluation"),
    ("lmsat.config", "load_plan"): ("lmsat.planning.load", "load_plan"),
    ("lmsat.config", "ConfigError"): ("lmsat.errors", "ConfigError"),
    ("lmsat.config", "revisions"): ("lmsat.planning.model_entries", "expand_revisions"),
    ("lmsat.config", "check_run_claim"): ("lmsat.planning.run_claim", "check_run_claim"),
    ("lmsat.tables", "write_csv"): ("lmsat.products.table_files", "write_csv"),
    ("lmsat.tables", "loss_table"): ("lmsat.products.saturation_tables", "loss_table"),
    ("lmsat.tables", "heads_tables"): ("lmsat.products.bottleneck_tables", "heads_tables"),
    ("lmsat.heads", "train_head"): ("lmsat.bottleneck.rank_heads", "train_head"),
    ("lmsat.heads", "ShardedRepresentations"): ("lmsat.bottleneck.representation_cache", "ShardedRepresentations"),
    ("lmsat.io", "write_json"): ("lmsat.core.io", "write_json"),
    ("lmsat.cache", "extract_to_cache"): ("lmsat.data.hidden_states", "extract_to_cache"),
    ("lmsat.checkpoints", "check_weight_files"): ("lmsat.checkpoints.validation", "check_weight_files"),
    ("lmsat.toy", "build_model"): ("lmsat.toy.suite", "build_model"),
    ("lmsat.bottleneck", "head_ranks"): ("lmsat.bottleneck.rank_grid", "head_ranks"),
    ("lmsat.degeneration", "head_spectrum"): ("lmsat.degeneration.weight_files", "head_spectrum"),
}


@pytest.mark.parametrize(("old", "name"), sorted(SAMPLES))
def test_an_old_path_gives_the_new_object_and_says_where_it_lives(old, name):
    new_module, new_name = SAMPLES[(old, name)]
    expected = getattr(importlib.import_module(new_module), new_name)
    with pytest.warns(DeprecationWarning, match=r"old path of lmsat 0\.1: import from lmsat\."):
        module = importlib.import_module(old)
        value = getattr(module, name)
    assert value is expected


def test_every_moved_module_is_its_new_module_and_keeps_its_own_spec():
    for old, new in compat.MOVED.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert module.__spec__.name == new and module.__name__ == new, old


def test_every_split_module_name_is_found_in_its_successors():
    """Each public name the split modules had (read from git's last version of them) resolves."""
    for old in compat.SPLIT:
        for name in OLD_PUBLIC_NAMES[old]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                assert getattr(importlib.import_module(old), name) is not None, (old, name)


def test_an_unknown_name_at_an_old_path_is_an_attribute_error_naming_the_layout_doc():
    with pytest.raises(AttributeError, match=r"lmsat\.config.*no attribute 'nope'.*docs/layout.md"):
        importlib.import_module("lmsat.config").nope


def test_the_readme_s_callback_import_and_the_old_one_work_in_a_fresh_interpreter():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning); "
            "from lmsat import SaturationCallback, monitor; "
            "warnings.simplefilter('default'); from lmsat.callbacks import SaturationCallback as Old; "
            "assert Old is SaturationCallback; print(SaturationCallback.__module__)")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lmsat.standalone.callback"
    assert "lmsat.callbacks.SaturationCallback is an old path of lmsat 0.1: import from lmsat.standalone.callback" in done.stderr


# The public names of lmsat/config.py, tables.py, heads.py, callbacks.py at the last commit
# before the split (git show 843fc36:src/lmsat/<name>.py), imported names included.
OLD_PUBLIC_NAMES = {
    "lmsat.config": (
        'ADDITIVE_KEYS', 'ARCHITECTURE_KEYS', 'INPUT_DIRS', 'MIN_SAMPLE_SEQUENCES', 'NOT_A_CONFIG_FIX',
        'PICKLE_FILES', 'RUN_CLAIM', 'SELECTION_LISTS', 'TOY_ORG', 'WEIGHT_FILES', 'by_size', 'check_run_claim',
        'check_scaling_plan', 'claim_differences', 'coerce_strings', 'config_sha256', 'config_sources', 'file_kind',
        'load_plan', 'load_yaml', 'ngram_tokenizers', 'offline_defaults', 'operational_keys', 'published_suites',
        'read_config_files', 'recorded_config_hashes', 'resolve_local_runs', 'result_config', 'run_of_config_file',
        'select', 'slice_run', 'validate_config', 'write_run_claim'
    ),
    "lmsat.tables": (
        'BEST_FINAL_COLUMNS', 'FIT_COLUMNS', 'FIT_KINDS', 'FORGOTTEN', 'GRADIENT_COLUMNS', 'HASHED_TENSORS',
        'HEAD_COLUMNS', 'IDENTICAL_COLUMNS', 'LEARNED', 'LOSS_COLUMNS', 'SATURATION_VERDICT_COLUMNS',
        'SEARCH_COLUMNS', 'SIMILARITY_BOUNDS', 'SIMILARITY_MEASURES', 'STATISTICS', 'WEIGHT_KEYS',
        'anisotropy_from_records', 'anisotropy_tables', 'attention_from_files', 'attention_table',
        'gradient_from_files', 'heads_tables', 'identical_weights_table', 'implausible_losses', 'implausible_notes',
        'in_model_order', 'loss_from_records', 'loss_table', 'make_table1', 'mark_on_disk', 'metric_records',
        'model_sizes', 'monotone_violations', 'ngram_ground_truth_table', 'ngram_werror_table', 'own_head_werror',
        'read_head_inputs', 'read_table', 'recorded_source', 'scalars_from_records', 'scaled_models',
        'scaling_tables', 'select_checkpoints', 'similarity_from_records', 'spectra_from_files', 'spectra_tables',
        'table1', 'table_to_latex', 'table_to_markdown', 'uniform_losses', 'verdicts_from_records',
        'weight_diagnostics_from_files', 'with_provenance', 'write_csv', 'write_table'
    ),
    "lmsat.heads": (
        'HeadTrainConfig', 'LowRankHead', 'ShardError', 'ShardedRepresentations', 'chunked_cross_entropy',
        'full_head_eval', 'stale_states', 'state_file', 'train_head'
    ),
    "lmsat.callbacks": (
        'CALLBACK_OPTIONS', 'DEFAULT_METRICS', 'EPOCH_NOTE', 'EVALUATION_REVISION', 'LOGGED', 'LOG_PREFIX',
        'MEMORY_DIR', 'OWN_TABLES', 'Sample', 'SaturationCallback', 'VERDICT_LOGGED', 'WATCHABLE',
        'abandon_evaluations', 'abandoned_folder', 'as_sample', 'check_count', 'check_model', 'check_number',
        'check_paths', 'check_sample', 'epoch_note', 'evaluation_files', 'load_sample', 'make_directories',
        'metric_files', 'monitor', 'read_history', 'scalars', 'scratch_dir', 'settings_sha256', 'text_sample',
        'tokenizer_agreement', 'untouched', 'write_evaluation', 'write_tables'
    ),
}
