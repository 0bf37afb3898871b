"""The MIG profile allowlist (device-config `nvidia.migProfileAllowlist`, HAMi format).

An allowlist is an ordered list of `{models: [...], profiles: [...]}` entries. A GPU uses the first
entry whose any model string is a substring of its NVML name (HAMi semantics). Validation applies
HAMi's rules (errors) plus dynmig's own checks against the GPU catalog (warnings): a model string that
matches no known GPU, a profile that does not exist on a GPU the entry applies to, and an entry that
an earlier, broader model string shadows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mig import catalog, resources

ERROR, WARNING = "error", "warning"
ALLOWLIST_KEY = "migProfileAllowlist"
ENTRY_KEYS = ("models", "profiles")
DEFAULT_POLICY = resources.default_policy()


@dataclass(frozen=True)
class Issue:
    """One finding about a policy file, addressed by a dotted path to the field."""

    path: str
    problem: str
    hint: str = ""
    severity: str = ERROR

    def render(self, source: str) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        tag = "" if self.severity == ERROR else "warning: "
        return f"{source}: {self.path}: {tag}{self.problem}{hint}"


class PolicyError(ValueError):
    """A policy that must not be used; `.issues` says field by field why."""

    def __init__(self, source: str, issues: list[Issue]):
        self.source = source
        self.issues = issues
        super().__init__("\n".join(i.render(source) for i in issues if i.severity == ERROR))


@dataclass(frozen=True)
class AllowlistEntry:
    models: tuple[str, ...]
    profiles: tuple[str, ...]

    def matches(self, nvml_name: str) -> bool:
        return any(model in nvml_name for model in self.models)


@dataclass(frozen=True)
class Allowlist:
    entries: tuple[AllowlistEntry, ...] = ()

    def entry_for(self, nvml_name: str) -> AllowlistEntry | None:
        """The first entry whose any model string is a substring of the NVML name."""
        return next((e for e in self.entries if e.matches(nvml_name)), None)

    def profiles_for(self, nvml_name: str) -> tuple[str, ...]:
        entry = self.entry_for(nvml_name)
        return entry.profiles if entry else ()

    def all_profiles(self) -> frozenset[str]:
        return frozenset(p for e in self.entries for p in e.profiles)


@dataclass(frozen=True)
class ResourceNames:
    """Extended-resource names from the device config (HAMi keys, chart defaults)."""

    count: str = "nvidia.com/gpu"
    memory: str = "nvidia.com/gpumem"
    memory_percentage: str = "nvidia.com/gpumem-percentage"
    cores: str = "nvidia.com/gpucores"


@dataclass(frozen=True)
class DeviceConfig:
    """What dynmig reads from the device-config file: resource names and the allowlist."""

    allowlist: Allowlist
    resources: ResourceNames = field(default_factory=ResourceNames)
    warnings: tuple[Issue, ...] = ()


# ---------------------------------------------------------------- parsing (HAMi rules)


def _profile_problem(name: object) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "a profile must be a non-empty string"
    if "." not in name:
        return f"profile {name!r} has no '.'"
    key = name.split(".", 1)[0]
    if len(key) < 2 or not key.endswith("g"):
        return f"profile {name!r} must start with a slice key like '1g' before the first '.'"
    return None


def _strings(value: object, path: str, what: str, issues: list[Issue]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        issues.append(Issue(path, f"{what} must be a non-empty list", f'e.g. {path}: ["{_EXAMPLE[what]}"]'))
        return ()
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            issues.append(
                Issue(f"{path}[{i}]", f"{what} entries must be non-empty strings", "quote the value")
            )
        else:
            out.append(item.strip())
    return tuple(out)


_EXAMPLE = {"models": "A100-SXM4-40GB", "profiles": "1g.5gb"}


def _parse_entry(raw: object, path: str, issues: list[Issue]) -> AllowlistEntry | None:
    if not isinstance(raw, dict):
        issues.append(Issue(path, "an allowlist entry must be a mapping with 'models' and 'profiles'"))
        return None
    for key in raw:
        if key not in ENTRY_KEYS:
            issues.append(Issue(f"{path}.{key}", f"unknown key {key!r}", "allowed keys: models, profiles"))
    models = _strings(raw.get("models"), f"{path}.models", "models", issues)
    profiles = _strings(raw.get("profiles"), f"{path}.profiles", "profiles", issues)
    for i, name in enumerate(profiles):
        problem = _profile_problem(name)
        if problem:
            issues.append(
                Issue(f"{path}.profiles[{i}]", problem, "profile names look like '1g.10gb' or '2g.48gb'")
            )
    return AllowlistEntry(models, profiles) if models and profiles else None


def parse_allowlist(raw: object, path: str = f"nvidia.{ALLOWLIST_KEY}") -> tuple[Allowlist, list[Issue]]:
    """Parse an allowlist value; returns it with every issue found (errors and warnings)."""
    issues: list[Issue] = []
    if raw is None:
        return Allowlist(), issues
    if not isinstance(raw, list):
        issues.append(Issue(path, "must be a list of {models, profiles} entries"))
        return Allowlist(), issues
    entries = []
    for i, item in enumerate(raw):
        entry = _parse_entry(item, f"{path}[{i}]", issues)
        if entry:
            entries.append(entry)
    allowlist = Allowlist(tuple(entries))
    if not any(i.severity == ERROR for i in issues):
        issues.extend(catalog_warnings(allowlist, path))
    return allowlist, issues


# ---------------------------------------------------------------- catalog checks (dynmig's own)


def catalog_warnings(allowlist: Allowlist, path: str) -> list[Issue]:
    """Check an allowlist against the GPU catalog: what each entry really does on known GPUs."""
    issues: list[Issue] = []
    known = catalog.all_profile_names()
    for i, entry in enumerate(allowlist.entries):
        for j, model_text in enumerate(entry.models):
            if not any(model_text in n for m in catalog.MODELS for n in m.nvml_names):
                issues.append(
                    Issue(
                        f"{path}[{i}].models[{j}]",
                        f"{model_text!r} is not part of any known GPU's NVML name",
                        "a model matches when it is a substring of nvidia-smi's name, e.g. "
                        "'H100 80GB HBM3' or 'A100-SXM4-40GB'",
                        WARNING,
                    )
                )
        for model in catalog.MODELS:
            if allowlist.entry_for(model.nvml_name) is not entry:
                continue
            missing = [p for p in entry.profiles if model.profile(p) is None]
            if missing:
                how = next(t for t in entry.models if t in model.nvml_name)
                kind = "does" if all(p in known for p in missing) else "do"
                issues.append(
                    Issue(
                        f"{path}[{i}].profiles",
                        f"on {model.nvml_name} (matched by {how!r}) {', '.join(missing)} {kind} not exist",
                        f"its profiles are {', '.join(model.profile_names)}; put a more specific entry first",
                        WARNING,
                    )
                )
    return issues


# ---------------------------------------------------------------- files


MAX_CONFIG_BYTES = 256 * 1024  # a device config is a few KiB; a ConfigMap holds at most 1 MiB
MAX_CONFIG_DEPTH = 32  # a device config nests 4 levels
MAX_CONFIG_EVENTS = 100_000  # scalars and collections together (bounds the work of checking it)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _shape_problem(text: str) -> Issue | None:
    """Why the YAML is too big, too deep or uses aliases, found by one bounded pass over its events
    (the parser is iterative; building the document and checking it only happen afterwards)."""
    if len(text) > MAX_CONFIG_BYTES:
        return Issue(
            "(file)",
            f"is {len(text)} characters; the limit is {MAX_CONFIG_BYTES}",
            "a device config is a few KiB: keep only the nvidia section",
        )
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_LOADER)):
        if isinstance(event, yaml.AliasEvent):
            return Issue(
                "(file)",
                "uses an alias (*name)",
                "write the values out; anchors and aliases are not allowed in a device config",
            )
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                return Issue("(file)", f"nests deeper than {MAX_CONFIG_DEPTH} levels", "flatten the document")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
        if count > MAX_CONFIG_EVENTS:
            return Issue(
                "(file)", f"has more than {MAX_CONFIG_EVENTS} values", "keep only the nvidia section"
            )
    return None


def load_yaml(text: str) -> tuple[Any, list[Issue]]:
    """A YAML document, bounded in size, depth and work; or the issue that refuses it."""
    try:
        problem = _shape_problem(text)
        if problem is not None:
            return None, [problem]
        return yaml.load(text, Loader=_LOADER), []
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        return None, [
            Issue(
                where,
                f"not valid YAML: {str(getattr(error, 'problem', None) or error)[:200]}",
                "fix the syntax",
            )
        ]


def _read_yaml(path: Path) -> tuple[Any, list[Issue]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        return None, [
            Issue("(file)", f"cannot read: {getattr(error, 'strerror', None) or error}", "check the path")
        ]
    return load_yaml(text)


def _allowlist_node(doc: object) -> tuple[object, str, list[Issue]]:
    """Find the allowlist in a device-config document (`nvidia.migProfileAllowlist`) or a bare one."""
    if isinstance(doc, dict) and isinstance(doc.get("nvidia"), dict):
        return doc["nvidia"].get(ALLOWLIST_KEY), f"nvidia.{ALLOWLIST_KEY}", []
    if isinstance(doc, dict) and ALLOWLIST_KEY in doc:
        return doc[ALLOWLIST_KEY], ALLOWLIST_KEY, []
    if isinstance(doc, list):
        return doc, ALLOWLIST_KEY, []
    return (
        None,
        "nvidia",
        [
            Issue(
                f"nvidia.{ALLOWLIST_KEY}",
                "no allowlist found",
                "a device config has `nvidia: {migProfileAllowlist: [...]}`",
            )
        ],
    )


def _resources(doc: object) -> ResourceNames:
    section = doc.get("nvidia") if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        return ResourceNames()
    defaults = ResourceNames()
    return ResourceNames(
        count=str(section.get("resourceCountName") or defaults.count),
        memory=str(section.get("resourceMemoryName") or defaults.memory),
        memory_percentage=str(section.get("resourceMemoryPercentageName") or defaults.memory_percentage),
        cores=str(section.get("resourceCoreName") or defaults.cores),
    )


def check_document(doc: object) -> tuple[DeviceConfig, list[Issue]]:
    node, path, issues = _allowlist_node(doc)
    if issues:
        return DeviceConfig(Allowlist()), issues
    allowlist, issues = parse_allowlist(node, path)
    warnings = tuple(i for i in issues if i.severity == WARNING)
    return DeviceConfig(allowlist, _resources(doc), warnings), issues


def check_text(text: str) -> tuple[DeviceConfig, list[Issue]]:
    """Check device-config YAML text (e.g. a ConfigMap's data value), bounded in size, depth and work."""
    doc, issues = load_yaml(text)
    if issues:
        return DeviceConfig(Allowlist()), issues
    return check_document(doc)


def check_allowlist_file(path: str | Path) -> list[Issue]:
    doc, issues = _read_yaml(Path(path))
    if issues:
        return issues
    return check_document(doc)[1]


def load_device_config(path: str | Path) -> DeviceConfig:
    """Load a device-config file; raise PolicyError when it has any error."""
    doc, issues = _read_yaml(Path(path))
    if not issues:
        config, issues = check_document(doc)
    if any(i.severity == ERROR for i in issues):
        raise PolicyError(str(path), issues)
    return config


def load_allowlist(path: str | Path) -> Allowlist:
    return load_device_config(path).allowlist


def default_allowlist() -> Allowlist:
    return load_allowlist(DEFAULT_POLICY)
