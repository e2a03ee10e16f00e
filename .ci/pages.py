"""The whole book's site in a real browser, offline.

Every notebook that `nbdev-proc-nbs` processed (`_proc/`) becomes a page as Quarto would write it: its cells turned into
pandoc markdown (`#| echo`, `#| output`, `#| include` and `#| code-fold` honoured, outputs stored in the notebook,
links to notebooks rewritten to their `output-file`), pandoc writes the HTML with the sidebar of `nbs/_quarto.yml`
around it, KaTeX renders the maths and mermaid draws the diagram (both from npm, pinned, cached beside ONNX Runtime
Web; nothing is fetched when the pages run), and the "Try it" pages are the ones `annotated-transformer web` builds,
in `web/`. The site is served on 127.0.0.1 and each page is opened in headless Chromium (the DevTools protocol), which
checks there:

* every formula renders in KaTeX, with no error; every mermaid diagram draws (an SVG with nodes);
* every image of the site loads (remote images, such as the Colab badge, are counted, not fetched);
* every internal link, the sidebar's included, points to a page or file of the site, and its anchor to an id of it;
* each "Try it" iframe loads its page, and the page answers its example (state done, an output, no error);
* no output is an error or a traceback, no link points to `#LNone`;

and, outside the browser, every link and image of `README.md` points to a file of the repository (and to an anchor
of the page it names). It prints what it counted and a screenshot of three pages goes to `--shots`.
Without Chromium, pandoc, npm (or the cached packages) or websocket-client it says what is missing and exits 0, but
under `CI=true` it exits 1: CI never passes without opening the pages.

    python .ci/pages.py [--proc _proc] [--web DIR] [--shots _pages] [--site DIR]
"""
import argparse
import base64
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
CI = os.environ.get("CI", "").lower() == "true"
# (package, version, sha256 of the npm tarball, files of it the site needs)
KATEX = ("katex", "0.16.22", "e9e0d167db3175481cbadaff38e8d90b130f6a3ddb451a47e43c577fd511f365")
MERMAID = ("mermaid", "11.12.0", "93492e4d609be83653a41c435f4cbd7e74419f7fa6b4fc90a8c983195f64af82")
SHOTS = {"index": None, "03_attention": None, "11_language_model": "iframe"}   # page -> what to frame (None: the top)
FRONT = re.compile(r"^---\n(.*?)\n---", re.S)
DIRECTIVE = re.compile(r"^#\|\s*([\w-]+)\s*:\s*(.*?)\s*$")

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>$pagetitle$</title>
<link rel="stylesheet" href="_vendor/katex/katex.min.css"><script src="_vendor/katex/katex.min.js"></script>
<script src="_vendor/mermaid.min.js"></script><script>mermaid.initialize({startOnLoad: false});</script>
<style>
$highlighting-css$
</style>
<link rel="stylesheet" href="_site.css"><link rel="stylesheet" href="styles.css"><script src="_check.js"></script>
</head><body>
$for(include-before)$
$include-before$
$endfor$
<main id="content">
<h1 class="title">$title$</h1>
$if(subtitle)$<div class="description">$subtitle$</div>$endif$
$body$
</main></body></html>
"""

SITE_CSS = """body { margin: 0; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; line-height: 1.5; }
#sidebar { position: fixed; top: 0; left: 0; bottom: 0; width: 17rem; overflow-y: auto; padding: 1rem; box-sizing: border-box;
  background: #f7f7f9; border-right: 1px solid #e3e3e8; font-size: .88rem; }
