// The worldd workbench: a provenance explorer served by the daemon itself.
//
// Plain DOM, no framework, no network but this daemon's own routes. Everything the daemon
// sends is inserted as text (never as HTML), so a tool input or output cannot become markup.
// The credential is kept in sessionStorage for this tab and sent as a bearer header; there
// are no cookies, so other sites cannot make requests in its name.

import { verifyEntry, short } from "./verify.js";
import { REF_PATTERN } from "./canon.js";

const CREDENTIAL_KEY = "worldd.workbench.credential";
const PAGE = 50;
const FOLD_CHARS = 160;

// ---------------------------------------------------------------------------------------
// Small helpers.

/** Build an element: h("a", {href: "#x", class: "y"}, "text", child, …). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);
const detailEmpty = $("detail-empty");

function copyButton(text, label = "copy") {
  const b = h("button", { type: "button", class: "copy", title: `Copy ${text}` }, label);
  b.addEventListener("click", async (ev) => {
    ev.preventDefault();
    ev.stopPropagation();
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = "copied";
      b.classList.add("done");
      setTimeout(() => { b.textContent = label; b.classList.remove("done"); }, 1500);
    } catch {
      b.textContent = "select";
    }
  });
  return b;
}

/** A ref, shortened, with its full text on hover and a copy button. */
function refView(ref) {
  if (!ref) return h("span", { class: "muted" }, "—");
  return h("span", { class: "ref" },
    h("span", { class: "ref-text", title: ref }, short(ref)), copyButton(ref));
}

/** Readable JSON: a tree, objects deeper than two levels folded, long strings folded. */
function jsonView(value) {
  return h("div", { class: "json" }, jsonNode(value, 0));
}

function jsonNode(v, depth) {
  if (v === null) return h("span", { class: "z" }, "null");
  if (typeof v === "boolean") return h("span", { class: "b" }, String(v));
  if (typeof v === "number") return h("span", { class: "n" }, String(v));
  if (typeof v === "string") return stringNode(v);
  const isArray = Array.isArray(v);
  const keys = isArray ? v.map((_, i) => i) : Object.keys(v);
  if (keys.length === 0) return h("span", {}, isArray ? "[]" : "{}");
  const list = h("ul", {}, keys.map((k) =>
    h("li", {}, isArray ? null : h("span", { class: "k" }, JSON.stringify(k)), isArray ? null : ": ",
      jsonNode(v[k], depth + 1))));
  const label = isArray ? `[${keys.length} item${keys.length === 1 ? "" : "s"}]`
    : `{${keys.length} key${keys.length === 1 ? "" : "s"}}`;
  return h("details", { open: depth < 2 }, h("summary", {}, label), list);
}

function stringNode(s) {
  if (REF_PATTERN.test(s)) return h("span", { class: "s" }, refView(s));
  const quoted = JSON.stringify(s);
  if (quoted.length <= FOLD_CHARS) return h("span", { class: "s" }, quoted);
  const span = h("span", { class: "s" }, quoted.slice(0, FOLD_CHARS) + "…");
  const more = h("button", { type: "button", class: "more" }, `show all ${quoted.length} chars`);
  more.addEventListener("click", () => {
    const open = more.dataset.open === "1";
    span.textContent = open ? quoted.slice(0, FOLD_CHARS) + "…" : quoted;
    more.textContent = open ? `show all ${quoted.length} chars` : "fold";
    more.dataset.open = open ? "0" : "1";
  });
  return h("span", {}, span, more);
}

function badge(outcome, reason) {
  if (!outcome) return h("span", { class: "badge none", title: "not a call" });
  const text = outcome;
  return h("span", { class: `badge ${outcome || ""}`, title: reason ? `${text}: ${reason}` : text }, text);
}

// ---------------------------------------------------------------------------------------
// The daemon's API.

class ApiError extends Error {
  constructor(status, cls, message) {
    super(`HTTP ${status}${cls ? " " + cls : ""}${message ? ": " + message : ""}`);
    this.status = status;
    this.cls = cls;
    this.reason = message;
  }
}

function credential() {
  return sessionStorage.getItem(CREDENTIAL_KEY);
}

