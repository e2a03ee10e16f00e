"""Decoding speed (chapter 7): naive vs cached greedy decoding, and beam search vs cached greedy decoding, on the CPU or a GPU.

A model of width 256 with 3 layers of each kind, 8 heads, d_ff 1024 and a 1,000-token vocabulary (untrained: decoding
speed does not depend on the weights' values) decodes random 32-token sources, in eval mode, without an end symbol so
that every output runs to its full length. For batches of 32 and 1 and outputs of 16, 64 and 128 tokens it measures
greedy decoding without the cache (chapter 6's `greedy_decode`: the whole prefix every step), with it (the
library's `fast_greedy_decode`), and beam search with 4 beams (the library's batched `beam_search`), and reports
generated tokens per second (batch x output tokens / seconds, median of `--repeats` runs).

    python bench/decode.py                       # torch's default number of threads
    python bench/decode.py --threads 1,2         # one run per thread count, in one JSON file
    OMP_WAIT_POLICY=PASSIVE python bench/decode.py --threads 1,2   # on a machine shared with other processes
    python bench/decode.py --device cuda         # on a GPU (timed after torch.cuda.synchronize)
    python bench/decode.py --peer --threads 1,2  # side by side with MarianMTModel.generate (the bench extra)
    python bench/decode.py --peer --device cuda --peer-sizes shipped,base --peer-batches 32,128 --budget 70
                                                 # the same at the shipped model's and the base model's sizes, batches
                                                 # of 32 and 128: one row per size and batch
    python bench/decode.py --ablation --threads 1,2   # chapter 7's optimisations one by one
    python bench/decode.py --floor --threads 1,2      # greedy: ours, a bare step with nothing to spare, MarianMT

Prints a table and writes bench/results/decode-<machine>.json (on a GPU: decode-<gpu name>.json) with a
description of the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import inspect

import torch

from annotated_transformer.decoding import beam_search, fast_greedy_decode
from annotated_transformer.model import make_model
from annotated_transformer.training import greedy_decode   # chapter 6's: the naive decoder

# chapter 6's greedy_decode without the cache (where it has a `use_cache` switch, turned off)
NAIVE = {"use_cache": False} if "use_cache" in inspect.signature(greedy_decode).parameters else {}

MODEL = dict(N=3, d_model=256, d_ff=1024, h=8, dropout=0.1)
VOCAB, SRC_LEN, START = 1000, 32, 1
BATCHES, LENGTHS, BEAM_SIZE = (32, 1), (16, 64, 128), 4
CAVEAT = ("Wall-clock medians on a machine that other processes may share: the load averages before and after each "
          "run are recorded, and a loaded machine gives slower, noisier numbers. With several threads it can be much "
          "slower, as each parallel operation waits for a thread that another process holds; OMP_WAIT_POLICY=PASSIVE "
          "(recorded) softens this. Compare ratios within one run.")


def cpu_model() -> str:
    "The CPU's model name, from /proc/cpuinfo where there is one."
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"): return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_name() -> str:
    "A file-name slug for this machine, as bench/copy_task.py makes it, e.g. `intel-r-xeon-r-processor-2-50ghz-2cores`."
    return re.sub(r"[^a-z0-9]+", "-", f"{cpu_model()}-{os.cpu_count()}cores".lower()).strip("-")


def sync(device: str) -> None:
    "Wait for the GPU's queued work (a GPU call returns before its work is done); nothing on the CPU."
    if device == "cuda": torch.cuda.synchronize()


def median_seconds(fn, repeats: int, device: str = "cpu") -> float:
    "Median wall-clock time of `fn()` over `repeats` runs, each from an idle device to an idle device."
    times = []
    for _ in range(repeats):
        sync(device); t0 = time.perf_counter(); fn(); sync(device); times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(threads: int, repeats: int, device: str = "cpu") -> dict:
    "All measurements with `threads` intra-op threads, on `device`."
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make_model(VOCAB, VOCAB, **MODEL).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    load_before = os.getloadavg()
    results = []
    with torch.inference_mode():
        for batch in BATCHES:
            src = torch.randint(2, VOCAB, (batch, SRC_LEN), generator=gen).to(device)   # no padding: every row is full
            src_mask = torch.ones(batch, 1, SRC_LEN, dtype=torch.bool, device=device)
            greedy = lambda n, cache: (fast_greedy_decode(model, src, src_mask, n + 1, START) if cache
                                       else greedy_decode(model, src, src_mask, n + 1, START, **NAIVE))
            beam = lambda n: beam_search(model, src, src_mask, n + 1, START, beam_size=BEAM_SIZE)
            greedy(8, True); greedy(8, False); beam(8)                         # warm-up
            for n in LENGTHS:
                assert greedy(n, True).shape == (batch, n + 1) and beam(n)[0].shape == (batch, n + 1)
                t_naive = median_seconds(lambda: greedy(n, False), repeats, device)
                t_cached = median_seconds(lambda: greedy(n, True), repeats, device)
                t_beam = median_seconds(lambda: beam(n), repeats, device)
                r = dict(batch=batch, tokens=n, naive_s=t_naive, cached_s=t_cached, beam_s=t_beam,
                         naive_tok_s=batch * n / t_naive, cached_tok_s=batch * n / t_cached,
                         beam_tok_s=batch * n / t_beam, speedup=t_naive / t_cached, beam_over_cached=t_beam / t_cached)
                results.append(r)
                print(f"threads {threads}  batch {batch:>2}  {n:>3} tokens:  naive {r['naive_tok_s']:>8,.0f} tok/s  "
                      f"cached {r['cached_tok_s']:>8,.0f} tok/s  speed-up {r['speedup']:5.1f}x  "
                      f"beam {BEAM_SIZE} {r['beam_tok_s']:>7,.0f} tok/s = {r['beam_over_cached']:.2f}x cached time",
                      flush=True)
    return dict(threads=threads, load_before=[round(x, 2) for x in load_before],
                load_after=[round(x, 2) for x in os.getloadavg()], results=results)


PEER = dict(batch=32, src_len=32, new_tokens=64, beam=4)   # the sizes of the side-by-side comparison (issue 15)


def _shipped_sizes() -> dict:
    "The shipped translation model's sizes, from pretrained/multi30k-small/config.json (these values if unreadable)."
    try:
        cfg = json.loads((Path(__file__).resolve().parent.parent / "pretrained" / "multi30k-small" / "config.json")
                         .read_text())["model"]
        return dict(N=cfg["N"], d_model=cfg["d_model"], d_ff=cfg["d_ff"], h=cfg["h"], vocab=cfg["tgt_vocab"],
                    tie=bool(cfg.get("tie_embeddings", False)))
    except (OSError, KeyError, ValueError):
        return dict(N=3, d_model=256, d_ff=1024, h=4, vocab=8000, tie=True)


#: the sizes `--peer-sizes` can name: `bench` (`MODEL` and `VOCAB`, untied: the default comparison), `shipped` (the
#: book's shipped translation model, `pretrained:multi30k-small`), `base` (the paper's base model, an 8000-token
#: shared vocabulary). `tie`: one matrix for both embeddings and the output layer (MarianMT always ties them).
PEER_SIZES = {"bench": dict(N=MODEL["N"], d_model=MODEL["d_model"], d_ff=MODEL["d_ff"], h=MODEL["h"], vocab=VOCAB,
                            tie=False),
              "shipped": _shipped_sizes(),
              "base": dict(N=6, d_model=512, d_ff=2048, h=8, vocab=8000, tie=True)}
#: `--tiny` (dry runs of the code paths on a CPU): toy sizes under the same names
TINY_SIZES = {"bench": dict(N=1, d_model=32, d_ff=64, h=2, vocab=100, tie=False),
              "shipped": dict(N=1, d_model=32, d_ff=64, h=2, vocab=120, tie=True),
              "base": dict(N=2, d_model=64, d_ff=128, h=4, vocab=160, tie=True)}


def marian_peer(device: str = "cpu", sizes: dict | None = None):
    """Hugging Face's `MarianMTModel` at the sizes of `MODEL` (or `sizes`, an entry of `PEER_SIZES`; random weights,
    no download), fp32, in eval mode: what a reader would otherwise use to translate. Needs the `bench` extra
    (`pip install -e ".[bench]"`)."""
    from transformers import MarianConfig, MarianMTModel
    z = sizes or PEER_SIZES["bench"]
    cfg = MarianConfig(vocab_size=z["vocab"], d_model=z["d_model"], encoder_layers=z["N"], decoder_layers=z["N"],
                       encoder_attention_heads=z["h"], decoder_attention_heads=z["h"],
                       encoder_ffn_dim=z["d_ff"], decoder_ffn_dim=z["d_ff"], max_position_embeddings=512,
                       pad_token_id=0, eos_token_id=2, decoder_start_token_id=START, forced_eos_token_id=None)
    torch.manual_seed(0)
    return MarianMTModel(cfg).to(device=device, dtype=torch.float32).eval()


def side_by_side_inputs(threads: int, device: str = "cpu", sizes: dict | None = None, batch: int | None = None):
    """What every side-by-side run decodes: our model at `MODEL`'s sizes (or `sizes`, an entry of `PEER_SIZES`;
    seeded, fp32, eval mode), and `PEER["batch"]` (or `batch`) random sources of `PEER["src_len"]` tokens with their
    all-true mask, on `device`, with `threads` CPU threads."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if sizes is None:
        ours, vocab = make_model(VOCAB, VOCAB, **MODEL), VOCAB
    else:
        vocab = sizes["vocab"]
        ours = make_model(vocab, vocab, N=sizes["N"], d_model=sizes["d_model"], d_ff=sizes["d_ff"], h=sizes["h"],
                          dropout=MODEL["dropout"], tie_embeddings=sizes["tie"])
    ours = ours.to(device=device, dtype=torch.float32).eval()
    return (ours, *peer_sources(vocab, batch or PEER["batch"], device))


