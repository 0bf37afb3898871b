"""GPU catalog: MIG-capable models, their NVML names and per-profile facts.

Source: shared reference `mig-facts.md` §2 and the `-lgip` outputs cited there. Each fact carries a
confidence mark: "confirmed" (NVIDIA docs/source), "observed" (real nvidia-smi output), "inferred"
(reasoned, not seen) or "unknown" (no source; a placeholder value chosen so the model is usable).
Memory values and some names vary between driver releases; one coherent set, from one named driver
release (`GpuModel.driver`), is pinned per model, and names other releases print are listed per
profile (`ProfileSpec.driver_names`).

The catalog feeds `dynmig policy` and the lab. The scheduler never uses it for capacity: node
annotations published from the real NVML are the truth there. The simulated NVML keeps its own
driver facts (sim/nvml/drivers); tests/sim/test_nvml_driver_facts.py names every disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mig.types import Placement

CONFIRMED, OBSERVED, INFERRED, UNKNOWN = "confirmed", "observed", "inferred", "unknown"

# NVML_GPU_INSTANCE_PROFILE_* enum values (nvml.h).
ENUM_1_SLICE, ENUM_2_SLICE, ENUM_3_SLICE, ENUM_4_SLICE, ENUM_7_SLICE = 0x0, 0x1, 0x2, 0x3, 0x4
ENUM_8_SLICE, ENUM_6_SLICE = 0x5, 0x6
ENUM_1_SLICE_REV1, ENUM_2_SLICE_REV1, ENUM_1_SLICE_REV2 = 0x7, 0x8, 0x9
ENUM_1_SLICE_GFX, ENUM_2_SLICE_GFX, ENUM_4_SLICE_GFX = 0xA, 0xB, 0xC
ENUM_1_SLICE_NO_ME, ENUM_2_SLICE_NO_ME = 0xD, 0xE
ENUM_1_SLICE_ALL_ME, ENUM_2_SLICE_ALL_ME = 0xF, 0x10
GPU_INSTANCE_PROFILE_COUNT = 0x12

# NVML_COMPUTE_INSTANCE_PROFILE_* enum per compute slice count (full CI of a GI).
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


@dataclass(frozen=True)
class Engines:
    copy: int = 1
    decoder: int = 0
    encoder: int = 0
    jpeg: int = 0
    ofa: int = 0


@dataclass(frozen=True)
class ProfileSpec:
    """One MIG GPU-instance profile of one GPU model, as NVML reports it."""

    name: str  # e.g. "1g.10gb", "1g.24gb+me"
    enum: int  # NVML_GPU_INSTANCE_PROFILE_* value passed to GetGpuInstanceProfileInfo
    profile_id: int  # info.id, taken by every other GI call
    memory_mib: int
    sm_count: int
    slice_count: int  # compute ("g") slices; NOT the placement size
    instance_count: int
    placements: tuple[Placement, ...]
    engines: Engines = Engines()
    confidence: str = OBSERVED
    notes: str = ""
    driver_names: tuple[str, ...] = ()  # the names other driver releases print for this profile

    @property
    def slice_key(self) -> str:
        """The text before the first '.', e.g. '1g' for '1g.10gb+me'."""
        return self.name.split(".", 1)[0]

    @property
    def placement_size(self) -> int:
        return self.placements[0].size


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model."""

    key: str  # short, stable name used on the command line, e.g. "A100-SXM4-40GB"
    nvml_names: tuple[str, ...]  # what nvmlDeviceGetName returns (first = canonical)
    pci_device_id: int
    memory_mib: int
    axis_length: int  # memory slices on the placement axis (8, 4 or 12)
    max_mig_devices: int
    profiles: tuple[ProfileSpec, ...]
    memory_confidence: str = OBSERVED
    notes: str = ""
    driver: str = ""  # the driver release whose profile memory set is pinned here

    @property
    def nvml_name(self) -> str:
        return self.nvml_names[0]

    def profile(self, name: str) -> ProfileSpec | None:
        """A profile by its name, or by a name another driver release prints for it."""
        return next((p for p in self.profiles if p.name == name), None) or next(
            (p for p in self.profiles if name in p.driver_names), None
        )

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


def _starts(starts: tuple[int, ...], size: int) -> tuple[Placement, ...]:
    return tuple(Placement(s, size) for s in starts)


