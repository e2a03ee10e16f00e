"""The in-browser pages (`annotated_transformer.web.build_site`) in headless Chromium, against the command line.

Builds the site (or takes `--site DIR`), serves it on 127.0.0.1, opens `translate.html`, `classify.html` and
`generate.html?top_k=1&n=...` with `?text=` for each of the inputs below, waits until the page says it is done, and
compares its `output` element with what `annotated-transformer translate` (greedy, and `--beam 4` on a few), `classify` and
`generate --top-k 1` print: translations and generations must be identical, labels identical and probabilities
within 0.001. Writes the page load times and the translation's milliseconds per token to
`bench/results/web-<machine>.json` and a screenshot of each page to `bench/results/web-<page>-chromium.png`.
Chromium is driven through its DevTools protocol (the `websocket-client` package). Without Chromium, npm (or the
cached onnxruntime-web package) or websocket-client it says what is missing and exits 0, but under `CI=true` it exits 1:
CI never passes without opening the pages. Every wait has a timeout.

    python .ci/web_check.py [--site DIR] [--results bench/results] [--no-save]
"""
import argparse
import base64
import functools
import http.server
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI = os.environ.get("CI", "").lower() == "true"
GERMAN = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau mit einem roten Hut liest ein Buch.",
          "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.", "Drei Kinder spielen am Strand mit einem Ball.",
          "Ein alter Mann sitzt auf einer Bank im Park.", "Eine Gruppe von Menschen wartet an einer Bushaltestelle.",
          "Ein Hund rennt durch das hohe Gras.", "Zwei Männer arbeiten auf einer Baustelle.",
          "Eine Frau verkauft Obst auf dem Markt.", "Ein Junge springt ins Wasser!", "Der Koch schneidet Gemüse in der Küche."]
REVIEWS = ["A moving film, beautifully acted, with a script that never talks down to its audience.",
           "Dull, long and badly written. I want my money back.", "The best thing about this movie is the end credits.",
           "I laughed, I cried, and I will watch it again next week.", "The plot makes no sense and the acting is wooden.",
           "A masterpiece of quiet storytelling; every frame is worth looking at.",
           "I fell asleep twice.<br /><br />Avoid it.", "Great cast, great music, a great evening at the cinema.",
           "Not the worst film I have seen this year, but close.", "My kids loved it and so did I.",
           "An utterly forgettable sequel that adds nothing to the original."]
PROMPTS = ["ROMEO:", "JULIET:\nO Romeo", "First Citizen:\n", "KING HENRY:\nNow", "To be, or not", "HAMLET:\n",
           "The king is dead", "MENENIUS:\nWhat", "Enter", "LADY MACBETH:\nOut"]
N_CHARS = 120
BEAM_INPUTS = 4   # the first sentences, also translated with beam search (4 beams)