def peer_sources(vocab: int, batch: int, device: str = "cpu"):
    "`batch` random (seeded) sources of `PEER['src_len']` tokens from 3 to `vocab` - 1 and their all-true mask."
    src = torch.randint(3, vocab, (batch, PEER["src_len"]), generator=torch.Generator().manual_seed(0)).to(device)
    return src, torch.ones(src.size(0), 1, src.size(1), dtype=torch.bool, device=device)


def versus_peer(threads: int, repeats: int, device: str = "cpu", sizes: dict | None = None, batch: int | None = None,
                size_name: str | None = None, models: tuple | None = None, deadline: float | None = None) -> dict:
    """Ours against `MarianMTModel.generate`, same sizes (`MODEL`'s, or `sizes` named `size_name`), greedy and beam
    search on `PEER["batch"]` (or `batch`) sources, each forced to exactly `PEER["new_tokens"]` new tokens (ours: no
    end symbol; the peer: `min_new_tokens`), runs interleaved (ours, peer, ours, ...) so that a change of load hits
    both; medians. `models`: (ours, peer) already built at these sizes; `deadline` (a `time.perf_counter()` value):
    no timed round after the first that would end past it."""
    import transformers
    if models is None:
        ours, src, src_mask = side_by_side_inputs(threads, device, sizes, batch)
        peer = marian_peer(device, sizes)
    else:
        torch.set_num_threads(threads)
        ours, peer = models
        src, src_mask = peer_sources(sizes["vocab"] if sizes else VOCAB, batch or PEER["batch"], device)
    for mdl in (ours, peer):
        assert not mdl.training and next(mdl.parameters()).dtype == torch.float32
        assert next(mdl.parameters()).device.type == device
    b, n, k = src.size(0), PEER["new_tokens"], PEER["beam"]
    attn = torch.ones_like(src)
    fns = {
        "ours_greedy": lambda: fast_greedy_decode(ours, src, src_mask, n + 1, START),
        "peer_greedy": lambda: peer.generate(input_ids=src, attention_mask=attn, max_new_tokens=n, min_new_tokens=n,
                                             num_beams=1, do_sample=False),
        "ours_beam": lambda: beam_search(ours, src, src_mask, n + 1, START, beam_size=k)[0],
        "peer_beam": lambda: peer.generate(input_ids=src, attention_mask=attn, max_new_tokens=n, min_new_tokens=n,
                                           num_beams=k, do_sample=False, early_stopping=False),
    }
    load_before = os.getloadavg()
    times = {name: [] for name in fns}
    with torch.inference_mode():
        for name, fn in fns.items():                                       # warm-up, and the shapes
            assert fn().shape == (b, n + 1), name
        for i in range(repeats):
            t_round = time.perf_counter()
            for name, fn in fns.items():
                sync(device); t0 = time.perf_counter(); fn(); sync(device); times[name].append(time.perf_counter() - t0)
            now = time.perf_counter()
            if deadline is not None and i + 1 < repeats and now + (now - t_round) > deadline:
                print(f"  budget: {i + 1} of {repeats} timed rounds", flush=True)
                break
    med = {name: statistics.median(t) for name, t in times.items()}
    tok_s = {name: b * n / t for name, t in med.items()}
    r = dict(threads=threads, batch=b, src_len=PEER["src_len"], new_tokens=n, beam=k, seconds=med, tok_s=tok_s,
             greedy_ratio=tok_s["ours_greedy"] / tok_s["peer_greedy"], beam_ratio=tok_s["ours_beam"] / tok_s["peer_beam"],
             transformers=transformers.__version__, load_before=[round(x, 2) for x in load_before],
             load_after=[round(x, 2) for x in os.getloadavg()])
    if sizes is not None:                    # the multi-size comparison names its sizes and what it ran
        r.update(size=size_name, model={k_: v for k_, v in sizes.items()}, repeats_done=len(times["ours_greedy"]),
                 dtype=str(next(ours.parameters()).dtype).replace("torch.", ""), torch=torch.__version__)
    print(f"threads {threads}" + (f", {size_name} sizes, batch {b}" if sizes is not None else "") + f": greedy ours {tok_s['ours_greedy']:,.0f} tok/s, MarianMT {tok_s['peer_greedy']:,.0f} "
          f"({r['greedy_ratio']:.2f}x); beam {k} ours {tok_s['ours_beam']:,.0f}, MarianMT {tok_s['peer_beam']:,.0f} "
          f"({r['beam_ratio']:.2f}x)", flush=True)
    return r


