"""Print the coverage of `make coverage` per product package, and the total (no threshold: a report).

    python scripts/coverage_summary.py [DATA_FILE]

Reads the data pytest-cov combined (the test process and every Python process the tests and the lab
started: serve, device-plugin, certs, the CLI; see [tool.coverage.run] in pyproject.toml). The files
counted are the measured product packages, generated gRPC code left out; `coverage report` gives the
same figures file by file.
"""

from __future__ import annotations

import fnmatch
import sys
from collections import defaultdict
from pathlib import Path

import coverage
from coverage.exceptions import NoDataError, NoSource

ROOT = Path(__file__).resolve().parents[1]


def per_package(cov: coverage.Coverage) -> dict[str, tuple[int, int]]:
    """package -> (statements, statements run), from every measured file under the checkout."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    omit = cov.get_option("report:omit") or []
    assert isinstance(omit, list)
    for name in sorted(cov.get_data().measured_files()):
        path = Path(name)
        if not path.is_relative_to(ROOT) or _omitted(path.relative_to(ROOT), omit):
            continue
        try:
            _, statements, _, missing, _ = cov.analysis2(name)
        except NoSource:
            continue
        package = path.relative_to(ROOT).parts[0]
        totals[package][0] += len(statements)
        totals[package][1] += len(statements) - len(missing)
    return {package: (n, run) for package, (n, run) in sorted(totals.items())}


def _omitted(relative: Path, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(str(relative), pattern) for pattern in patterns)


def render(rows: dict[str, tuple[int, int]]) -> str:
    lines = [f"{'package':<12}{'statements':>12}{'run':>10}{'cover':>8}"]
    for package, (n, run) in [*rows.items(), ("TOTAL", _sum(rows))]:
        lines.append(f"{package:<12}{n:>12}{run:>10}{_percent(run, n):>8}")
    return "\n".join(lines)


def _sum(rows: dict[str, tuple[int, int]]) -> tuple[int, int]:
    return sum(n for n, _ in rows.values()), sum(run for _, run in rows.values())


def _percent(run: int, n: int) -> str:
    return f"{100 * run / n:.0f}%" if n else "-"


def main(argv: list[str]) -> int:
    config = str(ROOT / "pyproject.toml")
    cov = (
        coverage.Coverage(data_file=argv[0], config_file=config)
        if argv
        else coverage.Coverage(config_file=config)
    )
    try:
        cov.load()
        rows = per_package(cov)
    except NoDataError as error:
        print(f"coverage: no data ({error})", file=sys.stderr)
        return 1
    if not rows:
        where = argv[0] if argv else cov.get_option("run:data_file")
        print(f"coverage: no data in {where} (did the suite run?)", file=sys.stderr)
        return 1
    print("== coverage of the product packages (lines run by the tests and the processes they start)")
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
