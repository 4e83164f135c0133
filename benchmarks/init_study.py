"""The initialisation study: ours (batched, vmapped over stacked parameters) vs a loop of separate forward passes.

    python benchmarks/init_study.py            # M = 256 initialisations, n = 10, d = 32 (issue 39: ours <= 10 s)
    python benchmarks/init_study.py --quick    # M = 16, n = 6 (CI)

Both sides build the same M models (seeds 0..M-1, PyTorch's default initialisation) and evaluate every
vertex of the cube; the loop runs one traced forward pass per model (`looped_outputs`). Rows: building
the models (shared), the evaluation alone, and the whole study (build, evaluation, sensitivity and
FWHT degree profiles). `agree`: both give the same outputs (to 1e-5), attention entropies and as_n.
Timings are the best of `--repeat` runs, on the CPU: wall seconds, and in brackets the process's CPU seconds
(every torch thread's), which another program's load on a shared machine does not inflate.

Measured 2026-12-05 on the shared 2-core machine, one torch thread, M = 256, d = 32:
- before: n = 10, `init_study` 10.9 s wall, 10.8 CPU s at load 5 (just over the 10 s goal); with 2 threads
  122 s wall / 29.8 CPU s against the loop's 318 s / 106.8 CPU s (two threads spin on contended cores).
- after (`sensviz.encoder`'s written-out softmax and per-head attention on views, the entropy without
  xlogy, 2 MiB vmapped chunks, plain passes once one model fills a chunk), at load 10-12:
  n = 10: whole study 4.72 s wall, 4.08 CPU s (ours) and 4.27 s / 3.99 CPU s (loop): within the goal; the
  evaluation 4.08 / 3.59 CPU s for the same code (at n = 10 ours is the loop: one model's cube fills a
  chunk, and a vmapped call of one model cost ~13 % more than the plain pass; the two rows differ by the
  machine's noise; the last run, at load 9-11: 4.62 s / 4.60 CPU s against 4.32 s / 4.22 CPU s, the
  evaluation 4.02 / 3.32 CPU s, ours measured first). Building the 256 models is 1.6 CPU s of it.
  n = 8: evaluation 0.94 / 0.75 CPU s, whole study 1.65 / 1.56 CPU s (a sweep of chunk sizes just before:
  0.87 against 0.88);
  n = 6: evaluation 0.22 / 0.30 CPU s (1.4x), whole study 1.34 / 1.55 CPU s.
  On this CPU batching the models in vmap pays while a model's cube is small; at n >= 8 a plain pass over
  one model's 2^n inputs is as fast.

    python benchmarks/init_study.py --n 6      # M = 256 at another length; --inits for another M
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sensviz import cube  # noqa: E402
from sensviz.init_study import batched_outputs, init_models, init_study, looped_outputs  # noqa: E402
from sensviz.models import ModelSettings  # noqa: E402

CPU = {}
"""What each `best` call used: the least process CPU seconds (every torch thread's), by its wall row."""


def best(fn, repeat: int):
    times, cpus, result = [], [], None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    CPU[len(CPU)] = min(cpus)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="M = 16 at n = 6")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs (default 1)")
    parser.add_argument("--arch", default="encoder", choices=("encoder", "formal"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the pages compute; "
                        "two spin on a loaded 2-core machine)")
    parser.add_argument("--n", type=int, help="input length (default 10; 6 with --quick)")
    parser.add_argument("--inits", type=int, help="initialisations M (default 256; 16 with --quick)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    m, n, d = (16, 6, 32) if args.quick else (256, 10, 32)
    m, n = args.inits or m, args.n or n
    settings = ModelSettings(arch=args.arch, d_model=d, n_layers=2, n_heads=2)
    bits = cube.vertices(n)
    build_s, models = best(lambda: init_models(settings, n, m), args.repeat)
    ours_s, (out, ent) = best(lambda: batched_outputs(models, bits), args.repeat)
    loop_s, (ref_out, ref_ent) = best(lambda: looped_outputs(models, bits), args.repeat)
    study_s, study = best(lambda: init_study(settings, n, m, task="parity"), args.repeat)
    study_loop_s, study_loop = best(lambda: init_study(settings, n, m, task="parity", batched=False), args.repeat)
    agree_eval = torch.allclose(out, ref_out, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    agree_study = torch.equal(study.avg_sensitivity, study_loop.avg_sensitivity)
    print(f"initialisation study: {args.arch}, M = {m}, n = {n} (2^n = {2**n} vertices), d = {d}, 2 layers, 2 heads, "
          f"{torch.get_num_threads()} threads")
    cpu = list(CPU.values())  # build, ours, loop, study, study loop
    print(f"{'what':<34}{'ours s (CPU s)':>18}{'loop s (CPU s)':>18}{'speed-up':>10}  agree")
    print(f"{'build M models (shared)':<34}{build_s:>8.2f} ({cpu[0]:>6.2f}){build_s:>10.2f} ({cpu[0]:>6.2f}){'':>10}  -")
    print(f"{'evaluate the cube (+ entropy)':<34}{ours_s:>8.2f} ({cpu[1]:>6.2f}){loop_s:>10.2f} ({cpu[2]:>6.2f})"
          f"{loop_s / ours_s:>9.2f}x  {agree_eval}")
    print(f"{'whole study (build + eval + as_n)':<34}{study_s:>8.2f} ({cpu[3]:>6.2f}){study_loop_s:>10.2f} "
          f"({cpu[4]:>6.2f}){study_loop_s / study_s:>9.2f}x  {agree_study}")
    print(f"ours, whole study: {study_s:.2f} s wall, {cpu[3]:.2f} CPU s ({'within' if study_s <= 10 else 'over'} the 10 s "
          f"goal in wall time); mean as_n = {study.avg_sensitivity.mean():.3f} (n/2 = {n / 2:g}, target PARITY "
          f"{study.target_avg_sensitivity:g}); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
