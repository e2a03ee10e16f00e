"""The pages in a real browser, offline: each notebook that `nbdev-proc-nbs` processed (`_proc/`) is rendered to HTML
with nbconvert (images embedded; maths by a local KaTeX with its auto-render, as Quarto's `html-math-method: katex`),
opened in headless Chromium, and checked there:

* every image of the page loads (its natural width is not 0); remote images (the Colab badge) are only counted;
* every formula renders in KaTeX, with no KaTeX error;
* no output is an error or a traceback, and no link points to `#LNone`.

Screenshots of the landing page and two chapters go to `--shots` (default `_pages/`). The Quarto site stays the real
renderer; this is a check that a reader's page has its figures, its maths and no tracebacks. Without Chromium, pandoc
or KaTeX (Debian: `apt-get install chromium libjs-katex`) it says so and exits 0: it never hangs
(every browser call has a timeout).

    python .ci/pages.py [--proc _proc] [--shots _pages]
"""
import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KATEX = Path("/usr/share/javascript/katex")

# runs in the page once it has loaded: renders the maths, then writes what it found into <body data-check=...>
PAGE = r"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>TITLE</title>
<link rel="stylesheet" href="KATEX/katex.min.css">
<script src="KATEX/katex.min.js"></script>
<script src="KATEX/contrib/auto-render.js"></script>
<style>body { max-width: 1100px; margin: 2em auto; font-family: sans-serif; } pre { background: #f6f6f6; padding: .5em;
overflow-x: auto; } img { max-width: 100%; } table { border-collapse: collapse; } td, th { border: 1px solid #ccc;
padding: 2px 6px; }</style>
<script>
window.addEventListener("load", () => {
  const mathErrors = [];
  renderMathInElement(document.body, {
    delimiters: [{left: "$$", right: "$$", display: true}, {left: "$", right: "$", display: false},
                 {left: "\\(", right: "\\)", display: false}, {left: "\\[", right: "\\]", display: true}],
    ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code"],
    throwOnError: false, errorCallback: (msg, err) => mathErrors.push(String(err).slice(0, 120))});
  const imgs = [...document.images], local = imgs.filter(i => !i.src.startsWith("http"));
  const broken = local.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80));
  mathErrors.push(...[...document.querySelectorAll(".katex-error")].map(e => e.title.slice(0, 120)));
  document.body.setAttribute("data-check", JSON.stringify({images: local.length, remote: imgs.length - local.length,
    broken, math: document.querySelectorAll(".katex").length, mathErrors}));
});
</script></head><body>
BODY
</body></html>"""

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--proc", default=str(ROOT / "_proc"))
    p.add_argument("--shots", default=str(ROOT / "_pages"))
    args = p.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    missing = [n for n, ok in (("chromium", chromium), ("KaTeX", (KATEX / "contrib" / "auto-render.js").is_file()))
               if not ok]
    if missing:
        print(f"pages: skipped, {', '.join(missing)} not installed (Debian: apt-get install chromium libjs-katex)")
        return 0
    # nbconvert's templates live under the interpreter's prefix; in a venv, also look under the base interpreter's
    env = {**os.environ, "JUPYTER_PATH": os.pathsep.join(
        [str(Path(pre) / "share" / "jupyter") for pre in dict.fromkeys([sys.prefix, sys.base_prefix])]
        + [os.environ.get("JUPYTER_PATH", "")])}
    probe = Path(tempfile.mkdtemp(prefix="pages-probe-")) / "probe.ipynb"
    probe.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    if subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--template", "basic", str(probe)],
                      capture_output=True, env=env, timeout=120).returncode:
        print("pages: skipped, nbconvert's html templates are not installed here")
        return 0
    proc = Path(args.proc)
    nbs = sorted(p for p in proc.glob("*.ipynb") if not p.name.startswith("_"))
    if not nbs: sys.exit(f"pages: no processed notebooks in {proc}; run nbdev-proc-nbs first")
    out, shots = Path(tempfile.mkdtemp(prefix="pages-")), Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    problems, deadline = [], time.time() + 420         # the whole check: 7 minutes at most, whatever the browser does
    for nb in nbs:
        if time.time() > deadline:
            problems.append(f"stopped after 420 s, before {nb.name}: the browser is too slow here"); break
        page, clean = out / (nb.stem + ".html"), out / nb.name
        raw = json.loads(nb.read_text(encoding="utf-8"))
        for cell in raw["cells"]: cell.get("metadata", {}).pop("execution", None)   # timings nbformat refuses
        clean.write_text(json.dumps(raw), encoding="utf-8")
        r = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--template", "basic", "--output-dir",
                            str(out / "body"), str(clean)], capture_output=True, text=True, timeout=120, env=env)
        if r.returncode: problems.append(f"{nb.name}: nbconvert failed: {r.stderr[-300:]}"); continue
        body = (out / "body" / (nb.stem + ".html")).read_text(encoding="utf-8")
        text = PAGE.replace("KATEX", KATEX.as_uri()).replace("TITLE", nb.stem).replace("BODY", body)
        page.write_text(text, encoding="utf-8")
        if "#LNone" in text: problems.append(f"{nb.name}: a link to #LNone")
        if "Traceback (most recent call last)" in text: problems.append(f"{nb.name}: a traceback in the page")
        try:
            dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                                  "--virtual-time-budget=15000", "--dump-dom", page.as_uri()],
                                 capture_output=True, text=True, timeout=120).stdout
        except subprocess.TimeoutExpired:
            problems.append(f"{nb.name}: the browser did not finish in 120 s"); continue
        m = re.search(r'data-check="([^"]*)"', dom)
        if not m: problems.append(f"{nb.name}: the page's check did not run"); continue
        check = json.loads(html.unescape(m.group(1)))
        if check["broken"]: problems.append(f"{nb.name}: {len(check['broken'])} images do not load: {check['broken'][:2]}")
        if check["mathErrors"]: problems.append(f"{nb.name}: {len(check['mathErrors'])} formulas fail in KaTeX: {check['mathErrors'][:2]}")
        print(f"{nb.name:28s} images {check['images']:3d} (broken {len(check['broken'])}, remote {check['remote']}), "
              f"formulas {check['math']:4d} (KaTeX errors {len(check['mathErrors'])})", flush=True)
        if nb.stem in ("index", "03_attention", "08_going_big"):
            try:
                subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                                "--hide-scrollbars", "--window-size=1200,1800", "--virtual-time-budget=15000",
                                f"--screenshot={shots / (nb.stem + '.png')}", page.as_uri()],
                               capture_output=True, timeout=120)
            except subprocess.TimeoutExpired: problems.append(f"{nb.name}: the screenshot did not finish in 120 s")
    for line in problems: print(line)
    print(f"pages: {len(nbs)} pages, {len(problems)} problems; screenshots in {shots}")
    return 1 if problems else 0

if __name__ == "__main__":
    sys.exit(main())
