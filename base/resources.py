"""The one place that finds files dynmig ships and reads at run time: the default policy, its examples,
the chart (which the testbed's lab renders).

They live in the `mig._data` package and are found with `importlib.resources`, so a checkout, an editable
install, a wheel in a fresh venv and the container image all read the same files the same way. In a
checkout `mig/_data/charts` and `mig/_data/policies` are symlinks to the top-level folders; the paths
returned here are resolved, so messages name `charts/dynmig`, not the symlink.
"""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources
from pathlib import Path

DATA_PACKAGE = "mig._data"
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def data_path(*parts: str) -> Path:
    """A real filesystem path to a shipped file or folder (extracted once if the package is zipped)."""
    resource = resources.files(DATA_PACKAGE)
    for part in parts:
        resource = resource.joinpath(part)
    if isinstance(resource, Path):
        return resource.resolve()
    return _extracted.enter_context(resources.as_file(resource))


def default_policy() -> Path:
    """The device config dynmig uses when none is given (`policies/default.yaml`)."""
    return data_path("policies", "default.yaml")
