"""Does masked-LM pretraining pay off when labels are few? (chapter 12; Dai and Le 2015 and ULMFiT asked it on IMDb.)

Stage 1, pretraining: BERT's masked LM (`annotated_transformer.bert`: 15% of the tokens chosen, 80% of those become
the real `<mask>`, 10% a random word, 10% stay) on the TEXT of the training reviews (labels unused; the validation
reviews, carved from the training split by `ImdbTask.split`, are held out; the test reviews are never read). The output
layer is `MaskedLM`: tied to the embedding table, with one bias per word. Every `--eval-every` steps the masked-LM loss
is measured on the validation reviews (the same masks every time) against the unigram level: the cross-entropy of
the same masked targets under the training reviews' word frequencies (a model that ignores the context). Pretraining
stops once the loss is `--below` (default 1) nat under that level, or at `--mlm-steps`.

Stage 2, fine-tuning: for each labelled-set size of `--sizes` (a random subset of the training reviews, drawn per
seed; sizes above the 22,500 that the validation set leaves take them all), each seed of `--seeds`, the classifier is
trained for the same `--ft-steps` labelled steps with its own Noam warm-up, once from the pretrained encoder and once
from scratch (same architecture, same batches). Accuracy on the 2,500 validation reviews at the end.

Launch (the tokenizer, the pretrained encoder and each run's checkpoint live under runs/imdb_mlm-<tag>/; --resume
goes on from them and from the JSON):

    # the CPU run chapter 12 shows (reviews cut to 128 tokens, 300 labelled steps): about 1.5 hours of one core
    OMP_NUM_THREADS=1 nice -n 10 python bench/imdb_mlm.py --data-dir /work/shared/data/imdb --tag small \
        --max-len 128 --ft-steps 300 --mlm-steps 6000 --sizes 250 1000 5000 25000 --seeds 0 1 2 --resume
    # the larger budget chapter 12 shows beside it (4 layers of width 256, 64 reviews a step; bench/gpu_part4.sh)
    python bench/imdb_mlm.py --data-dir DATA --tag gpu --device cuda --jobs 5 --layers 4 --d-model 256 --heads 4 \
        --batch 64 --mlm-steps 12000 --below 1.5 --mlm-minutes 2.5 --ft-steps 600 --sizes 250 1000 5000 25000
    python bench/imdb_mlm.py --data-dir /work/shared/data/imdb --dry-run     # < 1 minute, on made-up reviews

Cost, from step times measured on the 2-core AMD EPYC VM at a load average of about 10 (CPU seconds of one process,
32 reviews of up to 256 tokens a step): 1.3 s a masked-LM step, 0.8 s a fine-tuning step, 0.14 s to classify 32
validation reviews. At most 6,000 masked-LM steps is at most 2.2 CPU-hours (it stops earlier once a nat under the
unigram level), and 4 sizes x 2 arms x 3 seeds x 600 labelled steps another 3.2, with about 10 s of validation a run:
at most about 5.5 CPU-hours. `--max-len 128 --ft-steps 300` roughly halves the step and the fine-tuning budget
(about 2 CPU-hours in all). On one H100 beside the two other Part IV experiments (bench/gpu_part4.sh, about fifteen
processes sharing the GPU), the larger budget's masked-LM step took 0.14 s (it reached 1.5 nats under the unigram level
at step 1,500, after 201 s) and the whole experiment about 7 minutes.

Model (both arms): `make_classifier` with 2 pre-norm layers, d_model 128, 4 heads, d_ff 512, dropout 0.1, mean
pooling; reviews cut to 256 tokens (head and tail), a 16,000-word BPE vocabulary learned from the training reviews,
`<mask>` added. Writes `bench/results/imdb_mlm-<tag>-<machine>.json` as it goes: "pretraining" (curve, unigram level,
steps), "runs" (size | arm | seed) and "summary" (accuracy mean and standard deviation per size and arm).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from annotated_transformer.bert import IGNORE, MaskedLM, add_mask_token, mask_tokens
from annotated_transformer.classification import ImdbTask, classify_ids, write_fake_imdb
from annotated_transformer.data import PAD, load_tokenizer, pad_sequences
from annotated_transformer.model import count_parameters

sys.path.insert(0, str(Path(__file__).parent))
import charlm   # noqa: E402



def prepare(a, work: Path) -> ImdbTask:
    "The task with its splits encoded; the tokenizer learned once (with `<mask>`) and reloaded from `work` after."
    model = dict(N=a.layers, d_model=a.d_model, d_ff=4 * a.d_model, h=a.heads, dropout=0.1, pool="mean")
    task = ImdbTask(data_dir=a.data_dir, preset="small", model=model, max_len=a.max_len, vocab_size=a.vocab_size,
                    val_size=a.val_size)
    tok = work / "tokenizer.json"
    if tok.exists():
        task.tokenizer = load_tokenizer(work)
        train, val = task.split()
        task.train_set = (task.encode([t for t, _ in train]), [y for _, y in train])
        task.val_set = (task.encode([t for t, _ in val]), [y for _, y in val])
    else:
        task.prepare(None, save=False)
        add_mask_token(task.tokenizer)
        work.mkdir(parents=True, exist_ok=True)
        task.tokenizer.save(str(tok))
    return task


def mlm_loss_fn(ids: list[list[int]], mask_id: int, n_words: int, a):
    "A step of the masked LM: `--batch` random training reviews (labels unused), masked with the run's generator."
    def f(mlm, g, step, state):
        pick = torch.randint(0, len(ids), (a.batch,), generator=g).tolist()
        src, target = mask_tokens(pad_sequences([ids[i] for i in pick]), mask_id, n_words, 0.15, g)
        src, target = src.to(charlm.DEVICE), target.to(charlm.DEVICE)
        chosen = target != IGNORE
        logits = mlm(src, (src != PAD).unsqueeze(-2), chosen)
        return F.cross_entropy(logits, target[chosen]), None
    return f


@torch.no_grad()
def mlm_validation(mlm: MaskedLM, val_ids, mask_id, n_words, unigram_logp: torch.Tensor) -> tuple[float, float]:
    "(masked-LM loss, unigram loss) in nats per chosen token of the validation reviews, the same masks every call."
    mlm.eval()
    g, total, uni, n = torch.Generator().manual_seed(1234), 0.0, 0.0, 0
    for s in range(0, len(val_ids), 64):
        src, target = mask_tokens(pad_sequences(val_ids[s:s + 64]), mask_id, n_words, 0.15, g)
        chosen = target != IGNORE
        d = charlm.DEVICE
        logits = mlm(src.to(d), (src != PAD).unsqueeze(-2).to(d), chosen.to(d))
        total += float(F.cross_entropy(logits, target[chosen].to(d), reduction="sum"))
        uni -= float(unigram_logp[target[chosen]].sum()); n += int(chosen.sum())
    mlm.train()
    return total / n, uni / n


def unigram(ids: list[list[int]], vocab: int) -> torch.Tensor:
    "Log-frequencies of the words of the training reviews (add-one smoothed; `<s>` and padding are never targets)."
    c = torch.ones(vocab)
    for e in ids: c.index_add_(0, torch.tensor(e[1:]), torch.ones(len(e) - 1))
    return (c / c.sum()).log()


def pretrain(task: ImdbTask, a, work: Path, res: charlm.Results) -> Path:
    "Masked-LM pretraining to `--below` nats under the unigram level (or `--mlm-steps`); returns the encoder's file."
    final = work / "pretrained.pt"
    if final.exists() and "pretraining" in res.data: return final
    tok = task.tokenizer
    mask_id, n_words = add_mask_token(tok), tok.get_vocab_size(with_added_tokens=False)
    ids, val_ids = task.train_set[0], task.val_set[0]
    torch.manual_seed(a.mlm_seed)
    mlm = MaskedLM(task.build_model(), bias=True).to(charlm.DEVICE)
    logp = unigram(ids, tok.get_vocab_size())
    f, curve = mlm_loss_fn(ids, mask_id, n_words, a), []
    from annotated_transformer.training import noam_optimizer
    opt_sched = noam_optimizer(mlm, a.d_model, a.lr_factor, a.mlm_warmup)
    seconds, stopped = 0.0, "steps"
    for stop in list(range(a.eval_every, a.mlm_steps, a.eval_every)) + [a.mlm_steps]:
        r = charlm.train(mlm, f, stop, d_model=a.d_model, lr_factor=a.lr_factor, warmup=a.mlm_warmup, seed=a.mlm_seed,
                         ckpt=work / "mlm.pt", save_every=a.save_every, log_every=max(1, a.eval_every // 2),
                         name="masked LM", opt_and_sched=opt_sched)
        seconds = r["train_seconds"]
        loss, level = mlm_validation(mlm, val_ids, mask_id, n_words, logp)
        curve.append({"step": stop, "val_mlm_loss": round(loss, 4)})
        print(f"masked LM step {stop}: validation {loss:.4f} nats, unigram {level:.4f}", flush=True)
        if level - loss >= a.below: stopped = "below"
        elif a.mlm_minutes and seconds >= 60 * a.mlm_minutes and stop < a.mlm_steps: stopped = "minutes"
        res.put("pretraining", {"steps": stop, "val_mlm_loss": round(loss, 4), "unigram_level": round(level, 4),
                                "below_unigram": round(level - loss, 4), "target_below": a.below, "curve": curve,
                                "train_curve": r["curve"], "train_seconds": r["train_seconds"],
                                "seconds_per_step": r["seconds_per_step"], "load": charlm.load_average(),
                                "mask": "<mask>", "output_bias": True, "parameters": count_parameters(mlm),
                                "train_reviews": len(ids), "val_reviews": len(val_ids), "stopped_by": stopped},
                top=True)
        if stopped != "steps": break
    torch.save(mlm.classifier.state_dict(), final)
    return final


def finetune_loss_fn(ids, labels, a):
    def f(model, g, step, state):
        pick = torch.randint(0, len(ids), (a.batch,), generator=g).tolist()
        src = pad_sequences([ids[i] for i in pick]).to(charlm.DEVICE)
        out = model(src, (src != PAD).unsqueeze(-2))                    # (batch, 2) log-probabilities
        y = torch.tensor([labels[i] for i in pick], device=charlm.DEVICE)
        return F.cross_entropy(out, y, label_smoothing=0.1), None
    return f


def finetune(task: ImdbTask, size: int, arm: str, seed: int, encoder: Path | None, a, work: Path) -> dict:
    ids, labels = task.train_set
    keep = np.random.default_rng(seed).permutation(len(ids))[:size]
    sub_ids, sub_labels = [ids[i] for i in keep], [labels[i] for i in keep]
    torch.manual_seed(seed)
    model = task.build_model().to(charlm.DEVICE)
    if arm == "pretrained":
        state = torch.load(encoder, weights_only=True, map_location=charlm.DEVICE)
        missing, unexpected = model.load_state_dict({k: v for k, v in state.items() if not k.startswith("head.")}, strict=False)
        assert not unexpected and all(k.startswith("head.") for k in missing), (missing, unexpected)   # all but the head
    r = charlm.train(model, finetune_loss_fn(sub_ids, sub_labels, a), a.ft_steps, d_model=a.d_model,
                     lr_factor=a.ft_lr_factor, warmup=a.ft_warmup, seed=seed, ckpt=work / f"ft-{size}-{arm}-seed{seed}.pt",
                     save_every=a.save_every, log_every=max(1, a.ft_steps // 4), name=f"{size} {arm} s{seed}")
    val_ids, val_labels = task.val_set
    pred = classify_ids(model, val_ids).argmax(-1)
    acc = float((pred == torch.tensor(val_labels)).float().mean())
    print(f"{size} {arm} seed {seed}: validation accuracy {acc:.4f}", flush=True)
    return {"size": len(sub_ids), "asked": size, "arm": arm, "seed": seed, "accuracy": round(acc, 4),
            "val_reviews": len(val_ids), "steps": a.ft_steps, "train_seconds": r["train_seconds"],
            "seconds_per_step": r["seconds_per_step"], "load": charlm.load_average(), "train_curve": r["curve"]}


_TASK = {}


def init_worker(a, work: Path) -> None:
    "Once per process that fine-tunes: one thread, the device, the reviews encoded with the saved tokenizer."
    torch.set_num_threads(1)
    charlm.use_device(a.device)
    _TASK["task"] = prepare(a, work)


def finetune_job(size: int, arm: str, seed: int, encoder: Path, a, work: Path) -> dict:
    return finetune(_TASK["task"], size, arm, seed, encoder, a, work)


def summarise(res: charlm.Results) -> None:
    table = []
    for size in sorted({r["size"] for r in res["runs"].values()}):
        row = {"size": size}
        for arm in ("pretrained", "scratch"):
            accs = [r["accuracy"] for r in res["runs"].values() if r["size"] == size and r["arm"] == arm]
            if accs: row[arm] = charlm.mean_sd(accs)
        table.append(row)
    res.put("summary", table, top=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--mlm-steps", type=int, default=6000, help="the most masked-LM steps")
    p.add_argument("--below", type=float, default=1.0, help="stop pretraining this many nats under the unigram level")
    p.add_argument("--ft-steps", type=int, default=600, help="labelled steps of every fine-tuning run")
    p.add_argument("--sizes", type=int, nargs="+", default=[250, 1000, 5000, 25000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--mlm-seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32, help="reviews per step")
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--vocab-size", type=int, default=16000)
    p.add_argument("--val-size", type=int, default=2500)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr-factor", type=float, default=0.5)
    p.add_argument("--ft-lr-factor", type=float, default=0.2)
    p.add_argument("--mlm-warmup", type=int, default=400)
    p.add_argument("--ft-warmup", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--mlm-minutes", type=float, default=None,
                   help="stop pretraining at the first evaluation after this many minutes of training")
    charlm.add_common_args(p, "made-up reviews, a tiny model, end to end (< 1 minute)")
    a = p.parse_args()
    if a.dry_run:
        a.data_dir = str(write_fake_imdb(Path("runs") / "imdb_mlm-dry-run-data", n_train=240, n_test=20))
        a.mlm_steps, a.ft_steps, a.sizes, a.seeds, a.batch, a.max_len, a.vocab_size, a.val_size = 6, 4, [20, 500], [0, 1], 8, 32, 300, 40
        a.layers, a.d_model, a.heads, a.eval_every, a.save_every, a.mlm_warmup, a.ft_warmup, a.tag = 2, 32, 2, 3, 2, 2, 2, "dry-run"
    torch.set_num_threads(1)
    res, work = charlm.open_results("imdb_mlm", a)
    task = prepare(a, work)
    encoder = pretrain(task, a, work, res)
    todo = [(size, arm, seed, encoder, a, work) for seed in a.seeds for size in a.sizes   # every cell of a seed first
            for arm in ("pretrained", "scratch") if not res.done(f"{size} | {arm} | seed {seed}")]
    if a.jobs > 1: init, initargs = init_worker, (a, work)    # each worker process encodes the reviews itself
    else: _TASK["task"], init, initargs = task, None, ()
    for (size, arm, seed, *_), r in charlm.pool(a.jobs, finetune_job, todo, init, initargs):
        res.put(f"{size} | {arm} | seed {seed}", r)
        summarise(res)
    print(f"wrote {res.path}")
    pre = res["pretraining"]
    print(f"masked LM: {pre['val_mlm_loss']:.3f} nats after {pre['steps']} steps; unigram {pre['unigram_level']:.3f}")
    for row in res["summary"]:
        print(row["size"], *(f"{arm} {row[arm]['mean']:.4f} ± {row[arm]['sd']:.4f}" for arm in ("pretrained", "scratch") if arm in row))


if __name__ == "__main__":
    main()
