"""CEL for admission, evaluated the way kube-apiserver does for webhook `matchConditions` and
ValidatingAdmissionPolicies, with a real CEL implementation (`common-expression-language`).

Why a real implementation: the chart's expressions are what protect the allocation annotation in a
real cluster; a hand-written approximation would only test our own reading of CEL.

The activation is the API server's: `object`, `oldObject` (null on CREATE), `request` (the
AdmissionRequest without the objects, absent fields defaulted as the typed request has them),
and for policies `params`, `namespaceObject` and `variables`. Variables are evaluated lazily: only
those an expression names (`variables.<name>`), each once per request; one that fails makes only
the expressions that use it fail. Not provided: `authorizer` (an expression naming it fails to
evaluate, and the failure policy decides) and compile-time type checking (a type error shows at
evaluation instead of at creation).

The CEL package is imported on first use: the sim module loads without it, and a missing install
says what to install.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

_PROGRAMS: dict[str, Any] = {}
_LOCK = threading.Lock()
_VARIABLE_REF = re.compile(r"\bvariables\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")


class CelError(Exception):
    """An expression failed to compile or evaluate; the message is the API server's wording."""


def _cel() -> Any:
    try:
        import cel  # the `common-expression-language` package (test/simulation dependency)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CelError(
            "CEL needs the `common-expression-language` package, a dependency of dynmig: "
            "reinstall it (pip install -e .)"
        ) from exc
    return cel


def compile_expression(expression: str) -> Any:
    """The compiled program for `expression` (cached); CelError with the parse error if invalid."""
    with _LOCK:
        program = _PROGRAMS.get(expression)
    if program is not None:
        return program
    try:
        program = _cel().compile(expression)
    except CelError:
        raise
    except Exception as exc:
        raise CelError(f"compilation failed: {_first_line(exc)}") from exc
    with _LOCK:
        if len(_PROGRAMS) > 4096:
            _PROGRAMS.clear()
        _PROGRAMS[expression] = program
    return program


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no such key: {exc.args[0] if exc.args else ''}"
    return _first_line(exc)


def evaluate(
    expression: str, activation: dict[str, Any], functions: dict[str, Callable[..., Any]] | None = None
) -> Any:
    """Evaluate `expression` over `activation` (with `functions`, e.g. Kubernetes' CEL libraries);
    CelError worded as `expression '<expr>' resulted in error: <why>`."""
    try:
        program = compile_expression(expression)
    except CelError as exc:
        raise CelError(f"expression '{expression}' resulted in error: {exc}") from exc
    try:
        if functions:
            context = _cel().Context()
            context.update(activation)
            for name, function in functions.items():
                context.add_function(name, function)
            return program.execute(context)
        return program.execute(activation)
    except Exception as exc:
        raise CelError(f"expression '{expression}' resulted in error: {_describe(exc)}") from exc


def evaluate_bool(expression: str, activation: dict[str, Any]) -> bool:
    value = evaluate(expression, activation)
    if not isinstance(value, bool):
        raise CelError(
            f"expression '{expression}' resulted in error: it must evaluate to bool, "
            f"got {type(value).__name__}"
        )
    return value


def request_of(attrs: dict[str, Any]) -> dict[str, Any]:
    """The `request` variable: the AdmissionRequest fields, with the typed defaults the real
    server's request has (so `request.namespace == ''` works for cluster-scoped objects)."""
    user = dict(attrs.get("userInfo") or {})
    user.setdefault("username", "")
    user.setdefault("uid", "")
    user.setdefault("groups", [])
    user.setdefault("extra", {})
    out = {
        "uid": "",
        "name": "",
        "namespace": "",
        "operation": "",
        "subResource": "",
        "requestSubResource": "",
        "dryRun": False,
        "options": None,
    }
    out.update({k: v for k, v in attrs.items() if k not in ("object", "oldObject")})
    out["userInfo"] = user
    return out


class Variables:
    """`spec.variables` of one policy for one request, each evaluated at most once, on demand."""

    def __init__(self, specs: list[dict[str, Any]], base: Callable[[], dict[str, Any]]):
        self._exprs = {str(v.get("name")): str(v.get("expression", "")) for v in specs or []}
        self._order = list(self._exprs)
        self._base = base
        self._values: dict[str, Any] = {}
        self._errors: dict[str, str] = {}

    def activation_for(self, expression: str) -> dict[str, Any]:
        """The base activation plus a `variables` map holding the variables `expression` names
        (those that failed are left out, so using one is an error)."""
        act = dict(self._base())
        act["variables"] = {n: self._values[n] for n in self._resolve(expression) if n in self._values}
        return act

    def failure_in(self, expression: str) -> str | None:
        """The first error of a variable that `expression` names, to explain its failure."""
        for name in _VARIABLE_REF.findall(expression):
            if name in self._errors:
                return f'composited variable "{name}" fails to evaluate: {self._errors[name]}'
        return None

    def _resolve(self, expression: str) -> list[str]:
        names = [n for n in dict.fromkeys(_VARIABLE_REF.findall(expression)) if n in self._exprs]
        for name in names:
            self._value(name)
        return names

    def _value(self, name: str) -> None:
        if name in self._values or name in self._errors:
            return
        expr = self._exprs[name]
        # a variable may use only the variables declared before it
        earlier = set(self._order[: self._order.index(name)])
        act = dict(self._base())
        act["variables"] = {}
        for dep in dict.fromkeys(_VARIABLE_REF.findall(expr)):
            if dep in earlier:
                self._value(dep)
                if dep in self._values:
                    act["variables"][dep] = self._values[dep]
        try:
            self._values[name] = evaluate(expr, act)
        except CelError as exc:
            self._errors[name] = self.failure_in(expr) or str(exc)
