"""Command-line flags with one environment convention, for every long-running subcommand.

Each flag `--some-name` can also be set by the environment variable `DYNMIG_SOME_NAME`; a flag on the
command line wins, then the variable, then the default. Names a subcommand read before this
convention (e.g. `METRICS_ADDRESS`) are still honoured, with a warning naming the new variable.
Standard names (`KUBECONFIG`, `NODE_NAME` from the downward API) are read quietly after ours.

Every flag shows its default and its variable in `--help`, and a bad value, from either source, is
a usage error (exit 2) that names the flag, the variable and what would be accepted: never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

PREFIX = "DYNMIG_"
_UNSET = object()


def env_name(flag: str) -> str:
    return PREFIX + flag.lstrip("-").upper().replace("-", "_")


# ---- value types (each raises ArgumentTypeError with a message that says what would be accepted)


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
        return value

    parse.__name__ = "choice"
    return parse


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use true or false")


def port(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port number; use 0-65535 (0 picks a free port)"
        ) from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number; use 0-65535 (0 picks a free port)")
    return value


def positive_seconds(text: str) -> float:
    """Seconds from `300`, `300s`, `5m` or `1h`; must be more than zero."""
    raw = text.strip()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        value = float(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration; use e.g. 5, 90s, 5m, 1h")
    return value


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def dra_driver(text: str) -> str:
    """A DRA driver name: empty, or a DNS subdomain of at most 63 characters (as ResourceSlice's
    spec.driver must be)."""
    if text and (len(text) > 63 or not _DNS_SUBDOMAIN.match(text)):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a DRA driver name; use a lower-case DNS subdomain of at most 63 "
            "characters, e.g. mig.dynmig.io"
        )
    return text


# ---- the flag set


@dataclass(frozen=True)
class _Flag:
    dest: str
    flag: str
    env: str
    default: Any
    convert: Callable[[str], Any]
    old_env: tuple[str, ...]
    quiet_env: tuple[str, ...]
    repeat: bool


class FlagError(ValueError):
    """A bad flag or environment value, for callers that report errors themselves (`raise_errors=True`)."""


class _Parser(argparse.ArgumentParser):
    raise_errors = False

    def error(self, message: str) -> NoReturn:
        if self.raise_errors:
            raise FlagError(message)
        super().error(message)


class Flags:
    """An argparse parser whose flags follow the convention above. `add` flags, then `parse(argv)`.
    A bad value exits 2 with the usage, as argparse does, or raises FlagError with `raise_errors`."""

    def __init__(
        self,
        prog: str,
        description: str,
        environ: Mapping[str, str] | None = None,
        raise_errors: bool = False,
    ):
        self.parser = _Parser(prog=prog, description=description)
        self.parser.raise_errors = raise_errors
        self.environ = os.environ if environ is None else environ
        self.warnings: list[str] = []  # old variable names seen; log them once logging is set up
        self._flags: list[_Flag] = []

    def add(
        self,
        flag: str,
        *,
        default: Any,
        help: str,
        type: Callable[[str], Any] = str,
        choices: Sequence[str] | None = None,
        old_env: Iterable[str] = (),
        quiet_env: Iterable[str] = (),
        repeat: bool = False,
        metavar: str | None = None,
        show_default: str | None = None,
    ) -> None:
        """`repeat`: the flag may be given several times; its variable is a comma list.
        `show_default`: how the default reads in --help when its value alone would not say it."""
        convert = one_of(choices) if choices else type
        name = env_name(flag)
        shown = show_default if show_default is not None else _show(default)
        olds = tuple(old_env)
        extra = f"; old name {', '.join(olds)}" if olds else ""
        self.parser.add_argument(
            flag,
            dest=flag.lstrip("-").replace("-", "_"),
            type=convert,
            default=None if repeat else _UNSET,
            action="append" if repeat else "store",
            metavar=metavar or ("{" + ",".join(choices) + "}" if choices else None),
            help=f"{help} (default: {shown}; env {name}{extra})".replace("%", "%%"),
        )
        self._flags.append(
            _Flag(
                flag.lstrip("-").replace("-", "_"),
                flag,
                name,
                default,
                convert,
                olds,
                tuple(quiet_env),
                repeat,
            )
        )

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        args = self.parser.parse_args(list(argv))
        for f in self._flags:
            value = getattr(args, f.dest)
            if value is _UNSET or value is None:
                setattr(args, f.dest, self._from_env(f))
            elif f.repeat:
                setattr(
                    args,
                    f.dest,
                    [v for item in value for v in _items(item)] if isinstance(value[0], str) else value,
                )
        return args

    def error(self, message: str) -> None:
        self.parser.error(message)

    def _from_env(self, f: _Flag) -> Any:
        for name in (f.env, *f.old_env, *f.quiet_env):
            raw = self.environ.get(name)
            if raw is None:
                continue
            if name in f.old_env:
                self.warnings.append(
                    f"environment variable {name} is deprecated; set {f.env} instead (or pass {f.flag})"
                )
            try:
                return [f.convert(v) for v in _items(raw)] if f.repeat else f.convert(raw)
            except argparse.ArgumentTypeError as error:
                self.parser.error(f"{f.flag} (from env {name}): {error}")
        return list(f.default) if f.repeat else f.default


def _items(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _show(default: Any) -> str:
    if default is None or default == "" or default == () or default == []:
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (list, tuple)):
        return ",".join(str(d) for d in default)
    return str(default)


# ---- the same convention for commands built on a plain argparse parser (certs, policy, lab)


def apply_environment(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """Give every long option of `parser` and of its subcommands the DYNMIG_<FLAG> convention: a set
    variable becomes the option's default, converted as the option converts its flag, so the command
    line still wins. A bad value is the parser's usage error naming the flag and the variable."""
    env = os.environ if environ is None else environ
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                apply_environment(sub, env)
            continue
        flag = next((s for s in action.option_strings if s.startswith("--") and s != "--help"), None)
        if flag is None or env.get(env_name(flag)) is None:
            continue
        try:
            action.default = _env_value(action, env[env_name(flag)])
        except argparse.ArgumentTypeError as error:
            parser.error(f"{flag} (from env {env_name(flag)}): {error}")
        action.required = False  # the variable gives what the flag must otherwise give


def _env_value(action: argparse.Action, raw: str) -> Any:
    if action.nargs == 0:  # a switch (store_true, store_false): true means the switch is given
        return action.const if boolean(raw) else action.default
    if isinstance(action, argparse._AppendAction):
        return [_converted(action, item) for item in _items(raw)]
    return _converted(action, raw)


def _converted(action: argparse.Action, raw: str) -> Any:
    try:
        value = action.type(raw) if callable(action.type) else raw
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"{raw!r} is not valid: {error}") from None
    if action.choices is not None and value not in action.choices:
        raise argparse.ArgumentTypeError(f"{raw!r} is not one of {', '.join(map(str, action.choices))}")
    return value
