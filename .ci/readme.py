"""README.md from nbs/index.ipynb (nbdev-readme needs Quarto, which CI may lack).

    python .ci/readme.py           # write README.md
    python .ci/readme.py --check   # exit 1 if README.md is not what index.ipynb gives
"""
import re
import sys
from pathlib import Path

import nbformat

root = Path(__file__).resolve().parent.parent
HEADER = "<!-- Generated from nbs/index.ipynb by .ci/readme.py (nbdev-readme needs Quarto). Edit the notebook. -->\n\n"


def render() -> str:
    parts = []
    for cell in nbformat.read(root / "nbs" / "index.ipynb", as_version=4).cells:
        src = cell.source.strip("\n")
        if cell.cell_type == "markdown": parts.append(src)
        elif cell.cell_type == "code" and not src.startswith("#| hide"): parts.append(f"```python\n{src}\n```")
    md = "\n\n".join(parts).replace("```{mermaid}", "```mermaid")
    # chapter and appendix links (13_gpt2.ipynb, 9w_web.ipynb#anchor) from the repository root
    md = re.sub(r"\]\((\d[0-9a-z]_[0-9a-z_]+\.ipynb(?:#[^)\s]*)?)\)", r"](nbs/\1)", md)
    return HEADER + md + "\n"


if __name__ == "__main__":
    text, readme = render(), root / "README.md"
    if "--check" in sys.argv:
        if readme.read_text(encoding="utf-8") != text:
            sys.exit("README.md is out of step with nbs/index.ipynb: run python .ci/readme.py")
        print("README.md: in step with nbs/index.ipynb")
    else:
        readme.write_text(text, encoding="utf-8")
