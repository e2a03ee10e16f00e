"""The training loop that the experiment scripts of chapters 12, 14 and 16 share (bench/imdb_mlm.py,
bench/transformer_xl.py, bench/modern_ablation.py): Noam-scheduled Adam with gradient clipping, a checkpoint every
`save_every` steps (model, optimiser, schedule, the batch generator's state and any carried state such as
Transformer-XL's memory) that a later call resumes from, and a results JSON that grows one finished run at a time.
Not part of the library. Also: tiny-shakespeare as a character vocabulary and two tensors."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from annotated_transformer.checkpoint import atomic_write
from annotated_transformer.data import load_corpus
from annotated_transformer.language_model import CharVocab
from annotated_transformer.training import noam_optimizer


RESULTS = Path(__file__).parent / "results"
DEVICE = torch.device("cpu")       # where models and batches live; `use_device` changes it (`--device`)


def use_device(name: str) -> torch.device:
    "Set `DEVICE` from `--device` (`auto`: the GPU where there is one); on a GPU, float32 matrix products use TF32."
    global DEVICE
    DEVICE = torch.device("cuda" if name == "auto" and torch.cuda.is_available() else "cpu" if name == "auto" else name)
    if DEVICE.type == "cuda": torch.set_float32_matmul_precision("high")
    return DEVICE


def add_common_args(p, dry_run_help: str = "a tiny run end to end, written under runs/ (< 1 minute)") -> None:
    "The arguments every experiment script takes besides its design: its files, where it runs, how many runs at once."
    p.add_argument("--tag", default="full")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--dry-run", action="store_true", help=dry_run_help)
    p.add_argument("--out")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (the GPU where there is one)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process (a GPU has room for several)")


DATA = {}   # what `init_text_worker` loaded in this process


def init_text_worker(a, val_chars: int | None = None) -> None:
    """Once per process that trains on tiny-shakespeare: one thread, the device (`a.device`), and in `DATA` the
    vocabulary size and the training and validation ids on that device (the first `val_chars` of validation)."""
    torch.set_num_threads(1)
    use_device(a.device)
    vocab, train, val = shakespeare(a.data_dir)
    DATA.update(vocab=len(vocab), train=train.to(DEVICE), val=val[:val_chars].to(DEVICE))


def pool(jobs: int, fn: Callable, items: list, init: Callable | None = None, initargs: tuple = ()):
    """Yield `(item, fn(*item))` for each tuple of `items` as it finishes, `jobs` at a time, each in a worker process
    (spawned, so that each opens its own CUDA context; `init(*initargs)` runs once per worker first). `jobs` 1: here,
    in order."""
    if jobs <= 1 or len(items) <= 1:
        if init: init(*initargs)
        for item in items: yield item, fn(*item)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    with ProcessPoolExecutor(min(jobs, len(items)), mp_context=multiprocessing.get_context("spawn"),
                             initializer=init, initargs=initargs) as ex:
        futures = {ex.submit(fn, *item): item for item in items}
        for f in as_completed(futures): yield futures[f], f.result()

def shakespeare(data_dir: str | None):
    "tiny-shakespeare as (vocabulary, training ids, validation ids), chapter 11's split."
    splits = load_corpus("tinyshakespeare", data_dir)
    vocab = CharVocab("".join(splits.values()))
    return vocab, vocab.encode_tensor(splits["train"]), vocab.encode_tensor(splits["val"])


def mean_sd(xs: list[float]) -> dict:
    "Mean, sample standard deviation (0 for one value) and the values."
    return {"mean": round(statistics.fmean(xs), 4), "sd": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0,
            "n": len(xs), "values": [round(x, 4) for x in xs]}


class Results:
    """A JSON file of finished runs keyed by name, rewritten (atomically) after each one; `--resume` keeps it."""
    def __init__(self, path: Path, header: dict, resume: bool, work: Path | None = None):
        self.path = Path(path)
        if self.path.exists() and not resume:
            raise SystemExit(f"{self.path} exists; pass --resume to go on with it or --out to write elsewhere.")
        if work is not None and Path(work).exists() and any(Path(work).iterdir()) and not resume:
            raise SystemExit(f"{work} holds the checkpoints of an earlier run; pass --resume to go on with them or --tag to start another.")
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {**header, "runs": {}}
        self.data.setdefault("runs", {})
    def done(self, key: str) -> bool: return key in self.data["runs"]
    def __getitem__(self, key): return self.data[key]
    def put(self, key: str, value, top: bool = False):
        (self.data if top else self.data["runs"])[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda p: p.write_text(json.dumps(self.data, indent=1) + "\n"))


def train(model: torch.nn.Module, loss_fn: Callable, steps: int, *, d_model: int, lr_factor: float, warmup: int,
          seed: int, ckpt: Path | None = None, save_every: int = 200, log_every: int = 100, name: str = "",
          clip: float = 1.0, state=None, opt_and_sched=None) -> dict:
    """Train `model` for `steps` optimiser steps. `loss_fn(model, generator, step, state) -> (loss, state)` draws its
    own batch from `generator` (seeded by `seed`) and may carry `state` from step to step (a memory). With `ckpt`,
    the run resumes from that file when it exists and saves to it every `save_every` steps (and at the end).
    Returns {"curve": [(step, loss)], "train_seconds", "seconds_per_step" (median of the logged stretches)}."""
    opt, sched = opt_and_sched or noam_optimizer(model, d_model, lr_factor, warmup)
    g = torch.Generator().manual_seed(seed)
    start, curve, seconds = 0, [], 0.0
    if ckpt is not None and Path(ckpt).exists():
        c = torch.load(ckpt, weights_only=False)
        model.load_state_dict(c["model"]); opt.load_state_dict(c["opt"]); sched.load_state_dict(c["sched"])
        g.set_state(c["generator"]); start, curve, seconds, state = c["step"], c["curve"], c["seconds"], c["state"]
        print(f"{name}: resumed at step {start}", flush=True)

    def save(step):
        if ckpt is None: return
        Path(ckpt).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(ckpt, lambda p: torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
            "sched": sched.state_dict(), "generator": g.get_state(), "step": step, "curve": curve, "seconds": seconds,
            "state": state}, p))

    model.train()
    t0, stretch, stretch_times = time.perf_counter(), time.perf_counter(), []
    for step in range(start, steps):
        loss, state = loss_fn(model, g, step, state)
        opt.zero_grad(set_to_none=True); loss.backward()
        if clip: torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step(); sched.step()
        if (step + 1) % log_every == 0 or step + 1 == steps or step == start:
            now = time.perf_counter()
            if step > start: stretch_times.append((now - stretch) / ((step - start) % log_every or log_every))
            stretch = now
            curve.append((step + 1, round(loss.item(), 4)))
            print(f"{name}: step {step + 1} loss {curve[-1][1]:.4f} ({seconds + now - t0:.0f} s)", flush=True)
        if (step + 1) % save_every == 0 and step + 1 < steps:
            seconds += time.perf_counter() - t0; t0 = time.perf_counter(); save(step + 1)
    seconds += time.perf_counter() - t0
    save(steps)
    return {"curve": curve, "train_seconds": round(seconds, 1), "state": state,
            "seconds_per_step": round(statistics.median(stretch_times), 4) if stretch_times else None}


def interleaved_step_times(steps: dict[str, Callable[[], None]], rounds: int = 5, per_round: int = 3) -> dict:
    """Median seconds of one call of each `steps[name]()`, measured in interleaved rounds (each round runs every
    entry `per_round` times, one after the other), so that a change of load on the machine touches all alike."""
    sync = torch.cuda.synchronize if DEVICE.type == "cuda" else (lambda: None)   # a GPU runs behind the host
    for f in steps.values(): f()                                           # warm up
    times = {k: [] for k in steps}
    for _ in range(rounds):
        for k, f in steps.items():
            sync(); t0 = time.perf_counter()
            for _ in range(per_round): f()
            sync(); times[k].append((time.perf_counter() - t0) / per_round)
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def cpu_estimate(step_seconds: float, steps: int, runs: int) -> float:
    "Hours of one core for `runs` runs of `steps` steps at `step_seconds` each."
    return round(step_seconds * steps * runs / 3600, 2)


def open_results(name: str, a, **header) -> tuple[Results, Path]:
    """The results file and work folder of experiment `name` for the parsed arguments `a` (`--out`, `--tag`,
    `--dry-run`, `--resume`, `--device`): `bench/results/<name>-<tag>-<machine>.json` (the GPU's name on a GPU; a dry
    run writes under runs/ and starts afresh), the work folder `runs/<name>-<tag>`; `header` adds entries to the
    file's top level."""
    from copy_task import machine, slug
    m = machine()
    use_device(a.device)
    out = Path(a.out) if a.out else (Path("runs") if a.dry_run else RESULTS) / f"{name}-{a.tag}-{slug(m, DEVICE.type)}.json"
    work = Path("runs") / f"{name}-{a.tag}"
    if a.dry_run:
        out.unlink(missing_ok=True); shutil.rmtree(work, ignore_errors=True)
    settings = {k: v for k, v in vars(a).items() if k not in ("data_dir", "out", "resume", "dry_run", "jobs", "speed_only")}
    return Results(out, {"machine": m, "torch": torch.__version__, "threads": 1, "device": DEVICE.type,
                         "tf32": DEVICE.type == "cuda", "jobs": a.jobs, "settings": settings, **header},
                   a.resume or a.dry_run, work), work
