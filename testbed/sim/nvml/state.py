"""The simulated node's hardware state: GPUs, MIG mode, GPU and compute instances, processes,
pending faults. Plain data that round-trips through JSON, so two processes can share it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.nvml import hardware
from sim.nvml.hardware import GpuModel, Placement

FRESH, STABLE = "fresh", "stable"  # MIG UUIDs on re-creation: a new one each time, or the same back


@dataclass
class Process:
    pid: int
    used_mib: int = 0
    gi_id: int | None = None  # None: the process holds the whole GPU (no MIG instance)
    ci_id: int | None = None  # None with a gi_id: any CI of that GI


@dataclass
class ComputeInstance:
    serial: int  # unique for the life of the state; keeps stale handles stale
    ci_id: int
    profile_id: int  # CI profile ID (= the CI profile enum)
    start: int  # placement in compute slices inside the GI
    size: int
    uuid: str  # MIG device UUID
    visible_at: float = 0.0  # wall-clock time its MIG device shows in NVML's list (listing lag)


@dataclass
class GpuInstance:
    serial: int
    gi_id: int
    profile_id: int
    start: int
    size: int
    cis: list[ComputeInstance] = field(default_factory=list)

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.size)

    def ci(self, ci_id: int) -> ComputeInstance | None:
        return next((c for c in self.cis if c.ci_id == ci_id), None)


@dataclass
class Gpu:
    index: int
    uuid: str
    model_key: str
    mig_current: int = 1
    mig_pending: int = 1
    needs_reset: bool = False  # a MIG mode change stays pending until reset_gpu()
    gis: list[GpuInstance] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    release: str | None = None  # driver release key (None: the model's default)
    gi_numbering: str = hardware.HEAP  # how this GPU's driver numbers GIs (identity.py)
    gi_id_map: list[int] | None = None  # tree ID -> reported ID when IDs are shuffled

    @property
    def model(self) -> GpuModel:
        return hardware.model(self.model_key, self.release)

    def gi(self, gi_id: int) -> GpuInstance | None:
        return next((g for g in self.gis if g.gi_id == gi_id), None)


@dataclass
class CreateFailure:
    kind: str  # "gi" or "ci"
    countdown: int  # fail when this reaches 1 on a create of that kind
    code: int


@dataclass
class Faults:
    errors: dict[str, list[list[int]]] = field(default_factory=dict)  # symbol -> [[code, times], ...]
    create_failures: list[CreateFailure] = field(default_factory=list)
    destroy_delay_s: float = 0.0


ZERO, DRIVER = "zero", "driver"  # timing modes: instant mutations, or the driver data's latencies


@dataclass
class TimingConfig:
    """How long the simulated MIG mutations take: `mode` zero (instant, for tests) or driver (each
    model's `timing` in drivers/*.yaml); `serialization` "model" (the data's default), "gpu" or
    "node"; `listing_lag_s` None = the model's."""

    mode: str = ZERO
    serialization: str = "model"
    listing_lag_s: float | None = None


@dataclass
class State:
    gpus: list[Gpu] = field(default_factory=list)
    faults: Faults = field(default_factory=Faults)
    next_serial: int = 1
    events: list[dict[str, Any]] = field(default_factory=list)
    mig_uuids: str = FRESH
    timing: TimingConfig = field(default_factory=TimingConfig)

    def gpu(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def take_serial(self) -> int:
        serial = self.next_serial
        self.next_serial += 1
        return serial

    def record(self, op: str, **details: Any) -> None:
        """Append to the mutation log that observers read (kept to the last 2000 entries)."""
        self.events.append({"op": op, **details})
        del self.events[:-2000]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> State:
        faults = data.get("faults", {})
        return cls(
            gpus=[_gpu_from(g) for g in data.get("gpus", [])],
            faults=Faults(
                errors={k: [list(e) for e in v] for k, v in faults.get("errors", {}).items()},
                create_failures=[CreateFailure(**f) for f in faults.get("create_failures", [])],
                destroy_delay_s=float(faults.get("destroy_delay_s", 0.0)),
            ),
            next_serial=int(data.get("next_serial", 1)),
            events=list(data.get("events", [])),
            mig_uuids=str(data.get("mig_uuids", FRESH)),
            timing=TimingConfig(**data.get("timing", {})),
        )


def _gpu_from(data: dict[str, Any]) -> Gpu:
    gis = [
        GpuInstance(**{**g, "cis": [ComputeInstance(**c) for c in g.get("cis", [])]})
        for g in data.get("gis", [])
    ]
    procs = [Process(**p) for p in data.get("processes", [])]
    return Gpu(**{**data, "gis": gis, "processes": procs})
