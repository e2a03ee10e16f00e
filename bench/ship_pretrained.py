"""Ship a trained model: write `pretrained/<name>/` (fp16 weights, config, tokenizer, model card), measure its metric on
the shipped files loaded as a reader loads them, and pin the files' sha256 in `nbs/98_pretrained.ipynb`:

    # imdb: the window of checkpoints with the best validation accuracy (bench/imdb_average.py), averaged, shipped
    annotated-transformer average --out runs/part3-imdb-avg runs/part3-imdb/step-{500,1000,1500,2000}
    python bench/ship_pretrained.py imdb --run runs/part3-imdb --checkpoint runs/part3-imdb-avg --data-dir ../shared/data/imdb
    python bench/ship_pretrained.py shakespeare --run runs/part3-shakespeare --data-dir ../shared/data/tinyshakespeare
    python bench/ship_pretrained.py multi30k-small --run runs/m30k --checkpoint runs/m30k-avg --data-dir ../shared/data/multi30k

`--run` is the run folder that `train` wrote (its metrics.jsonl gives the training time of the shipped step);
`--checkpoint` (default: the run's `step-<--step>`, else its newest) is what is shipped, e.g. an average of snapshots.
The card's recipe comes from the checkpoint's `config.json` (`train`) and `task.json`, and its hardware from the machine
that runs this script: run it on the machine that trained the model. When the weights file is the same as in the
previous result file (same sha256), its metrics are reused instead of reading the test set again.
Writes `bench/results/pretrained-<name>-<machine>.json`. Then run `nbdev-export` (the pins live in the package), commit,
and set `PRETRAINED_REF` in the notebook to that commit (the chapter's test checks that its files match the pins)."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from fastcore.nbio import read_nb, write_nb

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug   # noqa: E402

from annotated_transformer.checkpoint import load_config, resolve_checkpoint   # noqa: E402
from annotated_transformer.data import sha256_file   # noqa: E402
from annotated_transformer.model import count_parameters   # noqa: E402
from annotated_transformer.pretrained import ship   # noqa: E402
from annotated_transformer.run import load_trained   # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
NOTEBOOK = ROOT / "nbs" / "98_pretrained.ipynb"

ABOUT = {
    "imdb": ("Sentiment of English movie reviews (positive or negative): chapter 10's encoder-only classifier.",
             "IMDb Large Movie Review Dataset (Maas et al. 2011, https://ai.stanford.edu/~amaas/data/sentiment/): "
             "25,000 labelled training reviews (2,500 held out for validation, a block of movies) and 25,000 test "
             "reviews. The dataset page states no licence; it asks users to cite Maas et al. (2011)."),
    "shakespeare": ("A character-level language model of Shakespeare's plays: chapter 11's decoder-only generator.",
                    "tiny-shakespeare (Karpathy's char-rnn collection: 1,115,394 characters of Shakespeare's plays, "
                    "public domain), nanoGPT's split: the first 90% for training, the last 10% for validation."),
    "multi30k-small": ("German-to-English translation of image descriptions: chapter 9's encoder-decoder.",
                 "Multi30k (Elliott et al. 2016), task 1: 29,000 training pairs, val 1,014, test2016 1,000. "
                 "See https://github.com/multi30k/dataset for its terms."),
}


def measure(name: str, folder: Path, data_dir: str) -> tuple[dict, str]:
    "The metrics of the shipped model in `folder`, loaded as a reader loads it (fp32 on the CPU), and one line of text."
    model, task = load_trained(folder, "cpu")
    task.data_dir = data_dir
    if name == "imdb":
        m = {s: task.evaluate(model, None, "cpu", split=s) for s in ("val", "test")}
        return m, (f"test accuracy {m['test']['accuracy']:.2%} ({m['test']['n']:,} reviews), "
                   f"validation {m['val']['accuracy']:.2%}")
    if name == "shakespeare":
        m = {"val": task.evaluate(model, None, "cpu", split="val")}
        return m, f"validation {m['val']['loss']:.4f} nats/char ({m['val']['bits_per_char']:.3f} bits/char)"
    m = {f"{split}/beam{beam}": task.evaluate(model, None, "cpu", split=split, beam=beam)
         for split in ("val", "test2016") for beam in (1, 4)}
    sig = m["test2016/beam4"].get("signature", "")
    return m, (f"test2016 sacreBLEU {m['test2016/beam4']['bleu']:.2f} (beam 4), {m['test2016/beam1']['bleu']:.2f} "
               f"(greedy); val {m['val/beam4']['bleu']:.2f} / {m['val/beam1']['bleu']:.2f}; {sig}")


def training_seconds(run: Path, step: int) -> float | None:
    "Elapsed training seconds at `step`, from the run's metrics.jsonl (None when the run did not log it)."
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    at = [l["elapsed_s"] for l in lines if l.get("step") == step and "elapsed_s" in l]
    return max(at) if at else None


def shipped_weights(cfg: dict) -> str:
    "Which weights: one step's, or the average of several snapshots (the `average` command records them)."
    if not cfg.get("averaged"): return f"the weights of step {cfg.get('step')}"
    steps = [int(str(p).rstrip("/").rsplit("step-", 1)[-1]) for p in cfg["averaged"]]
    return "the average of the weights at steps " + ", ".join(map(str, steps))


def card(name: str, cfg: dict, task: dict, metric_text: str, minutes: float | None, m: dict, params: int, mb: float,
         notes: list[str] | None = None) -> str:
    what, data = ABOUT[name]
    train = cfg.get("train", {})
    recipe = {k: v for k, v in train.items() if v is not None and k not in ("out", "data_dir", "resume", "overwrite",
                                                                            "progress", "force", "device")}
    hw = f"{m['cpu']}, {m['cores']} cores, CPU only" if not m.get("gpu") else m["gpu"]
    averaging = ""
    if cfg.get("averaged"):
        how = ("the window chosen on validation by `bench/imdb_average.py`" if name == "imdb" else
               "the last snapshots the run kept, fixed in advance, not chosen by a score")
        averaging = (f"- Averaged with `annotated-transformer average --out AVG RUN/step-{{{','.join(map(str, cfg['averaged']))}}}` "
                     f"({how}).\n")
    notes_text = "## Notes\n" + "".join(f"- {x}\n" for x in notes) + "\n" if notes else ""
    return f"""# `{name}`: {what}

