#!/usr/bin/env bash
# One Snakemake job as a cloud executor runs it (Kubernetes, Google Batch, AWS Batch): in a
# directory of its own that holds nothing but the job script, so the job sees only what
# storage gives it (the workflow's sources, deployed from the source archive in the bucket,
# and its inputs, downloaded into its own storage prefix). tests/test_storage.py runs each
# job of a storage run through this, with Snakemake's cluster-sync executor:
#   --executor cluster-sync --cluster-sync-submit-cmd tests/storage/scratch_job.sh
# The directory is kept under $LMSAT_SCRATCH_ROOT (the test reads what each job left there).
set -euo pipefail
jobscript=$1
dir=$(mktemp -d "${LMSAT_SCRATCH_ROOT:?}/job.XXXXXX")
cp "$jobscript" "$dir/jobscript.sh"
cd "$dir"
exec bash jobscript.sh > job.out 2>&1