function authHeaders(extra = {}) {
  const c = credential();
  return c ? { Authorization: `Bearer ${c}`, ...extra } : extra;
}

async function request(path, extra) {
  const res = await fetch(path, { headers: authHeaders(extra), cache: "no-store", credentials: "omit" });
  if (!res.ok) {
    let cls = "", message = "";
    try {
      const body = await res.json();
      cls = body.error?.class || "";
      message = body.error?.message || "";
    } catch { /* not the envelope */ }
    const err = new ApiError(res.status, cls, message);
    if (res.status === 401) signedOut(err);
    throw err;
  }
  return res;
}

const api = {
  async json(path) {
    return (await request(path)).json();
  },
  async text(path) {
    return (await request(path)).text();
  },
};

// ---------------------------------------------------------------------------------------
// State.

const state = {
  entries: new Map(), // index → summary
  scannedFrom: null, // lowest index scanned into the timeline
  next: 0, // where the stream resumes
  head: null,
  selected: null, // index shown in the detail pane
  cursor: null, // index highlighted by keyboard
  stream: null, // AbortController of the open stream
  retry: 0,
  verifying: 0, // generation of the detail pane, so a stale verification does not paint
  started: false, // signed in and showing the app
};

// ---------------------------------------------------------------------------------------
// Sign in and out.

function showLogin(message) {
  state.started = false;
  $("login").hidden = false;
  document.querySelectorAll(".view").forEach((v) => { v.hidden = true; });
  $("signout").hidden = true;
  $("nav").hidden = true;
  const err = $("login-error");
  err.hidden = !message;
  err.textContent = message || "";
  setLive("offline", "");
  $("credential").focus();
}

function signedOut(err) {
  stopStream();
  sessionStorage.removeItem(CREDENTIAL_KEY);
  showLogin(`The daemon refused the credential: ${err.reason || err.message}`);
}

async function signIn(text) {
  const c = text.trim();
  if (!/^[0-9a-fA-F]{64}$/.test(c)) {
    showLogin("A credential is 64 hexadecimal digits.");
    return;
  }
  sessionStorage.setItem(CREDENTIAL_KEY, c);
  try {
    await start();
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) showLogin(`Could not reach the daemon: ${e.message}`);
  }
}

function signOut() {
  stopStream();
  sessionStorage.removeItem(CREDENTIAL_KEY);
  state.entries.clear();
  $("entries").replaceChildren();
  showLogin("");
}

// ---------------------------------------------------------------------------------------
// The timeline.

function setLive(text, cls) {
  const el = $("live");
  el.textContent = text;
  el.className = `live ${cls}`;
}

function matches(s) {
  const ep = $("filter-episode").value;
  const tool = $("filter-tool").value;
  const outcome = $("filter-outcome").value;
  if (ep && s.episode !== ep) return false;
  if (tool && s.tool !== tool) return false;
  if (outcome === "none") return s.outcome === null;
  if (outcome && s.outcome !== outcome) return false;
  return true;
}

function toolLabel(s) {
  if (s.tool) return s.tool;
  if (s.header.writtenBy === "world:genesis") return "genesis";
  return `commit by ${s.header.writtenBy}`;
}

function row(s, fresh) {
  const i = s.header.entryIndex;
  const a = h("a", { href: `#entry/${i}`, "data-index": i, "aria-current": state.selected === i ? "true" : "false" },
    h("span", { class: "idx" }, `#${i}`),
    badge(s.outcome, s.reason),
    h("span", { class: "tool" }, toolLabel(s)),
    h("span", { class: "sub", title: s.invocationId || s.entryHash },
      [s.episode, s.invocationId || short(s.entryHash)].filter(Boolean).join(" · ")));
  const li = h("li", { class: fresh ? "fresh" : "", "data-index": i }, a);
  // Once only: a hidden timeline shown again would otherwise replay the highlight.
  const settle = () => li.classList.remove("fresh");
  li.addEventListener("animationend", settle, { once: true });
  li.addEventListener("animationcancel", settle, { once: true });
  return li;
}

