"""docs/design.md against the code it names: the process table against the CLI's commands, the package
map, layers and import rules against the import-linter contracts, the ranking against `plan.py`'s key.

Each test reads the truth from the code or the contracts, so a change to either that the page does not
follow fails here, naming what to write."""

from __future__ import annotations

import configparser
import importlib
import inspect
import re
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from docs_testkit import ROOT, section

from dynmig import cli
from mig.placement import plan
from mig.placement.request import BINPACK, SPREAD, PodRequest

DESIGN = ROOT / "docs" / "design.md"
TICKED = re.compile(r"`([^`]+)`")


def _contracts() -> tuple[list[str], list[dict[str, Any]]]:
    """(root packages, contracts) as import-linter reads them: `.importlinter` when there is one, else
    `[tool.importlinter]` in pyproject.toml."""
    ini = ROOT / ".importlinter"
    if ini.exists():
        parser = configparser.ConfigParser()
        parser.read(ini)

        def listed(value: str) -> list[str]:
            return [v.strip() for v in value.splitlines() if v.strip()]

        main = parser["importlinter"]
        roots = listed(main.get("root_packages", "")) or [main["root_package"]]
        contracts = [
            {
                key: listed(value) if "\n" in value or key.endswith(("modules", "layers")) else value
                for key, value in parser[name].items()
            }
            for name in parser.sections()
            if name.startswith("importlinter:contract:")
        ]
        return roots, contracts
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(tool.get("root_packages") or [tool["root_package"]]), list(tool["contracts"])


def _layer(text: str) -> tuple[str, frozenset[str]]:
    """One layer of a layers contract: its separator (`|` independent, `:` not) and its packages."""
    sep = "|" if "|" in text else ":"
    return sep, frozenset(p.strip() for p in text.split(sep) if p.strip())


