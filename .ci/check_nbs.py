"""Checks on the notebooks as they are committed (no execution):

1. no stored output is an error or a traceback, and no stored output links to `#LNone` (a stale `show_doc`);
2. every notebook is in the sidebar of `nbs/_quarto.yml`, and the sidebar names no missing notebook;
3. every link to this project's GitHub repository (Colab badges, install cells, the README) uses the
   repository URL of `pyproject.toml`, the one place where it is set;
4. every file of the package that is not Python (the in-browser pages' `web/*.js`, `web.css`) is package data in
   `pyproject.toml`, so that the wheel ships it;
5. every cell that draws a figure (calls `plt.show()` outside a function) has a stored image, unless it is a GPU,
   slow or skipped cell, or one that printed the book's parenthesised note that its data is not there: the website
   shows stored outputs, and a notebook executed with a non-interactive matplotlib backend (e.g. `MPLBACKEND=Agg` in
   the environment) stores none.

Prints one line per problem and exits 1 if there is any."""
import ast
import json
import re
import sys
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
nbs = sorted(p for p in (root / "nbs").glob("*.ipynb") if not p.name.startswith("_"))
problems = []

def draws_figure(src: str) -> bool:
    "Whether the cell calls `plt.show()` outside a function definition (magics and shell lines ignored)."
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())
    try: tree = ast.parse(code)
    except SyntaxError: return False
    def walk(node, in_def=False):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)): in_def = True
        if (not in_def and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "show"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "plt"): return True
        return any(walk(child, in_def) for child in ast.iter_child_nodes(node))
    return walk(tree)

for p in nbs:
    for i, cell in enumerate(json.loads(p.read_text(encoding="utf-8"))["cells"]):
        for out in cell.get("outputs", []):
            text = json.dumps(out)
            if out.get("output_type") == "error" or "Traceback (most recent call last)" in text:
                problems.append(f"{p.name}: cell {i} has a stored error output; re-run the notebook")
            if "#LNone" in text:
                problems.append(f"{p.name}: cell {i} links to #LNone (a stale show_doc output); re-run the notebook")
        src = "".join(cell.get("source", []))
        if (cell["cell_type"] == "code" and draws_figure(src)
                and not re.search(r"^#\|\s*(cuda|slow|notest|eval:\s*false)", src, re.M)
                and not any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))
                and not any(line.startswith("(") for out in cell.get("outputs", []) if out.get("output_type") == "stream"
                            for line in out.get("text", []))):   # "(... not stored ...)": the book's note for no data
            problems.append(f"{p.name}: cell {i} draws a figure but stores no image; re-run the notebook without "
                            f"MPLBACKEND=Agg (or the figure's data was missing)")

sidebar = set(re.findall(r"([\w.-]+\.ipynb)", (root / "nbs" / "_quarto.yml").read_text(encoding="utf-8")))
for p in nbs:
    if p.name not in sidebar: problems.append(f"nbs/_quarto.yml: the sidebar does not list {p.name}")
for name in sorted(sidebar - {p.name for p in nbs}):
    problems.append(f"nbs/_quarto.yml: the sidebar lists {name}, which does not exist")

repo = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Repository"]
owner_repo = re.match(r"https://github.com/([^/]+/[^/]+?)/?$", repo).group(1)
project = owner_repo.split("/")[1]
files = [*nbs, root / "README.md", *(root / "bench").glob("*.py"), *(root / "bench").glob("*.sh")]
for f in files:
    for m in re.finditer(r"github\.com/(?:[\w.-]+/)*?([\w.-]+/[\w.-]+)", f.read_text(encoding="utf-8")):
        found = m.group(1)
        if found.split("/")[1] == project and found != owner_repo:
            problems.append(f"{f.relative_to(root)}: links to github.com/{found}, but pyproject.toml says {repo}")

pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
patterns = pyproject.get("tool", {}).get("setuptools", {}).get("package-data", {}).get("annotated_transformer", [])
pkg = root / "annotated_transformer"
for f in sorted(pkg.rglob("*")):
    if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts \
            and not any(f.relative_to(pkg).match(pat) for pat in patterns):
        problems.append(f"pyproject.toml: {f.relative_to(root)} is not package data (tool.setuptools.package-data): the wheel would lack it")

for line in problems: print(line)
print(f"check_nbs: {len(nbs)} notebooks, {len(problems)} problems")
sys.exit(1 if problems else 0)
