"""An experiment for chapter 10's classifier (reported in appendix 9g), not part of the library: masked-language-model pretraining on the
training reviews themselves (BERT's objective, Devlin et al. 2019, on no text but the 22,500 training reviews), then
fine-tuning on their labels, in one run of the library's `train`:

    python bench/imdb_mlm.py --data-dir ../shared/data/imdb --mlm-steps 2000 --steps 4000 --out runs/imdb-x-mlm
    python bench/imdb_mlm.py --report --out runs/imdb-x-mlm   # only write the JSON of a run (stopped or finished)
    python bench/imdb_mlm.py --finetune-from runs/imdb-x-mlm/step-2000 --steps 1500 --out runs/imdb-x-mlm-ft

`--finetune-from` (with `--report`: only its JSON) starts a new run of the `small` preset (its own warm-up and
schedule) from the weights of a masked-LM checkpoint, instead of going on with the pretraining run's decayed rate.

For the first `--mlm-steps` batches, 15% of each review's subword tokens (never padding or `<s>`) are chosen; 80% of
them become `<unk>` (standing in for a mask token; `--real-mask`: a `<mask>` token added to the tokenizer), 10% a
random token, 10% stay; the loss is the cross-entropy of the chosen tokens, predicted from the encoder's outputs
through the embedding table (tied weights: no new parameters). The masked-LM code is the package's
(`annotated_transformer.bert`, chapter 12).
The later batches are the ordinary labelled ones of the `small` preset, whose Noam schedule simply goes on. The
validation accuracy of the pretraining steps is that of an untrained head (about 50%).

Writes bench/results/imdb_mlm-<machine>.json: the masked-LM loss curve, the unigram entropy of the tokens (the
loss of a model that ignores the context), and the validation accuracy at each evaluation; `--finetune-from` adds
its run's validation curve as `fresh_warmup`."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug   # noqa: E402

from annotated_transformer.bert import MASK_TOKEN, add_mask_token, pretraining_batches   # noqa: E402
from annotated_transformer.checkpoint import atomic_write   # noqa: E402
from annotated_transformer.classification import ImdbTask   # noqa: E402
from annotated_transformer.data import UNK, load_tokenizer   # noqa: E402
from annotated_transformer.tasks import register_task   # noqa: E402
from annotated_transformer.run import train   # noqa: E402

def register(mlm_steps: int, rate: float = 0.15, real_mask: bool = False) -> str:
    """The experiment's task: `mlm_steps` masked-LM batches, then the labelled ones. The mask is `<unk>` (as in the
    stored result), or with `real_mask` a `<mask>` token added to the tokenizer (the vocabulary grows by one)."""
    @register_task
    @dataclass
    class ImdbMlm(ImdbTask):
        name = "imdb_mlm_experiment"
        def prepare(self, out=None, resume=False, save=True):
            tok = super().prepare(out, resume, save)
            if real_mask and tok.token_to_id(MASK_TOKEN) is None:   # a new run: add <mask>, save the grown tokenizer
                add_mask_token(tok)
                if out is not None and save: atomic_write(Path(out, "tokenizer.json"), lambda tmp: tok.save(str(tmp)))
            return tok
        def batches(self, generator, rank=0, world=1, start=0):
            if real_mask: mask_id, n_words = add_mask_token(self.tokenizer), self.tokenizer.get_vocab_size(with_added_tokens=False)
            else: mask_id, n_words = UNK, self.tokenizer.get_vocab_size()
            return pretraining_batches(super().batches, generator, rank, world, start, steps=mlm_steps,
                                       mask_id=mask_id, n_words=n_words, rate=rate)
    return ImdbMlm.name


def register_finetune(checkpoint: str) -> str:
    from annotated_transformer.checkpoint import atomic_write, load_model
    @register_task
    @dataclass
    class ImdbFromMlm(ImdbTask):
        name = "imdb_from_mlm_experiment"
        def prepare(self, out=None, resume=False, save=True):
            "The checkpoint's tokenizer, not a new one: copied into `out`, then loaded as on a resume."
            if not resume:
                Path(out).mkdir(parents=True, exist_ok=True)
                atomic_write(Path(out, "tokenizer.json"), lambda tmp: shutil.copyfile(Path(checkpoint, "tokenizer.json"), tmp))
            return super().prepare(out, resume=True, save=save)
        def build_model(self):
            model = super().build_model()
            model.load_state_dict(load_model(checkpoint, "cpu").state_dict())
            return model
    return ImdbFromMlm.name


def unigram_entropy(run: Path, data_dir: str) -> float:
    "Entropy (nats) of the training reviews' token frequencies, with the run's tokenizer."
    task = ImdbTask(data_dir=data_dir)
    task.tokenizer = load_tokenizer(run)
    ids = task.encode([t for t, _ in task.split()[0]])
    c = torch.zeros(task.tokenizer.get_vocab_size())
    for e in ids: c.index_add_(0, torch.tensor(e[1:]), torch.ones(len(e) - 1))
    p = c[c > 0] / c.sum()
    return float(-(p * p.log()).sum())


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]


def val_curve(rows: list[dict]) -> list[dict]:
    return [{"step": r["step"], "accuracy": r["accuracy"]} for r in rows if "accuracy" in r]


def results_file(tag: str | None = None) -> Path:
    return Path(__file__).parent / "results" / f"imdb_mlm-{tag + '-' if tag else ''}{slug(machine(), 'cpu')}.json"


def report_finetune(run: Path, checkpoint: str) -> None:
    "Add the fresh-warm-up run's validation curve to the JSON, as `fresh_warmup`."
    rows = read_metrics(run)
    out = results_file()
    result = json.loads(out.read_text()) if out.is_file() else {"machine": machine()}
    result["fresh_warmup"] = {"run": str(run), "from": checkpoint,
                              "val_accuracy": val_curve(rows)}
    out.write_text(json.dumps(result, indent=1) + "\n")
    for r in result["fresh_warmup"]["val_accuracy"]: print(f"step {r['step']}: validation {r['accuracy']:.2%}")
    print(f"wrote {out}")


def report(run: Path, mlm_steps: int, data_dir: str, tag: str | None = None, extra: dict | None = None) -> None:
    rows = read_metrics(run)
    m = machine()
    out = results_file(tag)
    kept = json.loads(out.read_text()).get("fresh_warmup") if out.is_file() else None
    result = {"machine": m, "run": str(run), "mlm_steps": mlm_steps, "unigram_entropy": unigram_entropy(run, data_dir),
              "mlm_loss": [{"step": r["step"], "loss": r["loss"]} for r in rows if "loss" in r and r["step"] <= mlm_steps],
              "finetune_loss": [{"step": r["step"], "loss": r["loss"]} for r in rows if "loss" in r and r["step"] > mlm_steps],
              "val_accuracy": val_curve(rows)}
    if kept is not None: result["fresh_warmup"] = kept
    if extra: result.update(extra)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for r in result["val_accuracy"]:
        if r["step"] > mlm_steps: print(f"fine-tuning step {r['step'] - mlm_steps}: validation {r['accuracy']:.2%}")
    if result["mlm_loss"]: print(f"masked-LM loss at step {mlm_steps}: {result['mlm_loss'][-1]['loss']:.3f} nats "
                                 f"(unigram entropy {result['unigram_entropy']:.3f})")
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--mlm-steps", type=int, default=2000, help="0: the small preset from scratch (a baseline at --seed)")
    p.add_argument("--steps", type=int, default=4000, help="all steps, pretraining included")
    p.add_argument("--out", default="runs/imdb-x-mlm")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--report", action="store_true", help="only write the JSON of the run in --out")
    p.add_argument("--finetune-from", default=None, metavar="CHECKPOINT", help="fine-tune from a masked-LM checkpoint")
    p.add_argument("--real-mask", action="store_true", help="mask with a new <mask> token instead of <unk>")
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: the runner's)")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--tag", default=None, help="write bench/results/imdb_mlm-<tag>-<machine>.json (the one-run mode)")
    a = p.parse_args()
    if a.finetune_from:
        if not a.report:
            train(task=register_finetune(a.finetune_from), data_dir=a.data_dir, out=a.out, overwrite=True,
                  progress=False, max_steps=a.steps, eval_every=250, keep_checkpoints=20, threads=a.threads, log_every=50)
        report_finetune(Path(a.out), a.finetune_from)
        return
    if not a.report:
        train(task=register(a.mlm_steps, real_mask=a.real_mask), data_dir=a.data_dir, out=a.out, overwrite=True,
              progress=False, max_steps=a.steps, eval_every=a.eval_every, keep_checkpoints=20, threads=a.threads,
              log_every=100, seed=a.seed)
    extra = {k: v for k, v in (("mask", "<mask>" if a.real_mask else None), ("seed", a.seed)) if v is not None}
    report(Path(a.out), a.mlm_steps, a.data_dir, a.tag, extra)


if __name__ == "__main__":
    main()
