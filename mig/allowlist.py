"""The MIG profile allowlist (device-config `nvidia.migProfileAllowlist`, HAMi format).

An allowlist is an ordered list of `{models: [...], profiles: [...]}` entries. It is read as HAMi
v2.10 reads it (docs/policy.md names the source): a GPU uses the first entry whose any model string
is a substring of its NVML name, each profile name resolves on that GPU by its own name or by its
slice key (`mig.resolve`), and what does not resolve is omitted. An entry may instead say
`migOff: true` (and list no profiles): the GPUs it matches publish no MIG profiles, on purpose.

Findings come in three severities:
- error: a policy that cannot mean anything: not YAML or not a mapping, an unknown or miscased key
  ("did you mean"), an empty allowlist, an entry without models or profiles, a profile not shaped
  `<N>g.<x>`, entries that match no GPU model at all. Nothing with an error is loaded anywhere.
- warning: a policy that loads and does something other than what it says, each naming the entry
  and the fix: a model string no GPU reports, an entry shadowed by an earlier substring match, a
  profile name the GPU's driver does not report (resolved by slice key, or omitted), a GPU left with
  no profile by its entry, an `nvidia` key HAMi does not define.
- info: catalog models no entry names (they publish no MIG profile, as in HAMi).
`strict=True` (`dynmig policy check --strict`, the chart's hook when asked) makes every warning an
error; serve, the webhook and the chart's hook otherwise refuse errors only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from mig import catalog
from mig.jsontext import replace_lone_surrogates
from mig.resolve import Resolved, on_model, slice_key

ERROR, WARNING, INFO = "error", "warning", "info"
ALLOWLIST_KEY = "migProfileAllowlist"
# a device config in the cluster: a ConfigMap with this label set to "true", the YAML under this key
DEVICE_CONFIG_LABEL = "dynmig.io/device-config"
DEVICE_CONFIG_KEY = "device-config.yaml"
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
# a catch-all model string: every NVIDIA GPU's NVML name holds it
CATCH_ALL = "NVIDIA"


@dataclass(frozen=True)
class Issue:
    """One finding about a policy file, addressed by a dotted path to the field."""

    path: str
    problem: str
    hint: str = ""
    severity: str = ERROR

    def render(self, source: str) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        tag = "" if self.severity == ERROR else f"{self.severity}: "
        return f"{source}: {self.path}: {tag}{self.problem}{hint}"


def strictly(issues: Iterable[Issue]) -> list[Issue]:
    """`--strict`: every warning is an error (information stays information)."""
    return [replace(i, severity=ERROR) if i.severity == WARNING else i for i in issues]


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
    """Near misses of the keys dynmig reads, at the top and in `nvidia:` (errors), and
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
    key, rest = name.split(".", 1)
    if not re.fullmatch(r"[0-9]+g", key) or not rest:
        return f"profile {name!r} must be shaped <N>g.<x>: a slice key like '1g' before the first '.'"
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
    raw: object, path: str = f"{NVIDIA_KEY}.{ALLOWLIST_KEY}"
) -> tuple[Allowlist, list[Issue]]:
    """Parse an allowlist value; returns it with every issue found (errors, warnings, information)."""
    issues: list[Issue] = []
    if raw is None:  # HAMi: no allowlist is an empty one
        return Allowlist(), catalog_issues(Allowlist(), path)
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
        issues.extend(catalog_issues(allowlist, path))
    return allowlist, issues


# ---------------------------------------------------------------- against the GPU catalog


def published(allowlist: Allowlist, model: catalog.GpuModel) -> tuple[Resolved[catalog.ProfileSpec], ...]:
    """What a GPU of `model` publishes under `allowlist` (HAMi's rules, `mig.resolve`)."""
    return on_model(model, allowlist.profiles_for(model.nvml_name))


