"""Kernel timings against the memory-bandwidth floor, and the report table.

The floor of a memory-bound kernel is ``bytes moved / peak bandwidth``: no kernel moving
those bytes can be faster. Peak comes from :data:`PEAK_BYTES_PER_S` by device name, else
from a measured device-to-device copy (a lower bound of the true peak, so the floor
printed is then optimistic by the copy's shortfall).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

# Datasheet HBM bandwidth, bytes/s; the first substring found in the device name wins,
# so the more specific names come first.
PEAK_BYTES_PER_S: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H200",), 4.8e12),
    (("H100", "PCIe"), 2.0e12),
    (("H100", "NVL"), 3.9e12),
    (("H100",), 3.35e12),  # SXM5, HBM3
    (("GH200",), 4.0e12),
    (("A100", "80GB"), 2.039e12),
    (("A100",), 1.555e12),
    (("L40S",), 0.864e12),
    (("L4",), 0.3e12),
    (("A10G",), 0.6e12),
)


def table_peak(name: str) -> float | None:
    """Datasheet bandwidth for a device name (``torch.cuda.get_device_name``), or None."""
    if "GH200" in name:
        return 4.0e12
    for needles, peak in PEAK_BYTES_PER_S:
        if all(n in name for n in needles):
            return peak
    return None


def floor_us(nbytes: int, peak_bytes_per_s: float) -> float:
    return nbytes / peak_bytes_per_s * 1e6


def gbps(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9 if us > 0 else float("inf")


def median_us(
    fn: Callable[[], object], device: torch.device, warmup: int = 5, reps: int = 30
) -> float:
    """Median time of ``fn`` in microseconds: CUDA events on CUDA, perf_counter otherwise."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return float(statistics.median(times))


def measured_copy_peak(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Bytes/s of a device-to-device copy (read + write counted)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src), device, warmup=3, reps=10)
    return 2 * nbytes / (us * 1e-6)


@dataclass(frozen=True)
class Timing:
    kernel: str
    shape: str
    median_us: float
    torch_ref_us: float
    bytes: int
    peak_bytes_per_s: float

    @property
    def achieved_gbps(self) -> float:
        return gbps(self.bytes, self.median_us)

    @property
    def floor_us(self) -> float:
        return floor_us(self.bytes, self.peak_bytes_per_s)

    @property
    def of_floor(self) -> float:
        """Floor / time: 1.0 means the kernel runs at peak bandwidth."""
        return self.floor_us / self.median_us if self.median_us > 0 else 0.0

    def row(self) -> dict[str, object]:
        return {
            **asdict(self),
            "achieved_gbps": self.achieved_gbps,
            "floor_us": self.floor_us,
            "of_floor": self.of_floor,
        }


HEADER = (
    "kernel",
    "shape",
    "median us",
    "torch ref us",
    "MB moved",
    "GB/s",
    "floor us",
    "floor/time",
)


def markdown_table(timings: list[Timing]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for t in timings:
        cells = (
            t.kernel,
            t.shape,
            f"{t.median_us:.1f}",
            f"{t.torch_ref_us:.1f}",
            f"{t.bytes / 1e6:.2f}",
            f"{t.achieved_gbps:.0f}",
            f"{t.floor_us:.2f}",
            f"{t.of_floor:.0%}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