function addOption(select, value) {
  if (!value) return;
  if ([...select.options].some((o) => o.value === value)) return;
  const opts = [...select.options].slice(1).map((o) => o.value).concat(value).sort();
  const current = select.value;
  select.replaceChildren(h("option", { value: "" }, "all"), ...opts.map((v) => h("option", { value: v }, v)));
  select.value = current;
}

function remember(s) {
  state.entries.set(s.header.entryIndex, s);
  addOption($("filter-episode"), s.episode);
  addOption($("filter-tool"), s.tool);
}

/** Redraw the whole list (after a filter change or an older page). */
function renderTimeline() {
  const list = $("entries");
  const indices = [...state.entries.keys()].sort((a, b) => b - a);
  const shown = indices.map((i) => state.entries.get(i)).filter(matches);
  list.replaceChildren(...shown.map((s) => row(s, false)));
  renderTimelineState(shown.length);
}

function renderTimelineState(shownCount) {
  const empty = $("timeline-empty");
  const total = state.entries.size;
  empty.hidden = shownCount > 0;
  empty.textContent = total === 0 ? "No entries you can see yet. Calls appear here as they are committed."
    : "No loaded entry matches these filters.";
  $("older").hidden = !(state.scannedFrom > 0);
  const range = state.scannedFrom === null ? "" : `entries ${state.scannedFrom}–${Math.max(state.next - 1, 0)} scanned`;
  $("timeline-status").textContent = `${shownCount} shown of ${total} loaded${range ? " · " + range : ""}`;
}

/** One new entry from the stream: add it on top without redrawing the list. */
function arrived(s) {
  const i = s.header.entryIndex;
  if (state.entries.has(i)) return;
  remember(s);
  state.next = Math.max(state.next, i + 1);
  if (matches(s)) {
    const list = $("entries");
    const first = list.firstElementChild;
    if (!first || Number(first.dataset.index) < i) list.prepend(row(s, true));
    else renderTimeline();
  }
  renderTimelineState($("entries").children.length);
}

async function loadNewest() {
  const page = await api.json(`/v1/log/summaries?limit=${PAGE}`);
  state.entries.clear();
  for (const s of page.items) remember(s);
  state.scannedFrom = page.from;
  state.next = page.next;
  state.head = page.head;
  renderTimeline();
}

async function loadOlder() {
  if (!(state.scannedFrom > 0)) return;
  const from = Math.max(0, state.scannedFrom - PAGE);
  const button = $("older");
  button.disabled = true;
  try {
    const page = await api.json(`/v1/log/summaries?from=${from}&limit=${state.scannedFrom - from}`);
    for (const s of page.items) remember(s);
    state.scannedFrom = from;
    renderTimeline();
  } catch (e) {
    $("timeline-status").textContent = `Could not load older entries: ${e.message}`;
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------------------------------
// The live stream: fetch (so the bearer header can be sent), parsed as Server-Sent Events,
// resumed with Last-Event-ID after a drop.

function stopStream() {
  if (state.stream) state.stream.abort();
  state.stream = null;
}

async function follow() {
  stopStream();
  const ctl = new AbortController();
  state.stream = ctl;
  while (state.stream === ctl) {
    try {
      const headers = authHeaders(state.next > 0 ? { "Last-Event-ID": String(state.next - 1) } : {});
      const path = state.next > 0 ? "/v1/log/stream" : "/v1/log/stream?from=0";
      const res = await fetch(path, { headers, cache: "no-store", credentials: "omit", signal: ctl.signal });
      if (res.status === 401) {
        const body = await res.json().catch(() => ({}));
        signedOut(new ApiError(401, body.error?.class, body.error?.message));
        return;
      }
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      setLive("live", "on");
      state.retry = 0;
      await readEvents(res.body, ctl);
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    if (state.stream !== ctl) return;
    state.retry = Math.min(state.retry + 1, 5);
    setLive("reconnecting…", "wait");
    await new Promise((r) => setTimeout(r, 500 * 2 ** state.retry));
  }
}

async function readEvents(body, ctl) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { type: "message", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done || ctl.signal.aborted) return;
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (event.data.length) dispatch(event.type, event.data.join("\n"));
        event = { type: "message", data: [] };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "event") event.type = val;
      else if (field === "data") event.data.push(val);
    }
  }
}

