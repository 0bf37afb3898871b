"""The MIG profile allowlist (device-config `nvidia.migProfileAllowlist`, HAMi format).

An allowlist is an ordered list of `{models: [...], profiles: [...]}` entries. A GPU uses the first
entry whose any model string is a substring of its NVML name (HAMi semantics). An entry may instead
say `migOff: true` (and list no profiles): the GPUs it matches publish no MIG profiles, on purpose.

Findings come at three levels (`Level`), each a superset of the one before:
- `hami`: HAMi's own rules, plus keys that are near misses of the keys dynmig reads (a miscased
  `migProfileAllowList` is otherwise MIG off without a word). What the device plugin and status read:
  a file HAMi accepts is accepted, with the catalog findings below as warnings.
- `check` (`dynmig policy check`): the catalog findings are errors: a catalog model left with no
  profile and no `migOff`, a profile name that no GPU has.
- `strict` (`dynmig policy check --strict`, `dynmig serve`, the chart's pre-install check): a profile
  that exists, but not on a model the entry applies to, is an error too.
A model string that matches no known GPU, and an unknown `nvidia` key HAMi does not read, stay
warnings at every level.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from mig import catalog, resources
from mig.jsontext import replace_lone_surrogates

ERROR, WARNING = "error", "warning"
ALLOWLIST_KEY = "migProfileAllowlist"
MIG_OFF_KEY = "migOff"
ENTRY_KEYS = ("models", "profiles", MIG_OFF_KEY)
NVIDIA_KEY = "nvidia"
# HAMi's `nvidia:` section (v2.10 chart and docs, older names included): accepted, read or not
HAMI_NVIDIA_KEYS = (
    "resourceCountName",
    "resourceMemoryName",
    "resourceMemoryPercentageName",
    "resourceCoreName",
    "resourcePriorityName",
    "overwriteEnv",
    "defaultMemory",
    "defaultMem",
    "defaultCores",
    "defaultGPUNum",
    "preConfiguredDeviceMemory",
    "memoryFactor",
    "deviceSplitCount",
    "deviceMemoryScaling",
    "deviceCoreScaling",
    "enableNumaTopology",
    "gpuCorePolicy",
    "libCudaLogLevel",
    "runtimeClassName",
    "migstrategy",
    "migStrategy",
    "disablecorelimit",
    "knownMigGeometries",
    ALLOWLIST_KEY,
)
DEFAULT_POLICY = resources.default_policy()
# a catch-all model string: every NVIDIA GPU's NVML name holds it
CATCH_ALL = "NVIDIA"

Level = Literal["hami", "check", "strict"]
HAMI: Level = "hami"
CHECK: Level = "check"
STRICT: Level = "strict"
LEVELS: tuple[Level, ...] = ("hami", "check", "strict")
# what kind of finding, and from which level on it is an error
Kind = Literal["rule", "catalog", "other-model", "advice"]
_ERROR_FROM: dict[Kind, tuple[Level, ...]] = {
    "rule": LEVELS,
    "catalog": ("check", "strict"),
    "other-model": ("strict",),
    "advice": (),
}


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


def _issue(level: Level, kind: Kind, path: str, problem: str, hint: str = "") -> Issue:
    return Issue(path, problem, hint, ERROR if level in _ERROR_FROM[kind] else WARNING)


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
    mig_off: bool = False

    def matches(self, nvml_name: str) -> bool:
        return any(model in nvml_name for model in self.models)

    def matched_by(self, nvml_name: str) -> str:
        """The first model string of the entry that matches the NVML name ("" when none does)."""
        return next((m for m in self.models if m in nvml_name), "")


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


def nearest(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The closest choices to `word` (a case-only difference first), for a "did you mean" hint."""
    options = list(dict.fromkeys(choices))
    same_case = [c for c in options if c.casefold() == word.casefold() and c != word]
    close = difflib.get_close_matches(word, options, n=n, cutoff=cutoff)
    return list(dict.fromkeys(same_case + close))[:n]


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    close = nearest(word, choices, cutoff=cutoff)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


# ---------------------------------------------------------------- keys


def _misspelt(key: str, known: Sequence[str]) -> str | None:
    """The known key that `key` is a near miss of (case, a letter or two), or None."""
    if key in known:
        return None
    close = nearest(key, known, n=1, cutoff=0.8)
    return close[0] if close else None