#: chapter 7's optimisations with a switch, switched on one after another (each row keeps the ones above it)
STEPS = ("torch.cat cache, fused attention kernel", "+ static cache written in place",
         "+ explicit attention for a decoding step")
LONG = 256   # a longer output, where copying the whole past at every step (torch.cat) costs more


def configure(step: int) -> dict:
    """Switch the optimisations of `STEPS[:step + 1]` on and the others off; returns the decoding keywords. The
    switches are the library's own: `static_cache=` and `attention.FEW_QUERIES` (0 sends every call to the fused
    kernel). The changes without a switch (cross-attention keys stored contiguous, an all-true source mask dropped,
    the beams of a source sharing its memory row) are on in every row."""
    from annotated_transformer import attention
    attention.FEW_QUERIES = 8 if step >= 2 else 0
    return dict(static_cache=step >= 1)


def ablation(threads: int, repeats: int, device: str = "cpu") -> dict:
    """Ours at the sizes of the side-by-side comparison, with chapter 7's switches turned on one by one, runs
    interleaved across the steps: greedy and beam search for `PEER["new_tokens"]` tokens, greedy for `LONG` tokens.
    The tokens must not change. Medians and best (least disturbed) runs."""
    ours, src, src_mask = side_by_side_inputs(threads, device)
    b, n, k = PEER["batch"], PEER["new_tokens"], PEER["beam"]
    kinds = {"greedy": n, "beam": n, f"greedy_{LONG}": LONG}
    def fns(step):
        kw = configure(step)
        return {"greedy": lambda: fast_greedy_decode(ours, src, src_mask, n + 1, START, **kw),
                "beam": lambda: beam_search(ours, src, src_mask, n + 1, START, beam_size=k, **kw)[0],
                f"greedy_{LONG}": lambda: fast_greedy_decode(ours, src, src_mask, LONG + 1, START, **kw)}
    load_before = os.getloadavg()
    times = {(s, kind): [] for s in range(len(STEPS)) for kind in kinds}
    with torch.inference_mode():
        ref = {}
        for s in range(len(STEPS)):                                        # warm-up, and the same tokens
            for kind, fn in fns(s).items():
                out = fn()
                assert torch.equal(out, ref.setdefault(kind, out)), (STEPS[s], kind)
        for _ in range(repeats):
            for s in range(len(STEPS)):
                for kind, fn in fns(s).items():
                    sync(device); t0 = time.perf_counter(); fn(); sync(device); times[s, kind].append(time.perf_counter() - t0)
    configure(len(STEPS) - 1)
    rows = []
    for s in range(len(STEPS)):
        r = dict(step=STEPS[s])
        for kind, tokens in kinds.items():
            r[f"{kind}_tok_s"] = b * tokens / statistics.median(times[s, kind])
            r[f"{kind}_best_tok_s"] = b * tokens / min(times[s, kind])
        rows.append(r)
        print(f"threads {threads}  {r['step']:<42} " + "  ".join(
            f"{kind} {r[f'{kind}_tok_s']:>6,.0f} tok/s (best {r[f'{kind}_best_tok_s']:,.0f})" for kind in kinds), flush=True)
    return dict(threads=threads, rows=rows, tokens=kinds, load_before=[round(x, 2) for x in load_before],
                load_after=[round(x, 2) for x in os.getloadavg()])