function dispatch(type, data) {
  let v;
  try {
    v = JSON.parse(data);
  } catch {
    return;
  }
  if (type === "entry") {
    arrived(v);
  } else if (type === "error") {
    const cls = v.error?.class || "";
    if (cls.startsWith("Session")) signedOut(new ApiError(401, cls, v.error?.message));
    else setLive(`stream error: ${v.error?.message || cls}`, "wait");
  }
}

// ---------------------------------------------------------------------------------------
// One entry's chain.

async function summaryOf(index) {
  if (state.entries.has(index)) return state.entries.get(index);
  const page = await api.json(`/v1/log/summaries?from=${index}&limit=1`);
  return page.items.find((s) => s.header.entryIndex === index) || null;
}

function linkItem(l) {
  const mark = l.ok === null ? "…" : l.ok ? "✓" : "✗";
  const li = h("li", { class: `link ${l.ok ? "good" : "bad"}`, "data-kind": l.kind, "data-ok": String(l.ok) },
    h("div", { class: "link-head" },
      h("span", { class: "mark", "aria-label": l.ok ? "verified" : "broken" }, mark),
      h("span", { class: "kind" }, l.kind),
      h("span", { class: "ref" }, refView(l.ref)),
      h("span", { class: "why" }, l.detail)));
  if (l.fields) {
    li.append(h("dl", { class: "fields" }, l.fields.map(([k, v, note]) => [
      h("dt", {}, k),
      h("dd", {}, REF_PATTERN.test(v) ? refView(v) : v, note ? h("span", { class: "muted" }, ` (${note})`) : null),
    ])));
  }
  if (l.doc !== undefined) {
    li.append(h("details", {}, h("summary", {}, "document"), jsonView(l.doc)));
  } else if (l.text !== undefined) {
    li.append(h("details", {}, h("summary", {}, `bytes (${l.bytes ? l.bytes.length : 0} B, as text)`),
      h("div", { class: "json" }, stringNode(l.text))));
  }
  if (l.result && l.result.text !== undefined) {
    let doc;
    try { doc = JSON.parse(l.result.text); } catch { doc = l.result.text; }
    li.append(h("details", {}, h("summary", {}, "handler result"), jsonView(doc)));
  }
  return li;
}

async function showEntry(index) {
  const gen = ++state.verifying;
  state.selected = index;
  document.body.classList.add("entry-open");
  markSelected();
  const pane = $("detail");
  const back = h("a", { href: "#log", class: "back" }, "← Log");
  const verdict = h("div", { id: "verdict", class: "verdict pending", role: "status" }, "Verifying…");
  pane.replaceChildren(back, h("h2", {}, `Entry #${index}`), verdict);
  let s;
  try {
    s = await summaryOf(index);
  } catch (e) {
    if (gen !== state.verifying) return;
    verdict.textContent = `Could not read entry #${index}: ${e.message}`;
    verdict.className = "verdict bad";
    return;
  }
  if (gen !== state.verifying) return;
  if (!s) {
    verdict.className = "verdict pending";
    verdict.textContent = `Entry #${index} does not exist or is not visible to this credential.`;
    return;
  }
  const permalink = `${location.origin}${location.pathname}#entry/${index}`;
  const title = h("h2", {}, `Entry #${index}`, badge(s.outcome, s.reason));
  const meta = h("dl", { class: "meta" },
    h("dt", {}, "tool"), h("dd", {}, toolLabel(s)),
    h("dt", {}, "episode"), h("dd", {}, s.episode || "—"),
    h("dt", {}, "invocation"), h("dd", {}, s.invocationId || "—", s.invocationId ? copyButton(s.invocationId) : null),
    h("dt", {}, "outcome"), h("dd", {}, s.outcome ? `${s.outcome}${s.reason ? ` (${s.reason})` : ""}` : "not a call"),
    h("dt", {}, "written by"), h("dd", {}, s.header.writtenBy),
    h("dt", {}, "permalink"), h("dd", {}, h("a", { href: `#entry/${index}` }, `#entry/${index}`), copyButton(permalink)));
  const links = h("ol", { class: "links", id: "links" });
  pane.replaceChildren(back, title, meta, verdict, links);

  let result;
  try {
    result = await verifyEntry(api, index, s.worldRef);
  } catch (e) {
    if (gen !== state.verifying) return;
    verdict.className = "verdict bad";
    verdict.textContent = `Verification stopped: ${e.message}`;
    return;
  }
  if (gen !== state.verifying) return;
  const n = result.links.length;
  const broken = result.links.filter((l) => !l.ok).length;
  verdict.className = `verdict ${broken ? "bad" : "ok"}`;
  verdict.textContent = broken
    ? `✗ ${broken} of ${n} link${n === 1 ? "" : "s"} broken: the daemon served bytes that do not match their address`
    : `✓ ${n} link${n === 1 ? "" : "s"} verified`;
  verdict.dataset.links = String(n);
  verdict.dataset.broken = String(broken);
  links.replaceChildren(...result.links.map(linkItem));
}