def key_issues(doc: object) -> list[Issue]:
    """Near misses of the keys dynmig reads, at the top and in `nvidia:` (errors at every level), and
    keys of `nvidia:` that HAMi does not define (warnings). Other top-level keys are other vendors'
    sections of HAMi's device config and are left alone."""
    if not isinstance(doc, dict):
        return []
    issues: list[Issue] = []
    for key in doc:
        meant = _misspelt(str(key), (NVIDIA_KEY, ALLOWLIST_KEY))
        if meant and meant not in doc:
            issues.append(_key_error(str(key), str(key), meant))
    section = doc.get(NVIDIA_KEY)
    for key in section if isinstance(section, dict) else ():
        path = f"{NVIDIA_KEY}.{key}"
        meant = _misspelt(str(key), HAMI_NVIDIA_KEYS)
        if meant:
            issues.append(_key_error(path, str(key), meant))
        elif str(key) not in HAMI_NVIDIA_KEYS:
            issues.append(
                Issue(
                    path,
                    f"unknown key {str(key)[:64]!r}: neither HAMi nor dynmig reads it",
                    "remove it",
                    WARNING,
                )
            )
    return issues


def _key_error(path: str, key: str, meant: str) -> Issue:
    case = " keys are case-sensitive" if key.casefold() == meant.casefold() else ""
    return Issue(path, f"unknown key {key[:64]!r}", f"did you mean {meant!r}?{case}")


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


def _entry_key_issues(raw: Mapping[Any, Any], path: str) -> list[Issue]:
    issues = []
    for key in raw:
        if key not in ENTRY_KEYS:
            hint = did_you_mean(str(key), ENTRY_KEYS) or f"allowed keys: {', '.join(ENTRY_KEYS)}"
            issues.append(Issue(f"{path}.{key}", f"unknown key {str(key)[:64]!r}", hint))
    return issues


def _mig_off(raw: Mapping[Any, Any], path: str, issues: list[Issue]) -> bool:
    """The entry's `migOff` flag; with it the entry lists no profiles (dynmig's own field)."""
    value: object = raw.get(MIG_OFF_KEY, False)
    if not isinstance(value, bool):
        issues.append(Issue(f"{path}.{MIG_OFF_KEY}", "must be true or false", f"write {MIG_OFF_KEY}: true"))
        return False
    if value and raw.get("profiles"):
        issues.append(
            Issue(
                f"{path}.profiles",
                f"an entry with {MIG_OFF_KEY}: true lists no profiles",
                f"remove the profiles, or remove {MIG_OFF_KEY} to offer them",
            )
        )
    return value


def _parse_entry(raw: object, path: str, issues: list[Issue]) -> AllowlistEntry | None:
    if not isinstance(raw, dict):
        issues.append(Issue(path, "an allowlist entry must be a mapping with 'models' and 'profiles'"))
        return None
    issues.extend(_entry_key_issues(raw, path))
    models = _strings(raw.get("models"), f"{path}.models", "models", issues)
    if _mig_off(raw, path, issues):
        return AllowlistEntry(models, (), mig_off=True) if models else None
    profiles = _strings(raw.get("profiles"), f"{path}.profiles", "profiles", issues)
    for i, name in enumerate(profiles):
        problem = _profile_problem(name)
        if problem:
            issues.append(
                Issue(f"{path}.profiles[{i}]", problem, "profile names look like '1g.10gb' or '2g.48gb'")
            )
    return AllowlistEntry(models, profiles) if models and profiles else None


def parse_allowlist(
    raw: object, path: str = f"{NVIDIA_KEY}.{ALLOWLIST_KEY}", level: Level = HAMI
) -> tuple[Allowlist, list[Issue]]:
    """Parse an allowlist value; returns it with every issue found at `level` (errors and warnings)."""
    issues: list[Issue] = []
    if raw is None:  # HAMi: no allowlist is an empty one
        return Allowlist(), catalog_issues(Allowlist(), path, level)
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
        issues.extend(catalog_issues(allowlist, path, level))
    return allowlist, issues


# ---------------------------------------------------------------- catalog checks (dynmig's own)


