"""The README and docs/ as a reader meets them: short, the two commands first, every link and every
file or module they name present, and the commands they show ones the CLI and the lab accept."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from docs_testkit import ROOT, blocks, section, shell_lines

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


def test_the_readme_is_at_most_300_lines_and_starts_with_make_lab_and_make_test():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("```sh"))
    commands = shell_lines("\n".join(lines[first + 1 : lines.index("```", first + 1)]))
    assert [c.split("#")[0].strip() for c in commands] == ["make lab", "make test"]
    assert lines.index("```", first + 1) < 40


def _anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    ids = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        ids.add(slug)
    return ids


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
    text = page.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(ROOT)} links to {target}: no such file"
        if anchor:
            assert anchor in _anchors(linked.read_text()), (
                f"{page.relative_to(ROOT)}: no heading #{anchor} in {path}"
            )


# a backticked path of the tree: `webhooks/leader.py`, `mig/placement/`, `testbed/sim/nvml/drivers/*.yaml`
PATH = re.compile(
    r"`((?:base|mig|kube|certs|webhooks|plugin|dynmig|testbed|charts|policies|bench|tests|scripts|examples|image|docs)"
    r"/[\w./*-]*)`"
)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_path_a_page_names_is_in_the_tree(page):
    missing = []
    for name in set(PATH.findall(page.read_text())):
        name = name.split("::", 1)[0].rstrip(".")
        candidates = [name, name.rstrip("/"), f"{name.rstrip('/')}.py"]
        if "*" in name:
            if not list(ROOT.glob(name)):
                missing.append(name)
        elif not any((ROOT / c).exists() for c in candidates):
            missing.append(name)
    assert not missing, f"{page.relative_to(ROOT)} names what the tree does not have: {sorted(missing)}"


def test_the_design_notes_no_longer_say_the_lab_has_no_replicasets():
    text = (ROOT / "docs" / "design.md").read_text()
    assert "no ReplicaSets" not in text
    assert "ReplicaSets" in text
    assert "`sim/" not in text, "the simulator lives in testbed/sim"


def _lab_lines():
    for page in PAGES:
        for body in blocks(page.read_text(), "sh"):
            for line in shell_lines(body):
                if " lab " in f" {line} " and "dynmig lab" in line:
                    yield page, line


def test_every_documented_lab_scenario_exists():
    from lab.scenarios import SCENARIOS

    named = {
        m
        for page in PAGES
        for m in re.findall(r"dynmig lab --scenario ([a-z0-9-]+)", page.read_text())
        if m not in ("NAME", "list")
    }
    assert named, "no page names a scenario"
    assert named <= set(SCENARIOS), sorted(named - set(SCENARIOS))


def test_every_documented_lab_command_line_parses():
    """The flags of each `dynmig lab` line shown, against the lab's own parser (nothing is started)."""
    from lab import build_parser

    parser = build_parser()
    for page, line in _lab_lines():
        argv = line.split("#", 1)[0].split()
        args = argv[argv.index("lab") + 1 :]
        try:
            parser.parse_args(shlex.split(" ".join(args)))
        except SystemExit as error:
            pytest.fail(f"{page.relative_to(ROOT)}: `{line}` does not parse ({error})")


def test_the_policy_examples_in_the_readme_run():
    """`dynmig policy explain` lines the README names beside a figure give that figure."""
    text = section(README, "Asking for a MIG device")
    (command,) = re.findall(r"`dynmig policy explain ([^`]+)`", text)

    done = subprocess.run(
        [sys.executable, "-m", "dynmig.cli", "policy", "explain", *shlex.split(command)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "device 0: 1g.10gb" in done.stdout, done.stdout
    assert "a 1g.10gb on an A100-SXM4-80GB" in text


def test_the_profile_table_in_policy_md_is_what_policy_explain_profiles_prints():
    text = (ROOT / "docs" / "policy.md").read_text()
    start = text.index("<!-- profiles: dynmig policy explain --profiles -->\n")
    documented = text[text.index("\n", start) + 1 : text.index("<!-- /profiles -->")]

    done = subprocess.run(
        [sys.executable, "-m", "dynmig.cli", "policy", "explain", "--profiles"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert documented == done.stdout