function markSelected() {
  for (const a of $("entries").querySelectorAll("a[data-index]")) {
    a.setAttribute("aria-current", Number(a.dataset.index) === state.selected ? "true" : "false");
  }
}

// ---------------------------------------------------------------------------------------
// Episode, plugins, metrics.

function table(headers, rows, numeric = []) {
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, headers.map((t, i) => h("th", { class: numeric.includes(i) ? "num" : "" }, t)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : "" }, c)))))));
}

function meter(fraction, title) {
  const bar = h("span");
  // CSSOM, not a style attribute: the page's Content-Security-Policy allows no inline styles.
  bar.style.width = `${Math.round(Math.max(0, Math.min(1, fraction)) * 100)}%`;
  return h("div", { class: `meter ${fraction < 0.2 ? "low" : ""}`, title }, bar);
}

async function showEpisode() {
  const view = $("view-episode");
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let b;
  try {
    b = await api.json("/v1/budget");
  } catch (e) {
    view.replaceChildren(h("p", { class: "error" }, `Could not read the budget: ${e.message}`));
    return;
  }
  const expires = b.expiresAt ? new Date(b.expiresAt * 1000).toISOString().replace(".000Z", "Z") : "—";
  const grants = (b.grants || []).map((g) => {
    const frac = g.granted ? g.remaining / g.granted : 0;
    return [
      h("code", {}, g.effect), g.scope,
      String(g.granted), String(g.spent),
      h("span", {}, String(g.remaining),
        meter(frac, `${g.remaining} of ${g.granted} left`)),
      g.live ? "yes" : "expired",
    ];
  });
  const pending = b.indeterminate;
  const intents = pending === undefined
    ? h("p", { class: "muted" }, "This daemon does not report indeterminate intents.")
    : pending.length === 0
      ? h("p", { class: "empty" }, "None: every effect of this episode has an outcome.")
      : table(["invocation", "effect", "cost", "request"], pending.map((p) => [
        p.invocationId, `${p.effect}@${p.scope}`, String(p.cost), refView(p.requestRef)]), [2]);
  const counts = new Map();
  for (const s of state.entries.values()) if (s.episode) counts.set(s.episode, (counts.get(s.episode) || 0) + 1);
  const seen = counts.size === 0 ? h("p", { class: "empty" }, "No calls in the loaded part of the log.")
    : table(["episode", "entries loaded"], [...counts].sort().map(([ep, n]) => [
      h("a", { href: "#log", "data-episode": ep, onclick: () => { $("filter-episode").value = ep; renderTimeline(); } }, ep),
      String(n)]), [1]);
  view.replaceChildren(
    h("h1", {}, `Episode ${b.episode}`),
    h("div", { class: "grid2" },
      h("section", { class: "card wide" }, h("h2", {}, "Budget"),
        h("p", { class: "muted" }, `Credential expires ${expires}. Budgets belong to the episode: a new credential does not refill them.`),
        grants.length ? table(["effect", "scope", "granted", "spent", "remaining", "live"], grants, [2, 3, 4])
          : h("p", { class: "empty" }, "This credential holds no grants.")),
      h("section", { class: "card" }, h("h2", {}, "Indeterminate intents"),
        h("p", { class: "muted" }, "Effects whose intent is durable but whose outcome is not: they may have run, are never retried, and their budget stays spent."),
        intents),
      h("section", { class: "card" }, h("h2", {}, "Episodes in the log"), seen)));
}

