"""Rule evaluate_checkpoint: one lm-eval task on a model's best or final checkpoint, as JSON.

The JSON holds the model, checkpoint kind, revision and task, a status, and lm-eval's
results (lmsat.saturation.downstream.run_lmeval). A task whose data must be downloaded by hand
(storycloze_2016 without evaluation.storycloze_dir) is written with status "skipped" and the
message saying how to get it, so that the other tasks and Table 1 still get built. A best
checkpoint that is also the final one copies the final job's JSON instead of rerunning.
"""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.runtime.offline  # noqa: F401 (first: compute jobs never reach the network)
import lmsat.runtime.warm_start  # noqa: F401 (then: a local run's warm interpreter takes the job, if it serves it)

import logging
import os

from lmsat.core.io import read_json, read_record, setup_logging, write_json

log = logging.getLogger(__name__)


def main(snakemake):
    setup_logging(snakemake.log[0])
    params, wildcards = snakemake.params, snakemake.wildcards
    record = dict(model=wildcards.model, checkpoint=wildcards.kind, revision=params.revision, task=wildcards.task)
    if "same_as" in snakemake.input.keys():
        final = read_record(snakemake.input.same_as, "model", "checkpoint", "task")
        log.info("%s: best checkpoint %s is the final one; reusing %s", wildcards.model, params.revision, snakemake.input.same_as)
        write_json(snakemake.output[0], {**final, **record, "reused_from": snakemake.input.same_as})
        return

    # Offline (lmsat.runtime.offline): a hub task's datasets come from the cache rule stage_lmeval_task
    # filled for it (results/<run>/staged/datasets/<task>), an input of this job: where it is
    # now, not the path its manifest records, so a copied or moved run (or a storage run's
    # local copy) reads its own. Read by datasets when imported, so set before any import.
    if snakemake.input.get("staged"):
        read_json(snakemake.input.staged)  # a manifest that is not JSON fails here, naming it
        os.environ["HF_DATASETS_CACHE"] = os.path.abspath(snakemake.input.datasets)
    import torch

    from lmsat.checkpoints.loading import job_device
    from lmsat.checkpoints.validation import check_weight_files
    from lmsat.core.job_inputs import local_copy, model_at
    from lmsat.core.plan import ModelEntry
    from lmsat.saturation.downstream import ManualDownloadRequired, run_lmeval

    torch.set_num_threads(snakemake.threads)
    model = model_at(ModelEntry(**params.model), params.revision, snakemake.input)  # its weights as this job's input
    # the task YAMLs the pipeline wrote: the directory of this job's copies of them
    include_path = params.include_path and os.path.dirname(
        local_copy(os.path.join(params.include_path, f"{wildcards.task}.yaml"), snakemake.input)
    )
    # A hub model reads the copy fetched for this job (a best revision has its own); one
    # staged by hand (its input is the record of rule record_weights) is read where it is.
    fetched = snakemake.input.weights if model.source == "hub" and os.path.isdir(snakemake.input.weights) else None
    target, source = model.pretrained_source(params.revision, cache_dir=fetched)
    check_weight_files(model, params.revision, cache_dir=fetched)  # a truncated file or missing shard, by name
    try:
        results = run_lmeval(
            target,
            source.get("revision", params.revision),  # a pinned revision is its commit (lmsat.checkpoints.pins)
            [wildcards.task],
            **params.lmeval,
            device=job_device(snakemake),
            cache_dir=source.get("cache_dir"),
            local_files_only=source["local_files_only"],
            include_path=include_path,
        )
        status, message = "done", ""
    except ManualDownloadRequired as error:
        log.warning("skipping task %s (shown as missing in Table 1): %s", wildcards.task, error)
        results, status, message = {}, "skipped", str(error)
    write_json(snakemake.output[0], {**record, "status": status, "message": message, "results": results})


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