@dataclass(frozen=True)
class _Row:
    """Compact input row for an 8-slice GPU's profile set."""

    name: str
    mib: int
    sm: int
    confidence: str = OBSERVED
    driver_names: tuple[str, ...] = ()


# The 8-slice pattern shared by A100/H100/H200/H20/B200/GB200 (mig-facts §2.1, §2.5):
# (enum, profile id, slice count, instance count, placements)
_EIGHT_SLICE = {
    "1g": (ENUM_1_SLICE, 19, 1, 7, _starts((0, 1, 2, 3, 4, 5, 6), 1)),
    "1g+me": (ENUM_1_SLICE_REV1, 20, 1, 1, _starts((0, 1, 2, 3, 4, 5, 6), 1)),
    "1g.2x": (ENUM_1_SLICE_REV2, 15, 1, 4, _starts((0, 2, 4, 6), 2)),
    "2g": (ENUM_2_SLICE, 14, 2, 3, _starts((0, 2, 4), 2)),
    "3g": (ENUM_3_SLICE, 9, 3, 2, _starts((0, 4), 4)),
    "4g": (ENUM_4_SLICE, 5, 4, 1, _starts((0,), 4)),
    "7g": (ENUM_7_SLICE, 0, 7, 1, _starts((0,), 8)),
}


# Engines (CE, DEC, ENC, JPEG, OFA) per kind, by family, as `-lgip` shows them.
# A100: MIG User Guide A100 table [confirmed].
_AMPERE_ENGINES = {
    "1g": Engines(1),
    "1g+me": Engines(1, 1, 0, 1, 1),
    "1g.2x": Engines(1, 1),
    "2g": Engines(2, 1),
    "3g": Engines(3, 2),
    "4g": Engines(4, 2),
    "7g": Engines(7, 5, 0, 1, 1),
}
# Hopper: a g-slice brings a CE, an NVDEC and an NVJPG; the full GPU has 8 CE, 7 NVDEC, 7 NVJPG and
# the OFA [observed: H200 `-lgip` in NVIDIA/mig-parted#120, H100 NVL in NVIDIA/gpu-operator#903].
_HOPPER_ENGINES = {
    "1g": Engines(1, 1, 0, 1),
    "1g+me": Engines(1, 1, 0, 1, 1),
    "1g.2x": Engines(1, 1, 0, 1),
    "2g": Engines(2, 2, 0, 2),
    "3g": Engines(3, 3, 0, 3),
    "4g": Engines(4, 4, 0, 4),
    "7g": Engines(8, 7, 0, 7, 1),
}
# Blackwell B200/GB200: 1g CE 2, 2g CE 4 [observed: NVIDIA/mig-parted#166, #187, gpu-operator#1303];
# 3g/4g/7g follow that pattern [inferred].
_BLACKWELL_ENGINES = {
    "1g": Engines(2, 1, 0, 1),
    "1g+me": Engines(2, 1, 0, 1, 1),
    "1g.2x": Engines(2, 1, 0, 1),
    "2g": Engines(4, 2, 0, 2),
    "3g": Engines(6, 3, 0, 3),
    "4g": Engines(8, 4, 0, 4),
    "7g": Engines(16, 7, 0, 7, 1),
}


def _eight_slice(
    rows: dict[str, _Row], placement_confidence: str, engines: dict[str, Engines]
) -> tuple[ProfileSpec, ...]:
    out = []
    for kind, row in rows.items():
        enum, pid, slices, count, placements = _EIGHT_SLICE[kind]
        conf = row.confidence if placement_confidence == CONFIRMED else _weaker(row.confidence, INFERRED)
        out.append(
            ProfileSpec(
                row.name,
                enum,
                pid,
                row.mib,
                row.sm,
                slices,
                count,
                placements,
                engines[kind],
                confidence=conf,
                driver_names=row.driver_names,
            )
        )
    return tuple(out)


_ORDER = (CONFIRMED, OBSERVED, INFERRED, UNKNOWN)


def _weaker(a: str, b: str) -> str:
    return max(a, b, key=_ORDER.index)


