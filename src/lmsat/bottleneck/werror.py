"""W-error: how well a rank-d matrix can approximate W (Godey et al. 2024, Eq. in 5.1).

    W-error(d) = ||sigma_{d+1:}||_2 / ||W||_F

is the Eckart-Young-Mirsky error of the best rank-d approximation of W, normalised by
the Frobenius norm. It needs the whole tail of the spectrum, so for the 5-gram matrices
W (C x V, C in the millions) we take *all* singular values at once from the eigenvalues
of the small side's Gram matrix (V x V, built by a sparse product) instead of asking an
iterative solver (`scipy.sparse.linalg.svds`) for thousands of them, which is much
slower (see `benchmarks/werror.py`).

Usage:
    sigma = gram_spectrum(context_matrix(counts))   # (min(C, V),) descending
    dims, werror = w_error_curve(sigma)              # werror[d] for d = 0..len(sigma)
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.csgraph


def gram_spectrum(matrix, device: str | None = None) -> np.ndarray:
    """All singular values of `matrix` (sparse or dense, (C, V)), exactly, descending.

    Eigenvalues of the Gram matrix of the smaller side (M^T M if V <= C else M M^T),
    computed in float64 with a symmetric eigensolver; sigma = sqrt(max(lambda, 0))
    (round-off can make zero eigenvalues tiny negatives). For sparse input the Gram matrix
    is split into its connected blocks (columns that never share a row do not interact),
    each solved on its own; all-zero rows/columns only add zero singular values. The
    result always has min(C, V) entries.

    Accuracy: the squared singular values come out with an absolute error of about
    1e-16 * sigma_max^2, which is exactly the quantity W-error sums; individual tiny
    singular values (below ~1e-8 sigma_max) are not resolved, and W-error does not need them.

    Cost: the dense eigensolves, O(sum k_b^3) time and k_max^2 float64 of memory for
    blocks of k_b columns (at worst one block of V = 50k columns, Pythia's vocabulary:
    20 GB). device=None uses scipy in place (no second copy); device="cuda" (or "cpu")
    uses torch.linalg.eigvalsh on that device, which needs a second copy of each block
    but is much faster on a GPU, and on CPU (MKL) for large blocks: 14.4 s against 26.2 s
    for a 7939-column block on 2 cores (below ~4000 columns scipy is as fast or faster).
    """
    if not (scipy.sparse.issparse(matrix) or isinstance(matrix, np.ndarray)):
        raise ValueError(
            f"gram_spectrum: matrix must be a numpy array or a scipy sparse matrix, "
            f"got {type(matrix).__name__}; convert it with np.asarray or scipy.sparse.csr_matrix"
        )
    if matrix.ndim != 2:
        raise ValueError(f"gram_spectrum: matrix must be 2-D (C, V), got shape {matrix.shape}")
    n_rows, n_cols = matrix.shape
    n_singular = min(n_rows, n_cols)
    if n_singular == 0:
        return np.zeros(0)

    if scipy.sparse.issparse(matrix):
        matrix = scipy.sparse.csr_matrix(matrix, dtype=np.float64)
        if n_rows < n_cols:  # Gram of the small side
            matrix = matrix.T.tocsr()  # (V, C) -> now rows >= cols
        # (V, V) sparse: tokens that share a context. W^T in CSR first: `matrix.T @ matrix`
        # would make scipy convert the tall W to CSC, 4x slower for a 5-gram matrix.
        gram = matrix.T.tocsr() @ matrix
        eigenvalues = _block_eigenvalues(gram, device)
    else:
        matrix = np.asarray(matrix, dtype=np.float64)
        if n_rows < n_cols:
            matrix = matrix.T
        matrix = matrix[:, np.any(matrix != 0, axis=0)]
        eigenvalues = _dense_eigenvalues(matrix.T @ matrix, device)  # (k, k) Gram

    singular_values = np.sqrt(np.clip(np.sort(eigenvalues)[::-1], 0.0, None))  # descending
    singular_values = singular_values[:n_singular]
    return np.concatenate([singular_values, np.zeros(n_singular - singular_values.size)])


def _block_eigenvalues(gram, device: str | None) -> np.ndarray:
    """Eigenvalues of a sparse symmetric Gram matrix, one connected block at a time.

    Two columns interact only if some row holds both (two tokens seen after one context).
    In n-gram matrices most contexts have a single next token, so the co-occurrence graph
    splits into one large component and many small ones; the spectrum is the union of
    the blocks' spectra, and a dense solve per block costs sum k_b^3 instead of k^3.
    All-zero columns are isolated with a zero diagonal: they add the zero eigenvalues.
    """
    gram = scipy.sparse.csr_matrix(gram)
    gram.eliminate_zeros()  # a stored zero is no edge, and must not be scattered below
    n_blocks, labels = scipy.sparse.csgraph.connected_components(gram, directed=False)
    sizes = np.bincount(labels, minlength=n_blocks)
    diagonal = gram.diagonal()
    eigenvalues = [diagonal[sizes[labels] == 1]]  # 1 x 1 blocks are their own eigenvalue
    order = np.argsort(labels, kind="stable")  # (V,) columns grouped by block
    starts = np.concatenate([[0], np.cumsum(sizes)])
    position = np.empty(labels.size, dtype=np.int64)  # (V,) index of a column in its block
    position[order] = np.arange(labels.size) - starts[labels[order]]
    for block in np.flatnonzero(sizes > 1):
        members = order[starts[block] : starts[block + 1]]
        rows = gram[members]  # (k, V) CSR; a component's rows only hold its own columns
        dense = scipy.sparse.csr_matrix(
            (rows.data, position[rows.indices], rows.indptr), shape=(members.size,) * 2
        ).toarray()  # (k, k), one pass instead of a second (column) fancy index
        eigenvalues.append(_dense_eigenvalues(dense, device))
    return np.concatenate(eigenvalues)


def _dense_eigenvalues(gram: np.ndarray, device: str | None) -> np.ndarray:
    """Eigenvalues of a dense symmetric matrix, (k,) unordered; overwrites `gram`."""
    if gram.shape[0] == 0:
        return np.zeros(0)
    if device is None:  # divide and conquer: ~1.6x faster than the default MRRR here
        return scipy.linalg.eigvalsh(gram, overwrite_a=True, check_finite=False, driver="evd")
    import torch  # only this path needs it

    gram_tensor = torch.from_numpy(gram).to(device)
    del gram
    return torch.linalg.eigvalsh(gram_tensor).cpu().numpy()


def w_error_curve(
    singular_values, frobenius_norm: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """W-error(d) for d = 0..k from k singular values: returns (dims (k+1,), werror (k+1,)).

    singular_values: any order, non-negative. If they are all the singular values of W,
    leave `frobenius_norm` as None (||W||_F^2 = sum sigma^2). If they are only the top k
    (e.g. from svds), pass ||W||_F: the mass of the unseen tail,
    ||W||_F^2 - sum sigma^2, is then added to every tail sum.

    The tail sums sum_{i>d} sigma_i^2 are accumulated from the smallest value upward in
    float64 (cumsum of the reversed squares), so small errors near the end of the curve
    are not swamped by the large leading terms as they would be in 1 - cumsum / total.
    """
    sigma = np.asarray(singular_values, dtype=np.float64).ravel()
    if sigma.size and (not np.all(np.isfinite(sigma)) or sigma.min() < 0):
        raise ValueError(
            "w_error_curve: singular_values must be finite and non-negative; "
            "pass the output of gram_spectrum or an SVD"
        )
    sigma = np.sort(sigma)[::-1]  # descending
    squares = sigma**2
    # tail[d] = sum_{i >= d} squares[i] (0-based), tail[k] = 0; smallest terms added first.
    tail = np.concatenate([np.cumsum(squares[::-1])[::-1], [0.0]])  # (k+1,)
    observed_total = tail[0]
    if frobenius_norm is None:
        total = observed_total
    else:
        total = float(frobenius_norm) ** 2
        if not np.isfinite(total) or total < observed_total * (1 - 1e-9):
            raise ValueError(
                f"w_error_curve: frobenius_norm={frobenius_norm!r} is smaller than the norm "
                f"of the given singular values ({np.sqrt(observed_total)!r}); pass ||W||_F of "
                f"the same matrix, or None when all singular values are given"
            )
        tail = tail + max(total - observed_total, 0.0)
    dims = np.arange(sigma.size + 1)
    if total == 0:
        raise ValueError("w_error_curve: W is the zero matrix (all singular values are 0)")
    werror = np.sqrt(np.clip(tail, 0.0, None) / total)
    return dims, werror


def frobenius_norm(matrix) -> float:
    """||matrix||_F in float64, for sparse or dense matrices."""
    if scipy.sparse.issparse(matrix):
        data = np.asarray(matrix.tocsr().data, dtype=np.float64)
    else:
        data = np.asarray(matrix, dtype=np.float64).ravel()
    return float(np.sqrt(np.sum(data**2)))
