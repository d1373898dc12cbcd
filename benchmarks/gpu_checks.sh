#!/usr/bin/env bash
# Every GPU measurement of the per-checkpoint job, prepared for a lent GPU machine (the
# `device` tool's H200: 15 minutes a session, 10 a command, no network, no jsonschema).
#
#   bash benchmarks/gpu_checks.sh wheels   # HERE, once (needs PyPI): the wheels into .whl/
#   bash benchmarks/gpu_checks.sh small    # THERE, carry .whl (~5 min): 1.4b shape in bfloat16
#                                          #   (+ peers) and float32, dtype policy on the GPU,
#                                          #   old vs new weight analyses on the host's CPUs
#   bash benchmarks/gpu_checks.sh large    # THERE, carry .whl (~6 min): 12b shape, both dtypes
#
# Each part writes its reports to $OUT (the device tool brings them back; default
# benchmarks/out/gpu). Checkpoints are built once under $WORKDIR, so a `large` run on the
# still-warm machine after `small` does not rebuild them. A dry run of the plumbing on a
# CPU: DEVICE=cpu SMALL=14m LARGE=70m SEQUENCES=2 SEQ_LEN=128 bash benchmarks/gpu_checks.sh small
set -euo pipefail
cd "$(dirname "$0")/.."

PART=${1:?usage: gpu_checks.sh wheels|small|large}
OUT=${OUT:-benchmarks/out/gpu}
WORKDIR=${WORKDIR:-/tmp/lmsat-gpu-checks}
DEVICE=${DEVICE:-cuda}
SMALL=${SMALL:-1.4b}
LARGE=${LARGE:-12b}
SAMPLE=()
[[ -n ${SEQUENCES:-} ]] && SAMPLE+=(--sequences "$SEQUENCES")
[[ -n ${SEQ_LEN:-} ]] && SAMPLE+=(--seq-len "$SEQ_LEN")
PYTHON=${PYTHON:-python3}

if [[ $PART == wheels ]]; then
    # The GPU machine's image has torch, transformers, h5py, scipy, pandas, sklearn, attrs,
    # matplotlib, mpmath, tqdm; lmsat.planning needs jsonschema, the peers need these.
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl jsonschema jsonschema-specifications referencing rpds-py \
        weightwatcher IsoScore powerlaw matplotlib-inline traitlets
    # the old weight analyses (--compare-old): the copy sent to the GPU machine has no .git
    mkdir -p .whl/lmsat-d5aea3a && git archive d5aea3a src | tar -x -C .whl/lmsat-d5aea3a
    exit
fi

mkdir -p "$OUT" "$WORKDIR"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1

job() { # shape dtype report [extra args]: the job beside its limit, the weights alone per metric
    local shape=$1 dtype=$2 report=$3
    shift 3
    "$PYTHON" benchmarks/checkpoint_job.py --shape "$shape" --device "$DEVICE" --dtype "$dtype" \
        --workdir "$WORKDIR" "${SAMPLE[@]}" "$@" 2>&1 | tee "$OUT/$report"
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
    "$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
    nproc
} 2>&1 | tee "$OUT/machine-$PART.txt"

case $PART in
small)
    job "$SMALL" bfloat16 "job-$SMALL-bfloat16.txt" --peers
    job "$SMALL" float32 "job-$SMALL-float32.txt"
    "$PYTHON" benchmarks/dtype_policy.py --device "$DEVICE" --pythia-shape "$SMALL" \
        --workdir "$WORKDIR" 2>&1 | tee "$OUT/dtype-policy-$SMALL.txt"
    # the CPU target (old / new weight analyses >= 10x) on the host's cores, not a laptop's 2
    "$PYTHON" benchmarks/checkpoint_job.py --shape "$SMALL" --device cpu --weights-only --compare-old \
        --threads "$(nproc)" --workdir "$WORKDIR" 2>&1 | tee "$OUT/weights-cpu-$SMALL.txt"
    ;;
large)
    job "$LARGE" bfloat16 "job-$LARGE-bfloat16.txt"
    job "$LARGE" float32 "job-$LARGE-float32.txt"
    ;;
*)
    echo "unknown part $PART: wheels, small or large" >&2
    exit 2
    ;;
esac
date -u | tee -a "$OUT/machine-$PART.txt"
