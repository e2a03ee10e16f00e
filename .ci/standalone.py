"""Every notebook run alone, as a reader runs it from its Colab badge: the package built as a wheel and installed into a
fresh virtual environment (with the notebooks' extras), each notebook copied alone into an empty folder (no
repository around it: no `../bench`, no `../shared`), then executed top to bottom with `nbdev-test`'s skip flags
(`notest`, `slow`, `cuda`, `eval: false`). Prints one line per notebook and `standalone: N passed, M failed`.

    python .ci/standalone.py [--jobs 2] [--keep DIR] [--prepare] [notebook ...]

`--prepare --keep DIR` only builds the environment in DIR (mostly downloads and disk writes, little CPU), so that CI can
build it while the notebooks' tests run; a later `--keep DIR` installs the current wheel into it (unless the package's
files are those it was built from) and runs the notebooks. An environment whose build did not finish is rebuilt from
scratch.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# executed by the virtual environment's Python inside the notebook's empty folder
RUNNER = r'''
import re, sys
from fastcore.nbio import read_nb
from execnb.shell import CaptureShell
skip = re.compile(r"^#\|\s*(notest|slow|cuda|eval:\s*false)\s*$", re.M)
nb = read_nb(sys.argv[1])
sh = CaptureShell()
for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code" or skip.search(cell.source): continue
    sh.cell(cell)
    if sh.exc:
        print(f"cell {i} failed:\n{cell.source[:500]}\n---\n{sh.exc!r}")
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error": print("\n".join(o.get("traceback", []))[-3000:])
        sys.exit(1)
'''

def package_fingerprint() -> str:
    "SHA-256 over what goes into the wheel (the package's files, pyproject.toml, README.md): equal, the same wheel."
    h = hashlib.sha256()
    files = [p for p in sorted((ROOT / "annotated_transformer").rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for f in files + [ROOT / "pyproject.toml", ROOT / "README.md"]:
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()

def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode: sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", help="default: every notebook in nbs/")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--keep", help="build the environment here and keep it (default: a temporary folder)")
    p.add_argument("--prepare", action="store_true", help="only build the environment (with --keep), run no notebook")
    args = p.parse_args()
    if args.prepare and not args.keep: p.error("--prepare needs --keep DIR, where the environment stays for the run")
    work = Path(args.keep or tempfile.mkdtemp(prefix="standalone-")); work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    venv = work / "venv"
    py = venv / "bin" / "python"
    ready = work / "environment-ready"                 # written once the environment is complete
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)        # a build that stopped half-way is not reused
        dist = work / "dist"; shutil.rmtree(dist, ignore_errors=True)
        fingerprint = package_fingerprint()
        sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)])
        wheel = next(dist.glob("annotated_transformer-*.whl"))
        sh([sys.executable, "-m", "venv", str(venv)])
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        sh(pip + ["torch==2.13.0"])                        # the CPU build, as CI installs it
        sh(pip + [f"{wheel}[notebooks]", "execnb"])
        ready.write_text(fingerprint)                  # of the package in the environment
        if args.prepare:
            print(f"environment built in {time.time() - t0:.0f} s in {venv}", flush=True)
            return
    elif args.prepare: return
    elif ready.read_text() != (fingerprint := package_fingerprint()):   # a kept environment: refresh the package only
        dist = work / "dist"; shutil.rmtree(dist, ignore_errors=True)
        sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)])
        sh([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(next(dist.glob("*.whl")))])
        ready.write_text(fingerprint)
    where = sh([str(py), "-c", "import annotated_transformer as a; print(a.__file__)"], cwd=work).stdout.strip()
    assert str(venv) in where, f"the notebooks would import {where}, not the installed wheel"
    print(f"environment ready in {time.time() - t0:.0f} s: {where}", flush=True)
    (work / "runner.py").write_text(RUNNER)
    nbs = [Path(n) for n in args.notebooks] or sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_"))

    def run(nb: Path):
        folder = Path(tempfile.mkdtemp(prefix=nb.stem + "-", dir=work))
        shutil.copy(nb, folder / nb.name)
        env = {**os.environ, "HOME": str(folder), "ANNOTATED_TRANSFORMER_DATA": str(folder / "cache"),
               "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONPATH": "", "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
        t = time.time()
        r = subprocess.run([str(py), str(work / "runner.py"), nb.name], cwd=folder, env=env, capture_output=True,
                           text=True, timeout=900)
        if r.returncode == 0: shutil.rmtree(folder, ignore_errors=True)    # a failed notebook's folder stays in DIR
        return nb.name, r.returncode == 0, time.time() - t, (r.stdout + r.stderr)[-4000:]

    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for name, ok, secs, log in pool.map(run, nbs):
            print(f"{'ok  ' if ok else 'FAIL'} {name} ({secs:.0f} s)", flush=True)
            if not ok: failed += 1; print(log, flush=True)
    print(f"standalone: {len(nbs) - failed} passed, {failed} failed, in {time.time() - t0:.0f} s")
    if not args.keep: shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)

if __name__ == "__main__":
    main()
