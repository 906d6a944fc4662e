"""``python -m kubesim``: run a simulated cluster until Ctrl-C.

Prints the URL (useful with ``--port 0``) and writes a kubeconfig that the official client,
kubectl or the portal can use as-is.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from types import FrameType

from kubesim.cluster import KubeSim
from kubesim.config import ConfigError, load_config


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog="python -m kubesim",
        description="A Kubernetes API server with simulated GPU nodes and Volcano.",
    )
    parser.add_argument(
        "--config", default="small", help="cluster config file, or a packaged name: small, large"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server to this path")
    parser.add_argument("--http", action="store_true", help="serve plain HTTP instead of HTTPS")
    parser.add_argument(
        "--clock-speed",
        type=float,
        default=1.0,
        help="simulated seconds per wall second (60 = an hour per minute)",
    )
    parser.add_argument("--token", help="the admin bearer token (random by default)")
    parser.add_argument("--log-level", default="WARNING", help="Python logging level")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run until SIGINT/SIGTERM; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
    except (ConfigError, OSError) as exc:
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2
    extra_hosts = [args.host] if args.host not in ("127.0.0.1", "localhost", "::1") else None
    sim = KubeSim(
        config,
        tls=not args.http,
        host=args.host,
        port=args.port,
        clock_speed=args.clock_speed,
        token=args.token,
        extra_hosts=extra_hosts,
    )
    # A dedicated server process: move the large, long-lived object graph (CRD schemas,
    # nodes) out of the collector's way and collect less often; with 20,000 pods the default
    # thresholds make cyclic GC a third of the scheduling time.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    # Hand the GIL over every millisecond instead of every 5: request threads then wait at
    # most about one millisecond behind the simulation thread.
    sys.setswitchinterval(0.001)
    sim.start()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.kubeconfig:
        sim.write_kubeconfig(args.kubeconfig)
    print(
        f"kubesim: cluster {config.name!r} ({config.node_count} nodes) serving at {sim.url}",
        flush=True,
    )
    if args.kubeconfig:
        print(f"kubesim: kubeconfig written to {args.kubeconfig}", flush=True)
    print("kubesim: press Ctrl-C to stop", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
    print("kubesim: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