def finished_rows(data_dir: str, threads: int, repeats: int, n: int = 1000, batch: int = 100) -> dict:
    """What dropping finished rows buys on real sentences, where outputs end at different lengths: the shipped
    translation model (`pretrained:multi30k-small`) translates the first `n` test sentences greedily in batches of
    `batch`, with `drop_finished` on and off, interleaved; the translations must be the same."""
    import functools
    from annotated_transformer import translation
    from annotated_transformer.run import load_pretrained
    from annotated_transformer.data import load_multi30k
    from annotated_transformer.translation import fast_translate
    torch.set_num_threads(threads)
    model, task = load_pretrained("multi30k-small")
    sentences = [de for de, _ in load_multi30k("test2016", data_dir)[:n]]
    runs = {drop: functools.partial(fast_greedy_decode, drop_finished=drop) for drop in (True, False)}
    name = "fast_greedy_decode" if hasattr(translation, "fast_greedy_decode") else "greedy_decode"   # what translate calls
    times, outs, before = {True: [], False: []}, {}, getattr(translation, name)
    with torch.inference_mode():
        for _ in range(repeats):
            for drop, fn in runs.items():
                setattr(translation, name, fn)
                t0 = time.perf_counter(); outs[drop] = fast_translate(model, task.tokenizer, sentences, batch_size=batch)
                times[drop].append(time.perf_counter() - t0)
    setattr(translation, name, before)
    assert outs[True] == outs[False]
    r = dict(threads=threads, sentences=len(sentences), batch=batch,
             **{f"{'drop' if d else 'keep'}_sent_s": len(sentences) / statistics.median(t) for d, t in times.items()})
    print(f"threads {threads}: {len(sentences)} test sentences, batches of {batch}: finished rows kept "
          f"{r['keep_sent_s']:.1f} sentences/s, dropped {r['drop_sent_s']:.1f} sentences/s "
          f"({r['drop_sent_s'] / r['keep_sent_s']:.2f}x)", flush=True)
    return r


