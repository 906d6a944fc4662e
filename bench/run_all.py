"""``make bench``: run every benchmark in ``bench/`` one after another and stream its figures.

    .venv/bin/python bench/run_all.py [--quick] [NAME ...] [-- ARG ...]

Runs each ``bench/*_bench.py`` and ``bench/*_sim.py`` it finds (sorted by name) as its own
process, so one benchmark's imports, settings and database cannot leak into the next, and
their output streams as it is printed. ``--quick`` is passed on to each one that has that
option (its source mentions ``"--quick"``; the others run as they are); ``NAME`` picks
benchmarks by a part of their file name (``make bench ARGS="submit -- --million"``); anything
after ``--`` goes to every benchmark run. Exits non-zero when any of them failed, after running
the rest.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PATTERNS = ("*_bench.py", "*_sim.py")


def discover(names: list[str]) -> list[Path]:
    """The benchmark scripts in ``bench/``, narrowed to those whose name contains a NAME."""
    found = sorted({p for pattern in PATTERNS for p in BENCH_DIR.glob(pattern)})
    if names:
        found = [p for p in found if any(n in p.stem for n in names)]
    return found


def takes_quick(script: Path) -> bool:
    return '"--quick"' in script.read_text()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run of each benchmark")
    parser.add_argument("names", nargs="*", help="run only benchmarks whose file name has this")
    args = parser.parse_args(argv)

    scripts = discover(args.names)
    if not scripts:
        print(f"no benchmark matches {args.names}", file=sys.stderr)
        return 2
    results: list[tuple[str, int, float]] = []
    for script in scripts:
        quick = ["--quick"] if args.quick and takes_quick(script) else []
        cmd = [sys.executable, str(script), *quick, *extra]
        print(f"\n=== {script.name} {' '.join(cmd[2:])}".rstrip(), flush=True)
        began = time.perf_counter()
        try:
            rc = subprocess.run(cmd, cwd=BENCH_DIR.parent, check=False).returncode
        except KeyboardInterrupt:
            print(f"\n{script.name} interrupted", file=sys.stderr)
            return 130
        results.append((script.name, rc, time.perf_counter() - began))

    print("\n=== summary")
    for name, rc, seconds in results:
        print(f"  {name:<28} {'ok' if rc == 0 else f'FAILED (exit {rc})':<18} {seconds:7.1f} s")
    return 1 if any(rc for _, rc, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
