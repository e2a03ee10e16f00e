#!/usr/bin/env python
"""The command line against a hostile user: each case runs `annotated-transformer` in a process of its own, limited to
2 GiB of address space (RLIMIT_AS) and 60 s, and checks its exit code, that standard error says one line (no
traceback), and that a folder of the user's files is byte-identical afterwards. Prints one line per case and a
summary; exits 1 if any case failed. Run from the repository root: `python .ci/adversarial.py [-k SUBSTRING]`."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_AS, TIMEOUT = 2 << 30, 60
PROG = "annotated-transformer"
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1",
       "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


def limits(fsize: int | None = None):
    "preexec_fn: the memory bound of every case (and a file-size limit for `ulimit -f`)."
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
        if fsize is not None: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


def cli(args: list[str], stdin: bytes | None = None, inject: str = "", fsize: int | None = None,
        timeout: float = TIMEOUT) -> tuple[int | None, str, str, float]:
    """Run the program with `args` (str or bytes); `inject`: Python run first (a simulated fault). Returns (exit code,
    stdout, stderr, seconds); the code is None when the process overran `timeout` (it is killed)."""
    code = f"{inject}\nimport sys\nfrom annotated_transformer.cli import main\nsys.exit(main())"
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV, cwd=WORK, preexec_fn=limits(fsize))
    try: out, err = p.communicate(stdin or b"", timeout=timeout); rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill(); out, err = p.communicate(); rc = None
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.perf_counter() - t0


def digest(folder: Path) -> dict[str, str]:
    "Every entry under `folder`: file contents' sha256, link targets, folders."
    d = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink(): d[rel] = "link:" + os.readlink(p)
        elif p.is_file(): d[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else: d[rel] = "dir"
    return d


RESULTS: list[tuple[str, bool, str]] = []
JOBS: list = []
LOG = re.compile(r"^(training \w+: |step \d+: )")   # train's progress log on stderr, before any error


def case(name: str, args: list, rc: int | tuple[int, ...], has: str | None = None, lacks: tuple[str, ...] = (), keep: list[Path] = (),
         **kw) -> None:
    """Queue one case: exit code `rc`, exactly one line on stderr besides train's log (containing `has`, none of
    `lacks`), nothing on stdout, within the time limit, and every folder of `keep` byte-identical afterwards."""
    if FILTER and FILTER not in name: return
    JOBS.append(lambda: _case(name, args, rc, has, lacks, keep, **kw))


def _case(name, args, rc, has, lacks, keep, **kw) -> list[str]:
    before = [digest(k) for k in keep]
    got, out, err, secs = cli([str(a) if isinstance(a, Path) else a for a in args], **kw)
    lines = [l for l in err.strip().splitlines() if not LOG.match(l)]
    problems = []
    if got is None: problems.append(f"still running after {kw.get('timeout', TIMEOUT)} s")
    elif got not in (rc if isinstance(rc, tuple) else (rc,)): problems.append(f"exit {got}, expected {rc}")
    if len(lines) != 1: problems.append(f"{len(lines)} lines on stderr")
    if has is not None and has not in err: problems.append(f"stderr lacks {has!r}")
    problems += [f"stderr says {s!r}" for s in lacks if s in err]
    if out.strip(): problems.append(f"stdout: {out.strip()[:80]!r}")
    problems += [f"{k} changed" for k, b in zip(keep, before) if digest(k) != b]
    ok = not problems
    RESULTS.append((name, ok, "; ".join(problems)))
    shown = (lines[-1] if lines else "(nothing on stderr)")[:150]
    report = [f"{'ok  ' if ok else 'FAIL'} {name} ({secs:.1f} s): {shown}" + ("" if ok else f"  <-- {'; '.join(problems)}")]
    if not ok and len(lines) > 1: report += ["     " + l for l in lines[-8:]]
    return report


def check(name: str, ok: bool, detail: str = "") -> list[str]:
    "A case checked by hand."
    RESULTS.append((name, ok, detail))
    return [f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else "")]


def job(name: str):
    "Queue a hand-written case (a function returning its report lines)."
    def add(f):
        if not FILTER or FILTER in name: JOBS.append(f)
        return f
    return add


def run_all(workers: int) -> None:
    "The queued cases, `workers` at a time (each is a process of its own), reported in order."
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(workers) as pool:
        for report in pool.map(lambda f: f(), JOBS): print("\n".join(report), flush=True)


def try_mount(where: Path, options: str) -> bool:
    "A small tmpfs at `where` (root only): a real full or read-only disk."
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"): return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True).returncode == 0


def setup(tmp: Path) -> dict:
    "A small trained run, a folder of the user's files, a hostile Hugging Face folder, damaged checkpoints."
    rc, out, err, _ = cli(["train", "--task", "copy", "--max-steps", "4", "--eval-every", "2", "--keep-checkpoints", "2",
                           "--out", str(tmp / "run"), "--no-progress", "--device", "cpu"], timeout=300)
    if rc != 0: sys.exit(f"setup: training the small run failed:\n{err}")
    user = tmp / "user"; user.mkdir()
    files = {"notes.txt": b"mine\n", "metrics.jsonl": b'{"mine": 1}\n', "task.json": b'{"mine": true}\n',
             "train_config.json": b"{}\n", "config.json": b'{"model_type": "gpt2"}\n', "model.safetensors": b"\0" * 64,
             "tokenizer.json": b"{}\n", "sub/deep.txt": b"deep\n"}
    for name, data in files.items():
        (user / name).parent.mkdir(parents=True, exist_ok=True); (user / name).write_bytes(data)
    (tmp / "afile").write_text("a file, not a folder\n")
    # a Hugging Face folder whose pickle would run code when loaded without weights_only
    hf = tmp / "hf-evil"; hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 10, "n_positions": 16, "n_embd": 8,
                                                "n_layer": 1, "n_head": 2, "bos_token_id": 0}))
    marker = tmp / "PWNED"
    evil = (f"import torch, os\nclass Evil:\n    def __reduce__(self): return (os.system, ({f'touch {marker}'!r},))\n"
            f"torch.save({{'wte.weight': Evil()}}, {str(hf / 'pytorch_model.bin')!r})")
    subprocess.run([sys.executable, "-c", evil], check=True, env=ENV)
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate("a b c d e f g h i j".split())}, unk_token="a"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit(); tok.save(str(hf / "tokenizer.json"))
    bad_json = tmp / "hf-badjson"; bad_json.mkdir(); (bad_json / "config.json").write_text('{"model_type": "gpt2", ')
    tok.save(str(bad_json / "tokenizer.json"))
    # checkpoints whose config.json describes an absurd or impossible model (the weights file is the small run's)
    step = sorted((tmp / "run").glob("step-*"), key=lambda p: int(p.name[5:]))[-1]
    absurd = {}
    for name, change in (("N", 10**7), ("d_model", 10**9), ("h", 0)):
        d = tmp / f"ckpt-{name}"; shutil.copytree(step, d)
        cfg = json.loads((d / "config.json").read_text()); cfg["model"][name] = change
        (d / "config.json").write_text(json.dumps(cfg)); absurd[name] = d
    five = tmp / "five.toml"; five.write_text('task = "copy"\nmax_steps = "five"\n')
    return dict(user=user, hf=hf, marker=marker, bad_json=bad_json, absurd=absurd, five=five, steps=sorted(
        (tmp / "run").glob("step-*"), key=lambda p: int(p.name[5:])))


def main() -> int:
    global WORK, FILTER
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", dest="filter", default="", help="run only the cases whose name holds this")
    ap.add_argument("-j", dest="workers", type=int, default=3, help="cases run at once (default: 3)")
    opts = ap.parse_args(); FILTER = opts.filter
    tmp = Path(tempfile.mkdtemp(prefix="adversarial-")); WORK = tmp
    mounts = []
    t0 = time.perf_counter()
    try:
        s = setup(tmp)
        run, steps = tmp / "run", s["steps"]
        copies = iter(range(10**6))
        def user() -> Path:
            "A fresh copy of the user's folder, so that a case that damages one cannot hide another's damage."
            d = tmp / f"user-{next(copies)}"; shutil.copytree(s["user"], d, symlinks=True); return d

        # --- exhaustion: every size is checked before any work
        case("translate --beam 100000", ["translate", "--beam", "100000", "Ein Mann."], 2, "GiB")
        case("translate --max-len 1e9", ["translate", "--max-len", "1000000000", "Ein Mann."], 2, "positional table")
        case("generate --max-new-tokens 1e9", ["generate", "--max-new-tokens", "1000000000"], 2, "GiB")
        case("train --threads 100000", ["train", "--threads", "100000", "--out", tmp / "t-threads"], 2, "CPU")
        case("train --batch-size 1e9", ["train", "--batch-size", "1000000000", "--out", tmp / "t-batch"], 2, "GiB")
        case("train --batch-size 1e9 (literal)", ["train", "--batch-size", "1e9", "--out", tmp / "t-batch"], 2)
        case("translate --batch-size 1e9 (literal)", ["translate", "--batch-size", "1e9", "x"], 2)
        case("eval --n 1e9", ["eval", "--checkpoint", run, "--n", "1000000000"], 2, "--n", keep=[run])
        case("eval --beam 1e6", ["eval", "--checkpoint", "pretrained:multi30k-small", "--beam", "1000000"], 2, "GiB")
        for name, d in s["absurd"].items():
            case(f"checkpoint with {name}={json.loads((d / 'config.json').read_text())['model'][name]}",
                 ["eval", "--checkpoint", d, "--n", "10"], 1, str(d), keep=[d])

        # --- raw tracebacks: each expected failure is one line and its exit code
        case("--out is a file (train)", ["train", "--out", tmp / "afile", "--max-steps", "1"], 2, "afile")
        case("--out is a file (web)", ["web", "--out", tmp / "afile"], 2, "afile")
        case("--out under a file (train)", ["train", "--out", tmp / "afile" / "run", "--max-steps", "1", "--no-progress"],
             1, "not a folder")
        case("web --out non-empty", ["web", "--out", (u := user())], 2, "new or empty folder", keep=[u])
        case("invalid UTF-8 on stdin", ["translate"], 2, "UTF-8", stdin=b"ein caf\xe9 .\n")
        case("invalid UTF-8 in argv (translate)", ["translate", b"caf\xe9"], 2, "UTF-8")
        case("invalid UTF-8 in argv (classify)", ["classify", b"caf\xe9 \xff"], 2, "UTF-8")
        case("invalid UTF-8 in --prompt", ["generate", "--prompt", b"\xff\xfe"], 2, "UTF-8")

        @job("malicious pytorch_model.bin")
        def _():
            report = _case("malicious pytorch_model.bin", ["generate", "--checkpoint", s["hf"], "--max-new-tokens", "2"],
                           1, str(s["hf"]), ("weights_only=False", "Traceback"), [s["hf"]])
            return report + check("malicious pytorch_model.bin ran no code", not s["marker"].exists())
        case("invalid HF config.json", ["generate", "--checkpoint", s["bad_json"], "--max-new-tokens", "2"], 1,
             "config.json")
        case("hf:../../nonexistent", ["generate", "--checkpoint", "hf:../../nonexistent"], 1, "nonexistent")
        case("eval --split nosuch", ["eval", "--checkpoint", "pretrained:multi30k-small", "--split", "nosuch"], 2,
             "nosuch")
        case('--config max_steps = "five"', ["train", "--config", s["five"], "--out", tmp / "t-five"], 2,
             "max_steps")
        case("missing checkpoint", ["eval", "--checkpoint", tmp / "nowhere"], 1, "nowhere")
        case("unknown pretrained name", ["eval", "--checkpoint", "pretrained:nosuch"], 1, "nosuch")

        # disk full: a real 512 KiB file system where the program may mount one, and safetensors' own error always
        full = tmp / "full"
        if try_mount(full, "size=512k"):
            mounts.append(full)
            case("disk full (tmpfs)", ["train", "--max-steps", "2", "--out", full / "run", "--no-progress"], 1,
                 "no space left")
        else: print("     (not root or no mount: the full disk is simulated below only)")
        enospc = ("import safetensors, annotated_transformer.checkpoint as c\n"
                  "def full(*a, **k): raise safetensors.SafetensorError('Error while serializing: IoError(Os { code: 28, "
                  "kind: StorageFull, message: \"No space left on device\" })')\nc.save_file = full")
        case("disk full (SafetensorError)", ["train", "--max-steps", "2", "--out", tmp / "t-enospc", "--no-progress"], 1,
             "no space left", inject=enospc)
        case("ulimit -f", ["train", "--max-steps", "2", "--out", tmp / "t-fsize", "--no-progress"], 1, "ulimit -f",
             fsize=256 << 10)
        ro = tmp / "ro"
        if try_mount(ro, "size=64k,ro"):
            mounts.append(ro)
            case("read-only folder (tmpfs)", ["train", "--max-steps", "2", "--out", ro / "run", "--no-progress"], 1,
                 "read-only")
        erofs = ("import errno, os, pathlib\n"
                 "def mkdir(self, *a, **k): raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))\n"
                 "pathlib.Path.mkdir = mkdir")
        case("read-only folder (simulated)", ["average", "--out", tmp / "t-ro", *steps], 1, "read-only", inject=erofs)
        eacces = erofs.replace("OSError(errno.EROFS, os.strerror(errno.EROFS)", "PermissionError(errno.EACCES, 'Permission denied'")
        case("permission denied (simulated)", ["train", "--max-steps", "2", "--out", tmp / "t-acc", "--no-progress"], 1,
             "permission denied", inject=eacces)

        def interrupt_training(out_dir: Path, sig: int, times: int) -> tuple[int, str]:
            "Start `train` into `out_dir`, send `sig` `times` times once it has logged, return (exit code, stderr)."
            code = "import sys\nfrom annotated_transformer.cli import main\nsys.exit(main())"
            p = subprocess.Popen([sys.executable, "-c", code, "train", "--max-steps", "100000", "--eval-every", "100000",
                                  "--log-every", "2", "--out", str(out_dir), "--no-progress"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=tmp, preexec_fn=limits())
            try:
                deadline = time.time() + TIMEOUT
                while not (out_dir / "metrics.jsonl").is_file() and p.poll() is None and time.time() < deadline:
                    time.sleep(0.02)
                for _ in range(times): p.send_signal(sig); time.sleep(0.05)
                _, err = p.communicate(timeout=TIMEOUT)
            finally:
                if p.poll() is None: p.kill()
            return p.returncode, err.decode("utf-8", "replace")

        @job("double Ctrl-C")
        def _():
            "Ctrl-C three times during training: one message, no 'Exception ignored in atexit', exit 130."
            rc, err = interrupt_training(tmp / "t-ctrl-c", signal.SIGINT, 3)
            last = err.strip().splitlines()[-1] if err.strip() else ""
            return check("double Ctrl-C", rc == 130 and "Traceback" not in err and "Exception ignored" not in err
                         and last.startswith(f"{PROG}: stopped"), f"exit {rc}: {last[:120]}")

        @job("double SIGTERM before the first checkpoint")
        def _():
            "Two SIGTERMs before any checkpoint: one line, exit 143, and --resume works if the line says to use it."
            out_dir = tmp / "t-sigterm"
            rc, err = interrupt_training(out_dir, signal.SIGTERM, 2)
            lines = [l for l in err.strip().splitlines() if not LOG.match(l)]
            ok = rc == 143 and len(lines) == 1 and "Traceback" not in err
            detail = f"exit {rc}: {(lines or [''])[-1][:120]}"
            if ok and "--resume" in lines[-1]:
                rc, _, err2, _ = cli(["train", "--resume", "--max-steps", "4", "--out", str(out_dir), "--no-progress"])
                ok = rc == 0
                detail += f"; --resume: exit {rc} {(err2.strip().splitlines() or [''])[-1][:100]}"
            return check("double SIGTERM before the first checkpoint", ok, detail)

        # --- silent: empty input is a usage error; average takes pretrained:NAME
        case('translate ""', ["translate", ""], 2, "empty")
        case('classify ""', ["classify", "  "], 2, "empty")
        case("translate, blank standard input", ["translate"], 2, "standard input", stdin=b"\n  \n\n")
        case("classify, blank standard input", ["classify"], 2, "standard input", stdin=b"")

        @job("average pretrained:NAME")
        def _():
            rc, out, err, _ = cli(["average", "--out", str(tmp / "avg-pre"), "pretrained:shakespeare",
                                   "pretrained:shakespeare"])
            return check("average pretrained:NAME", rc == 0 and (tmp / "avg-pre" / "model.safetensors").is_file(),
                         f"exit {rc}: {(err.strip().splitlines() or [''])[-1][:120]}")

        # --- data loss: nothing the user has is replaced, whatever the verb
        case("average --out an existing checkpoint", ["average", "--out", steps[-1], steps[0], "pretrained:shakespeare"],
             2, "checkpoint", keep=[run])
        case("average --out a checkpoint it averages", ["average", "--out", steps[-1], *steps], 2, "one of", keep=[run])
        case("average --out a non-empty folder", ["average", "--out", (u := user()), *steps], 2, "new or empty folder",
             keep=[u, run])
        case("train --out a folder of user files", ["train", "--max-steps", "1", "--out", (u := user()), "--no-progress"],
             2, str(u), keep=[u])
        case("train --overwrite a folder of user files", ["train", "--max-steps", "1", "--out", (u := user()),
                                                          "--overwrite", "--no-progress"], 2, str(u), keep=[u])
        case("train --resume a folder of user files", ["train", "--max-steps", "1", "--out", (u := user()),
                                                       "--resume", "--no-progress"], (1, 2), str(u), keep=[u])
        fifo_run = tmp / "run-fifo"; shutil.copytree(run, fifo_run)
        (fifo_run / "metrics.jsonl").unlink(); os.mkfifo(fifo_run / "metrics.jsonl")
        case("train --resume with a FIFO in the run folder", ["train", "--resume", "--max-steps", "6", "--out", fifo_run,
                                                               "--no-progress"], (1, 2), "metrics.jsonl")

        @job("retention and a symlinked checkpoint")
        def _():
            "A step-1 that links outside the run: --keep-checkpoints 1 must not delete what it points to."
            linked, outside = tmp / "run-link", tmp / "outside"
            shutil.copytree(run, linked); shutil.copytree(steps[-1], outside)
            (linked / "step-1").symlink_to(Path("..") / "outside", target_is_directory=True)
            before = digest(outside)
            rc, out, err, _ = cli(["train", "--resume", "--max-steps", "6", "--keep-checkpoints", "1", "--out", str(linked),
                                   "--no-progress"])
            lines = [l for l in err.strip().splitlines() if not LOG.match(l)]
            return check("retention and a symlinked checkpoint", digest(outside) == before and len(lines) <= 1 and
                         "Traceback" not in err, f"exit {rc}; {'outside unchanged' if digest(outside) == before else 'outside CHANGED'}")
        for verb in (["eval", "--checkpoint"], ["translate", "x", "--checkpoint"], ["classify", "x", "--checkpoint"],
                     ["generate", "--max-new-tokens", "2", "--checkpoint"]):
            case(f"{verb[0]} --checkpoint a folder of user files", [*verb, (u := user())], 1, None, keep=[u])
        run_all(opts.workers)
    finally:
        for m in mounts: subprocess.run(["umount", "-l", str(m)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    failed = [n for n, ok, _ in RESULTS if not ok]
    print(f"adversarial: {len(RESULTS) - len(failed)} passed, {len(failed)} failed in {time.perf_counter() - t0:.0f} s"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


WORK: Path = Path.cwd()
FILTER = ""
if __name__ == "__main__":
    sys.exit(main())