async function showPlugins() {
  const view = $("view-plugins");
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let v;
  try {
    v = await api.json("/v1/handlers");
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) {
      view.replaceChildren(h("h1", {}, "Plugins"),
        h("p", { class: "notice", id: "plugins-unavailable" },
          "Not available: this daemon does not serve ", h("code", {}, "GET /v1/handlers"),
          ", so its plugins cannot be listed here. ", h("code", {}, "worldd handlers"),
          " lists them on the daemon's machine."));
      return;
    }
    view.replaceChildren(h("p", { class: "error" }, `Could not list the plugins: ${e.message}`));
    return;
  }
  const plugins = (v.plugins || []).map((p) => h("section", { class: "card" },
    h("h2", {}, `${p.name} ${p.version || ""}`),
    h("dl", { class: "meta" },
      h("dt", {}, "identity"), h("dd", {}, h("code", {}, p.identity || "—"), p.identity ? copyButton(p.identity) : null),
      h("dt", {}, "library"), h("dd", {}, h("code", {}, p.path || "—"))),
    table(["effect", "class"], (p.effects || []).map((e) => [h("code", {}, e.effect), e.class]))));
  const tools = (v.tools || []).map((t) => [h("code", {}, t.name), (t.effects || []).join(", "),
    t.canRun ? "yes" : h("span", { class: "error" }, `no: ${t.reason || ""}`)]);
  view.replaceChildren(h("h1", {}, "Plugins"),
    plugins.length ? h("div", { class: "grid2" }, plugins) : h("p", { class: "empty" }, "No plugin is loaded."),
    h("section", { class: "card" }, h("h2", {}, "Tools this credential sees"),
      tools.length ? table(["tool", "effects", "can run"], tools) : h("p", { class: "empty" }, "No tools.")));
}

function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const part of (m[3] || "").match(/\w+="(?:[^"\\]|\\.)*"/g) || []) {
      const eq = part.indexOf("=");
      labels[part.slice(0, eq)] = JSON.parse(part.slice(eq + 1));
    }
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return samples;
}

async function showMetrics() {
  const view = $("view-metrics");
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let samples;
  try {
    samples = parseMetrics(await api.text("/v1/metrics"));
  } catch (e) {
    view.replaceChildren(h("p", { class: "error" }, `Could not read the metrics: ${e.message}`));
    return;
  }
  const sum = (name, pred = () => true) => samples.filter((s) => s.name === name && pred(s)).reduce((a, s) => a + s.value, 0);
  const calls = sum("worldd_calls_total");
  const byOutcome = new Map();
  const byTool = new Map();
  for (const s of samples.filter((x) => x.name === "worldd_calls_total")) {
    byOutcome.set(s.labels.outcome, (byOutcome.get(s.labels.outcome) || 0) + s.value);
    const t = byTool.get(s.labels.tool) || {};
    t[s.labels.outcome] = s.value;
    byTool.set(s.labels.tool, t);
  }
  const latencyCount = sum("worldd_call_seconds_count");
  const meanMs = latencyCount ? (sum("worldd_call_seconds_sum") / latencyCount) * 1000 : null;
  const batches = sum("worldd_commit_batches_total");
  const ops = sum("worldd_commit_operations_total");
  const tile = (value, label) => h("div", { class: "tile" }, h("div", { class: "v" }, value), h("div", { class: "l" }, label));
  const outcomes = [...byOutcome.keys()].sort();
  view.replaceChildren(
    h("div", { class: "title-row" }, h("h1", {}, "Metrics"),
      h("button", { type: "button", id: "metrics-refresh", onclick: showMetrics }, "Refresh")),
    h("div", { class: "tiles" },
      tile(String(calls), "calls since start"),
      tile(meanMs === null ? "—" : `${meanMs.toFixed(1)} ms`, "mean call latency"),
      tile(String(sum("worldd_denials_total")), "broker denials"),
      tile(String(sum("worldd_effect_failures_total")), "effect failures"),
      tile(String(sum("worldd_callbacks_rejected_total")), "refused for capacity"),
      tile(batches ? (ops / batches).toFixed(1) : "—", `operations per group commit (${batches} commit${batches === 1 ? "" : "s"})`)),
    h("section", { class: "card" }, h("h2", {}, "Calls by tool and outcome"),
      byTool.size ? table(["tool", ...outcomes], [...byTool].sort().map(([tool, o]) =>
        [h("code", {}, tool), ...outcomes.map((k) => String(o[k] || 0))]), outcomes.map((_, i) => i + 1))
        : h("p", { class: "empty" }, "No calls since the daemon started.")),
    h("p", { class: "muted" }, "From GET /v1/metrics (Prometheus text format)."));
}