def catalog_issues(allowlist: Allowlist, path: str) -> list[Issue]:
    """What the allowlist really does on the catalog's GPUs, entry by entry (module doc)."""
    issues = _meaningless(allowlist, path)
    if not allowlist.entries:
        return issues
    for i, entry in enumerate(allowlist.entries):
        where = f"{path}[{i}]"
        issues.extend(_model_string_issues(allowlist, entry, where))
        if not entry.mig_off:
            for model in _applies_to(allowlist, entry):
                issues.extend(_resolution_issues(allowlist, entry, model, where))
    unnamed = [m.key for m in catalog.MODELS if allowlist.entry_for(m.nvml_name) is None]
    if unnamed:
        issues.append(
            Issue(
                path,
                f"no entry names {', '.join(unnamed)}: those GPUs publish no MIG profile (as in HAMi)",
                "add an entry for a model your cluster has",
                INFO,
            )
        )
    return issues


_MIG_OFF_ALL = f"{{models: [{CATCH_ALL}], {MIG_OFF_KEY}: true}}"


def _meaningless(allowlist: Allowlist, path: str) -> list[Issue]:
    """An allowlist under which no GPU at all would publish a profile, without saying so on purpose."""
    if not allowlist.entries:
        return [
            Issue(
                path,
                "is empty or missing: no GPU would publish a MIG profile",
                f"list profiles per model, starting from `dynmig policy default`, or write [{_MIG_OFF_ALL}] "
                "to switch MIG off on every GPU on purpose",
            )
        ]
    if any(e.mig_off for e in allowlist.entries) or any(published(allowlist, m) for m in catalog.MODELS):
        return []
    if any(allowlist.entry_for(m.nvml_name) for m in catalog.MODELS):
        problem = "resolves no profile on the GPUs it matches"
        hint = "list profiles those GPUs have; `dynmig policy explain --profiles` lists each model's"
    else:
        problem = "matches no GPU model"
        hint = (
            "a model string is a substring of nvidia-smi's name, e.g. 'A100-SXM4-40GB', 'H100 80GB HBM3' "
            "or 'RTX PRO 6000 Blackwell Server Edition'; `dynmig policy explain --profiles` lists them all"
        )
    return [Issue(path, f"{problem}: no known GPU would publish a MIG profile", hint)]


def _applies_to(allowlist: Allowlist, entry: AllowlistEntry) -> list[catalog.GpuModel]:
    return [m for m in catalog.MODELS if allowlist.entry_for(m.nvml_name) is entry]