A30 = GpuModel(
    key="A30",
    nvml_names=("NVIDIA A30",),
    pci_device_id=0x20B7,
    memory_mib=24576,
    memory_confidence=INFERRED,
    axis_length=4,
    max_mig_devices=4,
    profiles=(
        ProfileSpec("1g.6gb", ENUM_1_SLICE, 14, 5952, 14, 1, 4, _starts((0, 1, 2, 3), 1), Engines(1, 1)),
        ProfileSpec(
            "1g.6gb+me",
            ENUM_1_SLICE_REV1,
            21,
            5952,
            14,
            1,
            1,
            _starts((0, 1, 2, 3), 1),
            Engines(1, 1, 0, 1, 1),
        ),
        ProfileSpec("2g.12gb", ENUM_2_SLICE, 5, 11968, 28, 2, 2, _starts((0, 2), 2), Engines(2, 2)),
        ProfileSpec(
            "2g.12gb+me", ENUM_2_SLICE_REV1, 6, 11968, 28, 2, 1, _starts((0, 2), 2), Engines(2, 2, 0, 1, 1)
        ),
        ProfileSpec(
            "4g.24gb",
            ENUM_4_SLICE,
            0,
            24000,
            56,
            4,
            1,
            _starts((0,), 4),
            Engines(4, 4, 0, 1, 1),
            notes="23.44 GiB with the set above; 23.50 GiB (24064) on another driver",
        ),
    ),
    driver="R535",
)

_A100_40_ROWS = {
    "1g": _Row("1g.5gb", 4864, 14),
    "1g+me": _Row("1g.5gb+me", 4864, 14),
    "1g.2x": _Row("1g.10gb", 9984, 14),
    "2g": _Row("2g.10gb", 9984, 28),
    "3g": _Row("3g.20gb", 20096, 42),
    "4g": _Row("4g.20gb", 20096, 56),
    "7g": _Row("7g.40gb", 40448, 98),
}
A100_SXM4_40GB = GpuModel(
    key="A100-SXM4-40GB",
    nvml_names=("NVIDIA A100-SXM4-40GB",),
    pci_device_id=0x20B0,
    memory_mib=40960,
    axis_length=8,
    max_mig_devices=7,
    driver="R550",
    profiles=_eight_slice(_A100_40_ROWS, CONFIRMED, _AMPERE_ENGINES),
)
A100_PCIE_40GB = GpuModel(
    key="A100-PCIE-40GB",
    nvml_names=("NVIDIA A100-PCIE-40GB",),
    pci_device_id=0x20F1,
    memory_mib=40960,
    axis_length=8,
    max_mig_devices=7,
    driver="R550",
    profiles=_eight_slice(_A100_40_ROWS, CONFIRMED, _AMPERE_ENGINES),
)

_A100_80_ROWS = {
    "1g": _Row("1g.10gb", 9728, 14),
    "1g+me": _Row("1g.10gb+me", 9728, 14),
    "1g.2x": _Row("1g.20gb", 19968, 14),
    "2g": _Row("2g.20gb", 19968, 28),
    "3g": _Row("3g.40gb", 40192, 42),
    "4g": _Row("4g.40gb", 40192, 56),
    "7g": _Row("7g.80gb", 80896, 98),
}
A100_SXM4_80GB = GpuModel(
    key="A100-SXM4-80GB",
    nvml_names=("NVIDIA A100-SXM4-80GB",),
    pci_device_id=0x20B2,
    memory_mib=81920,
    axis_length=8,
    max_mig_devices=7,
    driver="R535",
    profiles=_eight_slice(_A100_80_ROWS, INFERRED, _AMPERE_ENGINES),
    notes="placements inferred from the A100-40GB (same die)",
)
A100_PCIE_80GB = GpuModel(
    key="A100-PCIE-80GB",
    nvml_names=("NVIDIA A100 80GB PCIe",),
    pci_device_id=0x20B5,
    memory_mib=81920,
    axis_length=8,
    max_mig_devices=7,
    driver="R535",
    profiles=_eight_slice(_A100_80_ROWS, INFERRED, _AMPERE_ENGINES),
    notes="placements inferred from the A100-40GB (same die)",
)