class Chromium:
    "A headless Chromium and one tab, driven through the DevTools protocol."
    def __init__(self, exe: str, profile: Path):
        import websocket
        self.proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
                                      f"--user-data-dir={profile}", "--window-size=1000,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file, t0 = profile / "DevToolsActivePort", time.time()
        while not port_file.is_file() or not port_file.read_text().strip():
            if time.time() - t0 > 60: raise TimeoutError("Chromium did not open its DevTools port in 60 s")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10))
        tab = next(t for t in tabs if t.get("type") == "page")
        self.ws, self.n = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=120), 0

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg: raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expr: str):
        return self.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

    def open(self, url: str, timeout: float = 300) -> dict:
        "Load `url` and wait until the page's state is done (or error); what the page shows."
        self.eval("window.__left = true")          # the old document has it, the new one does not
        self.call("Page.navigate", url=url)
        t0 = time.time()
        while True:
            s = self.eval("!window.__left && document.body && document.body.dataset.state")
            if s in ("done", "error"): break
            if time.time() - t0 > timeout: raise TimeoutError(f"{url} was not done after {timeout} s (state {s!r})")
            time.sleep(0.1)
        return self.eval("({state: document.body.dataset.state, output: document.getElementById('output').textContent, "
                         "note: document.getElementById('note').textContent, loadMs: +document.body.dataset.loadMs, "
                         "msPerToken: +(document.body.dataset.msPerToken || NaN)})")

    def screenshot(self, path: Path):
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self):
        try: self.ws.close()
        finally:
            self.proc.terminate()
            try: self.proc.wait(10)
            except subprocess.TimeoutExpired: self.proc.kill()


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    "A static server of `folder` on 127.0.0.1 (a free port), in a thread; the server and its base URL."
    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                          ".mjs": "text/javascript", ".js": "text/javascript", ".onnx": "application/octet-stream"}
        def log_message(self, *a): pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def cli(*args: str) -> str:
    "What `annotated-transformer ARGS` prints (run as `python -m annotated_transformer`)."
    r = subprocess.run([sys.executable, "-m", "annotated_transformer", *args], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode: raise RuntimeError(f"annotated-transformer {args[0]} failed: {r.stderr[-2000:]}")
    return r.stdout


def machine_slug() -> str:
    "The machine's name in result files, as bench/copy_task.py writes it (e.g. amd-epyc-2cores)."
    cpu = platform.processor() or platform.machine()
    try: cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration): pass
    return re.sub(r"[^a-z0-9]+", "-", f"{cpu}-{os.cpu_count()}cores".lower()).strip("-"), cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="a folder written by build_site (default: build one now)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--no-save", action="store_true", help="check only; write no JSON and no screenshots")
    a = ap.parse_args()
    t_start = time.time()
    def fail_or_skip(why: str) -> int:
        print(f"web check: {'FAILED' if CI else 'skipped'}, {why}")
        return 1 if CI else 0
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    missing = [] if exe else ["chromium"]
    try: import websocket  # noqa: F401
    except ImportError: missing.append("websocket-client (pip)")
    if missing: return fail_or_skip(f"{', '.join(missing)} not installed (Debian: apt-get install chromium; or run .ci/run)")
    sys.path.insert(0, str(ROOT))
    from annotated_transformer.web import build_site, ORT_WEB_VERSION
    work = Path(tempfile.mkdtemp(prefix="web_check_"))
    site = a.site
    if site is None:
        t0 = time.time()
        try: built = build_site(work / "site")
        except (FileNotFoundError, ConnectionError) as e: return fail_or_skip(str(e))   # npm or its registry: one line
        site = work / "site"
        print(f"web check: built the site in {time.time() - t0:.0f} s, {len(built['files'])} files, {built['bytes'] / 1e6:.1f} MB")
    srv, base = serve(site)
    browser = Chromium(exe, work / "profile")
    problems, record = [], {}
    try:
        want_tr = cli("translate", *GERMAN).splitlines()
        want_beam = cli("translate", "--beam", "4", *GERMAN[:BEAM_INPUTS]).splitlines()
        want_cl = cli("classify", *REVIEWS).splitlines()
        want_gen = [cli("generate", "--prompt", p, "--top-k", "1", "--max-new-tokens", str(N_CHARS))[:-1] for p in PROMPTS]
        q = lambda s: urllib.parse.quote(s, safe="")
        got = {"translate": [browser.open(f"{base}/translate.html?text={q(s)}") for s in GERMAN]}
        if not a.no_save: browser.screenshot(a.results / "web-translate-chromium.png")
        got_beam = [browser.open(f"{base}/translate.html?beam=4&text={q(s)}") for s in GERMAN[:BEAM_INPUTS]]
        got["classify"] = [browser.open(f"{base}/classify.html?text={q(s)}") for s in REVIEWS]
        if not a.no_save: browser.screenshot(a.results / "web-classify-chromium.png")
        got["generate"] = [browser.open(f"{base}/generate.html?top_k=1&n={N_CHARS}&text={q(p)}") for p in PROMPTS]
        if not a.no_save: browser.screenshot(a.results / "web-generate-chromium.png")
        bad = [browser.open(f"{base}/translate.html?text="), browser.open(f"{base}/translate.html?text={q('Hund ' * 1000)}"),
               browser.open(f"{base}/generate.html?text={q('Ω≠ROMEO')}"), browser.open(f"{base}/classify.html?text={q('good ' * 1000)}")]
    finally:
        browser.close(); srv.shutdown()
    problems += [f"{k}: {p['note']}" for k, v in got.items() for p in v if p["state"] == "error"][:3]
    for name, want, pages in (("translate", want_tr, got["translate"]), ("translate --beam 4", want_beam, got_beam),
                              ("generate", want_gen, got["generate"])):
        same = sum(p["output"] == w for p, w in zip(pages, want))
        print(f"web check: {name}: {same}/{len(want)} outputs identical to the command line's")
        problems += [f"{name}: page {p['output']!r} != command line {w!r}" for p, w in zip(pages, want) if p["output"] != w]
    split = lambda line: (line.split() + ["", "nan"])[:2]
    labels = sum(split(p["output"])[0] == w.split()[0] for p, w in zip(got["classify"], want_cl))
    close = sum(abs(float(split(p["output"])[1]) - float(w.split()[1])) <= 1e-3 for p, w in zip(got["classify"], want_cl))
    print(f"web check: classify: {labels}/{len(want_cl)} labels identical, {close} probabilities within 0.001, "
          f"{sum(p['output'] == w for p, w in zip(got['classify'], want_cl))} lines identical")
    if labels < len(want_cl) or close < len(want_cl): problems.append(f"classify: {[p['output'] for p in got['classify']]} != {want_cl}")
    for p, what in zip(bad, ("empty text", "5,000 characters", "characters outside the vocabulary", "a long review")):
        ok = p["state"] == "done" and p["note"].strip()
        print(f"web check: {what}: {'message' if ok else 'NO MESSAGE'}: {p['note'][:100]!r}")
        if not ok: problems.append(f"{what}: no message in the page")
    if not a.no_save:
        slug, cpu = machine_slug()
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
        ms = lambda v: round(v, 1)
        record = {"what": "the in-browser pages in headless Chromium (WebAssembly, one thread), served from 127.0.0.1",
                  "machine": {"cpu": cpu, "cores": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)},
                  "chromium": version, "onnxruntime_web": ORT_WEB_VERSION,
                  "site_bytes": sum(p.stat().st_size for p in site.rglob("*") if p.is_file()),
                  "load_ms": {k: [ms(p["loadMs"]) for p in v] for k, v in got.items()},
                  "load_ms_median": {k: ms(statistics.median(p["loadMs"] for p in v)) for k, v in got.items()},
                  "translate_ms_per_token": [ms(p["msPerToken"]) for p in got["translate"]],
                  "translate_ms_per_token_median": ms(statistics.median(p["msPerToken"] for p in got["translate"])),
                  "beam4_ms_per_step": [ms(p["msPerToken"]) for p in got_beam],
                  "identical": {"translate": sum(p["output"] == w for p, w in zip(got["translate"], want_tr)),
                                "translate_beam4": sum(p["output"] == w for p, w in zip(got_beam, want_beam)),
                                "classify_labels": labels, "generate": sum(p["output"] == w for p, w in zip(got["generate"], want_gen))},
                  "inputs": {"translate": len(GERMAN), "translate_beam4": BEAM_INPUTS, "classify": len(REVIEWS), "generate": len(PROMPTS)},
                  "note": "load_ms: from the request of the page to a ready model (the browser's cache is warm after "
                          "the first page); a shared machine under load: timings are indicative"}
        out = a.results / f"web-{slug}.json"
        out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"web check: load {record['load_ms_median']} ms (median), translation "
              f"{record['translate_ms_per_token_median']} ms/token; written to {out.relative_to(ROOT)}")
    shutil.rmtree(work, ignore_errors=True)
    for p in problems: print("web check: PROBLEM:", p[:500])
    print(f"web check: {'ok' if not problems else f'{len(problems)} problems'} in {time.time() - t_start:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
