// llmgym view: episodes, comparisons and training runs. Plain JavaScript, no build step.
// Episode text is untrusted (anything an LLM wrote): it only ever enters the page as text
// (el() appends text nodes, textContent), never as markup.
"use strict";
(function () {
  const embedded = document.getElementById("llmgym-data");
  const DATA = embedded ? JSON.parse(embedded.textContent) : null;
  const PAGE = 50;
  const root = document.getElementById("app");
  const state = { info: null, source: 0, filters: {}, sort: "index", desc: false, offset: 0, compareOffset: 0, step: null };

  // -- DOM: children are nodes or text, never HTML ------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  const fmt = (x, digits = 3) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number.isInteger(x) ? String(x) : Number(x).toFixed(digits));

  // -- data: the server's API, or the same answers from the data an exported file embeds --
  async function api(name, params = {}) {
    if (DATA) return localApi(name, params);
    const url = new URL("api/" + name, location.href);
    for (const [key, value] of Object.entries(params)) if (value !== "" && value !== null && value !== undefined) url.searchParams.set(key, value);
    const response = await fetch(url);
    const body = await response.json();
    if (!response.ok) throw new Error(body.detail || response.statusText);
    return body;
  }

  function localApi(name, p) {
    if (name === "info") return DATA.info;
    const source = DATA.sources[Number(p.source || 0)];
    if (name === "metrics") return { rows: source.metrics };
    if (name === "episode") {
      const episode = source.episodes[Number(p.index)];
      if (!episode) throw new Error("episode " + p.index + " is not in this exported file");
      return episode;
    }
    if (name === "compare") {
      const offset = Number(p.offset || 0), limit = Number(p.limit || PAGE);
      return { ...DATA.compare, rows: DATA.compare.rows.slice(offset, offset + limit) };
    }
    if (name === "episodes") return localEpisodes(source, p);
    throw new Error("unknown request " + name);
  }

  function localEpisodes(source, p) {
    const num = (v) => (v === "" || v === null || v === undefined ? null : Number(v));
    const [lo, hi, clo, chi, step] = [num(p.min_reward), num(p.max_reward), num(p.component_min), num(p.component_max), num(p.step)];
    const needle = (p.q || "").toLowerCase();
    let rows = source.rows.filter((row) => {
      if (lo !== null && !(row.reward >= lo)) return false;
      if (hi !== null && !(row.reward <= hi)) return false;
      if (p.component) {
        const value = row.components[p.component] ?? 0;
        if ((clo !== null && !(value >= clo)) || (chi !== null && !(value <= chi))) return false;
      }
      if (p.outcome && row.outcome !== p.outcome) return false;
      if (step !== null && row.step !== step) return false;
      if (needle && !transcriptText(source.episodes[row.index]).some((t) => t.toLowerCase().includes(needle))) return false;
      return true;
    });
    const key = p.sort || "index";
    const value = (row) => (key.startsWith("component:") ? row.components[key.slice(10)] ?? 0 : row[key]);
    const sign = p.desc === "true" || p.desc === true ? -1 : 1;
    rows = rows.slice().sort((a, b) => {
      const [x, y] = [value(a), value(b)];
      if (x === null || x === undefined) return y === null || y === undefined ? 0 : 1; // none last, as the server
      if (y === null || y === undefined) return -1;
      return sign * (x - y);
    });
    const offset = Number(p.offset || 0);
    return { total: rows.length, rows: rows.slice(offset, offset + Number(p.limit || PAGE)), indexing: false };
  }

  function transcriptText(episode) {
    const out = [];
    for (const m of (episode && episode.messages) || []) {
      for (const key of ["content", "reasoning_content", "name"]) if (typeof m[key] === "string") out.push(m[key]);
      for (const call of m.tool_calls || []) if (call && call.function) out.push(String(call.function.name || ""), String(call.function.arguments || ""));
    }
    return out;
  }

  // -- layout -------------------------------------------------------------------------
  function header(active) {
    const info = state.info;
    const tabs = [["#episodes", "Episodes"]];
    if (info.compare) tabs.push(["#compare", "Compare"]);
    if (info.sources.some((s) => s.has_metrics)) tabs.push(["#run", "Training"]);
    const progress = info.sources
      .filter((s) => s.episodes && (s.episodes.indexing || s.episodes.bad_lines.length || s.episodes.error))
      .map((s) => {
        const e = s.episodes;
        const parts = [];
        if (e.indexing) parts.push(`indexing ${s.label}: ${e.episodes} episodes, ${Math.round((100 * e.bytes_read) / Math.max(e.bytes, 1))}% read`);
        if (e.error) parts.push(e.error);
        if (e.bad_lines.length) {
          const named = e.bad_lines.slice(0, 3).map((b) => `line ${b.line} (${b.reason})`).join("; ");
          const count = e.bad_line_count;
          parts.push(`${s.label}: ${count} line${count === 1 ? "" : "s"} skipped, not episodes: ${named}${count > 3 ? "; …" : ""}`);
        }
        return el("div", { class: "status" }, parts.join(" · "));
      });
    return el("header", {},
      el("h1", {}, "llmgym view ", el("span", { class: "muted" }, info.title)),
      el("nav", {}, tabs.map(([href, label]) => el("a", { href, class: href === active ? "active" : "" }, label))),
      progress);
  }

  function sourcePicker(onchange) {
    const info = state.info;
    const withEpisodes = info.sources.map((s, i) => [s, i]).filter(([s]) => s.episodes);
    if (withEpisodes.length < 2) return null;
    const select = el("select", { id: "f-source", onchange: () => { state.source = Number(select.value); onchange(); } },
      withEpisodes.map(([s, i]) => el("option", { value: i, selected: i === state.source }, s.label)));
    return el("label", {}, "source ", select);
  }

  // -- episodes table ----------------------------------------------------------------
  async function showEpisodes() {
    const info = state.info;
    if (!info.sources[state.source] || !info.sources[state.source].episodes) {
      const first = info.sources.findIndex((s) => s.episodes);
      if (first < 0) return showRun();
      state.source = first;
    }
    const status = info.sources[state.source].episodes;
    const f = state.filters;
    const input = (id, value, placeholder, size = 7) => el("input", { id, value: value ?? "", placeholder, size });
    const componentSelect = el("select", { id: "f-component" }, el("option", { value: "" }, "component…"),
      status.components.map((c) => el("option", { value: c, selected: c === f.component }, c)));
    const outcomeSelect = el("select", { id: "f-outcome" }, el("option", { value: "" }, "any outcome"),
      ["solved", "failed", "error"].map((o) => el("option", { value: o, selected: o === f.outcome }, o)));
    const stepSelect = status.steps.length
      ? el("select", { id: "f-step" }, el("option", { value: "" }, "any step"), status.steps.map((s) => el("option", { value: s, selected: String(s) === String(f.step) }, "step " + s)))
      : null;
    const read = () => {
      state.filters = {
        min_reward: document.getElementById("f-min-reward").value,
        max_reward: document.getElementById("f-max-reward").value,
        component: componentSelect.value,
        component_min: document.getElementById("f-component-min").value,
        component_max: document.getElementById("f-component-max").value,
        outcome: outcomeSelect.value,
        step: stepSelect ? stepSelect.value : "",
        q: document.getElementById("f-text").value,
      };
      state.offset = 0;
      loadRows();
    };
    const form = el("form", { class: "filters", id: "filters", onsubmit: (event) => { event.preventDefault(); read(); } },
      sourcePicker(() => { state.filters = {}; state.offset = 0; showEpisodes(); }),
      el("label", {}, "reward ", input("f-min-reward", f.min_reward, "min"), " – ", input("f-max-reward", f.max_reward, "max")),
      el("label", {}, componentSelect, " ", input("f-component-min", f.component_min, "min"), " – ", input("f-component-max", f.component_max, "max")),
      outcomeSelect, stepSelect,
      el("label", {}, "text ", input("f-text", f.q, "in the transcript", 22)),
      el("button", { id: "f-apply", type: "submit" }, "Filter"),
      el("button", { type: "button", onclick: () => { state.filters = {}; state.offset = 0; showEpisodes(); } }, "Clear"));
    const columns = [["index", "#"], ["env_id", "env"], ["seed", "seed"], ["policy", "policy"]];
    if (status.steps.length) columns.push(["step", "step"]);
    columns.push(["reward", "reward"], ...status.components.map((c) => ["component:" + c, c]), ["turns", "turns"], ["tokens", "tokens"], ["outcome", "outcome"]);
    const sortable = (key) => key !== "env_id" && key !== "policy" && key !== "outcome";
    const head = el("tr", {}, columns.map(([key, label]) => el("th", {
      class: sortable(key) ? "sortable" + (state.sort === key ? " sorted" : "") : "",
      onclick: sortable(key) ? () => { state.desc = state.sort === key ? !state.desc : key !== "index"; state.sort = key; state.offset = 0; showEpisodes(); } : null,
    }, label, state.sort === key ? (state.desc ? " ▼" : " ▲") : "")));
    const body = el("tbody");
    const pageInfo = el("span", { id: "page-info" });
    const prev = el("button", { id: "page-prev", onclick: () => { state.offset = Math.max(0, state.offset - PAGE); loadRows(); } }, "‹ prev");
    const next = el("button", { id: "page-next", onclick: () => { state.offset += PAGE; loadRows(); } }, "next ›");
    const error = el("p", { class: "error", id: "error" });
    const boxes = [summaryBox(info.sources[state.source]), leagueBox(info.sources[state.source])].filter(Boolean);
    root.replaceChildren(header("#episodes"), ...boxes, form, error,
      el("table", { id: "episodes-table" }, el("thead", {}, head), body), el("div", { class: "pager" }, prev, pageInfo, next));

    async function loadRows() {
      error.textContent = "";
      let page;
      try {
        page = await api("episodes", { source: state.source, offset: state.offset, limit: PAGE, sort: state.sort, desc: state.desc, ...state.filters });
      } catch (err) {
        error.textContent = String(err.message || err);
        return;
      }
      body.replaceChildren(...page.rows.map((row) => el("tr", { class: "row " + row.outcome, "data-index": row.index, onclick: () => { location.hash = `#episode/${state.source}/${row.index}`; } },
        columns.map(([key]) => {
          if (key.startsWith("component:")) return el("td", { class: "num" }, fmt(row.components[key.slice(10)]));
          if (key === "outcome") return el("td", {}, el("span", { class: "badge " + row.outcome }, row.outcome), row.truncated ? el("span", { class: "badge truncated" }, "truncated") : null);
          const value = row[key];
          return el("td", { class: typeof value === "number" ? "num" : "" }, typeof value === "number" ? fmt(value) : value ?? "–");
        }))));
      const end = Math.min(state.offset + page.rows.length, page.total);
      pageInfo.textContent = page.total ? `${state.offset + 1}–${end} of ${page.total}${page.indexing ? " (indexing…)" : ""}` : "no episodes match";
      prev.disabled = state.offset === 0;
      next.disabled = end >= page.total;
    }
    await loadRows();
  }

  function summaryBox(source) {
    const s = source.summary;
    if (!s || !s.reward) return null;
    const items = [["episodes", `${s.episodes} (${s.failed || 0} failed)`], ["mean reward", `${fmt(s.reward.mean)} ± ${fmt(s.reward.ci95)}`]];
    if (s.success_rate !== undefined && s.success_rate !== null) items.push([`success (${s.success_rule})`, fmt(s.success_rate)]);
    if (s.turns) items.push(["turns / episode", fmt(s.turns.mean ?? s.turns, 2)]);
    const run = s.run || {};
    if (run.policy) items.push(["policy", run.policy]);
    return el("div", { class: "summary" }, items.map(([k, v]) => el("span", { class: "chip" }, el("b", {}, k + " "), String(v))));
  }

  // an `llmgym league --out` folder: the standings (league.json) and each player's score against each other
  function leagueBox(source) {
    const l = source.league;
    if (!l || !Array.isArray(l.standings) || !Array.isArray(l.players)) return null;
    const standings = el("table", { id: "league-table" },
      el("thead", {}, el("tr", {}, ["#", "player", "ordinal", "mu", "sigma", "W/D/L", "score"].map((h) => el("th", {}, h)))),
      el("tbody", {}, l.standings.map((r, i) => el("tr", {}, el("td", { class: "num" }, i + 1), el("td", {}, r.name),
        ...[r.ordinal, r.mu, r.sigma].map((v) => el("td", { class: "num" }, fmt(v, 2))),
        el("td", {}, `${r.win}/${r.draw}/${r.loss}`), el("td", { class: "num" }, fmt(r.score))))));
    const scores = l.scores || {};
    const matrix = el("table", { id: "league-scores" },
      el("thead", {}, el("tr", {}, el("th", {}, "score"), l.players.map((p) => el("th", {}, p)))),
      el("tbody", {}, l.players.map((a) => el("tr", {}, el("th", {}, a),
        l.players.map((b) => el("td", { class: "num" }, a === b ? "–" : fmt((scores[a] || {})[b])))))));
    return el("div", { class: "league" },
      el("h2", {}, `League · ${l.env_id} · ${l.games_per_pair} seeds per pair and seat · ${l.failed_games} failed games`),
      standings,
      el("p", { class: "muted" }, "ordinal = mu − 3 sigma (openskill Plackett-Luce), the standings' order; score = (wins + draws / 2) / games of the row player against the column player, both seats."),
      matrix);
  }

  // -- one episode ----------------------------------------------------------------------
  async function showEpisode(source, index) {
    root.replaceChildren(header(""), el("p", {}, el("a", { href: "#episodes" }, "‹ episodes")), el("div", { id: "episode" }, "Loading…"));
    const holder = document.getElementById("episode");
    try {
      holder.replaceChildren(await renderEpisode(source, index));
    } catch (err) {
      holder.replaceChildren(el("p", { class: "error" }, String(err.message || err)));
    }
  }

  async function renderEpisode(source, index) {
    const e = await api("episode", { source, index });
    const meta = e.metadata || {};
    const rewards = e.turn_rewards || [];
    const total = rewards.reduce((a, b) => a + (b || 0), 0);
    const chips = [["env", e.env_id], ["seed", e.seed], ["policy", e.policy || "–"], ["reward", fmt(total)], ["turns", rewards.length],
      ["end", e.terminated ? "terminated" : e.truncated ? "truncated" : "running/failed"]];
    if (meta.generated_tokens !== undefined && meta.generated_tokens !== null) chips.push(["tokens", meta.generated_tokens]);
    if (e.timing && e.timing.wall_s !== undefined) chips.push(["wall", fmt(e.timing.wall_s, 2) + " s"]);
    if (meta.train_step !== undefined) chips.push(["step", meta.train_step], ["outcome advantage", fmt(meta.outcome_advantage)], ["in loss", meta.in_loss ? "yes" : "no"]);
    const card = el("div", { class: "episode-card" },
      el("h2", {}, `${e.env_id} · seed ${e.seed ?? "–"}`),
      el("div", { class: "summary" }, chips.map(([k, v]) => el("span", { class: "chip" }, el("b", {}, k + " "), String(v)))),
      meta.error ? el("p", { class: "error" }, `${meta.error_source || ""} error: ${meta.error}`) : null);
    const transcript = renderTranscript(e);
    const hasTokens = (e.token_ids || []).length > 0;
    if (!hasTokens) return el("div", {}, card, transcript);
    const tokens = el("div", { class: "hidden" });
    const buttons = [el("button", { class: "active", id: "view-transcript" }, "Transcript"), el("button", { id: "view-tokens" }, "Tokens")];
    buttons[0].addEventListener("click", () => { transcript.classList.remove("hidden"); tokens.classList.add("hidden"); buttons[0].classList.add("active"); buttons[1].classList.remove("active"); });
    buttons[1].addEventListener("click", () => {
      if (!tokens.childElementCount) tokens.append(renderTokens(e));
      tokens.classList.remove("hidden"); transcript.classList.add("hidden"); buttons[1].classList.add("active"); buttons[0].classList.remove("active");
    });
    return el("div", {}, card, el("div", { class: "toggle" }, buttons), transcript, tokens);
  }

  function renderTranscript(e) {
    const meta = e.metadata || {};
    const list = el("div", { class: "transcript" });
    let turn = -1;
    for (const m of e.messages || []) {
      const role = ["system", "user", "assistant", "tool"].includes(m.role) ? m.role : "other";
      const content = typeof m.content === "string" ? m.content : m.content === null || m.content === undefined ? "" : JSON.stringify(m.content, null, 2);
      const body = el("div", { class: "body" });
      let side = null;
      if (role === "system") {
        body.append(el("details", {}, el("summary", {}, `system prompt (${content.length} characters)`), el("pre", {}, content)));
      } else if (role === "assistant") {
        turn += 1;
        const reasoning = m.reasoning_content || (meta.reasoning && meta.reasoning[turn]);
        if (reasoning) body.append(thinking(String(reasoning)));
        const calls = m.tool_calls || [];
        let text = content;
        const thoughts = [];
        text = text.replace(/<think>([\s\S]*?)(<\/think>|$)/g, (_, inner) => { thoughts.push(inner); return ""; });
        for (const t of thoughts) body.append(thinking(t));
        if (calls.length) text = text.replace(/<tool_call>[\s\S]*?(<\/tool_call>|$)/g, "");
        if (text.trim()) body.append(el("pre", {}, text.trim()));
        for (const call of calls) body.append(toolCall(call));
        side = turnPanel(e, turn);
      } else {
        body.append(el("pre", {}, content));
      }
      const label = role === "tool" ? `tool · ${m.name || ""}` : role === "assistant" ? `assistant · turn ${turn + 1}` : role;
      list.append(el("div", { class: "msg " + role }, el("div", { class: "role" }, label), el("div", { class: "content" }, body, side)));
    }
    return list;
  }

  function thinking(text) {
    return el("details", { class: "thinking" }, el("summary", {}, `thinking (${text.length} characters)`), el("pre", {}, text));
  }

  function toolCall(call) {
    const f = (call && call.function) || {};
    let args = f.arguments;
    try { args = JSON.stringify(typeof args === "string" ? JSON.parse(args) : args, null, 2); } catch (err) { args = String(args); }
    return el("div", { class: "toolcall" }, el("span", { class: "call-name" }, "→ " + String(f.name || "?")), el("pre", {}, args));
  }

  function turnPanel(e, turn) {
    const rewards = e.turn_rewards || [];
    if (turn >= rewards.length) return null;
    const components = (e.reward_components || [])[turn] || {};
    const meta = e.metadata || {};
    const rows = Object.entries(components).map(([name, value]) => el("tr", {}, el("td", {}, name), el("td", { class: "num" }, fmt(value))));
    if (meta.turn_advantages && meta.turn_advantages[turn] !== undefined) rows.push(el("tr", { class: "adv" }, el("td", {}, "turn advantage"), el("td", { class: "num" }, fmt(meta.turn_advantages[turn]))));
    return el("aside", { class: "turn" }, el("div", { class: "turn-reward" }, "reward ", el("b", {}, fmt(rewards[turn]))), el("table", {}, rows));
  }

  function renderTokens(e) {
    const meta = e.metadata || {};
    const ids = e.token_ids || [], mask = e.mask || [], logprobs = e.logprobs || [], texts = meta.token_text || [], adv = meta.advantages || [];
    const modes = [];
    if (adv.length === ids.length) modes.push(["advantage", "advantage it was trained with"]);
    if (logprobs.length === ids.length) modes.push(["logprob", "log-prob"]);
    const select = el("select", { id: "token-colour" }, modes.map(([k, label]) => el("option", { value: k }, "colour: " + label)));
    const tokens = el("div", { class: "tokens" });
    const limit = 20000;
    const maxAdv = Math.max(1e-9, ...adv.map((a) => Math.abs(a)));
    const legend = el("p", { class: "muted" });
    const paint = () => {
      const mode = select.value;
      legend.textContent = mode === "advantage"
        ? `green: positive advantage, red: negative (strongest ±${fmt(maxAdv)}); grey: prompt, env and tool tokens (not trained)`
        : mode === "logprob" ? "darker red: less likely under the policy; grey: prompt, env and tool tokens" : "grey: prompt, env and tool tokens";
      for (const span of tokens.children) {
        const i = Number(span.dataset.i);
        if (!mask[i]) continue;
        if (mode === "advantage") {
          const x = adv[i] / maxAdv;
          span.style.backgroundColor = x >= 0 ? `rgba(34, 160, 70, ${0.12 + 0.75 * x})` : `rgba(215, 50, 40, ${0.12 + 0.75 * -x})`;
        } else if (mode === "logprob") {
          span.style.backgroundColor = `rgba(215, 50, 40, ${0.85 * (1 - Math.exp(Math.min(0, logprobs[i])))})`;
        } else span.style.backgroundColor = "";
      }
    };
    for (let i = 0; i < Math.min(ids.length, limit); i++) {
      const text = texts[i] !== undefined ? texts[i] : `⟨${ids[i]}⟩`;
      const title = [`token ${ids[i]}`, mask[i] ? "policy" : "not trained"];
      if (logprobs.length) title.push(`log-prob ${fmt(logprobs[i])}`);
      if (adv.length) title.push(`advantage ${fmt(adv[i])}`);
      tokens.append(el("span", { class: mask[i] ? "tok policy" : "tok masked", "data-i": i, title: title.join(" · ") }, text));
    }
    select.addEventListener("change", paint);
    const note = ids.length > limit ? el("p", { class: "muted" }, `first ${limit} of ${ids.length} tokens`) : null;
    const noText = texts.length ? null : el("p", { class: "muted" }, "this file has no token text (training samples carry it): tokens show as ⟨id⟩");
    const box = el("div", {}, modes.length ? select : null, legend, noText, note, tokens);
    paint();
    return box;
  }

  // -- compare ---------------------------------------------------------------------------
  async function showCompare() {
    const [a, b] = state.info.sources;
    const body = el("tbody");
    const pageInfo = el("span", { id: "compare-info" });
    const prev = el("button", { onclick: () => { state.compareOffset = Math.max(0, state.compareOffset - PAGE); load(); } }, "‹ prev");
    const next = el("button", { onclick: () => { state.compareOffset += PAGE; load(); } }, "next ›");
    const note = el("p", { class: "muted" });
    root.replaceChildren(header("#compare"),
      el("p", {}, "The seeds both runs played, where the mean rewards differ most first. A = ", el("b", {}, a.label), ", B = ", el("b", {}, b.label), "."), note,
      el("table", { id: "compare-table" }, el("thead", {}, el("tr", {}, ["env", "seed", "A reward", "A solved", "B reward", "B solved", "B − A"].map((h) => el("th", {}, h)))), body),
      el("div", { class: "pager" }, prev, pageInfo, next));
    async function load() {
      const page = await api("compare", { offset: state.compareOffset, limit: PAGE });
      note.textContent = `${page.total} seeds in both; ${page.only_first} only in A, ${page.only_second} only in B${page.indexing ? " (still indexing)" : ""}.`;
      body.replaceChildren(...page.rows.map((r) => el("tr", { class: "row", onclick: () => { location.hash = `#pair/${r.a.indices[0]}/${r.b.indices[0]}`; } },
        el("td", {}, r.env_id), el("td", { class: "num" }, r.seed), el("td", { class: "num" }, fmt(r.a.mean)), el("td", { class: "num" }, fmt(r.a.solved, 2)),
        el("td", { class: "num" }, fmt(r.b.mean)), el("td", { class: "num" }, fmt(r.b.solved, 2)),
        el("td", { class: "num " + (r.diff > 0 ? "better" : r.diff < 0 ? "worse" : "") }, (r.diff > 0 ? "+" : "") + fmt(r.diff)))));
      const end = Math.min(state.compareOffset + page.rows.length, page.total);
      pageInfo.textContent = page.total ? `${state.compareOffset + 1}–${end} of ${page.total}` : "no shared seeds";
      prev.disabled = state.compareOffset === 0;
      next.disabled = end >= page.total;
    }
    await load();
  }

  async function showPair(first, second) {
    const columns = [0, 1].map((source) => el("div", { class: "pair-column" }, el("h3", {}, state.info.sources[source].label), "Loading…"));
    root.replaceChildren(header(""), el("p", {}, el("a", { href: "#compare" }, "‹ compare")), el("div", { class: "pair" }, columns));
    for (const [source, index] of [[0, first], [1, second]]) {
      try {
        columns[source].replaceChildren(el("h3", {}, state.info.sources[source].label), await renderEpisode(source, index));
      } catch (err) {
        columns[source].replaceChildren(el("p", { class: "error" }, String(err.message || err)));
      }
    }
  }

  // -- training run ------------------------------------------------------------------------
  async function showRun() {
    const source = state.info.sources.findIndex((s) => s.has_metrics);
    const { rows } = await api("metrics", { source });
    const charts = el("div", { class: "charts", id: "charts" });
    const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => k !== "step" && rows.some((r) => typeof r[k] === "number")).sort();
    const components = keys.filter((k) => /^reward\/.+\/mean$/.test(k));
    const wanted = [["reward", ["reward/mean", ...components]], ["KL to the reference", ["kl"]], ["clip fraction", ["clip_fraction"]],
      ["entropy", ["entropy"]], ["tokens / s", ["tokens_per_s"]], ["loss", ["loss"]], ["advantage", ["advantage/std", "advantage/abs_max"]]];
    const extra = el("select", { id: "add-chart" }, el("option", { value: "" }, "add a chart…"), keys.map((k) => el("option", { value: k }, k)));
    extra.addEventListener("change", () => { if (extra.value) chart(charts, rows, extra.value, [extra.value]); extra.value = ""; });
    const config = state.info.sources[source].config;
    const samples = el("div", { id: "samples" });
    root.replaceChildren(header("#run"),
      el("p", {}, `${rows.length} steps`, config ? ` · ${config.env_id} · model ${config.model} · group size ${config.group_size} · turn λ ${config.turn_lambda}` : ""),
      extra, charts, samples);
    for (const [title, series] of wanted) if (series.some((k) => keys.includes(k))) chart(charts, rows, title, series.filter((k) => keys.includes(k)));
    const status = state.info.sources[source].episodes;
    if (status && status.steps.length) {
      if (state.step === null || !status.steps.includes(state.step)) state.step = status.steps[status.steps.length - 1];
      const select = el("select", { id: "sample-step" }, status.steps.map((s) => el("option", { value: s, selected: s === state.step }, "step " + s)));
      const table = el("tbody");
      const load = async () => {
        state.step = Number(select.value);
        const page = await api("episodes", { source, step: state.step, limit: 200 });
        table.replaceChildren(...page.rows.map((r) => el("tr", { class: "row " + r.outcome, onclick: () => { location.hash = `#episode/${source}/${r.index}`; } },
          el("td", { class: "num" }, r.seed), el("td", { class: "num" }, r.group_index ?? "–"), el("td", { class: "num" }, fmt(r.reward)), el("td", { class: "num" }, r.turns), el("td", {}, r.outcome))));
      };
      select.addEventListener("change", load);
      samples.replaceChildren(el("h2", {}, "Sample episodes ", select),
        el("p", { class: "muted" }, "Open one and choose Tokens to see each policy token coloured by the advantage it was trained with."),
        el("table", { id: "samples-table" }, el("thead", {}, el("tr", {}, ["seed", "in group", "reward", "turns", "outcome"].map((h) => el("th", {}, h)))), table));
      await load();
    } else {
      samples.replaceChildren(el("p", { class: "muted" }, "No samples.jsonl in this run (runs record it from sample_groups = 1 on)."));
    }
  }

  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  function chart(container, rows, title, series) {
    const box = el("div", { class: "chart" });
    container.append(box);
    const x = rows.map((r) => r.step);
    const ys = series.map((k) => rows.map((r) => (typeof r[k] === "number" ? r[k] : null)));
    const width = Math.max(320, Math.min(560, container.clientWidth / 2 - 20 || 520));
    const tick = (u, values) => values.map((v) => (v === 0 || Math.abs(v) >= 1000 ? v.toFixed(0) : String(+v.toPrecision(4))));
    new uPlot({ title, width, height: 220, scales: { x: { time: false } }, axes: [{}, { values: tick, size: 60 }],
      series: [{ label: "step" }, ...series.map((k, i) => ({ label: k, stroke: PALETTE[i % PALETTE.length], width: 1.5, points: { show: rows.length < 60 } }))] },
    [x, ...ys], box);
  }

  // -- routing ------------------------------------------------------------------------------
  async function route() {
    const [view, a, b] = location.hash.replace(/^#/, "").split("/");
    try {
      if (view === "episode") return await showEpisode(Number(a), Number(b));
      if (view === "pair") return await showPair(Number(a), Number(b));
      if (view === "compare" && state.info.compare) return await showCompare();
      if (view === "run") return await showRun();
      const hasEpisodes = state.info.sources.some((s) => s.episodes);
      return hasEpisodes ? await showEpisodes() : await showRun();
    } catch (err) {
      root.replaceChildren(header(""), el("p", { class: "error" }, String(err.message || err)));
    }
  }

  async function poll() {
    // while a large file is indexed, refresh the header's progress and the first page of the table
    const before = state.info;
    state.info = await api("info");
    const counts = (info) => info.sources.map((s) => (s.episodes ? s.episodes.episodes : 0)).join();
    const still = state.info.sources.some((s) => s.episodes && s.episodes.indexing);
    if (counts(before) !== counts(state.info) && (location.hash === "" || location.hash === "#episodes")) await route();
    if (still) setTimeout(poll, 1000);
  }

  async function start() {
    state.info = await api("info");
    document.title = "llmgym view · " + state.info.title;
    window.addEventListener("hashchange", route);
    await route();
    if (!DATA && state.info.sources.some((s) => s.episodes && s.episodes.indexing)) setTimeout(poll, 1000);
    root.dataset.ready = "true";
  }
  start().catch((err) => root.replaceChildren(el("p", { class: "error" }, "cannot load: " + String(err.message || err))));
})();