H100_SXM5_80GB = GpuModel(
    key="H100-SXM5-80GB",
    nvml_names=("NVIDIA H100 80GB HBM3",),
    pci_device_id=0x2330,
    memory_mib=81559,
    axis_length=8,
    max_mig_devices=7,
    driver="R580",
    profiles=_eight_slice(
        {
            "1g": _Row("1g.10gb", 9984, 16),
            "1g+me": _Row("1g.10gb+me", 9984, 16),
            "1g.2x": _Row("1g.20gb", 20096, 26),
            "2g": _Row("2g.20gb", 20096, 32),
            "3g": _Row("3g.40gb", 40448, 60),
            "4g": _Row("4g.40gb", 40448, 64),
            "7g": _Row("7g.80gb", 81152, 132),
        },
        CONFIRMED,
        _HOPPER_ENGINES,
    ),
)
H100_PCIE_80GB = GpuModel(
    key="H100-PCIE-80GB",
    nvml_names=("NVIDIA H100 PCIe",),
    pci_device_id=0x2331,
    memory_mib=81559,
    axis_length=8,
    max_mig_devices=7,
    driver="R570",
    profiles=_eight_slice(
        {
            "1g": _Row("1g.10gb", 9984, 14),
            "1g+me": _Row("1g.10gb+me", 9984, 14),
            "1g.2x": _Row("1g.20gb", 20096, 14),
            "2g": _Row("2g.20gb", 20096, 30),
            "3g": _Row("3g.40gb", 40448, 46),
            "4g": _Row("4g.40gb", 40448, 62),
            "7g": _Row("7g.80gb", 81152, 114),
        },
        CONFIRMED,
        _HOPPER_ENGINES,
    ),
)
H100_NVL_94GB = GpuModel(
    key="H100-NVL-94GB",
    nvml_names=("NVIDIA H100 NVL",),
    pci_device_id=0x2321,
    memory_mib=95830,
    memory_confidence=INFERRED,
    axis_length=8,
    max_mig_devices=7,
    driver="R550",
    profiles=_eight_slice(
        {
            "1g": _Row("1g.12gb", 11008, 16),
            "1g+me": _Row("1g.12gb+me", 11008, 16),
            "1g.2x": _Row("1g.24gb", 22144, 26),
            "2g": _Row("2g.24gb", 22144, 32),
            "3g": _Row("3g.47gb", 47488, 60),
            "4g": _Row("4g.47gb", 47488, 64),
            "7g": _Row("7g.94gb", 95360, 132, INFERRED),
        },
        OBSERVED,
        _HOPPER_ENGINES,
    ),
    notes="one driver's set (NVIDIA/gpu-operator#903: 10.75/21.62/46.38 GiB); its 7g row is not shown, "
    "93.12 GiB seen elsewhere is taken; another driver reports 10880/22016/47232/94848",
)
H20_96GB = GpuModel(
    key="H20",
    nvml_names=("NVIDIA H20",),
    pci_device_id=0x2329,
    memory_mib=97871,
    memory_confidence=INFERRED,
    axis_length=8,
    max_mig_devices=7,
    driver="R550",
    profiles=_eight_slice(
        {
            "1g": _Row("1g.12gb", 12032, 8, UNKNOWN),
            "1g+me": _Row("1g.12gb+me", 12032, 8, UNKNOWN),
            "1g.2x": _Row("1g.24gb", 23552, 8, UNKNOWN),
            "2g": _Row("2g.24gb", 23552, 16, UNKNOWN),
            "3g": _Row("3g.48gb", 47616, 32, UNKNOWN),
            "4g": _Row("4g.48gb", 47616, 40, UNKNOWN),
            "7g": _Row("7g.96gb", 95232, 78, UNKNOWN),
        },
        INFERRED,
        _HOPPER_ENGINES,
    ),
    notes="per-profile SM counts are unknown (H20 has 78 SMs in total); 1g memory observed (11.75 GiB), "
    "the rest taken from GH200",
)
_H200_ROWS = {
    "1g": _Row("1g.18gb", 16384, 16),
    "1g+me": _Row("1g.18gb+me", 16384, 16),
    "1g.2x": _Row("1g.35gb", 33024, 26),
    "2g": _Row("2g.35gb", 33024, 32),
    "3g": _Row("3g.71gb", 71168, 60),
    "4g": _Row("4g.71gb", 71168, 64),
    "7g": _Row("7g.141gb", 143104, 132),
}
H200_SXM = GpuModel(
    key="H200",
    nvml_names=("NVIDIA H200",),
    pci_device_id=0x2335,
    memory_mib=143771,
    memory_confidence=INFERRED,
    axis_length=8,
    max_mig_devices=7,
    driver="R550",
    profiles=_eight_slice(_H200_ROWS, INFERRED, _HOPPER_ENGINES),
)
H200_NVL = GpuModel(
    key="H200-NVL",
    nvml_names=("NVIDIA H200 NVL",),
    pci_device_id=0x233B,
    memory_mib=143771,
    memory_confidence=INFERRED,
    axis_length=8,
    max_mig_devices=7,
    driver="R550",
    profiles=_eight_slice(
        {k: _Row(r.name, r.mib, r.sm, INFERRED) for k, r in _H200_ROWS.items()}, INFERRED, _HOPPER_ENGINES
    ),
)
B200 = GpuModel(
    key="B200",
    nvml_names=("NVIDIA B200",),
    pci_device_id=0x2901,
    memory_mib=183359,
    memory_confidence=INFERRED,
    axis_length=8,
    max_mig_devices=7,
    driver="R570",
    profiles=_eight_slice(
        {
            "1g": _Row("1g.23gb", 20992, 18),
            "1g+me": _Row("1g.23gb+me", 20992, 18),
            "1g.2x": _Row("1g.45gb", 45312, 30),
            "2g": _Row("2g.45gb", 45312, 36),
            "3g": _Row("3g.90gb", 90624, 54, UNKNOWN),
            "4g": _Row("4g.90gb", 90624, 72, UNKNOWN),
            "7g": _Row("7g.180gb", 181248, 148, UNKNOWN),
        },
        INFERRED,
        _BLACKWELL_ENGINES,
    ),
    notes="the driver that added 4g.90gb (NVIDIA/mig-parted#187: 1g at 20.50 GiB; the earlier one shows "
    "22.00); 3g/4g/7g memory and SM counts are unknown; placements inferred (8-slice pattern)",
)
GB200 = GpuModel(
    key="GB200",
    nvml_names=("NVIDIA GB200",),
    pci_device_id=0x2941,
    memory_mib=189471,
    memory_confidence=INFERRED,
    axis_length=8,
    max_mig_devices=7,
    driver="R580",
    profiles=_eight_slice(
        {
            "1g": _Row("1g.23gb", 22528, 18, driver_names=("1g.24gb",)),
            "1g+me": _Row("1g.23gb+me", 22528, 18, driver_names=("1g.24gb+me",)),
            "1g.2x": _Row("1g.47gb", 46592, 32),
            "2g": _Row("2g.47gb", 46592, 38),
            "3g": _Row("3g.93gb", 93184, 58, UNKNOWN),
            "4g": _Row("4g.93gb", 93184, 76, UNKNOWN),
            "7g": _Row("7g.186gb", 186368, 152, UNKNOWN),
        },
        INFERRED,
        _BLACKWELL_ENGINES,
    ),
    notes="3g/4g/7g memory and SM counts are unknown; early drivers (NVIDIA/gpu-operator#1303) name the "
    "1g '1g.24gb' and report it at 20.00 GiB",
)

