"""kubesim at scale: 2,100 nodes, 1,000 Volcano Jobs (20,000 pods) through the official client.

The simulator must never be the bottleneck of the portal's own benchmarks. This prints:

* the HTTP floor: ``GET /version`` through the official client (requests/s, p50/p99);
* list nodes (2,100 typed Node objects, and the same list read as raw JSON);
* 1,000 Volcano Job creates through ``CustomObjectsApi`` (requests/s, p50/p99) with the
  simulation paused: half from one client thread, half from several client processes, with the
  ratio to the ``/version`` floor;
* the time to watch every job to ``Completed`` (a ``watch.Watch`` on jobs) once the
  simulation resumes, then creates while it is busy;
* the scheduler's throughput: pods bound per second of scheduler time (the server's own
  counters), and an in-process run of the same workload without HTTP.

The server runs in a subprocess (``python -m kubesim``) so that client and server do not
share a GIL, as in the portal's own benchmarks.

    .venv/bin/python bench/kubesim_bench.py [--quick] [--jobs N] [--pods-per-job N]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NAMESPACES = [f"team-{c}" for c in "abcdefgh"]
RUN_SECONDS = 30  # simulated run time of every pod
CLOCK_SPEED = 60


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


def timed(call: Callable[[], Any], count: int) -> tuple[float, list[float]]:
    """Run ``call`` ``count`` times; returns (wall seconds, per-call latencies)."""
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t0)
    return time.perf_counter() - started, latencies


def report(name: str, wall: float, latencies: list[float]) -> dict[str, float]:
    """Print one line of figures and return them."""
    figures = {
        "rps": len(latencies) / wall,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }
    print(
        f"  {name:<40} {figures['rps']:>7.0f} req/s   p50 {figures['p50_ms']:>8.2f} ms   "
        f"p99 {figures['p99_ms']:>8.2f} ms   (n={len(latencies)})",
        flush=True,
    )
    return figures


def job_manifest(index: int, pods: int) -> dict[str, Any]:
    """A one-task gang: ``pods`` replicas of 1 GPU each, minAvailable = replicas."""
    namespace = NAMESPACES[index % len(NAMESPACES)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {
            "name": f"bench-{index:05d}",
            "namespace": namespace,
            "labels": {"bench": "kubesim"},
            "annotations": {"kubesim.gpupool.dev/duration-seconds": str(RUN_SECONDS)},
        },
        "spec": {
            "schedulerName": "volcano",
            "queue": namespace,
            "minAvailable": pods,
            "maxRetry": 1,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": pods,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "tolerations": [TOLERATION],
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "example/trainer:1.0",
                                    "resources": {
                                        "limits": {
                                            "nvidia.com/gpu": 1,
                                            "cpu": "4",
                                            "memory": "32Gi",
                                        }
                                    },
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


class Server:
    """``python -m kubesim`` in a subprocess, with its kubeconfig."""

    def __init__(self, config: str, clock_speed: float) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="kubesim-bench-")
        self.kubeconfig = Path(self.folder.name) / "kubeconfig.yaml"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubesim",
                "--config",
                config,
                "--port",
                "0",
                "--kubeconfig",
                str(self.kubeconfig),
                "--clock-speed",
                str(clock_speed),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "serving at" not in line:
            raise RuntimeError(f"kubesim did not start: {line!r}")
        while not self.kubeconfig.exists():
            time.sleep(0.05)

    def stats(self) -> dict[str, Any]:
        """GET /kubesim/v1/stats."""
        return self.control("stats", method="GET")

    def control(self, path: str, method: str = "POST") -> dict[str, Any]:
        """Call a kubesim control endpoint with the kubeconfig's token and CA."""
        doc = yaml.safe_load(self.kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        token = doc["users"][0]["user"]["token"]
        context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        request = urllib.request.Request(
            f"{cluster['server']}/kubesim/v1/{path}",
            headers={"Authorization": f"Bearer {token}"},
            method=method,
            data=b"{}" if method == "POST" else None,
        )
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        """Terminate the server and remove its files."""
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.folder.cleanup()


def create_worker(kubeconfig: str, indexes: list[int], pods: int) -> list[float]:
    """One client process: create the given jobs, return their latencies."""
    from kubernetes import client, config

    api = config.new_client_from_config(kubeconfig)
    custom = client.CustomObjectsApi(api)
    latencies = []
    for index in indexes:
        manifest = job_manifest(index, pods)
        namespace = manifest["metadata"]["namespace"]
        t0 = time.perf_counter()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", manifest)
        latencies.append(time.perf_counter() - t0)
    return latencies


def bench_http(jobs: int, pods: int, version_calls: int, workers: int) -> None:
    """Everything through the official client against a server subprocess."""
    from kubernetes import client, config, watch

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"(machine: {os.cpu_count()} CPUs, load average {load})", flush=True)
    print(
        f"== kubesim over HTTPS: large config, {jobs} jobs x {pods} pods, "
        f"clock speed {CLOCK_SPEED} ==",
        flush=True,
    )
    server = Server("large", clock_speed=CLOCK_SPEED)
    try:
        api = config.new_client_from_config(str(server.kubeconfig))
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        version_api = client.VersionApi(api)
        for _ in range(20):
            version_api.get_code()  # warm the pool and the models

        wall, lat = timed(version_api.get_code, version_calls)
        floor = report("GET /version (the HTTP floor)", wall, lat)

        nodes = len(core.list_node().items)  # the first call builds the client's models
        wall, lat = timed(core.list_node, 5)
        report(f"list nodes, typed models ({nodes})", wall, lat)
        wall, lat = timed(lambda: core.list_node(_preload_content=False).read(), 10)
        report(f"list nodes, raw JSON ({nodes})", wall, lat)

        completed: set[str] = set()
        all_done = threading.Event()
        watching = threading.Event()

        def watcher() -> None:
            w = watch.Watch()
            listed = custom.list_cluster_custom_object(GROUP, VERSION, "jobs")
            watching.set()
            for event in w.stream(
                custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                "jobs",
                resource_version=listed["metadata"]["resourceVersion"],
                allow_watch_bookmarks=True,
            ):
                obj = event["raw_object"]
                phase = (obj.get("status") or {}).get("state", {}).get("phase")
                if phase in ("Completed", "Failed"):
                    completed.add(obj["metadata"]["name"])
                    if len(completed) >= jobs:
                        all_done.set()
                        w.stop()

        threading.Thread(target=watcher, daemon=True).start()
        watching.wait(30)

        before = server.stats()
        # Part 1: the API alone. The simulation is paused so that the figures are those of
        # the request path (decode, schema, admission, store, response) and the client.
        server.control("pause")
        first_create = time.perf_counter()
        half = jobs // 2
        seq_lat: list[float] = []
        for index in range(half):
            manifest = job_manifest(index, pods)
            namespace = manifest["metadata"]["namespace"]
            t0 = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", manifest)
            seq_lat.append(time.perf_counter() - t0)
        seq = report(
            "create Volcano Job, 1 client thread", time.perf_counter() - first_create, seq_lat
        )

        # The official client spends more CPU per call than the server does, so one client
        # process cannot saturate the server; several processes can.
        chunks = [list(range(half + w, jobs, workers)) for w in range(workers)]
        started = time.perf_counter()
        with ProcessPoolExecutor(workers) as pool:
            results = list(
                pool.map(
                    create_worker, [str(server.kubeconfig)] * workers, chunks, [pods] * workers
                )
            )
        par_lat = [latency for chunk in results for latency in chunk]
        report(
            f"create Volcano Job, {workers} client processes",
            time.perf_counter() - started,
            par_lat,
        )
        print(
            f"  1-thread create vs /version: "
            f"{percentile(seq_lat, 50) * 1000 / floor['p50_ms']:.1f}x"
            f" the p50 latency, {floor['rps'] / seq['rps']:.1f}x fewer requests/s",
            flush=True,
        )
        after = server.stats()
        api_cpu = after["api_seconds"] - before["api_seconds"]
        print(
            f"  server CPU inside request handlers: {api_cpu / jobs * 1000:.2f} ms per create "
            f"= {jobs / api_cpu:.0f} creates/s per core (the rest of its time simulates)",
            flush=True,
        )
        # Part 2: the simulation resumes with 1,000 jobs waiting: watch them to completion.
        resumed = time.perf_counter()
        server.control("resume")
        finished = all_done.wait(900)
        done = time.perf_counter() - resumed
        state = "all" if finished else f"only {len(completed)} of"
        print(
            f"  watch to completion: {state} {jobs} jobs Completed {done:.1f} s after the "
            f"simulation resumed ({RUN_SECONDS} simulated s per pod at clock speed "
            f"{CLOCK_SPEED}; at most 700 jobs fit at once)",
            flush=True,
        )
        # Part 3: creates while the simulation is busy binding and running pods.
        live_jobs = max(jobs // 5, 1)
        live_lat: list[float] = []
        started = time.perf_counter()
        for index in range(jobs, jobs + live_jobs):
            manifest = job_manifest(index, pods)
            namespace = manifest["metadata"]["namespace"]
            t0 = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", manifest)
            live_lat.append(time.perf_counter() - t0)
        report("create, 1 thread, simulation running", time.perf_counter() - started, live_lat)
        stats = server.stats()
        sched = stats["scheduling_seconds"]
        print(
            f"  server: {stats['pods_bound']} pods bound in {sched:.2f} CPU-s of scheduling = "
            f"{stats['pods_bound'] / sched:.0f} pods bound per CPU-second; {stats['requests']} "
            f"requests; "
            f"simulation {stats['step_seconds']:.1f} CPU-s in total "
            f"({stats['step_seconds'] / stats['pods_bound'] * 1000:.2f} ms per pod lifecycle)",
            flush=True,
        )
    finally:
        server.stop()


def bench_in_process(jobs: int, pods: int) -> None:
    """The same workload through the in-process API: scheduler throughput without HTTP."""
    import gc

    from kubesim import KubeSim

    gc.collect()
    gc.freeze()  # as python -m kubesim does for its long-lived objects
    gc.set_threshold(50_000, 50, 100)
    print(f"== in-process, no HTTP: {jobs} jobs x {pods} pods ==", flush=True)
    sim = KubeSim("large", tls=False, clock_speed=0)
    started = time.perf_counter()
    for index in range(jobs):
        sim.create(job_manifest(index, pods))
    wall = time.perf_counter() - started
    print(
        f"  {jobs} creates through the API pipeline (schema, admission, store): "
        f"{jobs / wall:.0f} /s",
        flush=True,
    )
    started = time.perf_counter()
    sim.settle()
    wall = time.perf_counter() - started
    stats = sim.stats()
    bound = stats["pods_bound"]
    print(
        f"  first cycle: {stats['pods_created']} pods created, {bound} bound in {wall:.2f} s "
        f"({bound / wall:.0f} pods/s including pod creation, events and status); scheduler: "
        f"{bound / stats['scheduling_seconds']:.0f} pods bound per CPU-second",
        flush=True,
    )
    started = time.perf_counter()
    sim.advance(20 * RUN_SECONDS)
    wall = time.perf_counter() - started
    stats = sim.stats()
    phases: dict[str, int] = {}
    for job in sim.list("jobs"):
        phase = job.get("status", {}).get("state", {}).get("phase", "?")
        phases[phase] = phases.get(phase, 0) + 1
    print(
        f"  run to the end ({20 * RUN_SECONDS} simulated s): {wall:.2f} s; job phases "
        f"{phases}; {stats['pods_bound']} pods bound in all, scheduler "
        f"{stats['pods_bound'] / stats['scheduling_seconds']:.0f} pods bound per CPU-second",
        flush=True,
    )


def main() -> None:
    """Parse arguments and run both parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 jobs and fewer calls")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--pods-per-job", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4, help="client processes for creates")
    args = parser.parse_args()
    jobs = args.jobs or (200 if args.quick else 1000)
    version_calls = 300 if args.quick else 2000
    bench_http(jobs, args.pods_per_job, version_calls, args.workers)
    bench_in_process(jobs, args.pods_per_job)


if __name__ == "__main__":
    main()