def catalog_issues(allowlist: Allowlist, path: str, level: Level = HAMI) -> list[Issue]:
    """Check an allowlist against the GPU catalog: what each entry really does on known GPUs."""
    issues = coverage_issues(allowlist, path, level)
    for i, entry in enumerate(allowlist.entries):
        where = f"{path}[{i}]"
        issues.extend(_model_string_issues(entry, where))
        issues.extend(_unknown_profile_issues(entry, where, level))
        issues.extend(_other_model_issues(allowlist, entry, where, level))
    return issues


def _covered(allowlist: Allowlist, model: catalog.GpuModel) -> bool:
    """The model gets a profile it has, or an entry that says MIG is off on it."""
    entry = allowlist.entry_for(model.nvml_name)
    return entry is not None and (entry.mig_off or any(model.profile(p) for p in entry.profiles))


def coverage_issues(allowlist: Allowlist, path: str, level: Level) -> list[Issue]:
    """Catalog models the allowlist leaves with no profile, unless an entry says `migOff: true`."""
    off = f"{{models: [{CATCH_ALL}], {MIG_OFF_KEY}: true}}"
    if not allowlist.entries:
        return [
            _issue(
                level,
                "catalog",
                path,
                "is empty or missing: no GPU would publish a MIG profile",
                f"list profiles per model, starting from `dynmig policy default`, or write [{off}] "
                "to switch MIG off on every GPU on purpose",
            )
        ]
    issues = []
    unmatched = [m.key for m in catalog.MODELS if allowlist.entry_for(m.nvml_name) is None]
    if unmatched:
        issues.append(
            _issue(
                level,
                "catalog",
                path,
                f"no entry matches {', '.join(unmatched)}: those GPUs would publish no MIG profile",
                f"add an entry for them, or end the list with {off} to say MIG is off on every GPU "
                "not listed",
            )
        )
    for i, entry in enumerate(allowlist.entries):
        issues.extend(_entry_leaves_without(allowlist, entry, f"{path}[{i}]", level))
    return issues


def _entry_leaves_without(
    allowlist: Allowlist, entry: AllowlistEntry, where: str, level: Level
) -> list[Issue]:
    issues = []
    for model in catalog.MODELS:
        if allowlist.entry_for(model.nvml_name) is not entry or _covered(allowlist, model):
            continue
        issues.append(
            _issue(
                level,
                "catalog",
                f"{where}.profiles",
                f"applies to {model.key} ({model.nvml_name}, matched by {entry.matched_by(model.nvml_name)!r}) "
                f"but none of its profiles exists there, so that GPU would publish none",
                f"{model.key} has {', '.join(model.profile_names)}: give it its own entry before this "
                f"one, or one with {MIG_OFF_KEY}: true",
            )
        )
    return issues


def _model_string_issues(entry: AllowlistEntry, where: str) -> list[Issue]:
    issues = []
    for j, text in enumerate(entry.models):
        if any(text in n for m in catalog.MODELS for n in m.nvml_names):
            continue
        issues.append(
            Issue(
                f"{where}.models[{j}]",
                f"{text!r} is not part of any known GPU's NVML name",
                _model_hint(text),
                WARNING,
            )
        )
    return issues


def _model_hint(text: str) -> str:
    """What to write instead of a model string that matches no NVML name."""
    try:
        model = catalog.find_model(text)
    except catalog.UnknownModel:
        model = None
    if model is not None:
        return f"{model.key}'s NVML name is {model.nvml_name!r}: write {model.nvml_name.removeprefix('NVIDIA ')!r}"
    return (
        "a model matches when it is a substring of nvidia-smi's name, e.g. 'H100 80GB HBM3' or "
        "'A100-SXM4-40GB'"
    )


def _applies_to(allowlist: Allowlist, entry: AllowlistEntry) -> list[catalog.GpuModel]:
    return [m for m in catalog.MODELS if allowlist.entry_for(m.nvml_name) is entry]


