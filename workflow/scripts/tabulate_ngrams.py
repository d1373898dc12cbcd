"""Rule tabulate_ngrams: W-error(d) of every corpus x tokenizer n-gram matrix (Fig. 7's table)."""

import _lmsat_src  # noqa: F401 (first: this workflow's src/ on sys.path)
import lmsat.offline  # noqa: F401 (first: compute jobs never reach the network)
import h5py
import pandas as pd

from lmsat.tables import write_csv
from lmsat.io import check_identity, promised_by_path, setup_logging
from lmsat.ngram_werror import TABLE_COLUMNS, curve_rows


def main(snakemake):
    setup_logging(snakemake.log[0])
    tables = []
    for path in snakemake.input:
        with h5py.File(path, "r") as f:
            attrs = {k: f.attrs[k] for k in ("corpus", "tokenizer", "order", "n_tokens", "n_contexts", "vocab_size")}
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in attrs.items()}
            check_identity(path, attrs, promised_by_path(path, "corpus", "tokenizer"))
            tables.append(curve_rows(f["singular_values"][...], **attrs, kind="empirical"))
            if "truth_singular_values" in f:
                truth = dict(attrs, n_tokens=0, n_contexts=float(f.attrs["truth_n_contexts"]))
                tables.append(curve_rows(f["truth_singular_values"][...], **truth, kind="truth"))
    write_csv(pd.concat(tables, ignore_index=True)[TABLE_COLUMNS], snakemake.output[0], snakemake.params.config_sha256)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 (injected by Snakemake's script directive)
