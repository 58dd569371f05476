"""What every metakraft daemon's Prometheus metrics share: a registry with the
process, platform and garbage-collector collectors plus the collector's pauses, the
latency buckets, and the HTTP exporter.
"""

from __future__ import annotations

import gc
import time

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    start_http_server,
)

from controller.log import get_logger

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                     5.0)


# The garbage collector's pauses. A pass over the oldest generation walks every
# tracked object: with a million partitions in memory that can stop the whole
# process (Raft included) for a second, long enough to cost a leadership.
GC_PAUSE_SECONDS = Histogram("python_gc_pause_seconds",
                             "Time the cyclic garbage collector stopped the process",
                             ["generation"], registry=None, buckets=LATENCY_BUCKETS_S)
GC_PAUSE_LOG_S = 0.1  # pauses at least this long are logged too
_gc_started: list[float] = []


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_started[:] = [time.perf_counter()]
        return
    if not _gc_started:
        return
    paused_s = time.perf_counter() - _gc_started[0]
    generation = info.get("generation", -1)
    GC_PAUSE_SECONDS.labels(generation=str(generation)).observe(paused_s)
    if paused_s >= GC_PAUSE_LOG_S:
        get_logger("metakraft.gc").warning("gc_pause", generation=generation,
                                           ms=round(paused_s * 1e3, 1),
                                           collected=info.get("collected", 0))


def standard_registry() -> CollectorRegistry:
    """A registry with the process, platform and garbage-collector collectors
    (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
    `python_gc_collections_total`, ...) that the default registry would have, and
    the collector's pauses (`python_gc_pause_seconds`)."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR, GC_PAUSE_SECONDS):
        registry.register(collector)
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
    return registry


def serve_metrics(registry: CollectorRegistry, address: str, port: int) -> int:
    """Start the HTTP exporter (`/metrics`) in a thread; the bound port."""
    server, _thread = start_http_server(port, addr=address, registry=registry)
    return int(server.server_port)
