"""The symmetry-aware sharpness's cost beside L_rho's (goal: at most 10x at d = 32).

One seeded encoder (d_model = d, 2 layers, 2 heads) at input length n, the whole cube of 2^n
inputs, K directions, rho = 0.02 sqrt(P) (the measurement layer's default radius). Each row: the
median wall time and median process CPU time of `--repeats` calls on the CPU (`--threads` torch threads,
default 1), and the ratio of its CPU time to L_rho's (CPU seconds: another program's load does not inflate them).

On a shared 2-core machine (load 4.3, 1 thread): L_rho 0.757 s, symmetry-aware with M = 6
7.52 s (9.94x), with M = 8 8.46 s (10.7x), ASAM 0.94x, the checked canonical map 0.09x (wall seconds).
2026-12-05, after the encoder's faster attention (load 10.7, 1 thread, CPU seconds): L_rho 0.438, ASAM 0.433
(0.99x), the canonical map 0.056 (0.13x), symmetry-aware with M = 6 3.307 (7.55x; its M + 1 = 7 evaluations of
L_rho are nearly all of it): within the goal.

    python benchmarks/symmetry.py                  # d = 32, n = 10, K = 32, M = 6
    python benchmarks/symmetry.py --small          # d = 8, n = 6, K = 8 (CI)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

import sensviz as sv
from sensviz import cube
from sensviz.orbit_sharpness import orbit_sharpness
from sensviz.sharpness import adaptive_sharpness, sharpness
from sensviz.symmetries import canonical


def timed(fn, repeats: int) -> tuple[float, float, object]:
    """The median wall seconds and median process CPU seconds of `repeats` calls, and the last result."""
    times, cpus, result = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return statistics.median(times), statistics.median(cpus), result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=32)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--directions", type=int, default=32)
    parser.add_argument("--n-orbit", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--small", action="store_true", help="d = 8, n = 6, K = 8, one repeat")
    args = parser.parse_args(argv)
    if args.small:
        args.d, args.n, args.directions, args.repeats = 8, 6, 8, 1
    torch.set_num_threads(args.threads)
    model = sv.build_model("encoder", d_model=args.d, n_layers=2, n_heads=2, max_len=args.n, seed=0)
    bits = cube.vertices(args.n)
    rho = 0.02 * math.sqrt(model.n_params())
    rows = {
        "L_rho (sharpness)": lambda: sharpness(model, bits, rho, args.directions, 0, limit=False),
        "adaptive (ASAM)": lambda: adaptive_sharpness(model, bits, rho, args.directions, 0),
        "canonical map (checked)": lambda: canonical(model, n=args.n),
        f"symmetry-aware (M = {args.n_orbit})": lambda: orbit_sharpness(model, bits, rho, args.directions, 0,
                                                                       n_orbit=args.n_orbit),
    }
    print(f"encoder d={args.d}, 2 layers, 2 heads, P={model.n_params()}, n={args.n} ({bits.shape[0]} inputs), "
          f"K={args.directions}, rho={rho:.3g}; torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}")
    print(f"{'measure':<28} {'wall s':>9} {'CPU s':>9} {'x L_rho (CPU)':>14} {'value':>11}")
    base = None
    for name, fn in rows.items():
        seconds, cpu, result = timed(fn, args.repeats)
        base = base or cpu
        value = getattr(result, "value", None)
        print(f"{name:<28} {seconds:9.3f} {cpu:9.3f} {cpu / base:14.2f} {'' if value is None else f'{value:.4g}':>11}")
    print(f"goal: symmetry-aware <= 10x L_rho; load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
