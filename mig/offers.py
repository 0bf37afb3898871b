"""What each GPU model offers a pod: its total memory and its allowed MIG profiles, each with its MiB.

Admission reads requests against these offers before any node is chosen (a `nvidia.com/mig-<profile>`
translated into MiB, a `gpumem-percentage` that rounds up to a whole GPU). Two sources:

- the catalog and the allowlist (`catalog_offers`): every catalog model with the profiles its
  allowlist entry names and the catalog resolves, at the catalog's MiB (one pinned driver release);
- the fleet (`webhooks/fleet.py`): each GPU type as its nodes publish it, from the real NVML. Where a
  model is in both, the fleet's figures win (`merged`): they are what the scheduler will compare.

A profile's memory differs between models under one name (a 1g.10gb holds 9,728 MiB on an
A100-80GB and 9,984 on an H100), so a name maps to the memory of each model, never to one number.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mig import catalog
from mig.allowlist import Allowlist


@dataclass(frozen=True)
class Offer:
    """One GPU model: its NVML name, total MiB, and its allowed profiles as (name, MiB), smallest first."""

    model: str
    memory_mib: int
    profiles: tuple[tuple[str, int], ...]

    def smallest_covering(self, mib: int) -> tuple[str, int] | None:
        """The smallest allowed profile with at least `mib` MiB, or None."""
        return next((p for p in self.profiles if p[1] >= mib), None)

    @property
    def largest(self) -> tuple[str, int] | None:
        return self.profiles[-1] if self.profiles else None

    def memory_of(self, profile: str) -> int | None:
        return next((mib for name, mib in self.profiles if name == profile), None)


@dataclass(frozen=True)
class RoundUp:
    """A percentage of one model that lands just above a smaller allowed profile's MiB."""

    need: int  # the MiB the percentage asks on this model, as the scheduler sizes it
    under: tuple[str, int]  # the profile just below the ask
    got: tuple[str, int]  # the profile the ask gets instead
    fits: int  # the largest percentage that still gets `under`
    whole: bool  # `got` is the model's largest profile


def rounded_up(percent: int, offer: Offer) -> RoundUp | None:
    """Whether `percent` of this model's memory is at most two points above the largest percentage
    that a smaller profile holds (50 % of an A100-40GB is 20,480 MiB, above the 3g.20gb's 20,096): the
    ask then gets the next profile up, often a whole GPU, where one or two percent less would have fit.
    The one rule behind admission's warning and `dynmig policy explain --percentage`."""
    if offer.memory_mib <= 0:
        return None
    need = offer.memory_mib * percent // 100  # as mig.placement.request.memory_on sizes it
    got = offer.smallest_covering(need)
    below = [p for p in offer.profiles if p[1] < need]
    if got is None or not below:
        return None
    under = below[-1]
    fits = under[1] * 100 // offer.memory_mib
    if fits < 1 or percent - fits > 2:
        return None
    return RoundUp(need, under, got, fits, got == offer.largest)


def offer(model: str, memory_mib: int, profiles: Iterable[tuple[str, int]]) -> Offer:
    """An Offer with its profiles in order: memory ascending, then name."""
    return Offer(model, memory_mib, tuple(sorted(set(profiles), key=lambda p: (p[1], p[0]))))


def catalog_offers(allowlist: Allowlist) -> tuple[Offer, ...]:
    """Every catalog model with the profiles the allowlist allows it and the catalog resolves."""
    out = []
    for model in catalog.MODELS:
        specs = [(name, model.profile(name)) for name in allowlist.profiles_for(model.nvml_name)]
        out.append(offer(model.nvml_name, model.memory_mib, ((n, s.memory_mib) for n, s in specs if s)))
    return tuple(out)


def merged(fleet: Iterable[Offer], allowlist: Allowlist) -> tuple[Offer, ...]:
    """The fleet's offers, then the catalog's for every model the fleet does not publish."""
    published = {o.model: o for o in fleet}
    return (*published.values(), *(o for o in catalog_offers(allowlist) if o.model not in published))


def short_name(model: str) -> str:
    """A model's name for messages: the catalog key when known (`H100-SXM5-80GB`), else the NVML name."""
    try:
        return catalog.find_model(model).key
    except catalog.UnknownModel:
        return model.removeprefix("NVIDIA ")
