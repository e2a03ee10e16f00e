// annotated_transformer/web/page.js: package data, copied into the site by `build_site` (nbs/9w_web.ipynb explains it).
// The three pages: a text box, a button, ?text=... in the address runs at once; the result goes into #output.
(function () {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const MAX_CHARS = 20000;                        // longer text is refused before it reaches the tokenizer
  const say = (msg) => { $("note").textContent = msg; };
  const state = (s) => { document.body.dataset.state = s; };
  const paint = () => new Promise((r) => setTimeout(r, 0));   // let the page draw between steps
  const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  const shade = (w) => `rgba(31, 119, 180, ${Math.min(1, Math.max(0, w)).toFixed(3)})`;
  async function loadJSON(f) { const r = await fetch(f); if (!r.ok) throw new Error(`${f}: HTTP ${r.status}`); return r.json(); }
  async function session(f) { return ort.InferenceSession.create(f, { executionProviders: ["wasm"] }); }
  function check(text) {   // a message for text the page will not run, else null
    if (!text.trim()) return "Type some text first.";
    if (text.length > MAX_CHARS) return `That is ${text.length.toLocaleString()} characters; the page takes at most ${MAX_CHARS.toLocaleString()}.`;
    return null;
  }
  // load the model(s) with `load`, then run `run(text)` on a click, on Ctrl+Enter, and at once for ?text=
  async function page(load, run) {
    ort.env.wasm.wasmPaths = new URL("ort/", location.href).href; ort.env.wasm.numThreads = 1;
    state("loading"); say("Loading the model…");
    const t0 = performance.now();
    let model;
    try { model = await load(); }
    catch (e) { say("The model could not be loaded: " + e.message); state("error"); return; }
    const loadMs = performance.now() - t0;   // the model: fetched, parsed, ready
    document.body.dataset.loadMs = performance.now().toFixed(0);   // the page: from the request to a ready model
    say(`Model loaded in ${(loadMs / 1000).toFixed(1)} s.`); state("ready");
    let busy = false;
    const go = async () => {
      if (busy) return;
      const text = $("text").value, bad = check(text);
      $("output").textContent = ""; $("extra").innerHTML = ""; $("timing").textContent = "";
      if (bad) { say(bad); state("done"); return; }
      busy = true; $("run").disabled = true; state("running"); say("");
      try { await run(model, text); }
      catch (e) { say("Something went wrong: " + e.message); }
      busy = false; $("run").disabled = false; state("done");
    };
    $("run").addEventListener("click", go);
    $("text").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); go(); } });
    if (params.has("text")) { $("text").value = params.get("text"); await go(); }
  }
  function unknownNote(tok, text) {
    const u = tok.unknown(text);
    return u.length ? ` The model never saw ${u.map((c) => JSON.stringify(c)).join(" ")}: read as <unk>.` : "";
  }
  async function translatePage() {
    $("beam4").checked = params.get("beam") === "4";
    await page(async () => {
      const meta = (await loadJSON("web.json")).translate;
      const tok = new Tokenizer(await loadJSON(meta.tokenizer));
      return new Translator(ort, tok, meta, await session("translate_encoder.onnx"), await session("translate_decoder.onnx"));
    }, async (t, text) => {
      const src = t.source(text);
      say((src.cut ? `The sentence was cut to its first ${t.meta.max_source - 2} tokens, the most this page feeds the model.` : "")
          + unknownNote(t.tokenizer, text));
      const out = [], beam = $("beam4").checked ? 4 : 1;
      const r = beam > 1 ? await t.beamSearch(src.ids, beam, 0.6, paint) : await t.translate(src.ids, async (id) => {
        if (id !== 2) out.push(id);
        $("output").textContent = t.tokenizer.decode(out);
        await paint();
      });
      $("output").textContent = r.text;
      if (!r.cross) r.cross = await t.crossOf(src.ids, r.ids);
      $("timing").textContent = `${r.ids.length - 1} tokens, ${r.msPerToken.toFixed(1)} ms per ${beam > 1 ? `step of ${beam} beams` : "token (greedy)"}.`;
      document.body.dataset.msPerToken = r.msPerToken.toFixed(2);
      const name = (i) => esc(t.tokenizer.idToToken(i).replace(/\u2581/g, " ").replace(/\u25a0/g, ""));
      let h = `<p>Cross-attention of the last decoder layer (mean of its heads): which source token each output token looked at.</p><table class="heat"><tr><th></th>`;
      h += src.ids.map((i) => `<th class="src">${name(i)}</th>`).join("") + "</tr>";
      r.cross.forEach((row, k) => {
        const top = Math.max(...row);
        h += `<tr><th>${name(r.ids[k + 1])}</th>` + Array.from(row, (w) => `<td style="background:${shade(w / top)}" title="${w.toFixed(3)}"></td>`).join("") + "</tr>";
      });
      $("extra").innerHTML = h + "</table>";
    });
  }
  async function classifyPage() {
    await page(async () => {
      const meta = (await loadJSON("web.json")).classify;
      return new Classifier(ort, new Tokenizer(await loadJSON(meta.tokenizer)), meta, await session("classify.onnx"));
    }, async (c, text) => {
      const src = c.source(text);
      say((src.cut ? `The review was cut to ${c.meta.max_len} tokens, its first quarter and its end, as the model reads it.` : "")
          + unknownNote(c.tokenizer, c.clean(text)));
      const r = await c.classify(src.ids);
      $("output").textContent = r.line;
      const top = Math.max(...r.received);
      $("extra").innerHTML = `<p>Label <b>${r.label}</b>, probability ${r.prob.toFixed(3)}. Attention each token receives in the pooled layer (mean over heads and positions):</p><p class="tokens">`
        + src.ids.map((i, j) => `<span style="background:${shade(r.received[j] / top)}">${esc(c.tokenizer.idToToken(i).replace(/\u2581/g, " "))}</span>`).join("") + "</p>";
    });
  }
  async function generatePage() {
    const n = Math.min(5000, Math.max(1, parseInt(params.get("n") || "500", 10) || 500));
    const k = params.has("top_k") ? Math.max(1, parseInt(params.get("top_k"), 10) || 1) : null;
    await page(async () => new CharGenerator(ort, (await loadJSON("web.json")).generate, await session("generate.onnx")),
      async (g, text) => {
        const u = g.unknown(text);
        if (u.length) { say(`The model knows only the ${g.meta.chars.length} characters of its training text; remove ${u.map((c) => JSON.stringify(c)).join(" ")}.`); return; }
        say((text.length > g.meta.context ? `The model reads only the last ${g.meta.context} characters of the prompt.` : "")
            + ` ${n} characters, ${k === 1 ? "each the most likely (greedy)" : k ? `each drawn among the ${k} most likely` : "each drawn from the model's distribution"}.`);
        $("output").textContent = text;
        let i = 0;
        const r = await g.generate(text, n, k, async (ch) => { $("output").textContent += ch; if (++i % 4 === 0) await paint(); });
        $("output").textContent = r.text;
        $("timing").textContent = `${n} characters, ${r.msPerToken.toFixed(1)} ms per character.`;
      });
  }
  window.webPage = { translate: translatePage, classify: classifyPage, generate: generatePage };
})();
