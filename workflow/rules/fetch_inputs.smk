# The input functions and helpers of the rules in fetch.smk, used by them only; it
# includes this file above its rules (`snakemake --lint` flags a file that mixes rules
# and functions). What several stages share: common.smk.


HUB_MODELS = [name for name, m in MODELS.items() if m.source == "hub"]
# disk a checkpoint's download needs, for fetch_checkpoint's disk_mb
CHECKPOINT_DISK_MB = {
    name: checkpoint_disk_mb(MODELS[name], stored_bytes_per_param(MODELS[name], FETCH))
    for name in HUB_MODELS
}


def fetched_checkpoint(path):
    """The fetch rule's output; temp() so that Snakemake deletes it after its last consumer."""
    return temp(directory(path)) if FETCH["remove_after_use"] else directory(path)


def get_recorded_fingerprint(wildcards):
    """Fingerprint of a tracked checkpoint (lmsat.core.fingerprint), a param of record_weights:
    changed files change it, which reruns the record and so every job that read them. A hub
    cache staged by hand and removed after use keeps its recorded fingerprint."""
    directory = tracked_weights(wildcards.model, wildcards.revision)
    if Path(directory).exists():  # a folder, or a trainer's one-file checkpoint
        return weights_fingerprint(directory)
    return read_json(weights_record(wildcards.model, wildcards.revision))["fingerprint"]
