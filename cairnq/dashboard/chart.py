"""The overview's throughput chart as plain geometry: one stacked bar per
minute (succeeded below, failed above, canceled on top) and the failure rate
as a line on its own 0-100 % scale. The template draws it as inline SVG, so
the page needs no script and no image request; ``static/dashboard.js``
redraws it with the same arithmetic on live updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from cairnq.dashboard.queries import MinuteBucket
from cairnq.dashboard.render import utc

__all__ = ["Bar", "Chart", "WIDTH", "HEIGHT", "chart"]

WIDTH = 720  # the viewBox: the SVG scales to the page's width
HEIGHT = 160
PLOT_TOP = 10
PLOT_BOTTOM = HEIGHT - 20  # room for the time labels
LEFT = 40  # room for the count labels


@dataclass(frozen=True)
class Segment:
    kind: str  # "succeeded" | "failed" | "canceled"
    y: float
    height: float


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    segments: list[Segment]
    title: str


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int  # the count at the top of the scale
    rate_points: str  # the failure-rate polyline's "x,y x,y ..."
    labels: list[tuple[float, str]]  # (x, "HH:MM") along the bottom
    succeeded: int
    failed: int
    canceled: int
    failure_rate: Optional[float]


def _nice_peak(n: int) -> int:
    """A round number at or above ``n`` for the top of the scale."""
    for step in (1, 2, 5):
        for power in range(0, 12):
            top = int(step * 10**power)
            if top >= n:
                return max(top, 1)
    return n


def chart(buckets: Sequence[MinuteBucket]) -> Chart:
    count = max(len(buckets), 1)
    slot = (WIDTH - LEFT) / count
    peak = _nice_peak(max((b.finished for b in buckets), default=0))
    scale = (PLOT_BOTTOM - PLOT_TOP) / peak
    bars, points, labels = [], [], []
    for i, b in enumerate(buckets):
        x = LEFT + i * slot
        y = float(PLOT_BOTTOM)
        segments = []
        for kind, n in (("succeeded", b.succeeded), ("failed", b.failed), ("canceled", b.canceled)):
            if n:
                h = n * scale
                y -= h
                segments.append(Segment(kind, round(y, 2), round(h, 2)))
        rate = b.failure_rate
        rate_text = "" if rate is None else f", failure rate {rate:.0%}"
        title = (
            f"{utc(b.minute_start_ms)[:16]} UTC: {b.succeeded} succeeded, {b.failed} failed, "
            f"{b.canceled} canceled{rate_text}"
        )
        bars.append(Bar(round(x + slot * 0.1, 2), round(slot * 0.8, 2), segments, title))
        if rate is not None:
            ry = PLOT_BOTTOM - rate * (PLOT_BOTTOM - PLOT_TOP)
            points.append(f"{x + slot / 2:.1f},{ry:.1f}")
        if b.minute_start_ms % (15 * 60_000) == 0:
            labels.append((round(x, 1), utc(b.minute_start_ms)[11:16]))
    succeeded = sum(b.succeeded for b in buckets)
    failed = sum(b.failed for b in buckets)
    settled = succeeded + failed
    return Chart(
        bars=bars,
        peak=peak,
        rate_points=" ".join(points),
        labels=labels,
        succeeded=succeeded,
        failed=failed,
        canceled=sum(b.canceled for b in buckets),
        failure_rate=None if settled == 0 else failed / settled,
    )
