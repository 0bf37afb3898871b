"""HAMi's MIG hardware E2E sequences (`hack/hami-mig-e2e.sh`) as fixed traces on one GPU.

Each step creates a pod (asking the preset's memory), deletes one, or checks which pods run. Pods
that do not fit stay pending and are retried after every delete, in creation order, as
kube-scheduler retries unschedulable pods when a pod leaves. A check lists the pods the script
expects to run and those it expects to stay pending; a policy is scored by the expectations it
misses (a pod expected to run that stays pending, or one expected pending that runs).

A100-40GB preset: small 4500 MiB (1g.5gb), medium 9500 MiB (2g.10gb), large 19000 MiB (3g.20gb).
RTX PRO 6000 preset: small 8000 MiB (1g.24gb), medium 30000 MiB (2g.48gb), large 60000 MiB (4g.96gb).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

Step = tuple  # ("add", name, mem) | ("del", name) | ("check", case, running names, pending names)


def _a100() -> list[Step]:
    s, m, lg = 4500, 9500, 19000
    burst = [f"burst-{i}" for i in range(1, 8)]
    return [
        ("add", "one-a", s),
        ("add", "one-b", s),
        ("add", "two-a", m),
        ("check", "1: 2×1g + 1×2g", ("one-a", "one-b", "two-a"), ()),
        ("del", "one-b"),
        ("add", "two-b", m),
        ("add", "two-c", m),
        ("add", "overflow-one", s),
        (
            "check",
            "2: 1×1g + 3×2g, overflow pending",
            ("one-a", "two-a", "two-b", "two-c"),
            ("overflow-one",),
        ),
        ("del", "two-b"),
        ("check", "4: replacement 1g runs", ("one-a", "two-a", "two-c", "overflow-one"), ()),
        *[("del", n) for n in ("one-a", "two-a", "two-c", "overflow-one")],
        ("add", "three-a", lg),
        ("add", "three-b", lg),
        ("add", "blocked-one", s),
        ("check", "5: 2×3g, 1g pending", ("three-a", "three-b"), ("blocked-one",)),
        *[("del", n) for n in ("three-a", "three-b", "blocked-one")],
        ("add", "three-a", lg),
        ("add", "two-d", m),
        ("add", "one-c", s),
        ("add", "one-d", s),
        ("add", "overflow-two", s),
        (
            "check",
            "6: 1×3g + 1×2g + 2×1g, overflow pending",
            ("three-a", "two-d", "one-c", "one-d"),
            ("overflow-two",),
        ),
        ("del", "one-c"),
        ("check", "6: replacement 1g runs", ("three-a", "two-d", "one-d", "overflow-two"), ()),
        *[("del", n) for n in ("three-a", "two-d", "one-d", "overflow-two")],
        *[("add", n, s) for n in burst],
        ("check", "7: 7×1g", tuple(burst), ()),
        *[("del", n) for n in ("burst-1", "burst-3", "burst-5")],
        *[("add", f"burst-{i}", s) for i in (8, 9, 10)],
        (
            "check",
            "7: refill to 7×1g",
            ("burst-2", "burst-4", "burst-6", "burst-7", "burst-8", "burst-9", "burst-10"),
            (),
        ),
    ]


def _rtx() -> list[Step]:
    s, m, lg = 8000, 30000, 60000
    burst = [f"burst-{i}" for i in range(1, 5)]
    return [
        ("add", "mixed-small", s),
        ("add", "mixed-large", m),
        ("check", "1: 1g + 2g", ("mixed-small", "mixed-large"), ()),
        ("del", "mixed-small"),
        ("add", "mixed-small-replacement", s),
        ("check", "2: replacement 1g", ("mixed-large", "mixed-small-replacement"), ()),
        *[("del", n) for n in ("mixed-large", "mixed-small-replacement")],
        *[("add", n, s) for n in burst],
        ("add", "overflow-small", s),
        ("check", "4: 4×1g, overflow pending", tuple(burst), ("overflow-small",)),
        ("del", "burst-1"),
        ("check", "5: refill", ("burst-2", "burst-3", "burst-4", "overflow-small"), ()),
        *[("del", n) for n in ("burst-2", "burst-3", "burst-4", "overflow-small")],
        ("add", "full-a", lg),
        ("add", "blocked-small", s),
        ("check", "6: 4g, 1g pending", ("full-a",), ("blocked-small",)),
    ]


TRACES = (
    ("A100-SXM4-40GB", "hami e2e a100-40gb", _a100()),
    ("RTX-PRO-6000", "hami e2e rtx-pro-6000", _rtx()),
)


@dataclass
class Outcome:
    missed: list[str]  # "case: pod expected running|pending"
    layouts: dict[str, list[str]]  # case -> profiles of the running pods at the check


def replay(policy, steps: list[Step], apply, release) -> Outcome:
    """Run the steps against a policy (on a one-node, one-GPU fleet it was built for)."""
    live: dict[str, list] = {}
    pending: list[tuple[str, int]] = []
    keys: dict[str, int] = {}
    serial = count(1)
    out = Outcome([], {})

    def admit(name: str, mem: int) -> bool:
        picks = policy.decide([mem])
        if picks is None:
            return False
        key = keys[name] = next(serial)
        apply(policy, picks, key, (mem,))
        live[name] = picks
        return True

    for step in steps:
        if step[0] == "add":
            _, name, mem = step
            if not admit(name, mem):
                pending.append((name, mem))
        elif step[0] == "del":
            name = step[1]
            if name in live:
                release(policy, live.pop(name), keys[name])
            pending = [(n, m) for n, m in pending if n != name]
            pending = [(n, m) for n, m in pending if not admit(n, m)]
        else:
            _, case, running, waiting = step
            out.missed += [f"{case}: {n} expected running" for n in running if n not in live]
            out.missed += [f"{case}: {n} expected pending" for n in waiting if n in live]
            out.layouts[case] = sorted(
                f"{p[2].name}@{p[1]}" for name in running if name in live for p in live[name]
            )
    return out