def _model_string_issues(allowlist: Allowlist, entry: AllowlistEntry, where: str) -> list[Issue]:
    """Model strings no GPU reports, and strings whose GPUs an earlier entry takes first."""
    issues = []
    for j, text in enumerate(entry.models):
        hits = [m for m in catalog.MODELS if any(text in n for n in m.nvml_names)]
        if not hits:
            issues.append(
                Issue(
                    f"{where}.models[{j}]",
                    f"{text!r} is not part of any known GPU's NVML name, so it matches nothing",
                    _model_hint(text),
                    WARNING,
                )
            )
            continue
        # an earlier entry with a broader string (a substring of this one) takes a GPU this one names
        taken = [(m, allowlist.entry_for(m.nvml_name)) for m in hits if text in m.nvml_name]
        shadowed = [
            (m, e) for m, e in taken if e is not None and e is not entry and e.matched_by(m.nvml_name) in text
        ]
        if shadowed:
            model, first = shadowed[0]
            k = allowlist.entries.index(first)
            issues.append(
                Issue(
                    f"{where}.models[{j}]",
                    f"{text!r} matches {model.nvml_name}, but entry [{k}] comes first and takes it "
                    f"({first.matched_by(model.nvml_name)!r} is a substring of that name too)",
                    f"move this entry before entry [{k}], or make that entry's model string more specific",
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


def _resolution_issues(
    allowlist: Allowlist, entry: AllowlistEntry, model: catalog.GpuModel, where: str
) -> list[Issue]:
    """Profile names the model's driver does not report: resolved by slice key, or omitted."""
    got = published(allowlist, model)
    name = f"{model.key} ({model.nvml_name}, matched by {entry.matched_by(model.nvml_name)!r})"
    real = ", ".join(f"{p.name} ({p.memory_mib} MiB)" for p in model.profiles if "+" not in p.name)
    if not got:
        return [
            Issue(
                f"{where}.profiles",
                f"applies to {name}, but none of its profiles resolves there, so that GPU publishes none",
                f"{model.key} has {real}: list those (in an entry of its own before this one if the entry "
                f"is meant for other GPUs), or say {MIG_OFF_KEY}: true for it",
                WARNING,
            )
        ]
    issues = []
    by_key = [r for r in got if r.by_slice_key]
    if by_key:
        issues.append(
            Issue(
                f"{where}.profiles",
                f"on {name}: "
                + ", ".join(
                    f"{r.label!r} is its {r.profile.name} ({r.profile.memory_mib} MiB)" for r in by_key
                )
                + f", resolved by slice key and published under the allowlist's name{'s' if len(by_key) > 1 else ''}",
                _rename_hint(by_key, model),
                WARNING,
            )
        )
    labels = {r.label for r in got}
    omitted = [_why_omitted(p, got, model) for p in entry.profiles if p not in labels]
    if omitted:
        issues.append(
            Issue(
                f"{where}.profiles",
                f"on {name}: {'; '.join(omitted)}",
                f"remove the name, or list one of {model.key}'s profiles: {real}",
                WARNING,
            )
        )
    return issues


def _why_omitted(label: str, got: Sequence[Resolved[catalog.ProfileSpec]], model: catalog.GpuModel) -> str:
    key = slice_key(label)
    holder = next((r.label for r in got if slice_key(r.profile.name) == key), None)
    if holder:
        return f"{label!r} is omitted: its slice key {key} resolves to the profile already published as {holder!r}"
    return f"{label!r} is omitted: {model.key} has no base {key} profile to resolve it to"


def _rename_hint(by_key: Sequence[Resolved[catalog.ProfileSpec]], model: catalog.GpuModel) -> str:
    renames = ", ".join(f"{r.label} -> {r.profile.name}" for r in by_key)
    owners = sorted({m.key for r in by_key for m in catalog.MODELS if m is not model and m.profile(r.label)})
    verb = "has" if len(owners) == 1 else "have"
    more = (
        f" ({', '.join(owners[:3])} {verb} those names: give {model.key} an entry of its own)"
        if owners
        else ""
    )
    return f"write the name {model.key}'s driver reports: {renames}{more}"


# ---------------------------------------------------------------- text (callers read the files)


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


def check_document(doc: object, strict: bool = False) -> tuple[DeviceConfig, list[Issue]]:
    """A device-config document's config and every issue found (warnings as errors when `strict`)."""
    keys = key_issues(doc)
    node, path, issues = _allowlist_node(doc)
    if issues:
        return DeviceConfig(Allowlist()), keys + issues
    allowlist, issues = parse_allowlist(node, path)
    issues = strictly(keys + issues) if strict else keys + issues
    warnings = tuple(i for i in issues if i.severity == WARNING)
    return DeviceConfig(allowlist, _resources(doc), warnings), issues


def check_text(text: str, strict: bool = False) -> tuple[DeviceConfig, list[Issue]]:
    """Check device-config YAML text (e.g. a ConfigMap's data value), bounded in size, depth and work."""
    doc, issues = load_yaml(text)
    if issues:
        return DeviceConfig(Allowlist()), issues
    return check_document(doc, strict)


def device_config(text: str, source: str, strict: bool = False) -> DeviceConfig:
    """The device config in `text` (read from `source`, named in messages); PolicyError when it has any
    error (warnings count as errors when `strict`)."""
    config, issues = check_text(text, strict)
    if any(i.severity == ERROR for i in issues):
        raise PolicyError(source, issues)
    return config
