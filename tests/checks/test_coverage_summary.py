"""make coverage's summary: statements and lines run per product package, and the total."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("coverage_summary", ROOT / "scripts" / "coverage_summary.py")
assert _spec is not None and _spec.loader is not None
summary = importlib.util.module_from_spec(_spec)
sys.modules["coverage_summary"] = summary
_spec.loader.exec_module(summary)


def _measured(tmp_path: Path, lines: dict[str, list[int]]) -> coverage.Coverage:
    """A coverage data file saying these lines of these repository files ran."""
    data_file = str(tmp_path / "data")
    data = coverage.CoverageData(data_file)
    data.add_lines({str(ROOT / path): run for path, run in lines.items()})
    data.write()
    cov = coverage.Coverage(data_file=data_file, config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    return cov


def _lines(path: str) -> list[int]:
    cov = coverage.Coverage(data_file=None, config_file=str(ROOT / "pyproject.toml"))
    return list(cov.analysis2(str(ROOT / path))[1])


def _statements(path: str) -> int:
    return len(_lines(path))


def test_each_package_sums_its_files_and_the_total_sums_the_packages(tmp_path):
    first = {path: _lines(path)[:1] for path in ("mig/types.py", "kube/errors.py")}
    cov = _measured(tmp_path, {**first, "mig/jsontext.py": []})
    rows = summary.per_package(cov)
    assert set(rows) == {"mig", "kube"}
    assert rows["mig"] == (_statements("mig/types.py") + _statements("mig/jsontext.py"), 1)
    assert rows["kube"] == (_statements("kube/errors.py"), 1)
    text = summary.render(rows)
    total = rows["mig"][0] + rows["kube"][0]
    assert text.splitlines()[-1].split() == ["TOTAL", str(total), "2", f"{100 * 2 / total:.0f}%"]


def test_generated_grpc_code_is_left_out_of_the_report(tmp_path):
    cov = _measured(
        tmp_path,
        {
            "plugin/api/deviceplugin_pb2.py": [1],
            "plugin/api/__init__.py": _lines("plugin/api/__init__.py")[:1],
        },
    )
    assert set(summary.per_package(cov)) == {"plugin"}
    assert summary.per_package(cov)["plugin"][0] == _statements("plugin/api/__init__.py")


def test_a_run_without_coverage_data_says_so_and_fails(tmp_path, capsys):
    assert summary.main([str(tmp_path / "missing")]) == 1
    assert "no data" in capsys.readouterr().err
