"""`aaco --version`, `aaco --help` and `aaco ls --help` as whole commands: wall time and peak
RSS, medians of N fresh processes (issue #20's target: under 120 ms).

    python bench/bench_cli_startup.py [--repeat 21]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

_WRAP = (
    "import resource, subprocess, sys; "
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=21)
    args = p.parse_args(argv)
    exe = shutil.which("aaco") or str(__import__("pathlib").Path(sys.executable).with_name("aaco"))
    for cmd in (["--version"], ["--help"], ["ls", "--help"]):
        walls, rss = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([exe, *cmd], stdout=subprocess.DEVNULL, check=True)
            walls.append(time.perf_counter() - t0)
        for _ in range(3):  # peak RSS through a wrapper that reads its one child's
            out = subprocess.run([sys.executable, "-c", _WRAP, exe, *cmd], capture_output=True,
                                 text=True, check=True)  # fmt: skip
            rss.append(int(out.stdout.split()[-1]) / 1024)
        med, low, mib = statistics.median(walls) * 1000, min(walls) * 1000, statistics.median(rss)
        print(f"aaco {' '.join(cmd)}: median {med:.0f} ms (min {low:.0f}), peak RSS {mib:.0f} MiB")
    walls = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        walls.append(time.perf_counter() - t0)
    print(f"(a bare `python -c pass`: median {statistics.median(walls) * 1000:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
