"""`dynmig policy`: check an allowlist file, explain a placement, diff two policies by their effect.

Pure planning comes from `mig.placement`; this module only parses arguments, reads files and prints;
`check --cluster` reads the cluster's nodes and pods through a kubeconfig (read-only lists, as
`dynmig status` reads them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from base.policyfiles import DEFAULT_POLICY, check_allowlist_file, default_allowlist, load_allowlist
from dynmig.status.source import Source, StatusError, api_client
from mig import catalog
from mig.allowlist import ERROR, WARNING, Allowlist, Issue, PolicyError, check_text, published
from mig.fleetcheck import check_fleet
from mig.offers import offer, rounded_up
from mig.placement import ContainerRequest, GpuState, Plan, PodRequest, plan_pod
from mig.placement.occupancy import profile_set
from mig.placement.preference import parse_preference
from mig.placement.published import from_catalog
from mig.placement.request import MAX_DEVICES, Percent, RequestError, memory_mib, memory_on
from mig.quantity import QuantityError, parse_quantity
from mig.types import Placement

# Request sizes for `diff`: a ladder in GiB, asked a little under each size (95 %) so that a request
# "for 10 GiB" lands on a profile sold as 10gb (whose memory is slightly under 10 GiB).
LADDER_GIB = (1, 4, 8, 10, 16, 20, 24, 32, 40, 48, 64, 80, 96, 141, 180)
LADDER_MIB = tuple(round(g * 1024 * 0.95) for g in LADDER_GIB)
NODE = "explain-node"


MAX_AXIS = 64  # no GPU has more memory slices (they have 8)


def _positive_mib(text: str) -> int:
    """MiB as the scheduler reads nvidia.com/gpumem (8000, 8k, 1e4), through the webhook's own
    reading, so `8Gi` gets the admission webhook's sentence."""
    try:
        value = memory_mib(text)
    except RequestError as error:
        raise argparse.ArgumentTypeError(f"{error} (e.g. --memory 8000)") from None
    if value == 0:
        raise argparse.ArgumentTypeError("0 must be a positive number of MiB (e.g. --memory 8000)")
    return value


def _percentage(text: str) -> Percent:
    """A share of the GPU's memory, read as the scheduler reads nvidia.com/gpumem-percentage."""
    try:
        value = parse_quantity(text).as_int64()
    except QuantityError:
        value = None
    if value is None or not 0 < value < 100:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} must be a whole percentage from 1 to 99 (e.g. --percentage 25)"
        )
    return Percent(value)


def _positive_count(text: str) -> int:
    try:
        value = parse_quantity(text).as_int64() or 0
    except QuantityError:
        value = 0
    if not 0 < value <= MAX_DEVICES:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} must be a device count from 1 to {MAX_DEVICES} (e.g. --gpus 2)"
        )
    return value


def _placements(text: str) -> tuple[Placement, ...]:
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        start, sep, size = part.partition(":")
        try:
            placement = Placement(int(start), int(size))
        except ValueError:
            placement = None
        if (
            not sep
            or placement is None
            or placement.start < 0
            or placement.size <= 0
            or placement.end > MAX_AXIS
        ):
            raise argparse.ArgumentTypeError(
                f"{part!r} is not START:SIZE with START ≥ 0 and SIZE > 0 (e.g. --occupied 0:2,6:1)"
            )
        out.append(placement)
    return tuple(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynmig policy", description="Check, explain and diff MIG allowlists."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{check,explain,diff,default}")
    check = sub.add_parser("check", help="validate an allowlist / device-config file")
    check.add_argument(
        "file",
        nargs="?",
        default=str(DEFAULT_POLICY),
        help="allowlist or device-config file (default: the packaged default policy, %(default)s)",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="every warning is an error too (for CI; the chart's hook with deviceConfig.strict=true); "
        "serve and the webhook refuse errors only",
    )
    check.add_argument(
        "--cluster",
        action="store_true",
        help="also say, for the cluster's nodes and running pods (read through the kubeconfig), which nodes "
        "would publish no MIG profile and which held profiles the policy no longer allows (never an error)",
    )
    check.add_argument(
        "--kubeconfig", help="with --cluster: the kubeconfig (default: KUBECONFIG, ~/.kube/config)"
    )
    check.add_argument("--context", help="with --cluster: the kubeconfig context")
    check.add_argument(
        "--from-env",
        metavar="NAME",
        help="check the device-config text in environment variable NAME instead of a file (the chart's "
        "pre-install check: a Job needs no volume)",
    )
    sub.add_parser(
        "default",
        help="print the packaged default device config: a file given to serve replaces it, so start from it",
    )
    explain = sub.add_parser(
        "explain",
        help="which profile and placement a request gets on a GPU model; --profiles: each model's profiles",
    )
    explain.add_argument("--model", help="catalog key or (part of) the NVML name, e.g. A100-SXM4-40GB")
    ask = explain.add_mutually_exclusive_group()
    ask.add_argument("--memory", type=_positive_mib, help="MiB per device (nvidia.com/gpumem)")
    ask.add_argument(
        "--percentage",
        type=_percentage,
        help="a share of the GPU's memory per device, 1-99 (nvidia.com/gpumem-percentage)",
    )
    ask.add_argument(
        "--profiles",
        action="store_true",
        help="print each model's allowed profiles with their MiB (a Markdown table; --model: that model only)",
    )
    explain.add_argument(
        "--gpus", type=_positive_count, default=1, help="devices (nvidia.com/gpu), default 1"
    )
    explain.add_argument(
        "--preference", default="", help="nvidia.com/mig-profile-preference, e.g. 4g,3g.20gb"
    )
    explain.add_argument("--occupied", type=_placements, default=(), help="held placements, e.g. 0:2,6:1")
    explain.add_argument("--policy", help="allowlist file (default: the built-in default policy)")
    explain.add_argument("--json", action="store_true", help="print one JSON object")
    diff = sub.add_parser("diff", help="what changes, per model and request size, between two policies")
    diff.add_argument("old", help="the policy in force (allowlist or device-config file)")
    diff.add_argument("new", help="the policy to compare it with")
    return parser