Load it in one line: `model, task = annotated_transformer.load_pretrained("{name}")`, or from the command line
`--checkpoint pretrained:{name}`.

## Data
{data}

## Model and recipe
- Architecture: `{json.dumps(cfg['model'])}`; {params:,} parameters.
- Task settings: `{json.dumps({k: v for k, v in task.items() if k != 'data_dir'})}`.
- Trained with the library's own `train` (`annotated-transformer train --task {cfg.get('task')}`): `{json.dumps(recipe)}`;
  {shipped_weights(cfg)}.
{averaging}- Shipped in fp16 ({mb:.1f} MB in this folder); loaded in fp32.

## Measured on these files
{metric_text}.

## Hardware and time
{hw}{f'; {minutes:.1f} minutes of training to the newest step it uses' if minutes is not None else ''}.

{notes_text}Licence of the weights: MIT, as the repository. Built by `bench/ship_pretrained.py`; the figures come from
`bench/results/pretrained-{name}-*.json`.
"""


def pin(name: str, files: dict[str, str]) -> None:
    "Write `files` as the entry `name` of `PRETRAINED` in the chapter notebook (the package's pins)."
    nb = read_nb(NOTEBOOK)
    header = "PRETRAINED: dict[str, dict[str, str]] = {"
    [cell] = [c for c in nb.cells if c.cell_type == "code" and header in c.source]
    lines = cell.source.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(header))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "}")
    entries, current = {}, None
    for line in lines[start + 1:end]:   # the entries this function writes: '    "name": {', files, '    },'
        if line.startswith('    "') and line.endswith("{"): current = line.split('"')[1]; entries[current] = []
        elif current and line.startswith("        "): entries[current].append(line)
    entries[name] = [f'        "{f}": "{h}",' for f, h in sorted(files.items())]
    body = [x for n, ls in sorted(entries.items()) for x in [f'    "{n}": {{', *ls, "    },"]]
    cell["source"] = "\n".join(lines[:start + 1] + body + lines[end:])
    write_nb(nb, NOTEBOOK)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(ABOUT))
    p.add_argument("--run", required=True, help="the run folder train wrote")
    p.add_argument("--step", type=int, help="ship the run's step-N (default: its newest)")
    p.add_argument("--checkpoint", help="ship this checkpoint folder instead (e.g. an average of the run's snapshots)")
    p.add_argument("--data-dir", required=True, help="the data, to measure the shipped model")
    p.add_argument("--note", action="append", default=[], help="a line for the card's Notes section (repeatable)")
    a = p.parse_args()
    run = Path(a.run)
    src = Path(a.checkpoint) if a.checkpoint else (run / f"step-{a.step}" if a.step else resolve_checkpoint(run))
    cfg = load_config(src)
    dest = ROOT / "pretrained" / a.name
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        folder = Path(tmp) / a.name
        ship(src, folder, "")
        t0 = time.perf_counter()
        m = machine()
        previous = RESULTS / f"pretrained-{a.name}-{slug(m, 'cpu')}.json"
        old = json.loads(previous.read_text()) if previous.is_file() else {}
        if old.get("files", {}).get("model.safetensors") == sha256_file(folder / "model.safetensors"):
            metrics, text = old["metrics"], old["metric_text"]          # the same weights: the same metrics
            print(f"weights unchanged: metrics reused from {previous.name}")
        else:
            metrics, text = measure(a.name, folder, a.data_dir)
        seconds_measuring = time.perf_counter() - t0
        model, _ = load_trained(folder, "cpu")
        params = count_parameters(model)
        train_machine = json.loads((run / "machine.json").read_text()) if (run / "machine.json").is_file() else m
        seconds = training_seconds(run, cfg["step"])
        mb = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
        task = json.loads((folder / "task.json").read_text())
        (folder / "README.md").write_text(card(a.name, load_config(folder), task, text,
                                               seconds / 60 if seconds else None, train_machine, params, mb, a.note))
        files = {f.name: sha256_file(f) for f in sorted(folder.iterdir())}
        mb = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
        if dest.exists(): shutil.rmtree(dest)
        dest.parent.mkdir(exist_ok=True)
        shutil.move(str(folder), dest)
    hw = f"{train_machine['cpu']}, {train_machine['cores']} cores" if not train_machine.get("gpu") else train_machine["gpu"]
    result = {"name": a.name, "task": cfg.get("task"), "machine": m, "source": str(src), "step": cfg.get("step"),
              "weights": shipped_weights(cfg),
              "metrics": metrics, "metric_text": text, "parameters": params, "megabytes": round(mb, 2),
              "training_seconds": seconds,
              "training": f"{seconds / 60:.1f} min on {hw}" if seconds else hw,
              "measure_seconds": round(seconds_measuring, 1), "files": files, "dtype": "float16",
              "torch": torch.__version__}
    out = RESULTS / f"pretrained-{a.name}-{slug(m, 'cpu')}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    pin(a.name, files)
    print(text)
    print(f"shipped {dest} ({mb:.1f} MB); pinned in {NOTEBOOK.name}; wrote {out}")


if __name__ == "__main__":
    main()