def bare_greedy(model, src: torch.Tensor, max_len: int, compiled: bool = False) -> torch.Tensor:
    """A floor for greedy decoding in eager PyTorch: the operations a decoding step cannot do without (the
    projections, attention over the cached keys and values, the layer norms, the output projection, the argmax) called
    directly on the weights of `model` (post-norm, no source mask), with no modules, checks, branches or log-softmax.
    `compiled`: the step is `torch.compile`d, with static shapes (attention over the whole preallocated cache, the
    positions not yet written masked). What is left between this and `fast_greedy_decode` is the library's overhead;
    what is left between this and the peer is work both must do. Returns the same tokens as `fast_greedy_decode`."""
    import math
    import torch.nn.functional as F
    assert not model.config.get("norm_first"), "bare_greedy follows the post-norm layer"
    layers, (B, S), D = model.decoder.layers, src.shape, model.config["d_model"]
    H = model.config["h"]; dk = D // H
    lut, pe = model.tgt_embed.embed.lut.weight, model.tgt_embed.position.pe[0, :max_len]
    lin = lambda x, m: F.linear(x, m.weight, m.bias)
    norm = lambda x, n: F.layer_norm(x, (D,), n.weight, n.bias, n.eps)
    heads = lambda x: x.view(B, H, -1, dk)                                         # (B, D) -> (B, H, 1, dk)
    memory = model.encode(src, None)
    cross = [(lin(memory, l.src_attn.w_k).view(B, S, H, dk).transpose(1, 2).contiguous(),
              lin(memory, l.src_attn.w_v).view(B, S, H, dk).transpose(1, 2).contiguous()) for l in layers]
    cache = [memory.new_zeros(2, B, H, max_len, dk) for _ in layers]             # self-attention keys and values
    def attend(q, k, v, live=None):
        s = q @ k.transpose(-1, -2) / math.sqrt(dk)
        if live is not None: s = s.masked_fill(~live, float("-inf"))
        return (s.softmax(-1) @ v).view(B, D)
    def step(tok, t):                                          # t: the position, a 0-d tensor when compiled
        x = F.embedding(tok, lut) * math.sqrt(D) + (pe.index_select(0, t.view(1)) if compiled else pe[t])
        live = (torch.arange(max_len, device=tok.device) <= t).view(1, 1, 1, -1) if compiled else None
        for l, kv, (ck, cv) in zip(layers, cache, cross):
            a = l.self_attn
            if compiled: kv.index_copy_(3, t.view(1), torch.stack([heads(lin(x, a.w_k)), heads(lin(x, a.w_v))]))
            else: kv[0, :, :, t], kv[1, :, :, t] = lin(x, a.w_k).view(B, H, dk), lin(x, a.w_v).view(B, H, dk)
            k, v = (kv[0], kv[1]) if compiled else (kv[0, :, :, :t + 1], kv[1, :, :, :t + 1])
            x = norm(x + lin(attend(heads(lin(x, a.w_q)), k, v, live), a.w_o), l.sublayer[0].norm)
            x = norm(x + lin(attend(heads(lin(x, l.src_attn.w_q)), ck, cv), l.src_attn.w_o), l.sublayer[1].norm)
            x = norm(x + lin(F.relu(lin(x, l.feed_forward.w_1)), l.feed_forward.w_2), l.sublayer[2].norm)
        return lin(x, model.generator.proj).argmax(-1)
    fn = torch.compile(step, dynamic=False) if compiled else step
    ys = torch.full((B, max_len), START, dtype=torch.long, device=src.device)
    for t in range(max_len - 1):
        ys[:, t + 1] = fn(ys[:, t], torch.tensor(t, device=src.device) if compiled else t)
    return ys