class ClusterError(Exception):
    """The cluster could not be read for `check --cluster` (the message says why, for a person)."""


def read_cluster(
    kubeconfig: str | None, context: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    try:
        found = Source(api_client(kubeconfig, context)).read()
    except StatusError as error:
        raise ClusterError(str(error)) from None
    return found.nodes, found.pods


def main(
    argv: Sequence[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
) -> int:
    parser = parser or build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "check":
        code = _check_env(args.from_env, args.strict) if args.from_env else _check(args.file, args.strict)
        if args.cluster and code == 0:
            return _check_cluster(args)
        return code
    if args.command == "explain":
        return _explain(parser, args)
    if args.command == "default":
        print(DEFAULT_POLICY.read_text(), end="")
        return 0
    return _diff(args.old, args.new)


# ---- check -------------------------------------------------------------------------------------
def _check(path: str, strict: bool = False) -> int:
    return _report(path, check_allowlist_file(path, strict), strict)


def _check_env(name: str, strict: bool) -> int:
    """The same check over the text of an environment variable (named `$NAME` in every message)."""
    text = os.environ.get(name)
    if text is None:
        print(f"${name}: not set (--from-env names the variable holding the device config)", file=sys.stderr)
        return 2
    return _report(f"${name}", check_text(text, strict)[1], strict)


def _check_cluster(args: argparse.Namespace) -> int:
    """What the policy would do to the cluster's nodes and running pods; never a failure of the check."""
    try:
        if args.from_env:
            allowlist = check_text(os.environ.get(args.from_env, ""))[0].allowlist
        else:
            allowlist = load_allowlist(args.file)
        nodes, pods = read_cluster(args.kubeconfig, args.context)
    except (ClusterError, PolicyError, OSError) as error:
        print(f"dynmig policy check --cluster: {error}", file=sys.stderr)
        return 2
    found = check_fleet(allowlist, nodes, pods)
    for line in found.lines():
        print(f"cluster: {line}")
    print(
        f"cluster: {found.nodes} MIG node(s), {len(found.bare)} would publish no MIG profile, "
        f"{len(found.held)} running reservation(s) of a profile no longer allowed"
        + (" (they keep running; nothing is refused for this)" if found else "")
    )
    return 0


def _report(where: str, issues: Sequence[Issue], strict: bool) -> int:
    for issue in issues:
        print(issue.render(where), file=sys.stderr if issue.severity == ERROR else sys.stdout)
    errors = sum(1 for i in issues if i.severity == ERROR)
    if errors:
        why = " (--strict: warnings count as errors)" if strict else ""
        print(f"{where}: {errors} error(s){why}; the policy would be rejected", file=sys.stderr)
        return 1
    warnings = sum(1 for i in issues if i.severity == WARNING)
    print(
        f"{where}: ok" + (f" ({warnings} warning(s))" if warnings else "") + (" (strict)" if strict else "")
    )
    return 0


def _load(path: str | None) -> Allowlist:
    return default_allowlist() if path is None else load_allowlist(path)


# ---- explain -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Explanation:
    fits: bool
    profiles: tuple[str, ...]
    placements: tuple[Placement, ...]
    reason: str

    def as_json(self) -> dict[str, object]:
        return {
            "fits": self.fits,
            "profiles": list(self.profiles),
            "placements": [{"start": p.start, "size": p.size} for p in self.placements],
            "reason": self.reason,
        }


def explain(
    model: catalog.GpuModel,
    allowlist: Allowlist,
    memory: int | Percent,
    gpus: int = 1,
    preference: Sequence[str] = (),
    occupied: Sequence[Placement] = (),
) -> Explanation:
    """The placement engine's answer for one GPU of `model`, with the reasoning in words."""
    profiles = from_catalog(model, allowlist.profiles_for(model.nvml_name))
    if not profiles:
        return Explanation(False, (), (), _no_profiles(model, allowlist))
    gpu = GpuState(NODE, model.key, model.nvml_name, profiles, tuple(occupied), memory_mb=model.memory_mib)
    ask = (
        ContainerRequest(gpus, memory)
        if isinstance(memory, int)
        else ContainerRequest(gpus, None, memory.value)
    )
    pod = PodRequest(containers=(ask,), preference=tuple(preference))
    result = plan_pod(pod, [gpu])
    if not isinstance(result, Plan):
        return Explanation(False, (), (), "; ".join(r.message for r in result.reasons))
    return Explanation(
        True,
        tuple(d.profile for d in result.devices),
        tuple(d.placement for d in result.devices),
        _why(gpu, pod, result),
    )


def _no_profiles(model: catalog.GpuModel, allowlist: Allowlist) -> str:
    """Why a GPU of `model` publishes no MIG profile under `allowlist`, in words."""
    entry = allowlist.entry_for(model.nvml_name)
    name = f"{model.key} ({model.nvml_name})"
    if entry is None:
        return f"no allowlist entry matches {name}, so its GPUs publish no MIG profile"
    how = f"matched by {entry.matched_by(model.nvml_name)!r}"
    if entry.mig_off:
        return f"the allowlist switches MIG off on {name} ({how}, migOff: true)"
    return f"the allowlist entry for {name} ({how}) lists none of its profiles, so it publishes none"


def _why(gpu: GpuState, pod: PodRequest, plan: Plan) -> str:
    ps = profile_set(gpu.profiles)
    ask = pod.containers[0].memory
    memory = memory_on(ask, gpu.memory_mb)
    cover = [p for p in ps.profiles if p.memory_mb >= (memory or 0)]
    smallest = cover[0].name
    parts = [_percent_words(ask, memory, gpu, ps.profiles)] if isinstance(ask, Percent) else []
    for d in plan.devices:
        why = f"{d.profile} at {d.placement}"
        if d.profile == smallest:
            why += f" (the smallest allowlisted profile with ≥ {memory} MiB"
        elif any(e for e in pod.preference if d.profile == e or d.profile.split(".")[0] == e):
            why += f" (preferred by {','.join(pod.preference)}"
        else:
            why += f" (larger than {smallest}, which has no free placement left"
        parts.append(why + ")")
    mask = gpu.occupied_mask
    for d in plan.devices:
        mask |= d.placement.mask
    left = [f"{p.name}×{len(ps.free_placements(mask, i))}" for i, p in enumerate(ps.profiles)]
    return (
        "; ".join(p for p in parts if p) + "; placements chosen to keep the most large placements free "
        f"(still placeable afterwards: {', '.join(left)})"
    )


def _percent_words(ask: Percent, memory: int | None, gpu: GpuState, profiles: Sequence[Any]) -> str:
    """What a percentage means on this GPU, and a warning when it rounds up past a smaller profile."""
    said = f"{ask.value} % of {gpu.memory_mb} MiB is {memory} MiB"
    hit = rounded_up(ask.value, offer(gpu.type, gpu.memory_mb, ((p.name, p.memory_mb) for p in profiles)))
    if hit is None:
        return said
    (under, mib), takes = hit.under, f"{hit.got[0]}, the whole GPU" if hit.whole else hit.got[0]
    fix = f"--percentage {hit.fits} or --memory {mib} gets a {under}"
    return f"{said}, just above {under}'s {mib} MiB, so it takes {takes} (warning: {fix})"


def profiles_table(allowlist: Allowlist, models: Sequence[catalog.GpuModel] = catalog.MODELS) -> list[str]:
    """Each model's allowed profiles with their MiB, as a Markdown table (docs/policy.md holds the
    default policy's). A name resolved by slice key shows the driver's name beside it."""
    lines = ["| model | NVML name | allowed profiles: MiB |", "| --- | --- | --- |"]
    for model in models:
        got = published(allowlist, model)
        cells = [
            f"{r.label}{f' ({r.profile.name})' if r.by_slice_key else ''}: {r.profile.memory_mib:,}"
            for r in sorted(got, key=lambda r: (r.profile.memory_mib, r.profile.slice_count))
        ]
        lines.append(
            f"| {model.key} | {model.nvml_name} | {' · '.join(cells) or 'none (publishes no MIG profile)'} |"
        )
    return lines


def _explain(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        allowlist = _load(args.policy)
    except (PolicyError, OSError) as error:
        print(f"dynmig policy explain: --policy {args.policy}: {error}", file=sys.stderr)
        return 1
    try:
        model = catalog.find_model(args.model) if args.model else None
    except catalog.UnknownModel as error:
        parser.error(f"argument --model: {error}")
    if args.profiles:
        print("\n".join(profiles_table(allowlist, [model] if model else catalog.MODELS)))
        return 0
    if model is None or (args.memory is None and args.percentage is None):
        parser.error("explain needs --model and --memory or --percentage (or --profiles)")
    ask: int | Percent = args.memory if args.memory is not None else args.percentage
    axis = max(p.end for prof in model.profiles for p in prof.placements)
    occupied = sorted(args.occupied)
    for p in occupied:
        if p.end > axis:
            parser.error(f"argument --occupied: {p} ends past the {axis}-slice axis of {model.key}")
    for a, b in itertools.pairwise(occupied):
        if a.overlaps(b):
            parser.error(f"argument --occupied: {a} and {b} overlap; list each held placement once")
    result = explain(model, allowlist, ask, args.gpus, parse_preference(args.preference), occupied)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    held = ",".join(str(p) for p in occupied) or "nothing"
    print(f"{model.key} ({model.nvml_name}), policy {args.policy or 'default'}; occupied: {held}")
    print(
        f"request: {args.gpus} × {ask if isinstance(ask, Percent) else f'{ask} MiB'}"
        + (f", preference {args.preference}" if args.preference else "")
    )
    if result.fits:
        for n, (name, place) in enumerate(zip(result.profiles, result.placements, strict=True)):
            print(f"  device {n}: {name} at {place}")
    else:
        print("  does not fit")
    print(f"why: {result.reason}")
    return 0


# ---- diff --------------------------------------------------------------------------------------
def _first_profile(model: catalog.GpuModel, allowlist: Allowlist, memory: int) -> str:
    result = explain(model, allowlist, memory)
    if result.fits:
        return result.profiles[0]
    if not allowlist.profiles_for(model.nvml_name):
        return "(not allowlisted)"
    return "(nothing large enough)"


def _profile_changes(model: catalog.GpuModel, old: Allowlist, new: Allowlist) -> tuple[list[str], list[str]]:
    """Profiles of `model` the new policy adds and removes (names the model has)."""
    was, now = set(old.profiles_for(model.nvml_name)), set(new.profiles_for(model.nvml_name))
    return sorted(n for n in now - was if model.profile(n)), sorted(n for n in was - now if model.profile(n))


def diff_summary(old: Allowlist, new: Allowlist) -> list[str]:
    """What a person reads first: models whose MIG goes on or off, profiles added and removed."""
    lines: list[str] = []
    on: list[str] = []
    off: list[str] = []
    added = removed = 0
    for model in catalog.MODELS:
        plus, minus = _profile_changes(model, old, new)
        if not plus and not minus:
            continue
        added, removed = added + len(plus), removed + len(minus)
        had, has = (
            bool(from_catalog(model, old.profiles_for(model.nvml_name))),
            bool(from_catalog(model, new.profiles_for(model.nvml_name))),
        )
        (on if has and not had else off if had and not has else []).append(model.key)
        lines.append(f"  {model.key:<16} " + " ".join([*(f"+{n}" for n in plus), *(f"-{n}" for n in minus)]))
    head = f"summary: {len(lines)} model(s) change, {added} profile(s) added, {removed} removed"
    models = [f"models gaining MIG profiles: {', '.join(on)}"] if on else []
    models += [f"models left with no MIG profile: {', '.join(off)}"] if off else []
    note = (
        [
            "  (an added profile is chosen by default only where it is the smallest that fits; otherwise "
            "through nvidia.com/mig-profile-preference)"
        ]
        if added
        else []
    )
    return [head, *(f"  {m}" for m in models), *lines, *note]


def _diff(old_path: str, new_path: str) -> int:
    try:
        old, new = load_allowlist(old_path), load_allowlist(new_path)
    except (PolicyError, OSError) as error:
        print(f"dynmig policy diff: {error}", file=sys.stderr)
        return 1
    for line in diff_summary(old, new):
        print(line)
    changes = sum(1 for m in catalog.MODELS if any(_profile_changes(m, old, new)))
    for model in catalog.MODELS:
        for mib in LADDER_MIB:
            before, after = _first_profile(model, old, mib), _first_profile(model, new, mib)
            if before != after:
                changes += 1
                print(f"{model.key:<16} {mib:>7} MiB: {before} -> {after}")
    print(
        f"{changes} change(s) between {old_path} and {new_path}"
        f" ({len(catalog.MODELS)} models × {len(LADDER_MIB)} request sizes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