def _unknown_profile_issues(entry: AllowlistEntry, where: str, level: Level) -> list[Issue]:
    """Profile names no known GPU has (typos): the nearest names, those of the entry's models first."""
    known = catalog.all_profile_names()
    own = [n for m in catalog.MODELS if entry.matches(m.nvml_name) for n in m.profile_names]
    issues = []
    for j, name in enumerate(entry.profiles):
        if name in known:
            continue
        hint = did_you_mean(name, own) or did_you_mean(name, sorted(known)) or "see `dynmig policy default`"
        issues.append(
            _issue(
                level, "catalog", f"{where}.profiles[{j}]", f"{name!r} is not a MIG profile of any GPU", hint
            )
        )
    return issues


def _other_model_issues(allowlist: Allowlist, entry: AllowlistEntry, where: str, level: Level) -> list[Issue]:
    """Profiles that exist, but not on a model the entry applies to (that has some of its profiles)."""
    known = catalog.all_profile_names()
    models = _applies_to(allowlist, entry)
    issues = []
    for model in models:
        missing = [p for p in entry.profiles if p in known and model.profile(p) is None]
        if not missing or not _covered(allowlist, model) or entry.mig_off:
            continue
        issues.append(
            _issue(
                level,
                "other-model",
                f"{where}.profiles",
                f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not a profile of {model.key} "
                f"({model.nvml_name}, matched by {entry.matched_by(model.nvml_name)!r})",
                _other_model_hint(missing, model, models),
            )
        )
    return issues


def _other_model_hint(missing: list[str], model: catalog.GpuModel, siblings: list[catalog.GpuModel]) -> str:
    owners = sorted({m.key for m in catalog.MODELS for p in missing if m.profile(p)})
    shared = [m.key for m in siblings if m is not model and any(m.profile(p) for p in missing)]
    if shared:
        return (
            f"this entry also applies to {', '.join(shared)}, which has them: give {model.key} an entry of "
            f"its own before this one (its profiles are {', '.join(model.profile_names)})"
        )
    names, verb = ", ".join(missing), ("is a profile" if len(missing) == 1 else "are profiles")
    more = "…" if len(owners) > 4 else ""
    return (
        f"{names} {verb} of {', '.join(owners[:4])}{more}; {model.key}'s profiles are "
        f"{', '.join(model.profile_names)}: use one of those, or move {names} to an entry for its models"
    )


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
    """A YAML document, bounded in size, depth and work; or the issue that refuses it. A lone
    surrogate (no Unicode character, e.g. from a `"\\ud800"` JSON escape) reads as U+FFFD."""
    text = replace_lone_surrogates(text)
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
    if isinstance(doc, dict) and isinstance(doc.get(NVIDIA_KEY), dict):
        return doc[NVIDIA_KEY].get(ALLOWLIST_KEY), f"{NVIDIA_KEY}.{ALLOWLIST_KEY}", []
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


def check_document(doc: object, level: Level = HAMI) -> tuple[DeviceConfig, list[Issue]]:
    """A device-config document's config and every issue found at `level`."""
    keys = key_issues(doc)
    node, path, issues = _allowlist_node(doc)
    if issues:
        return DeviceConfig(Allowlist()), keys + issues
    allowlist, issues = parse_allowlist(node, path, level)
    issues = keys + issues
    warnings = tuple(i for i in issues if i.severity == WARNING)
    return DeviceConfig(allowlist, _resources(doc), warnings), issues


def check_text(text: str, level: Level = HAMI) -> tuple[DeviceConfig, list[Issue]]:
    """Check device-config YAML text (e.g. a ConfigMap's data value), bounded in size, depth and work."""
    doc, issues = load_yaml(text)
    if issues:
        return DeviceConfig(Allowlist()), issues
    return check_document(doc, level)


def check_allowlist_file(path: str | Path, level: Level = CHECK) -> list[Issue]:
    doc, issues = _read_yaml(Path(path))
    if issues:
        return issues
    return check_document(doc, level)[1]


def load_device_config(path: str | Path, level: Level = HAMI) -> DeviceConfig:
    """Load a device-config file; raise PolicyError when it has any error at `level`."""
    doc, issues = _read_yaml(Path(path))
    if not issues:
        config, issues = check_document(doc, level)
    if any(i.severity == ERROR for i in issues):
        raise PolicyError(str(path), issues)
    return config


def load_allowlist(path: str | Path, level: Level = HAMI) -> Allowlist:
    return load_device_config(path, level).allowlist


def default_allowlist() -> Allowlist:
    return load_allowlist(DEFAULT_POLICY)