def floor(threads: int, repeats: int, device: str = "cpu", compiled: bool = True) -> dict:
    """Ours (`fast_greedy_decode`), the bare step (`bare_greedy`, eager and, if `compiled`, compiled) and
    `MarianMTModel.generate` at the sizes of the side-by-side comparison, greedy, interleaved; the bare steps must
    give ours' tokens. How far the library is from the floor, and how far the floor is from the peer."""
    ours, src, src_mask = side_by_side_inputs(threads, device)
    peer = marian_peer(device)
    b, n = PEER["batch"], PEER["new_tokens"]
    fns = {"ours": lambda: fast_greedy_decode(ours, src, src_mask, n + 1, START),
           "bare": lambda: bare_greedy(ours, src, n + 1),
           "peer": lambda: peer.generate(input_ids=src, attention_mask=torch.ones_like(src), max_new_tokens=n,
                                         min_new_tokens=n, num_beams=1, do_sample=False)}
    notes = {}
    with torch.inference_mode():
        ref = fns["ours"]()
        assert torch.equal(fns["bare"](), ref)
        if compiled:
            try:
                t0 = time.perf_counter()
                assert torch.equal(bare_greedy(ours, src, n + 1, compiled=True), ref)
                notes["compile_seconds"] = round(time.perf_counter() - t0, 1)
                fns["bare_compiled"] = lambda: bare_greedy(ours, src, n + 1, compiled=True)
            except Exception as e:                   # no C++ compiler, or an unsupported operation: report it
                notes["compile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        fns["peer"]()
        load_before = os.getloadavg()
        times = {name: [] for name in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                sync(device); t0 = time.perf_counter(); fn(); sync(device); times[name].append(time.perf_counter() - t0)
    tok_s = {name: b * n / statistics.median(t) for name, t in times.items()}
    r = dict(threads=threads, tok_s=tok_s, over_peer={k: v / tok_s["peer"] for k, v in tok_s.items()}, **notes,
             load_before=[round(x, 2) for x in load_before], load_after=[round(x, 2) for x in os.getloadavg()])
    print(f"threads {threads}: " + ", ".join(f"{k} {v:,.0f} tok/s ({r['over_peer'][k]:.2f}x the peer)"
                                              for k, v in tok_s.items()) + (f"; {notes}" if notes else ""), flush=True)
    return r


def write_report(report: dict, path) -> Path:
    "Write `report` as JSON to `path` (its folder made if needed); returns the path."
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    return out


def peer_sizes_main(args, threads: list[int], machine: dict, name: str, t_start: float, parser) -> dict:
    """`--peer` with `--peer-sizes`/`--peer-batches`: one row per thread count, size and batch (each size's two models
    built once), each row's runs interleaved, medians; the JSON is rewritten after every row."""
    import transformers
    table = TINY_SIZES if args.tiny else PEER_SIZES
    size_names = (args.peer_sizes or "bench").split(",")
    if any(z not in table for z in size_names): parser.error(f"--peer-sizes: choose among {', '.join(table)}")
    batches = [int(b) for b in (args.peer_batches or str(PEER["batch"])).split(",")]
    if min(batches) < 1: parser.error("--peer-batches must be positive")
    device = args.device
    machine = dict(machine, transformers=transformers.__version__)
    n_rows, runs = len(threads) * len(size_names) * len(batches), []
    report = dict(machine=machine,
                  config=dict(sizes={z: table[z] for z in size_names}, batches=batches, src_len=PEER["src_len"],
                              new_tokens=PEER["new_tokens"], beam=PEER["beam"], start=START, repeats=args.repeats,
                              budget_s=args.budget, tiny=args.tiny, device=device, dtype="float32",
                              torch=torch.__version__, transformers=transformers.__version__,
                              mode="eval, random weights, fp32 (both), interleaved runs, medians",
                              tok_s="batch x new tokens / median seconds",
                              ratios="ours tok/s / MarianMTModel.generate tok/s"),
                  runs=runs)
    out = Path(args.out or Path(__file__).parent / "results" / f"decode_vs_marian-{name}.json")
    for t in threads:
        for z in size_names:
            ours, _, _ = side_by_side_inputs(t, device, table[z], 1)
            models = (ours, marian_peer(device, table[z]))
            for b in batches:
                deadline = (None if args.budget is None
                            else t_start + args.budget * (len(runs) + 1) / n_rows)   # this row's share ends here
                runs.append(versus_peer(t, args.repeats, device, table[z], b, z, models, deadline))
                write_report(report, out)
            del models, ours
            if device == "cuda": torch.cuda.empty_cache()
    print(f"\n{'threads':>7} {'sizes':>8} {'d_model/N/h/d_ff/vocab':>22} {'batch':>5} {'greedy ours':>12} {'MarianMT':>9} "
          f"{'ratio':>6} {'beam ours':>10} {'MarianMT':>9} {'ratio':>6} {'runs':>4}")
    for r in runs:
        t, z = r["tok_s"], r["model"]
        shape = f"{z['d_model']}/{z['N']}/{z['h']}/{z['d_ff']}/{z['vocab']}"
        print(f"{r['threads']:>7} {r['size']:>8} {shape:>22} {r['batch']:>5} {t['ours_greedy']:>12,.0f} "
              f"{t['peer_greedy']:>9,.0f} {r['greedy_ratio']:>5.2f}x {t['ours_beam']:>10,.0f} {t['peer_beam']:>9,.0f} "
              f"{r['beam_ratio']:>5.2f}x {r['repeats_done']:>4}")
    print(f"{machine.get('gpu') or machine['cpu']}, torch {torch.__version__}, transformers {transformers.__version__}; "
          f"{PEER['new_tokens']} new tokens, beam {PEER['beam']}, median of up to {args.repeats} runs; "
          f"{time.perf_counter() - t_start:.0f} s")
    print(f"wrote {out}")
    return report


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default=str(torch.get_num_threads()),
                   help="comma-separated intra-op thread counts, one run each (default: torch's default, %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per measurement; the median is kept")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to decode (default: cpu)")
    p.add_argument("--out", default=None, help="JSON file (default: bench/results/decode-<machine>.json)")
    p.add_argument("--ablation", action="store_true", help="only ours, chapter 7's optimisations switched on one "
                   "by one (greedy and beam at the --peer sizes), written to decode_steps-<machine>.json")
    p.add_argument("--finished", metavar="DATA_DIR", default=None, help="only dropping finished rows on and off, "
                   "translating Multi30k test sentences (from DATA_DIR, or downloaded) with the shipped model, "
                   "written to decode_finished-<machine>.json")
    p.add_argument("--floor", action="store_true", help="only greedy decoding: ours, the bare step (eager and "
                   "compiled) and MarianMTModel.generate, written to decode_floor-<machine>.json (needs the bench extra)")
    p.add_argument("--no-compile", action="store_true", help="with --floor: skip the compiled bare step")
    p.add_argument("--peer", action="store_true", help="only ours against Hugging Face's MarianMTModel.generate, "
                   "written to decode_vs_marian-<machine>.json (needs the bench extra)")
    p.add_argument("--peer-sizes", default=None, help=f"with --peer: comma-separated model sizes, one row each "
                   f"(of {', '.join(PEER_SIZES)}; default: bench, the sizes of MODEL)")
    p.add_argument("--peer-batches", default=None, help=f"with --peer: comma-separated batch sizes, one row each "
                   f"(default {PEER['batch']})")
    p.add_argument("--budget", type=float, default=None, help="with --peer-sizes/--peer-batches: seconds for the "
                   "whole run, shared evenly by the rows; a row stops its timed rounds (after the first) at its share")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)   # toy sizes: a dry run of the code paths
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    threads = [int(t) for t in args.threads.split(",")]
    if min(threads) < 1 or args.repeats < 1: p.error("--threads and --repeats must be positive")
    if args.device == "cuda" and not torch.cuda.is_available(): p.error("--device cuda, but no GPU is available")
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    name = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") if gpu else machine_name()
    machine = dict(cpu=cpu_model(), cores=os.cpu_count(), gpu=gpu, torch=torch.__version__,
                   python=platform.python_version(), platform=platform.platform(),
                   omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", ""),
                   date=time.strftime("%Y-%m-%d %H:%M:%S %z"), caveat=CAVEAT)
    if args.finished:
        runs = [finished_rows(args.finished, t, args.repeats) for t in threads]
        report = dict(machine=machine, config=dict(model="pretrained:multi30k-small", split="test2016", decoding="greedy",
                                                   repeats=args.repeats, device="cpu"), runs=runs)
        out = write_report(report, args.out or Path(__file__).parent / "results" / f"decode_finished-{name}.json")
        print(f"wrote {out}")
        return report
    if args.floor:
        runs = [floor(t, args.repeats, args.device, not args.no_compile) for t in threads]
        report = dict(machine=machine, config=dict(model=dict(src_vocab=VOCAB, tgt_vocab=VOCAB, **MODEL), **PEER,
                                                   repeats=args.repeats, device=args.device, decoding="greedy",
                                                   tok_s="batch x new tokens / median seconds"), runs=runs)
        out = write_report(report, args.out or Path(__file__).parent / "results" / f"decode_floor-{name}.json")
        print(f"wrote {out}")
        return report
    if args.ablation:
        runs = [ablation(t, args.repeats, args.device) for t in threads]
        report = dict(machine=machine, config=dict(model=dict(src_vocab=VOCAB, tgt_vocab=VOCAB, **MODEL), **PEER,
                                                   repeats=args.repeats, device=args.device, steps=STEPS,
                                                   tok_s="batch x new tokens / median seconds"), runs=runs)
        out = write_report(report, args.out or Path(__file__).parent / "results" / f"decode_steps-{name}.json")
        print(f"wrote {out}")
        return report
    if args.peer and (args.peer_sizes or args.peer_batches or args.tiny):
        return peer_sizes_main(args, threads, machine, name, t_start, p)
    if args.peer:
        runs = [versus_peer(t, args.repeats, args.device) for t in threads]
        report = dict(machine=machine,
                      config=dict(model=dict(src_vocab=VOCAB, tgt_vocab=VOCAB, **MODEL), **PEER, repeats=args.repeats,
                                  device=args.device, mode="eval, random weights, interleaved runs, medians",
                                  tok_s="batch x new tokens / median seconds"),
                      runs=runs)
        out = write_report(report, args.out or Path(__file__).parent / "results" / f"decode_vs_marian-{name}.json")
        print(f"\n{'threads':>7} {'greedy ours':>12} {'MarianMT':>9} {'ratio':>6} {'beam ours':>10} {'MarianMT':>9} {'ratio':>6}")
        for r in runs:
            t = r["tok_s"]
            print(f"{r['threads']:>7} {t['ours_greedy']:>12,.0f} {t['peer_greedy']:>9,.0f} {r['greedy_ratio']:>5.2f}x "
                  f"{t['ours_beam']:>10,.0f} {t['peer_beam']:>9,.0f} {r['beam_ratio']:>5.2f}x")
        print(f"wrote {out}")
        return report
    runs = [run(t, args.repeats, args.device) for t in threads]
    report = dict(
        machine=machine,
        config=dict(model=dict(src_vocab=VOCAB, tgt_vocab=VOCAB, **MODEL), mode="eval, untrained weights",
                    src_len=SRC_LEN, batches=BATCHES, output_tokens=LENGTHS, beam_size=BEAM_SIZE,
                    end_symbol=None, repeats=args.repeats, device=args.device,
                    tok_s="batch x output tokens / median seconds"),
        runs=runs)
    out = write_report(report, args.out or Path(__file__).parent / "results" / f"decode-{name}.json")
    print(f"\n{'threads':>7} {'batch':>5} {'tokens':>6} {'naive tok/s':>12} {'cached tok/s':>13} {'speed-up':>9} "
          f"{'beam tok/s':>11} {'beam/cached':>12}   load before -> after")
    for r_ in runs:
        for r in r_["results"]:
            print(f"{r_['threads']:>7} {r['batch']:>5} {r['tokens']:>6} {r['naive_tok_s']:>12,.0f} "
                  f"{r['cached_tok_s']:>13,.0f} {r['speedup']:>8.1f}x {r['beam_tok_s']:>11,.0f} "
                  f"{r['beam_over_cached']:>11.2f}x   {r_['load_before'][0]} -> {r_['load_after'][0]}")
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
