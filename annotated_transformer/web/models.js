// annotated_transformer/web/models.js: package data, copied into the site by `build_site` (nbs/9w_web.ipynb explains it).
// The decoding loops of the three pages, on ONNX Runtime (`ort`): in the browser and in node alike.
(function (root) {
  const BOS = 1, EOS = 2, PAD = 0;
  const i64 = (ort, ids, dims) => new ort.Tensor("int64", BigInt64Array.from(ids, (x) => BigInt(x)), dims);
  const emptyCache = (ort, m, batch = 1) => new ort.Tensor("float32", new Float32Array(0), [m.layers, batch, m.heads, 0, m.d_k]);
  function argmax(a, from, n) {   // index of the largest of a[from .. from + n - 1], the first one on ties (torch.argmax)
    let best = 0;
    for (let j = 1; j < n; j++) if (a[from + j] > a[from + best]) best = j;
    return best;
  }
  const now = () => (typeof performance !== "undefined" ? performance.now() : Date.now());

  class Translator {
    constructor(ort, tokenizer, meta, encoder, decoder) { Object.assign(this, { ort, tokenizer, meta, encoder, decoder }); }
    // source ids <s> ... </s>, cut to meta.max_source tokens; returns {ids, cut}
    source(text) {
      let ids = this.tokenizer.encode(text), cut = false;
      if (ids.length + 2 > this.meta.max_source) { ids = ids.slice(0, this.meta.max_source - 2); cut = true; }
      return { ids: [BOS, ...ids, EOS], cut };
    }
    // greedy decoding; onToken(tokenId, crossRow) after each step; returns {ids, text, cross, msPerToken}
    async translate(srcIds, onToken) {
      const { ort, meta } = this, S = srcIds.length;
      const src = i64(ort, srcIds, [1, S]);
      const { memory_k, memory_v } = await this.encoder.run({ src });
      let past_k = emptyCache(ort, meta), past_v = emptyCache(ort, meta);
      const ys = [BOS], cross = [], limit = Math.min(S + meta.extra, meta.max_positions);
      const t0 = now();
      while (ys.length < limit && ys[ys.length - 1] !== EOS) {
        const out = await this.decoder.run({ tokens: i64(ort, [ys[ys.length - 1]], [1, 1]), src, memory_k, memory_v, past_k, past_v });
        past_k = out.present_k; past_v = out.present_v;
        const V = out.logp.dims[2], next = argmax(out.logp.data, 0, V);
        const a = out.cross_attn.data, H = meta.heads, last = (meta.layers - 1) * H * S, row = new Float32Array(S);
        for (let h = 0; h < H; h++) for (let s = 0; s < S; s++) row[s] += a[last + h * S + s] / H;   // last layer, mean of heads
        ys.push(next); cross.push(row);
        if (onToken) await onToken(next, row);
      }
      const ms = (now() - t0) / (ys.length - 1);
      const end = ys.indexOf(EOS, 1);
      return { ids: ys, text: this.tokenizer.decode(ys.slice(1, end < 0 ? ys.length : end)), cross, msPerToken: ms };
    }
  }

  // chapter 7's beam_search for one source, K beams decoded as one batch of K rows: hypotheses ranked by summed
  // log-probability / ((5 + length) / 6) ** alpha; float32 sums as in PyTorch. Returns what translate returns.
  Translator.prototype.beamSearch = async function (srcIds, K, alpha = 0.6, onStep) {
    const { ort, meta } = this, S = srcIds.length, f = Math.fround, lp = (n) => f(((5 + n) / 6) ** alpha);
    const one = i64(ort, srcIds, [1, S]), { memory_k, memory_v } = await this.encoder.run({ src: one });
    const tile = (t) => {                                       // (N, 1, h, S, d_k) -> (N, K, h, S, d_k)
      const [N, , H, L, D] = t.dims, n = H * L * D, out = new Float32Array(N * K * n);
      for (let l = 0; l < N; l++) for (let k = 0; k < K; k++) out.set(t.data.subarray(l * n, (l + 1) * n), (l * K + k) * n);
      return new ort.Tensor("float32", out, [N, K, H, L, D]);
    };
    const mk = tile(memory_k), mv = tile(memory_v), src = i64(ort, [].concat(...Array(K).fill(srcIds)), [K, S]);
    const gather = (t, rows) => {                               // rows of the cache (N, K, h, T, d_k), along K
      const [N, , H, T, D] = t.dims, n = H * T * D, out = new Float32Array(t.data.length);
      for (let l = 0; l < N; l++) rows.forEach((r, k) => out.set(t.data.subarray((l * K + r) * n, (l * K + r + 1) * n), (l * K + k) * n));
      return new ort.Tensor("float32", out, t.dims);
    };
    const maxLen = Math.min(S + meta.extra, meta.max_positions);
    let past_k = emptyCache(ort, meta, K), past_v = emptyCache(ort, meta, K);
    let seqs = Array.from({ length: K }, () => [BOS]), logp = Array.from({ length: K }, (_, k) => (k ? -Infinity : 0));
    let fin = [], nFin = 0, done = false, t = 1;               // fin: {score, seq}, best first, at most K
    const t0 = now();
    for (; t < maxLen; t++) {
      const out = await this.decoder.run({ tokens: i64(ort, seqs.map((q) => q[q.length - 1]), [K, 1]), src, memory_k: mk, memory_v: mv, past_k, past_v });
      const V = out.logp.dims[2], a = out.logp.data, cand = [];
      for (let k = 0; k < K; k++) for (let v = 0; v < V; v++) cand.push(f(logp[k] + a[k * V + v]));
      const order = topk(cand, 2 * K), top = order.map((i) => cand[i]);
      const parent = order.map((i) => Math.floor(i / V)), tok = order.map((i) => i % V);
      const finish = order.map((_, j) => j < K && tok[j] === EOS && top[j] > -Infinity && !done);
      if (finish.some(Boolean)) {
        const pool = fin.concat(order.map((_, j) => ({ score: finish[j] ? f(top[j] / lp(t)) : -Infinity, seq: [...seqs[parent[j]], tok[j]] })));
        fin = topk(pool.map((x) => x.score), K).map((i) => pool[i]);
        nFin += finish.filter(Boolean).length;
      }
      const masked = top.map((x, j) => (tok[j] === EOS ? -Infinity : x));
      let keep = topk(masked, K);
      const slot = stableSlots(keep.map((j) => parent[j]), K), byRow = [];
      slot.forEach((r, i) => { byRow[r] = keep[i]; });
      keep = byRow;
      const rows = keep.map((j) => parent[j]);
      logp = keep.map((j) => top[j]);
      seqs = keep.map((j) => [...seqs[parent[j]], tok[j]]);
      past_k = gather(out.present_k, rows); past_v = gather(out.present_v, rows);
      const bestLp = Math.max(lp(t + 1), lp(maxLen - 1));
      done = done || nFin >= K || (fin.length > 0 && fin[0].score >= f(Math.max(...logp) / bestLp));
      if (onStep) await onStep(t);
      if (done) break;
    }
    const L = seqs[0].length, alive = done ? [] : logp.map((x) => f(x / lp(L - 1)));
    const a = alive.length ? topk(alive, 1)[0] : -1;
    const best = a >= 0 && (!fin.length || alive[a] > fin[0].score) ? seqs[a] : fin[0].seq;
    const steps = Math.min(t, maxLen - 1), end = best.indexOf(EOS, 1);
    return { ids: best, text: this.tokenizer.decode(best.slice(1, end < 0 ? best.length : end)), cross: null,
             msPerToken: (now() - t0) / steps };
  };
  // the cross-attention rows of a finished output `ys` (<s> first): one teacher-forced decoder pass over it
  Translator.prototype.crossOf = async function (srcIds, ys) {
    const { ort, meta } = this, S = srcIds.length, src = i64(ort, srcIds, [1, S]), n = ys.length - 1;
    const { memory_k, memory_v } = await this.encoder.run({ src });
    const out = await this.decoder.run({ tokens: i64(ort, ys.slice(0, n), [1, n]), src, memory_k, memory_v,
                                         past_k: emptyCache(ort, meta), past_v: emptyCache(ort, meta) });
    const a = out.cross_attn.data, H = meta.heads, base = (meta.layers - 1) * H * n * S;
    return Array.from({ length: n }, (_, q) => {
      const row = new Float32Array(S);
      for (let h = 0; h < H; h++) for (let s = 0; s < S; s++) row[s] += a[base + (h * n + q) * S + s] / H;
      return row;
    });
  };
  function topk(values, k) {   // indices of the k largest values, largest first (the lower index first on ties)
    return values.map((v, i) => i).sort((i, j) => values[j] - values[i] || i - j).slice(0, k);
  }
  function stableSlots(parents, K) {   // chapter 7's _stable_slots: a parent's best child keeps the parent's row
    const first = parents.map((p, i) => parents.indexOf(p) === i), taken = new Set(parents.filter((p, i) => first[i]));
    const free = [...Array(K).keys()].filter((r) => !taken.has(r));
    let m = 0;
    return parents.map((p, i) => (first[i] ? p : free[m++]));
  }

  class Classifier {
    constructor(ort, tokenizer, meta, session) { Object.assign(this, { ort, tokenizer, meta, session }); }
    clean(text) { text = text.replace(/<br\s*\/?>/g, " "); return this.meta.lowercase ? text.toLowerCase() : text; }
    // <s> then at most max_len - 1 ids: the head, or the first quarter and the last three quarters (chapter 10's truncate_ids)
    source(text) {
      let ids = this.tokenizer.encode(this.clean(text)), n = this.meta.max_len - 1, cut = ids.length > n;
      if (cut) ids = this.meta.keep === "head" ? ids.slice(0, n) : [...ids.slice(0, n >> 2), ...ids.slice(ids.length - (n - (n >> 2)))];
      return { ids: [BOS, ...ids], cut };
    }
    async classify(ids) {
      const out = await this.session.run({ src: i64(this.ort, ids, [1, ids.length]) });
      const lp = out.logp.data, k = argmax(lp, 0, lp.length);
      const S = ids.length, H = out.attn.dims[1], a = out.attn.data, received = new Float32Array(S);
      for (let h = 0; h < H; h++) for (let i = 0; i < S; i++) for (let j = 0; j < S; j++) received[j] += a[(h * S + i) * S + j] / (H * S);
      const p = Math.fround(Math.exp(lp[k]));
      return { label: this.meta.labels[k], prob: p, line: this.meta.labels[k] + " " + p.toFixed(3), received };
    }
  }

  class CharGenerator {
    constructor(ort, meta, session) {
      Object.assign(this, { ort, meta, session });
      this.index = new Map(Array.from(meta.chars).map((c, i) => [c, i]));
    }
    unknown(text) { return [...new Set(Array.from(text).filter((c) => !this.index.has(c)))]; }
    // chapter 11's generate: feed only the new id after the first step; when the cache holds `context` ids, start
    // again from the last context / 2. topK = 1 is greedy (argmax); onChar(c) after each step
    async generate(prompt, n, topK, onChar, random = Math.random) {
      const { ort, meta } = this, ctx = meta.context, V = meta.chars.length;
      const ys = Array.from(prompt, (c) => this.index.get(c));
      let new_ = ys.slice(-ctx), past_k = emptyCache(ort, meta), past_v = emptyCache(ort, meta), cached = 0;
      const t0 = now();
      for (let step = 0; step < n; step++) {
        if (cached + new_.length > ctx) { past_k = emptyCache(ort, meta); past_v = emptyCache(ort, meta); cached = 0; new_ = ys.slice(-Math.max(1, ctx >> 1)); }
        const out = await this.session.run({ ids: i64(ort, new_, [1, new_.length]), past_k, past_v });
        past_k = out.present_k; past_v = out.present_v; cached += new_.length;
        const lp = out.logp.data, from = (new_.length - 1) * V;
        const next = topK === 1 ? argmax(lp, from, V) : sample(lp, from, V, topK, random);
        ys.push(next); new_ = [next];
        if (onChar) await onChar(meta.chars[next]);
      }
      return { text: ys.map((i) => meta.chars[i]).join(""), msPerToken: (now() - t0) / Math.max(1, n) };
    }
  }
  function sample(lp, from, V, topK, random) {   // draw from softmax(log p) restricted to the top_k (ties with the k-th kept)
    const row = Array.from(lp.subarray(from, from + V));
    let kth = -Infinity;
    if (topK && topK < V) kth = [...row].sort((a, b) => b - a)[topK - 1];
    const w = row.map((x) => (x >= kth ? Math.exp(x) : 0)), total = w.reduce((a, b) => a + b, 0);
    let r = random() * total;
    for (let j = 0; j < V; j++) { r -= w[j]; if (r <= 0 && w[j] > 0) return j; }
    return argmax(lp, from, V);
  }
  Object.assign(root, { Translator, Classifier, CharGenerator });
  if (typeof module !== "undefined") module.exports = { Translator, Classifier, CharGenerator, argmax, topk, stableSlots, sample };
})(typeof window !== "undefined" ? window : globalThis);