_Q = _starts((0, 3, 6, 9), 3)
_H = _starts((0, 6), 6)
_F = _starts((0,), 12)
RTX_PRO_6000 = GpuModel(
    key="RTX-PRO-6000",
    nvml_names=("NVIDIA RTX PRO 6000 Blackwell Server Edition",),
    pci_device_id=0x2BB5,
    memory_mib=97887,
    axis_length=12,
    max_mig_devices=4,
    driver="R580",
    profiles=(
        ProfileSpec("1g.24gb", ENUM_1_SLICE, 14, 24192, 46, 1, 4, _Q, Engines(1, 1, 1, 1, 0)),
        ProfileSpec("1g.24gb+me", ENUM_1_SLICE_REV1, 21, 24192, 46, 1, 1, _Q, Engines(1, 1, 1, 1, 1)),
        ProfileSpec("1g.24gb+gfx", ENUM_1_SLICE_GFX, 47, 24192, 46, 1, 4, _Q, Engines(1, 1, 1, 1, 0)),
        ProfileSpec("1g.24gb+me.all", ENUM_1_SLICE_ALL_ME, 65, 24192, 46, 1, 1, _Q, Engines(1, 4, 4, 4, 1)),
        ProfileSpec("1g.24gb-me", ENUM_1_SLICE_NO_ME, 67, 24192, 46, 1, 4, _Q, Engines(1, 0, 0, 0, 0)),
        ProfileSpec("2g.48gb", ENUM_2_SLICE, 5, 48512, 94, 2, 2, _H, Engines(2, 2, 2, 2, 0)),
        ProfileSpec("2g.48gb+gfx", ENUM_2_SLICE_GFX, 35, 48512, 94, 2, 2, _H, Engines(2, 2, 2, 2, 0)),
        ProfileSpec("2g.48gb+me.all", ENUM_2_SLICE_ALL_ME, 64, 48512, 94, 2, 1, _H, Engines(2, 4, 4, 4, 1)),
        ProfileSpec("2g.48gb-me", ENUM_2_SLICE_NO_ME, 66, 48512, 94, 2, 2, _H, Engines(2, 0, 0, 0, 0)),
        ProfileSpec("4g.96gb", ENUM_4_SLICE, 0, 97408, 188, 4, 1, _F, Engines(4, 4, 4, 4, 1)),
        ProfileSpec("4g.96gb+gfx", ENUM_4_SLICE_GFX, 32, 97408, 188, 4, 1, _F, Engines(4, 4, 4, 4, 1)),
    ),
)
# The Workstation and Max-Q Workstation editions: the same GB202 part with 96 GB. NVML names and the
# Max-Q's 97887 MiB are observed in public nvidia-smi/CUDA output; MIG support with the Server
# Edition's profiles (MIG User Guide "RTX PRO 6000 Blackwell"; NVIDIA/gpu-operator#2249 configures
# MIG on a Max-Q) and the PCI IDs are inferred.
RTX_PRO_6000_WS = GpuModel(
    key="RTX-PRO-6000-WS",
    nvml_names=("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",),
    pci_device_id=0x2BB1,
    memory_mib=97887,
    memory_confidence=INFERRED,
    axis_length=12,
    max_mig_devices=4,
    driver="R580",
    profiles=tuple(replace(p, confidence=_weaker(p.confidence, INFERRED)) for p in RTX_PRO_6000.profiles),
    notes="profiles as the Server Edition (inferred)",
)
RTX_PRO_6000_MAXQ = GpuModel(
    key="RTX-PRO-6000-MAXQ",
    nvml_names=("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",),
    pci_device_id=0x2BB4,
    memory_mib=97887,
    axis_length=12,
    max_mig_devices=4,
    driver="R580",
    profiles=RTX_PRO_6000_WS.profiles,
    notes="profiles as the Server Edition (inferred)",
)

