// annotated_transformer/web/tokenizer.js: package data, copied into the site by `build_site` (nbs/9w_web.ipynb explains it).
// BPE tokenizer reading a `tokenizers` tokenizer.json: what the book's tokenizers use (NFKC and Replace normalizers,
// Metaspace and Split pre-tokenizers, a BPE model with <unk>, and the Replace/Fuse/Strip decoders).
(function (root) {
  // Oniguruma's \w and \s (what `tokenizers` runs its regular expressions with) as JavaScript Unicode classes
  const WORD = "\\p{L}\\p{M}\\p{N}\\p{Pc}", SPACE = "\\p{White_Space}";
  function toJsRegex(pattern) {
    let out = "", inClass = false;
    for (let i = 0; i < pattern.length; i++) {
      const c = pattern[i];
      if (c === "\\" && (pattern[i + 1] === "w" || pattern[i + 1] === "s")) {
        const cls = pattern[i + 1] === "w" ? WORD : SPACE;
        out += inClass ? cls : "[" + cls + "]"; i++; continue;
      }
      if (c === "\\") { out += c + pattern[i + 1]; i++; continue; }
      if (c === "[") inClass = true; else if (c === "]") inClass = false;
      out += c;
    }
    return new RegExp(out, "gu");
  }
  const pattern = (p) => ("Regex" in p ? toJsRegex(p.Regex) : new RegExp(p.String.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gu"));
  function normalizer(n) {
    if (!n) return (s) => s;
    if (n.type === "Sequence") { const fs = n.normalizers.map(normalizer); return (s) => fs.reduce((a, f) => f(a), s); }
    if (n.type === "NFKC") return (s) => s.normalize("NFKC");
    if (n.type === "Replace") { const re = pattern(n.pattern); return (s) => s.replace(re, n.content); }
    if (n.type === "Lowercase") return (s) => s.toLowerCase();
    throw new Error("normalizer " + n.type + " is not implemented");
  }
  function splitIsolated(s, re) {   // the matches and the text between them, in order, without empty pieces
    const out = []; let last = 0;
    for (const m of s.matchAll(re)) {
      if (m.index > last) out.push(s.slice(last, m.index));
      if (m[0].length) out.push(m[0]);
      last = m.index + m[0].length;
    }
    if (last < s.length) out.push(s.slice(last));
    return out;
  }
  function preTokenizer(p) {
    if (!p) return (pieces) => pieces;
    if (p.type === "Sequence") { const fs = p.pretokenizers.map(preTokenizer); return (pieces) => fs.reduce((a, f) => f(a), pieces); }
    if (p.type === "Metaspace") {
      const r = p.replacement;
      return (pieces) => pieces.flatMap((s) => {
        s = s.split(" ").join(r);
        if (p.prepend_scheme === "always" && !s.startsWith(r)) s = r + s;
        if (p.split === false) return [s];
        const out = []; let cur = "";                     // split before each replacement: merged with the next piece
        for (const ch of s) { if (ch === r && cur) { out.push(cur); cur = ""; } cur += ch; }
        if (cur) out.push(cur);
        return out;
      });
    }
    if (p.type === "Split" && p.behavior === "Isolated" && !p.invert) {
      const re = pattern(p.pattern);
      return (pieces) => pieces.flatMap((s) => splitIsolated(s, re));
    }
    throw new Error("pre-tokenizer " + p.type + " is not implemented");
  }
  function decoder(d) {   // a decoder maps a list of token strings to a list of strings
    if (!d) return (ts) => ts;
    if (d.type === "Sequence") { const fs = d.decoders.map(decoder); return (ts) => fs.reduce((a, f) => f(a), ts); }
    if (d.type === "Replace") { const re = pattern(d.pattern); return (ts) => ts.map((t) => t.replace(re, d.content)); }
    if (d.type === "Fuse") return (ts) => [ts.join("")];
    if (d.type === "Strip") return (ts) => ts.map((t) => {
      let a = 0, b = t.length;
      for (let k = 0; k < d.start && a < b && t[a] === d.content; k++) a++;
      for (let k = 0; k < d.stop && b > a && t[b - 1] === d.content; k++) b--;
      return t.slice(a, b);
    });
    throw new Error("decoder " + d.type + " is not implemented");
  }
  class Tokenizer {
    constructor(json) {
      const m = json.model;
      if (m.type !== "BPE" || m.continuing_subword_prefix || m.end_of_word_suffix || m.byte_fallback || m.fuse_unk)
        throw new Error("only plain BPE models are implemented");
      this.vocab = new Map(Object.entries(m.vocab));
      this.tokens = []; for (const [t, i] of this.vocab) this.tokens[i] = t;
      for (const a of json.added_tokens || []) { this.vocab.set(a.content, a.id); this.tokens[a.id] = a.content; }
      this.ranks = new Map(m.merges.map((x, r) => [Array.isArray(x) ? x.join(" ") : x, r]));
      this.unk = m.unk_token == null ? null : this.vocab.get(m.unk_token);
      const added = (json.added_tokens || []).map((a) => a.content.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
      this.added = added.length ? new RegExp(added.join("|"), "gu") : null;
      this.normalize = normalizer(json.normalizer);
      this.preTokenize = preTokenizer(json.pre_tokenizer);
      this.decoder = decoder(json.decoder);
      this.cache = new Map();
    }
    bpe(word) {   // ids of one pre-tokenized piece: merge the lowest-ranked pair, leftmost first, until none is left
      if (this.cache.has(word)) return this.cache.get(word);
      let syms = Array.from(word);
      for (;;) {
        let best = -1, bestRank = Infinity;
        for (let i = 0; i + 1 < syms.length; i++) {
          const r = this.ranks.get(syms[i] + " " + syms[i + 1]);
          if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
        }
        if (best < 0) break;
        syms.splice(best, 2, syms[best] + syms[best + 1]);
      }
      const ids = [];
      for (const s of syms) {
        const id = this.vocab.get(s);
        if (id !== undefined) ids.push(id); else if (this.unk != null) ids.push(this.unk);
      }
      if (this.cache.size < 50000) this.cache.set(word, ids);
      return ids;
    }
    encode(text) {   // ids without special tokens around them (add_special_tokens=False)
      const ids = [];
      for (const part of this.added ? splitIsolated(text, this.added) : [text]) {
        if (this.vocab.has(part) && this.added && part.match(this.added)?.[0] === part) { ids.push(this.vocab.get(part)); continue; }
        for (const piece of this.preTokenize([this.normalize(part)])) ids.push(...this.bpe(piece));
      }
      return ids;
    }
    unknown(text) {   // the characters of `text` that the vocabulary does not hold (they become <unk>)
      const seen = new Set();
      for (const piece of this.preTokenize([this.normalize(text)]))
        for (const ch of piece) if (!this.vocab.has(ch)) seen.add(ch);
      return [...seen];
    }
    decode(ids) { return this.decoder(ids.map((i) => this.tokens[i])).join(""); }
    idToToken(i) { return this.tokens[i]; }
  }
  root.Tokenizer = Tokenizer;
  if (typeof module !== "undefined") module.exports = { Tokenizer, toJsRegex, splitIsolated };   // node: the helpers too, for the tests
})(typeof window !== "undefined" ? window : globalThis);