// ---------------------------------------------------------------------------------------
// Routing (the hash is the permalink) and keyboard.

function route() {
  if (!state.started) return;
  const hash = location.hash.slice(1);
  const m = /^entry\/(\d+)$/.exec(hash);
  const view = m ? "log" : ["episode", "plugins", "metrics"].includes(hash) ? hash : "log";
  for (const name of ["log", "episode", "plugins", "metrics"]) $(`view-${name}`).hidden = name !== view;
  for (const a of $("nav").querySelectorAll("a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (m) {
    showEntry(Number(m[1]));
  } else {
    state.selected = null;
    state.verifying++;
    document.body.classList.remove("entry-open");
    markSelected();
    if (view === "log") {
      $("detail").replaceChildren(detailEmpty);
    }
  }
  if (view === "episode") showEpisode();
  if (view === "plugins") showPlugins();
  if (view === "metrics") showMetrics();
}

function moveCursor(step) {
  const rows = [...$("entries").querySelectorAll("a[data-index]")];
  if (!rows.length) return;
  let at = rows.findIndex((a) => a === document.activeElement);
  if (at < 0) at = rows.findIndex((a) => Number(a.dataset.index) === state.selected);
  const next = rows[Math.max(0, Math.min(rows.length - 1, at < 0 ? 0 : at + step))];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}

function onKey(ev) {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const t = ev.target;
  if (t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement) return;
  if (!state.started) return;
  const help = $("help");
  switch (ev.key) {
    case "j": case "ArrowDown":
      if ($("view-log").hidden) return;
      moveCursor(1); break;
    case "k": case "ArrowUp":
      if ($("view-log").hidden) return;
      moveCursor(-1); break;
    case "Escape":
      if (!help.hidden) help.hidden = true;
      else if (state.selected !== null) location.hash = "#log";
      break;
    case "?": help.hidden = !help.hidden; break;
    case "1": location.hash = "#log"; break;
    case "2": location.hash = "#episode"; break;
    case "3": location.hash = "#plugins"; break;
    case "4": location.hash = "#metrics"; break;
    default: return;
  }
  ev.preventDefault();
}

// ---------------------------------------------------------------------------------------
// Start.

async function start() {
  $("login").hidden = true;
  $("signout").hidden = false;
  $("nav").hidden = false;
  setLive("connecting…", "wait");
  await loadNewest();
  state.started = true;
  route();
  follow();
}

function init() {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    signIn($("credential").value);
    $("credential").value = "";
  });
  $("signout").addEventListener("click", signOut);
  $("older").addEventListener("click", loadOlder);
  for (const id of ["filter-episode", "filter-tool", "filter-outcome"]) $(id).addEventListener("change", renderTimeline);
  $("help-button").addEventListener("click", () => { $("help").hidden = !$("help").hidden; });
  $("help-close").addEventListener("click", () => { $("help").hidden = true; });
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", onKey);
  if (credential()) {
    start().catch((e) => {
      if (!(e instanceof ApiError && e.status === 401)) showLogin(`Could not reach the daemon: ${e.message}`);
    });
  } else {
    showLogin("");
  }
}

init();
