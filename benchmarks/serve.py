"""Serving latency and throughput: ``hierl serve`` over HTTP against the policy in-process,
and Serve's dynamic batching against unbatched serving.

One run, printed as a table and written to ``benchmarks/results/serve.json``:

1. **In-process**: ``ServedPolicy.act([ServedPolicy.parse(request)])`` in a loop (the
   replica's own work: decoding, preprocessing, filter, one forward pass, encoding),
   for 1 and 64 observations per request.
2. **HTTP, one client**: the same requests, one at a time over a kept-alive connection,
   to an app of one replica (1 CPU) with dynamic batching (``max_batch_size`` 32) and
   to one without (``max_batch_size`` 1, which never waits for a batch).
3. **HTTP, 32 concurrent clients**, 1 observation per request: batched against
   unbatched (the issue's target: >= 3x the requests/s), for CartPole's PPO network
   (64, 64) and for a large one (1024 x 3), whose forward pass dominates a request.

Clients are asyncio (aiohttp) in this process; the Serve proxy, the replica and this
client share the machine's cores, which the table's note reports.

Usage::

    .venv/bin/python benchmarks/serve.py            # ~2 minutes
    .venv/bin/python benchmarks/serve.py --quick    # shorter measurements
    .venv/bin/python benchmarks/serve.py --record   # + benchmarks/records/serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import aiohttp
import numpy as np
import psutil
import ray
from ray import serve

from hierl import PPOTrainer
from hierl.serve import ServedPolicy, deploy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import RECORD_HELP, CpuMeter, record

TARGET_BATCHING_GAIN = 3.0
"""The issue's bar: dynamic batching >= 3x the requests/s of unbatched serving."""
CONCURRENCY = 32
MODELS = {"small": (64, 64), "large": (1024, 1024, 1024)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _body(n: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"observations": (rng.normal(size=(n, 4)) * 0.5).astype(np.float32).tolist()}


def _figures(latencies: list[float], elapsed: float, obs_per_request: int) -> dict[str, float]:
    lat = np.asarray(latencies) * 1000.0
    return {
        "requests_per_s": len(lat) / elapsed,
        "observations_per_s": len(lat) * obs_per_request / elapsed,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "requests": len(lat),
    }


def in_process(policy: ServedPolicy, n: int, duration_s: float) -> dict[str, float]:
    """The replica's own work per request, with no HTTP and no Serve."""
    body = _body(n)
    latencies = []
    start = time.perf_counter()
    while time.perf_counter() - start < duration_s:
        t0 = time.perf_counter()
        policy.act([policy.parse(body)])
        latencies.append(time.perf_counter() - t0)
    return _figures(latencies, time.perf_counter() - start, n)


async def _load(url: str, n: int, clients: int, duration_s: float, warmup_s: float):
    payload = json.dumps(_body(n)).encode()
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    timeout = aiohttp.ClientTimeout(total=30)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t_start = time.perf_counter()
        t_measure = t_start + warmup_s
        t_end = t_measure + duration_s

        async def client() -> None:
            while (now := time.perf_counter()) < t_end:
                async with session.post(url, data=payload, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status}: {await r.text()}")
                if now >= t_measure:
                    latencies.append(time.perf_counter() - now)

        await asyncio.gather(*(client() for _ in range(clients)))
    return _figures(latencies, time.perf_counter() - t_measure, n)


def _serve_pids(app: str) -> dict[str, list[int]]:
    """The pids of Serve's HTTP proxy and of app ``app``'s replicas (Ray's process titles)."""
    groups: dict[str, list[int]] = {"proxy": [], "replica": []}
    for proc in psutil.process_iter(["cmdline"]):
        title = " ".join(proc.info["cmdline"] or [])
        if title.startswith("ray::ProxyActor"):
            groups["proxy"].append(proc.pid)
        elif title.startswith(f"ray::ServeReplica:{app}:"):
            groups["replica"].append(proc.pid)
    return groups


def over_http(url: str, n: int, clients: int, duration_s: float, app: str) -> dict[str, float]:
    """``clients`` concurrent keep-alive clients sending ``n`` observations per request,
    with the CPU milliseconds per request of the client, the proxy and the replica."""
    groups = {"client": [os.getpid()], **_serve_pids(app)}
    with CpuMeter(groups) as meter:
        figures = asyncio.run(_load(url + "/act", n, clients, duration_s, warmup_s=1.0))
    per_request = meter.cores["wall_s"] / figures["requests"] * 1000.0  # (includes warm-up)
    for group in groups:
        figures[f"{group}_cpu_ms_per_request"] = meter.cores[group] * per_request
    figures["machine_cores_busy"] = meter.cores["machine"]
    figures["other_cores_busy"] = meter.cores["outside"]
    return figures


def checkpoint(hiddens: tuple[int, ...], directory: Path) -> tuple[Path, ServedPolicy]:
    trainer = PPOTrainer({"env": "CartPole-v1", "model": {"hiddens": hiddens}})
    path = trainer.save(directory / f"ppo_{'x'.join(map(str, hiddens))}")
    return path, ServedPolicy(trainer)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short measurements")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args()
    duration = 2.0 if args.quick else 5.0
    ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    port = _free_port()
    rows: list[dict[str, Any]] = []
    busy0 = psutil.cpu_times()

    def add(model: str, mode: str, n: int, clients: int, figures: dict[str, float]) -> None:
        rows.append({"model": model, "mode": mode, "obs": n, "clients": clients, **figures})
        print(
            f"{model:>5} {mode:<28} {n:>3} obs {clients:>3} clients  "
            f"{figures['requests_per_s']:>8.0f} req/s {figures['observations_per_s']:>9.0f} "
            f"obs/s  p50 {figures['p50_ms']:>7.2f} ms  p99 {figures['p99_ms']:>7.2f} ms",
            flush=True,
        )
        if "proxy_cpu_ms_per_request" in figures:
            print(
                f"{'':>34}CPU ms per request: client {figures['client_cpu_ms_per_request']:.2f}, "
                f"proxy {figures['proxy_cpu_ms_per_request']:.2f}, replica "
                f"{figures['replica_cpu_ms_per_request']:.2f}; busy cores: machine "
                f"{figures['machine_cores_busy']:.2f}, others' {figures['other_cores_busy']:.2f}",
                flush=True,
            )

    try:
        with tempfile.TemporaryDirectory() as tmp:
            for model, hiddens in MODELS.items():
                path, local = checkpoint(hiddens, Path(tmp))
                sizes = (1, 64) if model == "small" else (1,)
                for n in sizes:
                    add(model, "in-process", n, 1, in_process(local, n, duration))
                local.stop()
                for name, batch in (("batched", 32), ("unbatched", 1)):
                    app = deploy(
                        path,
                        port=port,
                        name=f"{model}-{name}",
                        route_prefix=f"/{model}-{name}",
                        max_batch_size=batch,
                        num_cpus_per_replica=1.0,
                    )
                    label = f"HTTP {name} (max_batch_size {batch})"
                    for n in sizes:
                        add(model, label, n, 1, over_http(app.url, n, 1, duration, app.name))
                    add(
                        model,
                        label,
                        1,
                        CONCURRENCY,
                        over_http(app.url, 1, CONCURRENCY, duration, app.name),
                    )
                    app.delete()
    finally:
        serve.shutdown()
        ray.shutdown()
    busy1 = psutil.cpu_times()
    steal = getattr(busy1, "steal", 0.0) - getattr(busy0, "steal", 0.0)

    def rps(model: str, name: str) -> float:
        (row,) = [
            r
            for r in rows
            if r["model"] == model
            and r["mode"].startswith(f"HTTP {name}")
            and r["clients"] == CONCURRENCY
        ]
        return row["requests_per_s"]

    gains = {m: rps(m, "batched") / rps(m, "unbatched") for m in MODELS}
    for model, gain in gains.items():
        verdict = "meets" if gain >= TARGET_BATCHING_GAIN else "misses"
        print(
            f"{model}: dynamic batching at {CONCURRENCY} clients = {gain:.2f}x unbatched "
            f"({verdict} the {TARGET_BATCHING_GAIN:g}x target)",
            flush=True,
        )
    path = record(
        "serve",
        {
            "duration_s": duration,
            "concurrency": CONCURRENCY,
            "models": {k: list(v) for k, v in MODELS.items()},
            "batch_wait_timeout_s": 0.005,
            "cpus": os.cpu_count(),
        },
        {"rows": rows, "batching_gain": gains, "steal_s": steal},
        commit=args.record,
    )
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