def _fenced(text: str) -> list[str]:
    """The lines of the first fenced block in `text`."""
    match = re.search(r"^```\w*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert match, "no fenced block"
    return match.group(1).splitlines()


def _table(text: str) -> list[list[str]]:
    """The rows of the first Markdown table in `text`, header and rule left out, cells stripped."""
    rows = [line for line in text.splitlines() if line.lstrip().startswith("|")]
    return [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows[2:]]


# ---- processes -------------------------------------------------------------------------------------


def _process_rows() -> dict[str, str]:
    """`dynmig NAME` -> the package its row names, from the process table."""
    rows = {}
    for cells in _table(section(DESIGN, "Processes")):
        match = re.match(r"`dynmig ([\w-]+)` \(`([\w/]+)/`", cells[0])
        assert match, f"design.md, Processes: a row does not start `dynmig NAME` (`package/`): {cells[0]}"
        rows[match.group(1)] = match.group(2)
    return rows


def test_the_process_table_has_a_row_for_every_command_the_cli_runs_and_no_other():
    rows = _process_rows()
    commands = set(cli.SUBCOMMANDS) | set(cli.ELSEWHERE)
    assert not commands - set(rows), f"design.md, Processes, lacks a row for: {sorted(commands - set(rows))}"
    assert not set(rows) - commands, (
        f"design.md, Processes, names commands dynmig lacks: {sorted(set(rows) - commands)}"
    )


def test_each_process_row_names_the_package_whose_module_runs_that_command():
    for name, package in _process_rows().items():
        if name in cli.SUBCOMMANDS:
            module = importlib.import_module(cli.SUBCOMMANDS[name])
        else:  # a command another distribution adds (the testbed's lab), found as the CLI finds it
            (found,) = entry_points(group=cli.COMMAND_GROUP, name=name)
            module = found.load()
        where = Path(inspect.getfile(module)).resolve().relative_to(ROOT).as_posix()
        assert where.startswith(package + "/"), (
            f"design.md says `dynmig {name}` is in {package}/; it runs {where}"
        )


# ---- packages, layers, import rules --------------------------------------------------------------


def test_the_package_map_names_every_root_package_of_the_import_contracts_and_no_other():
    roots, _ = _contracts()
    mapped = set()
    for line in _fenced(section(DESIGN, "Packages and the direction of imports")):
        first = line.split(" ", 1)[0]
        if first.endswith("/") and (ROOT / first / "__init__.py").exists():
            mapped.add(first.rstrip("/").rsplit("/", 1)[-1])
    assert mapped == set(roots), (
        f"design.md's package map has {sorted(mapped)}; the import contracts' root packages are "
        f"{sorted(roots)}"
    )


def test_the_layers_in_design_md_are_the_layers_contract_top_to_bottom():
    _, contracts = _contracts()
    layered = [c for c in contracts if c.get("type") == "layers"]
    assert len(layered) == 1, "one layers contract is expected; describe each in design.md, Layers"
    written = [_layer(line.split("  ", 1)[0]) for line in _fenced(section(DESIGN, "Layers")) if line.strip()]
    assert written == [_layer(layer) for layer in layered[0]["layers"]], (
        f"design.md, Layers: {written}\ncontract: {layered[0]['layers']}"
    )


def test_the_import_rules_table_is_every_forbidden_contract_and_no_other():
    _, contracts = _contracts()
    in_code = {
        (frozenset(c["source_modules"]), frozenset(c["forbidden_modules"]))
        for c in contracts
        if c.get("type") == "forbidden"
    }
    written = {
        (frozenset(TICKED.findall(cells[1])), frozenset(TICKED.findall(cells[2])))
        for cells in _table(section(DESIGN, "Import rules"))
    }
    missing = [f"{sorted(s)} may not import {sorted(f)}" for s, f in in_code - written]
    extra = [f"{sorted(s)} may not import {sorted(f)}" for s, f in written - in_code]
    assert not missing, f"design.md, Import rules, lacks the contracts: {missing}"
    assert not extra, f"design.md, Import rules, states rules no contract checks: {extra}"


# ---- ranking -------------------------------------------------------------------------------------

# distinct stand-ins for each argument of `fragmentation`, so its result shows where each one went
_FRAGMENTATION_ARGS = {
    "nodes": 101,
    "empty_node": 109,
    "share": 102,
    "risk": 103,
    "whole_cost": 105.5,
    "memory_mb": 107,
}
_LOSS_PARTS = (104, 106, 108)  # occupancy.Choice.loss: capacity, large value, value
_TERM_OF = {
    101: "node slots",
    109: "empty node",
    102: "model share",
    103: "demand price",
    104: "capacity lost",
    105.5: "whole-GPU cost",
    106: "large value lost",
    107: "memory",
    108: "value lost",
}


def test_loss_terms_names_the_terms_of_fragmentation_in_the_order_it_returns_them():
    params = set(inspect.signature(plan.fragmentation).parameters)
    assert params == {"loss", *_FRAGMENTATION_ARGS}, (
        f"fragmentation takes {sorted(params)}: name each new term in plan.LOSS_TERMS, docs/design.md "
        "and this test"
    )
    loss = plan.fragmentation(loss=_LOSS_PARTS, **_FRAGMENTATION_ARGS)
    assert tuple(_TERM_OF[v] for v in loss) == plan.LOSS_TERMS


def test_design_md_lists_the_fragmentation_loss_terms_in_the_order_plan_py_compares_them():
    text = section(DESIGN, "The fragmentation loss")
    written = tuple(re.findall(r"^\d+\. \*\*(.+?)\*\*", text, re.MULTILINE))
    assert written == plan.LOSS_TERMS, f"design.md: {written}\nplan.LOSS_TERMS: {plan.LOSS_TERMS}"


def _key_words(node_policy: str, gpu_policy: str) -> list[str]:
    """`rank_key`'s terms for one policy pair, in words, read from the key it builds."""
    rank, loss, node_used, gpu_used, start = ("rank",), ("loss",), 0.25, 0.5, 7
    pod = PodRequest(containers=(), node_policy=node_policy, gpu_policy=gpu_policy)
    words = {
        rank: "profile rank",
        loss: "fragmentation loss",
        -node_used: "fuller node",
        node_used: "emptier node",
        -gpu_used: "fuller GPU",
        gpu_used: "emptier GPU",
        start: "lower start",
    }
    return [words[term] for term in plan.rank_key(pod, rank, loss, node_used, gpu_used, start)]  # type: ignore[arg-type]


def test_the_ranking_table_in_design_md_is_rank_key_for_each_node_and_gpu_policy():
    rows = {
        (TICKED.findall(cells[0])[0], TICKED.findall(cells[1])[0]): [w.strip() for w in cells[2].split(",")]
        for cells in _table(section(DESIGN, "Ranking"))
    }
    policies = [(n, g) for n in (BINPACK, SPREAD) for g in (BINPACK, SPREAD)]
    assert sorted(rows) == sorted(policies)
    for node_policy, gpu_policy in policies:
        assert rows[(node_policy, gpu_policy)] == _key_words(node_policy, gpu_policy), (
            f"design.md, Ranking, {node_policy}/{gpu_policy}"
        )
