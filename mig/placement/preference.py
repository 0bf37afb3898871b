"""`nvidia.com/mig-profile-preference`: which profiles a device tries, in which order.

Semantics (HAMi PR #3014, carried over): the value is a comma list, trimmed, empties and duplicates
dropped, order kept. An entry matches a profile by full name (`4g.20gb`) or slice key (`4g`). Profiles
matching entries come first (entry order; each entry pulls its matches in default order), then every
other covering profile in default order (memory ascending, then fewer slices, then smaller placement).
A preference never picks a profile smaller than the request, entries absent on a GPU are ignored, and
a preference never makes a GPU unschedulable: it only reorders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mig.placement.request import PublishedProfile, _split

Rank = tuple[int, int]  # (preference entry index or len(entries), position in default covering order)


def parse_preference(value: str | None) -> tuple[str, ...]:
    """Entries of a preference annotation value."""
    return _split(value)


def entry_matches(entry: str, profile_name: str) -> bool:
    return entry == profile_name or entry == profile_name.split(".", 1)[0]


def unknown_entries(entries: Iterable[str], profile_names: Iterable[str]) -> tuple[str, ...]:
    """Entries that match none of the given profile names (what admission rejects)."""
    names = tuple(profile_names)
    return tuple(e for e in entries if not any(entry_matches(e, n) for n in names))


def default_sort_key(p: PublishedProfile) -> tuple[int, int, int, str]:
    """Smallest first: memory, then compute slices, then placement size; the name keeps it total."""
    return (p.memory_mb, p.slice_count, p.size, p.name)


def covering(profiles: Sequence[PublishedProfile], memory_mib: int | None) -> list[int]:
    """Indexes (into `profiles`, already in default order) of profiles large enough for the request.

    No memory request means a whole GPU (HAMi's 100 % default): only the largest profiles cover it.
    """
    if not profiles:
        return []
    if memory_mib is None:
        top = max(p.memory_mb for p in profiles)
        return [i for i, p in enumerate(profiles) if p.memory_mb == top]
    return [i for i, p in enumerate(profiles) if p.memory_mb >= memory_mib]


def candidate_order(
    profiles: Sequence[PublishedProfile], memory_mib: int | None, preference: Sequence[str]
) -> tuple[tuple[Rank, int], ...]:
    """(rank, profile index) for every covering profile, best first.

    Ranks are comparable across GPUs: a profile named by the first preference entry on one GPU beats
    an unpreferred profile on another, and among unpreferred ones the smallest covering wins.
    """
    cover = covering(profiles, memory_mib)
    pos = {idx: n for n, idx in enumerate(cover)}
    ranked: dict[int, Rank] = {}
    for k, entry in enumerate(preference):
        for idx in cover:
            if idx not in ranked and entry_matches(entry, profiles[idx].name):
                ranked[idx] = (k, pos[idx])
    rest = len(preference)
    for idx in cover:
        ranked.setdefault(idx, (rest, pos[idx]))
    return tuple(sorted(((r, i) for i, r in ranked.items())))
