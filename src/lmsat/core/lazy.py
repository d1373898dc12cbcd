"""Modules imported on first use, so that a job pays only for the libraries it uses.

Every workflow job is a fresh interpreter, and importing is most of a small job's seconds
(docs/performance.md, "Start-up per job"): pandas alone costs a cache-metric job 0.4 s,
though only the table rules use it. `lazy_module("pandas")` returns the module object at
once and runs its import on the first attribute access (importlib.util.LazyLoader), so a
module can keep `pd = lazy_module("pandas")` at its top and use `pd.DataFrame` as usual.

Top-level packages only: finding `a.b`'s spec imports `a` eagerly, which is no saving when
`a` is the expensive part. A module already imported is returned as it is. A missing
package raises ModuleNotFoundError here, at the line that names it, as `import` would.
Before Python 3.12, LazyLoader takes no lock on the first access: a module whose
first use may come from two threads at once should be imported eagerly instead.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


def lazy_module(name: str) -> ModuleType:
    """`name` (a top-level package), imported when one of its attributes is first read."""
    if "." in name:
        raise ValueError(f"lazy_module({name!r}): top-level packages only (finding a submodule imports its parent)")
    with _LOCK:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
        return module
