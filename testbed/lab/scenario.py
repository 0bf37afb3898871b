"""A scripted scenario's voice: steps, things to look at, and checks printed as PASS/FAIL."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lab.kit import Kit, WaitTimeout


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str
    detail: str


class ScenarioFailed(AssertionError):
    """A step could not go on (a wait timed out); the scenario stops and counts as failed."""


@dataclass
class Run:
    lab: Any
    echo: Callable[[str], None] = print
    checks: list[Check] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kit = Kit(self.lab)
        self.started = time.monotonic()

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def step(self, text: str) -> None:
        self.echo("")
        self.echo(f"== {text}")

    def say(self, text: str) -> None:
        self.echo(f"   {text}")

    def show(self, title: str, block: str) -> None:
        self.echo(f"-- {title}")
        self.echo(block)

    def check(self, ok: bool, text: str, detail: str = "") -> bool:
        check = Check(bool(ok), text, detail)
        self.checks.append(check)
        self.echo(f"{'PASS' if ok else 'FAIL'}  {text}" + (f" — {detail}" if detail else ""))
        return bool(ok)

    def expect(self, value: Any, want: Any, text: str, detail: str = "") -> bool:
        return self.check(
            value == want, text, detail or (f"got {value}" if value == want else f"got {value}, want {want}")
        )

    def wait(self, what: Callable[[], Any], text: str) -> Any:
        """Run a wait; a timeout is a FAIL and stops the scenario."""
        try:
            value = what()
        except WaitTimeout as error:
            self.check(False, text, str(error))
            raise ScenarioFailed(text) from None
        self.check(True, text)
        return value