#sidebar .site { font-weight: 600; font-size: 1rem; display: block; margin-bottom: .6rem; color: #2780e3; }
#sidebar ul { list-style: none; padding-left: .6rem; margin: .2rem 0 .6rem; } #sidebar li { margin: .15rem 0; }
#sidebar .section { font-weight: 600; color: #555; margin-top: .5rem; } #sidebar a { color: #333; text-decoration: none; }
#sidebar a.active { color: #2780e3; font-weight: 600; }
main { margin-left: 17rem; padding: 1rem 2.5rem 3rem; max-width: 52rem; }
h1.title { margin-bottom: .2rem; } a { color: #2780e3; }
pre { background: #f6f8fa; padding: .6rem .8rem; overflow-x: auto; border-radius: 4px; font-size: .85rem; line-height: 1.35; }
code { font-size: .88em; } table { border-collapse: collapse; margin: .8rem 0; } td, th { border-bottom: 1px solid #ddd; padding: 3px 8px; }
img { max-width: 100%; } .math.display { display: block; overflow-x: auto; } figure { margin: 1rem 0; }
figcaption, .figcaption { font-size: .9em; color: #555; } details > summary { cursor: pointer; color: #555; }
pre.mermaid-source { display: none; } .mermaid svg { max-width: 100%; height: auto; }
"""

# runs in each page: renders its maths and diagrams once it has loaded (as Quarto's pages do), and window.checkPage()
# resolves to what the page holds (the "Try it" iframes run their example then)
CHECK_JS = r"""
async function renderPage() {
  const out = {math: 0, mathErrors: [], mermaid: 0, mermaidNodes: 0, mermaidErrors: []};
  for (const el of document.querySelectorAll("span.math")) {
    const display = el.classList.contains("display"), tex = el.textContent.replace(/^\\[\[(]|\\[\])]$/g, "");
    try { katex.render(tex, el, {displayMode: display, throwOnError: true}); out.math++; }
    catch (e) { out.mathErrors.push(String(e.message || e).slice(0, 160) + " in " + tex.slice(0, 80)); }
  }
  mermaid.initialize({startOnLoad: false, securityLevel: "strict"});
  let n = 0;
  for (const pre of document.querySelectorAll("pre.mermaid")) {
    const text = pre.textContent, div = document.createElement("div");
    div.className = "mermaid"; pre.classList.add("mermaid-source"); pre.after(div);
    try {
      const { svg } = await mermaid.render("mermaid-" + n++, text);
      div.innerHTML = svg;
      const nodes = div.querySelectorAll("g.node").length;
      if (!nodes || /Syntax error/.test(svg)) throw new Error("no nodes drawn");
      out.mermaid++; out.mermaidNodes += nodes;
    } catch (e) { out.mermaidErrors.push(String(e.message || e).slice(0, 200)); }
  }
  return out;
}
window.rendered = new Promise((done) => addEventListener("load", () => done(renderPage())));
window.checkPage = async function () {
  const out = {...await window.rendered, images: [], links: [], ids: [], iframes: [],
               sidebar: document.querySelectorAll("#sidebar a.page").length};
  for (const img of document.images) {
    if (!img.src.startsWith(location.origin)) { out.images.push({src: img.src, remote: true}); continue; }
    if (!img.complete) await new Promise((r) => { img.onload = img.onerror = r; setTimeout(r, 20000); });
    out.images.push({src: img.src, ok: img.naturalWidth > 0});
  }
  for (const a of document.querySelectorAll("a[href]"))
    if (!a.closest("pre, div.sourceCode")) out.links.push({href: a.getAttribute("href"), url: a.href, sidebar: !!a.closest("#sidebar")});
  out.ids = [...document.querySelectorAll("[id]")].map((e) => e.id);
  for (const f of document.querySelectorAll("iframe")) {
    const r = {src: f.getAttribute("src"), url: f.src};
    f.loading = "eager"; f.scrollIntoView();
    const t0 = performance.now(), wait = async (ok, ms) => {
      while (performance.now() - t0 < ms) { try { if (ok()) return true; } catch (e) {} await new Promise((z) => setTimeout(z, 100)); }
      return false;
    };
    const state = () => f.contentDocument && f.contentDocument.body && f.contentDocument.body.dataset.state;
    if (!await wait(() => ["ready", "done", "error"].includes(state()), 60000)) r.error = "not ready after 60 s (state " + state() + ")";
    else if (state() === "error") r.error = "the page says: " + f.contentDocument.getElementById("note").textContent;
    else {
      const doc = f.contentDocument;
      doc.getElementById("run").click();
      if (!await wait(() => state() === "done", 240000)) r.error = "no answer after 240 s";
      r.output = doc.getElementById("output").textContent; r.note = doc.getElementById("note").textContent;
      r.example = doc.getElementById("text").value;
      if (!r.output.trim()) r.error = "an empty answer (note: " + r.note + ")";
    }
    r.ms = Math.round(performance.now() - t0);
    out.iframes.push(r);
  }
  return out;
};
"""


def fail_or_skip(msg: str) -> int:
    "Missing tools: under CI=true a failure, elsewhere a skip; one line either way."
    print(f"pages: {'FAILED' if CI else 'skipped'}, {msg}")
    return 1 if CI else 0


def sidebar_tree() -> list:
    "The sidebar of nbs/_quarto.yml: a list of notebook names and (section, [names]) pairs."
    import yaml
    def walk(items):
        return [i if isinstance(i, str) else (i["section"], walk(i.get("contents", []))) for i in items]
    return walk(yaml.safe_load((ROOT / "nbs" / "_quarto.yml").read_text(encoding="utf-8"))["website"]["sidebar"]["contents"])


def front_matter(nb: dict) -> dict:
    "The YAML front matter that nbdev-proc-nbs writes into the first (raw) cell; {} when there is none."
    import yaml
    cells = nb["cells"]
    if cells and cells[0]["cell_type"] == "raw":
        m = FRONT.match("".join(cells[0]["source"]))
        if m: return yaml.safe_load(m.group(1)) or {}
    return {}


def text_of(x) -> str: return "".join(x) if isinstance(x, list) else x


def fence(text: str, cls: str = "") -> str:
    "A fenced code block of `text`, its fence longer than any run of backticks inside."
    n = max([3] + [len(m) + 1 for m in re.findall(r"`{3,}", text)])
    return f"{'`' * n}{cls}\n{text.rstrip(chr(10))}\n{'`' * n}"


def to_markdown(nb: dict, stem: str, media: Path, pages: dict) -> tuple[str, list[str]]:
    """The pandoc markdown of a processed notebook, as Quarto reads it; writes its images into `media`. Returns the
    markdown and the problems seen on the way (error outputs)."""
    parts, problems, n_img = [], [], 0
    link = re.compile(r"\]\((?:\./)?([\w.-]+\.ipynb)(#[^)\s]*)?\)")
    relink = lambda md: link.sub(lambda m: f"]({pages.get(m.group(1), m.group(1))}{m.group(2) or ''})", md)
    for i, cell in enumerate(nb["cells"]):
        src = text_of(cell["source"])
        if cell["cell_type"] == "raw": continue
        if cell["cell_type"] == "markdown":
            src = re.sub(r"```\{mermaid\}\n((?:%%\|[^\n]*\n)*)(.*?\n)```", mermaid_block, src, flags=re.S)
            parts.append(relink(src)); continue
        lines, opts = src.split("\n"), {}
        while lines and DIRECTIVE.match(lines[0]):
            k, v = DIRECTIVE.match(lines.pop(0)).groups(); opts[k] = v.strip("'\"")
        code = "\n".join(l for l in lines if not l.startswith("#|")).strip("\n")
        if opts.get("include") == "false": continue
        block = []
        if opts.get("echo") != "false" and code:
            shown = fence(code, "python")
            if opts.get("code-fold") == "true":
                shown = f"<details><summary>{opts.get('code-summary', 'Code')}</summary>\n\n{shown}\n\n</details>"
            block.append(shown)
        for out in ([] if opts.get("output") == "false" else cell.get("outputs", [])):
            kind = out["output_type"]
            if kind == "error" or "Traceback (most recent call last)" in json.dumps(out):
                problems.append(f"cell {i}: an error output"); continue
            if kind == "stream":
                block.append(f"::: {{.cell-output .cell-output-{out.get('name', 'stdout')}}}\n{fence(text_of(out['text']))}\n:::")
                continue
            data = out.get("data", {})
            if "text/markdown" in data:
                block.append(f"::: {{.cell-output .cell-output-display}}\n{relink(text_of(data['text/markdown']))}\n:::")
            elif "text/html" in data:
                block.append(f"::: {{.cell-output .cell-output-display}}\n```{{=html}}\n{text_of(data['text/html'])}\n```\n:::")
            elif any(m in data for m in ("image/png", "image/jpeg", "image/svg+xml")):
                mime = next(m for m in ("image/svg+xml", "image/png", "image/jpeg") if m in data)
                ext = {"image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpg"}[mime]
                n_img += 1
                f = media / f"{stem}-{n_img}.{ext}"
                raw = text_of(data[mime])
                f.write_bytes(raw.encode() if ext == "svg" else base64.b64decode(raw))
                alt = opts.get("fig-alt", "").replace('"', "&quot;")
                block.append(f'::: {{.cell-output .cell-output-display}}\n<img src="media/{f.name}" alt="{alt}">\n:::')
            elif "text/plain" in data:
                block.append(f"::: {{.cell-output .cell-output-display}}\n{fence(text_of(data['text/plain']))}\n:::")
        if block: parts.append("::: {.cell}\n" + "\n\n".join(block) + "\n:::")
    md = "\n\n".join(parts)
    md = re.sub(r"\s*\{#tbl-[\w-]+\}", "", md)          # Quarto's table labels: pandoc 2 does not take them
    return md, problems


def mermaid_block(m: re.Match) -> str:
    "A Quarto mermaid cell as a figure: the diagram's source for the browser, its `fig-cap` below it."
    cap = re.search(r"fig-cap:\s*([^\n]*)", m.group(1))
    cap = cap.group(1).strip().strip("'\"") if cap else ""
    return f"::: {{.figure}}\n``` {{.mermaid}}\n{m.group(2)}```\n\n{('::: {.figcaption}' + chr(10) + cap + chr(10) + ':::') if cap else ''}\n:::"


def sidebar_html(tree: list, titles: dict, pages: dict, current: str, site_title: str) -> str:
    "The sidebar of every page: the site's title, then the sections of nbs/_quarto.yml, the current page marked."
    def items(entries):
        out = []
        for e in entries:
            if isinstance(e, str):
                cls = "page active" if e == current else "page"
                out.append(f'<li><a class="{cls}" href="{pages.get(e, e)}">{html_escape(titles.get(e, e))}</a></li>')
            else:
                out.append(f'<li><div class="section">{html_escape(e[0])}</div><ul>{"".join(items(e[1]))}</ul></li>')
        return out
    return f'<nav id="sidebar"><a class="site" href="index.html">{html_escape(site_title)}</a><ul>{"".join(items(tree))}</ul></nav>'


def html_escape(s: str) -> str: return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def npm_files(spec: tuple, members: dict, dest: Path) -> None:
    "Extract `members` (path in the package -> path under `dest`) of the pinned npm package `spec`."
    from annotated_transformer.web import npm_package
    with tarfile.open(npm_package(*spec)) as tar:
        for name, to in members.items():
            if name.endswith("/"):
                for m in tar.getmembers():
                    if m.isfile() and m.name.startswith("package/" + name):
                        t = dest / to / m.name[len("package/" + name):]; t.parent.mkdir(parents=True, exist_ok=True)
                        t.write_bytes(tar.extractfile(m).read())
            else:
                (dest / to).parent.mkdir(parents=True, exist_ok=True)
                (dest / to).write_bytes(tar.extractfile("package/" + name).read())


class Links(html.parser.HTMLParser):
    "The (tag, href or src) pairs and the ids of an HTML document."
    def __init__(self):
        super().__init__(); self.found, self.ids = [], []
    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("href", "src") and v: self.found.append((tag, v))
            if k == "id" and v: self.ids.append(v)


def build(proc: Path, site: Path, web: Path | None) -> tuple[dict, int, list[str]]:
    "Write the site into `site`; its pages {notebook: output file}, the sidebar's length and the problems found while writing."
    import yaml
    tree, problems = sidebar_tree(), []
    site_title = yaml.safe_load((ROOT / "nbs" / "nbdev.yml").read_text(encoding="utf-8"))["website"]["title"]
    flat = lambda t: [x for e in t for x in ([e] if isinstance(e, str) else flat(e[1]))]
    in_sidebar = flat(tree)
    nbs = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(proc.glob("*.ipynb")) if not p.name.startswith("_")}
    if not nbs: raise SystemExit(f"pages: no processed notebooks in {proc}; run nbdev-proc-nbs first")
    fm = {n: front_matter(nb) for n, nb in nbs.items()}
    pages = {n: fm[n].get("output-file", n.replace(".ipynb", ".html")) for n in nbs}
    titles = {n: fm[n].get("title", n) for n in nbs}
    problems += [f"{n}: not in the sidebar of nbs/_quarto.yml" for n in nbs if n not in in_sidebar]
    problems += [f"nbs/_quarto.yml: the sidebar lists {n}, which nbdev-proc-nbs did not write" for n in in_sidebar if n not in nbs]
    media = site / "media"; media.mkdir(parents=True)
    npm_files(KATEX, {"dist/katex.min.js": "_vendor/katex/katex.min.js", "dist/katex.min.css": "_vendor/katex/katex.min.css",
                      "dist/fonts/": "_vendor/katex/fonts"}, site)
    npm_files(MERMAID, {"dist/mermaid.min.js": "_vendor/mermaid.min.js"}, site)
    (site / "_site.css").write_text(SITE_CSS, encoding="utf-8")
    (site / "_check.js").write_text(CHECK_JS, encoding="utf-8")
    shutil.copy(ROOT / "nbs" / "styles.css", site / "styles.css")
    template = site.parent / "template.html"; template.write_text(TEMPLATE, encoding="utf-8")
    if web is not None: (site / "web").symlink_to(web.resolve(), target_is_directory=True)

    def one(name: str) -> list[str]:
        md, probs = to_markdown(nbs[name], Path(name).stem, media, pages)
        side = site.parent / f"sidebar-{Path(name).stem}.html"
        side.write_text(sidebar_html(tree, titles, pages, name, site_title), encoding="utf-8")
        meta = ["-M", f"title={titles[name]}", "-M", f"pagetitle={titles[name]}"]
        if fm[name].get("description"): meta += ["-M", f"subtitle={fm[name]['description']}"]
        r = subprocess.run(["pandoc", "-f", "markdown", "-t", "html5", "--katex", "--standalone", f"--template={template}",
                            f"--include-before-body={side}", *meta, "-o", str(site / pages[name])],
                           input=md, capture_output=True, text=True, timeout=300)
        if r.returncode: probs.append(f"pandoc failed: {r.stderr.strip()[-300:]}")
        else:
            text = (site / pages[name]).read_text(encoding="utf-8")
            if "#LNone" in text: probs.append("a link to #LNone (a stale show_doc output)")
        return [f"{name}: {p}" for p in probs]
    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as ex:
        for probs in ex.map(one, nbs): problems += probs
    return pages, len(in_sidebar), problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proc", type=Path, default=ROOT / "_proc")
    ap.add_argument("--web", type=Path, help="the folder `annotated-transformer web` wrote (default: build one now)")
    ap.add_argument("--shots", type=Path, default=ROOT / "_pages", help="where the screenshots go")
    ap.add_argument("--site", type=Path, help="write the site here (kept) instead of a temporary folder")
    a = ap.parse_args()
    t_start = time.time()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    missing = [n for n, ok in (("chromium", chromium), ("pandoc", shutil.which("pandoc"))) if not ok]
    try: import websocket  # noqa: F401
    except ImportError: missing.append("websocket-client (pip)")
    try: import yaml  # noqa: F401
    except ImportError: missing.append("pyyaml (pip)")
    if missing:
        return fail_or_skip(f"{', '.join(missing)} not installed (Debian: apt-get install chromium pandoc; or run .ci/run)")
    if not a.proc.is_dir() or not any(a.proc.glob("*.ipynb")):
        print(f"pages: FAILED, no processed notebooks in {a.proc}; run nbdev-proc-nbs first"); return 1
    from web_check import Chromium, serve
    work = Path(tempfile.mkdtemp(prefix="pages-"))
    site = a.site or work / "site"
    if site.exists() and any(site.iterdir()): print(f"pages: FAILED, {site} is not empty; pass a new folder"); return 1
    web = a.web
    try:
        if web is None:
            from annotated_transformer.web import build_site
            t0 = time.time(); build_site(work / "web"); web = work / "web"
            print(f"pages: built the 'Try it' pages (annotated-transformer web) in {time.time() - t0:.0f} s", flush=True)
        t0 = time.time()
        pages, n_sidebar, problems = build(a.proc, site, web)
    except (FileNotFoundError, ConnectionError) as e:    # npm or the registry missing: the one line that names the fix
        return fail_or_skip(str(e))
    print(f"pages: wrote {len(pages)} pages with pandoc in {time.time() - t0:.0f} s", flush=True)
    srv, base = serve(site)
    a.shots.mkdir(parents=True, exist_ok=True)
    browser = Chromium(chromium, work / "profile")
    browser.ws.settimeout(300)                   # a page's check waits for its "Try it" iframe up to 240 s
    found, deadline = {}, time.time() + 420
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=1000, deviceScaleFactor=1, mobile=False)
        for name, page in pages.items():
            if time.time() > deadline: problems.append(f"stopped after 420 s, before {name}: the browser is too slow here"); break
            url = f"{base}/{page}"
            try:
                browser.call("Page.navigate", url=url)
                t0 = time.time()
                while time.time() - t0 < 60:
                    try: ready = browser.eval(f"location.href === {json.dumps(url)} && document.readyState === 'complete' && !!window.checkPage")
                    except RuntimeError: ready = False            # between two documents: no context to evaluate in yet
                    if ready is True: break
                    time.sleep(0.05)
                r = browser.call("Runtime.evaluate", expression="checkPage()", awaitPromise=True, returnByValue=True)
            except Exception as e:                                # a browser that stops answering: this page fails, not the run
                problems.append(f"{name}: the browser did not answer: {e!r}"[:300]); continue
            if "exceptionDetails" in r:
                problems.append(f"{name}: the page's check failed: {r['exceptionDetails'].get('exception', {}).get('description', '')[:300]}")
                continue
            found[name] = r["result"]["value"]
            stem = Path(name).stem
            if stem in SHOTS:
                clip = None
                if SHOTS[stem] == "iframe":
                    box = browser.eval("(() => { const f = document.querySelector('iframe'); if (!f) return null; const r = f.getBoundingClientRect();"
                                       " return {x: 0, y: r.top + scrollY - 120, width: 1280, height: r.height + 160}; })()")
                    clip = box and {**box, "scale": 1}
                else: browser.eval("scrollTo(0, 0)")
                shot = browser.call("Page.captureScreenshot", format="png",
                                    **({"clip": clip, "captureBeyondViewport": True} if clip else {}))
                (a.shots / f"{stem}.png").write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.close(); srv.shutdown()

    # what the browser found, checked against the site
    ids = {pages[n]: set(f["ids"]) for n, f in found.items()}
    count = dict(links=0, anchors=0, external=0, sidebar=0, images=0, remote=0, math=0, mermaid=0, nodes=0, iframes=0)
    distinct = set()
    for name, f in found.items():
        count["math"] += f["math"]; count["mermaid"] += f["mermaid"]; count["nodes"] += f["mermaidNodes"]
        problems += [f"{name}: KaTeX: {e}" for e in f["mathErrors"][:3]]
        problems += [f"{name}: mermaid: {e}" for e in f["mermaidErrors"]]
        if f["sidebar"] != n_sidebar: problems.append(f"{name}: the sidebar holds {f['sidebar']} pages, not {n_sidebar}")
        for img in f["images"]:
            if img.get("remote"): count["remote"] += 1
            elif img["ok"]: count["images"] += 1
            else: problems.append(f"{name}: an image does not load: {img['src'][:100]}")
        for l in f["links"]:
            if not l["url"].startswith(base + "/"):
                count["external"] += l["url"].startswith(("http:", "https:", "mailto:")); continue
            count["links"] += 1; count["sidebar"] += l["sidebar"]
            u = urllib.parse.urlsplit(l["url"]); path = urllib.parse.unquote(u.path.lstrip("/")) or "index.html"
            distinct.add((path, u.fragment))
            if not (site / path).exists(): problems.append(f"{name}: a link to {l['href']}: no such page or file"); continue
            if u.fragment:
                count["anchors"] += 1
                if path in ids and u.fragment not in ids[path]: problems.append(f"{name}: a link to {l['href']}: no such anchor")
        for fr in f["iframes"]:
            if fr.get("error"): problems.append(f"{name}: the iframe {fr['src']}: {fr['error']}")
            else:
                count["iframes"] += 1
                print(f"pages: {name}: the iframe {fr['src']} answered in {fr['ms'] / 1000:.1f} s: {fr['output'][:70]!r}")
    if count["mermaid"] == 0: problems.append("no mermaid diagram drawn (index.ipynb holds one)")
    if count["iframes"] < 3: problems.append(f"{count['iframes']} 'Try it' iframes answered, not 3 (chapters 9, 10, 11)")

    # README.md: relative links to files of the repository, anchors of the pages they name, the site's own addresses
    site_url = re.search(r'site-url:\s*"?([^"\n]+)"?', (ROOT / "nbs" / "nbdev.yml").read_text()).group(1).rstrip("/")
    readme = subprocess.run(["pandoc", "-f", "gfm", "-t", "html5", str(ROOT / "README.md")], capture_output=True, text=True, timeout=120)
    parser = Links(); parser.feed(readme.stdout)
    readme_ids, readme_n = set(parser.ids), 0
    for tag, target in parser.found:
        site_page = target.startswith(site_url + "/") or target == site_url
        if not site_page and (re.match(r"^[a-z]+:", target) or target.startswith("//")): continue    # elsewhere: not fetched
        readme_n += 1
        path, _, frag = (target[len(site_url):].lstrip("/") if site_page else target).partition("#")
        path = urllib.parse.unquote(path)
        if site_page:                                    # the book's address: a page of the site
            page = path or "index.html"
            ok = (site / page).exists() and (not frag or frag in ids.get(page, set()))
        elif not path: ok = frag in readme_ids         # an anchor of the README itself
        else:                                            # a file of the repository; a notebook's anchor on its page
            f = ROOT / path
            ok = f.exists() and (not frag or (f.parent == ROOT / "nbs" and frag in ids.get(pages.get(f.name, ""), set())))
        if not ok: problems.append(f"README.md: the {'link' if tag == 'a' else tag} {target} does not resolve")

    for line in problems: print("pages: PROBLEM:", " ".join(line.split())[:400])
    print(f"pages: {len(found)}/{len(pages)} pages opened in Chromium, each with the sidebar of nbs/_quarto.yml ({n_sidebar} entries); "
          f"{count['links']} internal links checked ({count['sidebar']} of them in sidebars; {len(distinct)} distinct targets, "
          f"{count['anchors']} with an anchor), {count['external']} external links counted, not fetched; "
          f"{count['images']} images loaded ({count['remote']} remote, not fetched); {count['math']} formulas rendered by KaTeX; "
          f"{count['mermaid']} mermaid diagram(s) drawn ({count['nodes']} nodes); {count['iframes']} 'Try it' iframes answered; "
          f"README.md: {readme_n} links and images checked")
    print(f"pages: {'ok' if not problems else f'{len(problems)} problems'} in {time.time() - t_start:.0f} s; screenshots in {a.shots}")
    if a.site is None: shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
