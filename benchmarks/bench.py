"""sensviz benchmarks: ours vs. a naive baseline, in one run, printed as a table.

    python benchmarks/bench.py            # full sizes
    python benchmarks/bench.py --quick    # small sizes (CI)
    python benchmarks/bench.py --only spectrum
    python benchmarks/bench.py --device cuda --only sharpness --only slice   # on a GPU

Each row times our implementation and a straightforward baseline on the same input and checks
that both give the same numbers (the `agree` column). Timings are the best of `--repeat` runs.
Models, inputs and training run on `--device` (default cpu); the spectrum rows are tensor math on
the CPU and the page rows are Streamlit's AppTest, so those two sections always run on the CPU.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from reference import AuthorsModel  # noqa: E402

import sensviz as sv  # noqa: E402
from sensviz import analysis, cube, curvature, slices  # noqa: E402
from sensviz.losses import loss_value  # noqa: E402
from sensviz.params import ParamSpace, make_generator, sphere_directions  # noqa: E402
from sensviz.sharpness import sharpness, sharpness_limit  # noqa: E402
from sensviz.training import Callback, TrainConfig, TrainingData, seeded, train, train_many  # noqa: E402
from ui import nav  # noqa: E402

ROWS: list[dict] = []
DEVICE = torch.device("cpu")
"""Where models, inputs and training live (`--device`)."""


def synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def best_time(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        synchronize()
        start = time.perf_counter()
        result = fn()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


def row(name: str, ours: float, baseline: float | None, agree: bool | None, note: str = "") -> None:
    ROWS.append({"benchmark": name, "ours_s": ours, "baseline_s": baseline, "agree": agree, "note": note})


def dense_character_avg_sensitivity(table: torch.Tensor) -> float:
    """Baseline: lambda = chi^T f / 2^n with the dense 2^n x 2^n character matrix (the authors' approach)."""
    n = table.numel().bit_length() - 1
    x = 2.0 * cube.vertices(n).double() - 1.0
    chi = torch.ones(2**n, 2**n, dtype=torch.float64)
    for i in range(n):  # chi[x, P] = prod_{i in P} x_i
        member = cube.vertices(n)[:, i].bool()
        chi[:, member] *= x[:, i : i + 1]
    coeffs = chi.T @ table / 2**n
    return float((coeffs**2 * cube.hamming_weight(n)).sum())


def bench_spectrum(sizes, dense_max, repeat):
    for n in sizes:
        table = sv.get_task(f"random:seed={n}").values_pm1(n)
        ours_t, ours = best_time(lambda: cube.analyze(table).avg_sensitivity, repeat)
        base_t, agree = None, None
        if n <= dense_max:
            base_t, base = best_time(lambda: dense_character_avg_sensitivity(table), 1)
            agree = abs(base - ours) < 1e-9
        row(f"spectrum + as_n, n={n}", ours_t, base_t, agree, "FWHT vs dense character matrix")


def per_bit_model_sensitivity(model, n, batch_size=8192) -> float:
    """Baseline: one forward pass per (input, bit) — 2^n (n+1) strings in all."""
    bits = cube.vertices(n)
    f = analysis.model_outputs(model, bits, batch_size)
    total = torch.zeros(2**n, dtype=torch.float64)
    for i in range(n):
        g = analysis.model_outputs(model, cube.flip(bits, i), batch_size)
        total += ((f.double() - g.double()) / 2) ** 2
    return total.mean().item()


def bench_model_sensitivity(sizes, repeat):
    for n in sizes:
        model = sv.build_model("encoder", d_model=32, n_layers=2, n_heads=2, max_len=n, seed=0).eval().to(DEVICE)
        ours_t, ours = best_time(lambda: cube.analyze(analysis.cube_outputs(model, n).double()).avg_sensitivity, repeat)
        base_t, base = best_time(lambda: per_bit_model_sensitivity(model, n), 1)
        row(f"model s(f,x) on the cube, n={n}, d=32", ours_t, base_t, abs(ours - base) < 1e-6 * max(1, abs(base)),
            "2^n passes + neighbour indexing vs 2^n(n+1) passes")


class StepClock(Callback):
    """Times the steps after the first (so that warm-up and evaluations at step 0 are left out)."""

    def __init__(self):
        self.start = self.end = None
        self.losses = []

    def on_step(self, state):
        if state.member == 0:
            synchronize()
            if state.step == 1:
                self.start = time.perf_counter()
            self.end = time.perf_counter()
            self.losses.append(state.loss)


def torch_encoder_loop(model, config: TrainConfig, task) -> tuple[float, list[float]]:
    """Baseline: a plain AdamW loop over `torch.nn.TransformerEncoder` on the same batches as ours.

    Returns the seconds for steps 2..S (as `StepClock`) and the training losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    data = TrainingData(config)
    losses, start = [], None
    for step in range(config.steps):
        bits = data.batch(config.n).to(DEVICE)
        if step == 1:
            synchronize()
            start = time.perf_counter()
        loss = ((model(bits) - task(bits)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    synchronize()
    return time.perf_counter() - start, losses


def bench_training_throughput(sizes, steps, repeat):
    """Our `train` vs a plain loop over `torch.nn.TransformerEncoder` from the same initial weights on
    the same batches: seconds for steps 2..S (best of `repeat`), and whether the losses agree."""
    task = sv.get_task("parity")
    for d_model, n, batch in sizes:
        config = TrainConfig(n=n, batch_size=batch, steps=steps, eval_interval=steps, eval_size=256, device=str(DEVICE))
        ours_s, base_s = float("inf"), float("inf")
        for _ in range(repeat):
            clock = StepClock()
            train(sv.build_model("encoder", d_model=d_model, n_layers=2, n_heads=2, max_len=n, seed=0), task, config, [clock])
            ours_s = min(ours_s, clock.end - clock.start)
            torch.manual_seed(0)
            theirs = AuthorsModel(d_model, 2, 2, max_len=n).to(DEVICE)  # the same initial weights as ours (seed 0)
            seconds, base_losses = torch_encoder_loop(theirs, config, task)
            base_s = min(base_s, seconds)
        timed = batch * (steps - 1)
        agree = all(abs(a - b) <= 1e-3 * max(1.0, abs(b)) for a, b in zip(clock.losses, base_losses))
        row(f"train d={d_model} n={n} batch={batch} ({steps} steps)", ours_s, base_s, agree,
            f"{timed / ours_s:,.0f} vs {timed / base_s:,.0f} samples/s; nn.TransformerEncoder loop")


def bench_multi_seed(k, steps, repeat, d_model=32, n=8, batch=256):
    """K seeds in one `train_many` run vs K `train` runs (best of `repeat`). They agree to float
    rounding at first; once PARITY starts to be learned, rounding differences grow chaotically, so
    `agree` compares the evaluations of the first 20 steps."""
    config = TrainConfig(n=n, batch_size=batch, steps=steps, lr=9e-4, eval_interval=10, eval_size=256,
                         device=str(DEVICE))
    configs = seeded(config, range(k))

    def models():
        return [sv.build_model("encoder", d_model=d_model, n_layers=2, n_heads=2, max_len=n, seed=s) for s in range(k)]

    ours_s, together = best_time(lambda: train_many(models(), "parity", configs), repeat)
    base_s, alone = best_time(lambda: [train(m, "parity", c) for m, c in zip(models(), configs)], repeat)
    agree = all(abs(x["eval_loss"] - y["eval_loss"]) <= 1e-5
                for a, b in zip(together, alone) for x, y in zip(a.history, b.history) if x["step"] <= 20)
    row(f"{k} seeds, d={d_model} n={n} batch={batch} ({steps} steps)", ours_s, base_s, agree,
        f"train_many (vmap) vs {k} train runs; {k * batch * steps / ours_s:,.0f} vs {k * batch * steps / base_s:,.0f} samples/s")


def landscape_model(d_model: int, n: int, seed: int = 0):
    return sv.build_model("encoder", d_model=d_model, n_layers=2, n_heads=2, max_len=n, seed=seed).to(DEVICE)


def functional_loop(model, bits, offsets) -> torch.Tensor:
    """Baseline: one functional_call per parameter offset, as the paper's code does: `[K, batch]`."""
    space = ParamSpace(model, positional=offsets.shape[1] != model.n_params())
    with torch.no_grad():
        return torch.stack([
            torch.func.functional_call(model, {**space.fixed, **space.unflatten(space.base + o.to(DEVICE))}, (bits,))
            for o in offsets
        ])


def loop_sharpness(model, bits, rho, n_directions, seed) -> tuple[float, float]:
    """Baseline L_rho and its stderr: the same directions as `sharpness`, one forward per direction."""
    directions = sphere_directions(model.n_params(), n_directions, rho, make_generator(seed))
    with torch.no_grad():
        base = model(bits).double()
    per_direction = (functional_loop(model, bits, directions).double() - base).pow(2).mean(dim=1)
    return per_direction.mean().item(), (per_direction.std() / n_directions**0.5).item()


def bench_sharpness(widths, n, repeat):
    bits, rho, k = cube.vertices(n).to(DEVICE), 0.01, 100
    for d in widths:
        model = landscape_model(d, n)
        ours_t, ours = best_time(lambda: sharpness(model, bits, rho, k, seed=0, limit=False), repeat)
        base_t, (base, base_err) = best_time(lambda: loop_sharpness(model, bits, rho, k, 0), 1)
        row(f"sharpness, {k} dirs x {2**n} inputs, d={d}", ours_t, base_t, abs(ours.value - base) <= 1e-5 * base,
            "ParamSpace.outputs (vmapped; a CPU call per direction for many inputs) vs functional_call per direction")
        limit_t, limit = best_time(lambda: sharpness_limit(model, bits), repeat)
        row(f"exact small-rho limit, {2**n} inputs, d={d}", limit_t, base_t,
            abs(base / rho**2 - limit.value) < 4 * base_err / rho**2,
            f"vmap(grad) vs the {k}-direction loop (agree: within 4 stderr)")


def bench_slice(d, n, steps, repeat):
    model = landscape_model(d, n)
    bits = cube.vertices(n).to(DEVICE)
    targets = sv.get_task("parity")(bits)
    directions = slices.random_directions(model, 2, "filter", seed=0)
    ours_t, frame = best_time(lambda: slices.loss_slice(model, bits, targets, directions, steps=steps), repeat)
    _, coeffs = slices._grid_points(directions, slices.grid(1.0, steps), None)
    offsets = (coeffs @ directions.double().cpu()).float()  # [steps^2, P] (moved to the device per point)

    def loop():
        return loss_value(functional_loop(model, bits, offsets).double().cpu(), targets.double().cpu())

    base_t, base = best_time(loop, 1)
    agree = bool(torch.allclose(torch.tensor(frame["loss"].to_numpy()), base, rtol=1e-5))
    row(f"2-D loss slice {steps}x{steps}, n={n}, d={d}", ours_t, base_t, agree,
        "ParamSpace.outputs over the grid vs functional_call per point")

    one = bits[:1]
    ours_t, frame = best_time(lambda: slices.output_slice(model, one[0], directions, steps=steps), repeat)
    base_t, base = best_time(lambda: functional_loop(model, one, offsets)[:, 0].double().cpu(), 1)
    agree = bool(torch.allclose(torch.tensor(frame["output"].to_numpy()), base, rtol=1e-5, atol=1e-6))
    row(f"2-D output slice {steps}x{steps}, one input, d={d}", ours_t, base_t, agree, "the same, on one input")


def bench_hessian(cases, repeat):
    for d, n, baseline in cases:
        model = landscape_model(d, n)
        bits = cube.vertices(n).to(DEVICE)
        targets = sv.get_task("majority")(bits)
        ours_t, ours = best_time(lambda: curvature.top_eigenvalues(model, bits, targets).values[0].item(), repeat)
        if baseline == "dense":
            base_t, base = best_time(lambda: torch.linalg.eigvalsh(curvature.dense_hessian(model, bits, targets))[-1].item(), 1)
            agree, note = abs(ours - base) <= 1e-4 * abs(base), "Lanczos vs eigvalsh of the dense Hessian"
        else:
            power = lambda: curvature.top_eigenvalues(model, bits, targets, method="power", tol=1e-5, n_iter=1000)  # noqa: E731
            base_t, eig = best_time(power, 1)
            base = eig.values[0].item()
            agree, note = abs(ours - base) <= 1e-3 * abs(base), "Lanczos vs power iteration"
        row(f"top Hessian eigenvalue, P={model.n_params()}, n={n}", ours_t, base_t, agree, note)


def bench_pages(model: str, pages):
    """Each page of the explorer opened by URL (`?model=...`) under AppTest: the first render on
    empty caches (the "baseline" column) and a re-render with the same settings (cached).
    `benchmarks/explorer.py` times the same against a served app, as a browser sees it."""
    import logging

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    logging.getLogger("streamlit").setLevel(logging.ERROR)  # AppTest runs without a server: quiet its warnings
    for spec in pages:
        st.cache_data.clear()
        st.cache_resource.clear()
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        at.query_params["model"] = model
        at.switch_page(spec.file)
        start = time.perf_counter()
        at.run()
        first = time.perf_counter() - start
        start = time.perf_counter()
        at.run()
        cached = time.perf_counter() - start
        row(f"page {spec.key}, {model}", cached, first, None if not at.exception else False,
            "cached re-render vs first render (AppTest)")


INSPECT_TARGET_S = 10.0
"""`sensviz inspect` with its defaults answers within this on every zoo checkpoint."""


def bench_inspect(names):
    """`sensviz inspect CKPT` with its defaults (`sensviz.measure`), end to end, one row per
    architecture's largest zoo checkpoint; the note compares with the target."""
    import contextlib
    import io

    from sensviz.cli import main as cli

    for name in names:
        path = str(ROOT / "checkpoints" / f"{name}.safetensors")
        with contextlib.redirect_stdout(io.StringIO()) as out:
            seconds, code = best_time(lambda: cli(["inspect", path]), 1)
        ok = code == 0 and seconds <= INSPECT_TARGET_S
        row(f"inspect (defaults), {name}", seconds, None, code == 0,
            f"{'within' if ok else 'OVER'} the {INSPECT_TARGET_S:g} s target; {len(out.getvalue())} bytes of JSON")


SECTIONS = {
    "spectrum": lambda q, r: bench_spectrum([10, 16] if q else [12, 16, 20], 10 if q else 12, r),
    "model_sensitivity": lambda q, r: bench_model_sensitivity([8] if q else [10, 14], r),
    "training": lambda q, r: bench_training_throughput([(128, 20, 1024), (32, 8, 256)], 4 if q else 30, r),
    "multi_seed": lambda q, r: bench_multi_seed(8, 20 if q else 300, r),
    "sharpness": lambda q, r: bench_sharpness([32] if q else [32, 128], 8 if q else 10, r),
    "slice": lambda q, r: bench_slice(32, 8 if q else 10, 11 if q else 41, r),
    "hessian": lambda q, r: bench_hessian([(8, 6, "dense")] if q else [(16, 8, "dense"), (32, 10, "power")], r),
    "inspect": lambda q, r: bench_inspect(["formal-parity-n4", "encoder-parity-n6", "scratchpad-parity-n8"] if q else
                                          ["formal-parity-n8", "encoder-parity-n16", "scratchpad-parity-n32"]),
    "pages": lambda q, r: bench_pages("encoder-parity-n6" if q else "encoder-parity-n10",
                                      nav.PAGES[:3] if q else nav.PAGES),
}


def print_table() -> None:
    header = f"{'benchmark':<46} {'ours (s)':>10} {'baseline (s)':>13} {'speedup':>9} {'agree':>6}  note"
    print(header)
    print("-" * len(header))
    for r in ROWS:
        base = f"{r['baseline_s']:.4f}" if r["baseline_s"] is not None else "-"
        speed = f"{r['baseline_s'] / r['ours_s']:.1f}x" if r["baseline_s"] is not None else "-"
        agree = {True: "yes", False: "NO", None: "-"}[r["agree"]]
        print(f"{r['benchmark']:<46} {r['ours_s']:>10.4f} {base:>13} {speed:>9} {agree:>6}  {r['note']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of ours (best is reported)")
    parser.add_argument("--device", default="cpu", help="where models and inputs live, e.g. cuda (default cpu)")
    args = parser.parse_args(argv)
    global DEVICE
    try:
        DEVICE = torch.device(args.device)
        torch.empty(0, device=DEVICE)
    except (RuntimeError, AssertionError) as err:
        parser.error(f"cannot use device '{args.device}': {err}")
    torch.set_num_threads(2)
    try:
        for name in args.only or SECTIONS:
            SECTIONS[name](args.quick, args.repeat)
    finally:  # the rows measured so far, also when a section fails
        print_table()
        for thread in threading.enumerate():  # the app's warm-up (pages section): a daemon thread still in
            if thread.name == "sensviz-warm-up":  # torch when the interpreter exits aborts it (std::terminate)
                thread.join(timeout=600)
    return 0 if all(r["agree"] is not False for r in ROWS) else 1


if __name__ == "__main__":
    sys.exit(main())
