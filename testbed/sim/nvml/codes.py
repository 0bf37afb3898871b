"""NVML return codes the simulated driver uses, and the error it raises internally.

The values are nvml.h's; they are repeated here so the pure driver model does not need pynvml.
"""

from __future__ import annotations

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
ALREADY_INITIALIZED = 5
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
IN_USE = 19
INSUFFICIENT_RESOURCES = 23
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

MIG_DISABLE, MIG_ENABLE = 0, 1
VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF

NAMES = {
    SUCCESS: "Success",
    UNINITIALIZED: "Uninitialized",
    INVALID_ARGUMENT: "Invalid Argument",
    NOT_SUPPORTED: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    ALREADY_INITIALIZED: "Already Initialized",
    NOT_FOUND: "Not Found",
    INSUFFICIENT_SIZE: "Insufficient Size",
    FUNCTION_NOT_FOUND: "Function Not Found",
    GPU_IS_LOST: "GPU is lost",
    RESET_REQUIRED: "GPU requires restart",
    IN_USE: "In use by another client",
    INSUFFICIENT_RESOURCES: "Insufficient resources",
    ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    UNKNOWN: "Unknown Error",
}


def error_string(code: int) -> str:
    return NAMES.get(code, f"Unknown NVML error {code}")


class NvmlFault(Exception):
    """A driver call that returns a non-success code (carried as `.code`)."""

    def __init__(self, code: int, why: str = "") -> None:
        super().__init__(f"{error_string(code)} ({code}){': ' + why if why else ''}")
        self.code = code
        self.why = why
