"""bench/ is on sys.path when a bench runs (Python puts a script's folder first) and in the tests
(pytest's `pythonpath`), so a bench module named like anything else importable would hide it: the
product's `plugin` package, a testbed package, a library or the standard library."""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _bench_modules() -> list[str]:
    scripts = [p.stem for p in BENCH.glob("*.py")]
    packages = [p.name for p in BENCH.iterdir() if (p / "__init__.py").is_file()]
    return sorted(scripts + packages)


def test_no_bench_module_shares_a_name_with_anything_else_importable():
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() not in (BENCH, ROOT / "tests" / "bench")]
    clashes = {
        name: spec.origin
        for name in _bench_modules()
        if (spec := importlib.machinery.PathFinder.find_spec(name, elsewhere)) is not None
        and spec.origin is not None  # a folder without __init__.py (tests/page) yields to a module
    }
    clashes |= {name: "the standard library" for name in _bench_modules() if name in sys.stdlib_module_names}
    assert not clashes, f"bench modules that hide another module (rename them <name>_bench.py): {clashes}"
