"""Benchmark: lmsat's representation similarity against pico-analyze's own CKA and PWCCA code, on
the same hidden states of a run's caches.

pico-analyze (pico-lm/pico-analyze) computes CKA with Kornblith et al.'s published
`feature_space_linear_cka` (its lib/cka.py) and PWCCA with Google's reference (its
lib/svcca/); both are plain numpy. Nothing of it is copied into lmsat: give a checkout of it,

    git clone https://github.com/pico-lm/pico-analyze /tmp/pico-analyze
    .venv/bin/python benchmarks/pico_analyze_side_by_side.py --pico /tmp/pico-analyze --run-dir DIR

DIR holds a finished default run (results/default/cache). For each toy model, pairs of
checkpoints (early, middle and late in training) and every hidden state of the caches' layer
subsample, it prints lmsat's linear CKA and PWCCA beside pico-analyze's, and the largest
differences. CKA is the same quantity (pico-analyze casts to float32 first: differences at
1e-6). PWCCA is not: lmsat runs CCA on the principal directions that keep 99% of each
representation's variance (SVCCA's reduction), Google's reference regularises the full
covariances with epsilon = 1e-6, which on anisotropic layers takes square roots of negative
eigenvalues (its numpy warns) and can land far from both CKA and SVCCA.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PAIRS = (("step16", "step64"), ("step200", "step800"), ("step600", "step800"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pico", type=Path, required=True, help="a checkout of pico-lm/pico-analyze")
    parser.add_argument("--run-dir", type=Path, default=ROOT, help="the directory holding results/default/cache")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(args.pico), str(ROOT / "src")]
    import h5py
    from lib import cka as kornblith  # pico-analyze's lib/cka.py
    from lib.svcca.pwcca import compute_pwcca  # pico-analyze's lib/svcca/pwcca.py

    from lmsat.degeneration.similarity import canonical_similarity, linear_cka

    caches = args.run_dir / "results" / "default" / "cache"
    rows, warned = [], 0
    for model in sorted(p.name for p in caches.iterdir()):
        for a, b in PAIRS:
            with h5py.File(caches / model / f"{a}.h5") as fa, h5py.File(caches / model / f"{b}.h5") as fb:
                for i in range(fa["layers"].shape[0]):
                    x, y = fa["layers"][i].astype(np.float64), fb["layers"][i].astype(np.float64)  # (k, w)
                    theirs_cka = kornblith.feature_space_linear_cka(x.astype(np.float32), y.astype(np.float32))
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        theirs_pwcca = float(compute_pwcca(x.T.astype(np.float32), y.T.astype(np.float32), epsilon=1e-6)[0])
                    warned += bool(caught)
                    rows.append((model, a, b, i, linear_cka(x, y), theirs_cka, canonical_similarity(x, y).pwcca, theirs_pwcca))
    print(f"{'model':9s} {'pair':16s} layer {'CKA lmsat':>10s} {'pico':>10s} {'PWCCA lmsat':>12s} {'pico':>8s}")
    for model, a, b, i, mine_cka, their_cka, mine_pw, their_pw in rows:
        print(f"{model:9s} {a + '-' + b:16s} {i:5d} {mine_cka:10.6f} {their_cka:10.6f} {mine_pw:12.4f} {their_pw:8.4f}")
    cka = np.array([abs(r[4] - r[5]) for r in rows])
    pwcca = np.array([abs(r[6] - r[7]) for r in rows])
    print(f"\n{len(rows)} hidden states: CKA max |difference| {cka.max():.2e}; PWCCA max |difference| {np.nanmax(pwcca):.3f}, "
          f"median {np.nanmedian(pwcca):.3f}; Google's PWCCA warned (invalid values) on {warned} of them")


if __name__ == "__main__":
    main()