MODELS: tuple[GpuModel, ...] = (
    A30,
    A100_SXM4_40GB,
    A100_PCIE_40GB,
    A100_SXM4_80GB,
    A100_PCIE_80GB,
    H100_SXM5_80GB,
    H100_PCIE_80GB,
    H100_NVL_94GB,
    H20_96GB,
    H200_SXM,
    H200_NVL,
    B200,
    GB200,
    RTX_PRO_6000,
    RTX_PRO_6000_WS,
    RTX_PRO_6000_MAXQ,
)


class UnknownModel(LookupError):
    pass


def _norm(text: str) -> str:
    return text.lower().replace("nvidia", "").replace("-", " ").replace("_", " ").strip()


def find_model(name: str) -> GpuModel:
    """Find a model by key, exact NVML name, or a unique substring of an NVML name."""
    for model in MODELS:
        if name == model.key or name in model.nvml_names:
            return model
    hits = [m for m in MODELS if any(name in n for n in m.nvml_names)]
    if not hits:
        wanted = _norm(name)
        hits = [m for m in MODELS if wanted in _norm(m.key) or any(wanted in _norm(n) for n in m.nvml_names)]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(m.key for m in MODELS)
    if not hits:
        raise UnknownModel(f"unknown GPU model {name!r}; known models: {known}")
    exact = [m for m in hits if _norm(m.nvml_name) == _norm(name) or _norm(m.key) == _norm(name)]
    if len(exact) == 1:
        return exact[0]
    raise UnknownModel(f"GPU model {name!r} is ambiguous: {', '.join(m.key for m in hits)}")


def all_profile_names() -> frozenset[str]:
    """Every profile name some driver prints on some known GPU."""
    return frozenset(n for m in MODELS for p in m.profiles for n in (p.name, *p.driver_names))


def core_percent(model: GpuModel, profile: ProfileSpec) -> int:
    """HAMi's `core`: ceil(SMs × 100 / largest SM count over the GPU's profiles)."""
    largest = max(p.sm_count for p in model.profiles)
    return -(-profile.sm_count * 100 // largest)
