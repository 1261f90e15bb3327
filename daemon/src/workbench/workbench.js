// The worldd workbench: a provenance explorer served by the daemon itself.
//
// Plain DOM, no framework, no network but this daemon's own routes. Everything the daemon
// sends is inserted as text (never as HTML), so a tool input or output cannot become markup.
// The credential is kept in this page's memory only (a reload forgets it) and sent as a bearer
// header; there are no cookies, so other sites cannot make requests in its name. Once the page
// has seen its daemon go away, nothing is sent with the credential until the daemon that
// answers on the port is again the one serving the same store.

import { verifyEntry, short } from "./verify.js";
import { REF_PATTERN } from "./canon.js";

// Where earlier versions of the page kept the credential: removed on load.
const CREDENTIAL_KEY = "worldd.workbench.credential";
const PAGE = 50;
// The most entries one page of GET /v1/log/summaries scans (the route's limit): how far each
// step goes back when the newest entries hold nothing this credential may see.
const SCAN = 500;
// A request with no answer after this long ends as "no answer" (a daemon stopped by a signal,
// stuck on its store, or on a paused machine answers nothing, and would leave the page waiting).
// Only the wait for the answer to begin is timed so, and then each wait for more of its body: a
// large answer over a slow link takes longer than this to arrive, and is not a silent daemon.
const REQUEST_TIMEOUT_MS = 30_000;
const NO_ANSWER = `no answer from the daemon within ${REQUEST_TIMEOUT_MS / 1000} s`;
const STALLED = `the daemon's answer stopped arriving for ${REQUEST_TIMEOUT_MS / 1000} s`;
// The unauthenticated "is it still this daemon?" probe: a health answer is quick or absent.
const PROBE_TIMEOUT_MS = 10_000;
// The daemon sends a keep-alive comment on a quiet stream every 15 s; a stream silent for two
// of those has in effect dropped.
const STREAM_SILENCE_MS = 2 * 15_000;
const FOLD_CHARS = 160;
// The most entries the timeline holds from the live log: a tab left open on a busy daemon
// would otherwise keep every entry it was sent, and redraw them all on each filter change.
// Past it the oldest are dropped (Load older entries fetches them again). Entries loaded by
// Load older entries widen the window to hold them.
const WINDOW = 2000;

// ---------------------------------------------------------------------------------------
// Small helpers.

// Characters that change how text reads without showing themselves. Text from the daemon
// (tool inputs and outputs, names, reasons) is shown with each of them escaped, as `\u202e`
// in a style of its own; the bytes are not changed.
//
// One table, from Unicode 16.0: every Default_Ignorable_Code_Point (DerivedCoreProperties.txt;
// it holds every Bidi_Control and Variation_Selector code point and the Hangul fillers), plus
// what draws nothing or breaks a line outside it: the format characters (Cf) that are not
// prepended concatenation marks (interlinear annotation, Egyptian hieroglyph format controls),
// DEL and the C1 controls, and the line and paragraph separators. A browser test checks the
// table against the browser's own `\p{Default_Ignorable_Code_Point}` and `\p{Cf}`.
// [first, last, name]: the name of each code point of the range, for the tooltip.
const INVISIBLE_RANGES = [
  [0x007f, 0x009f, "CONTROL CHARACTER"],
  [0x00ad, 0x00ad, "SOFT HYPHEN"],
  [0x034f, 0x034f, "COMBINING GRAPHEME JOINER"],
  [0x061c, 0x061c, "ARABIC LETTER MARK"],
  [0x115f, 0x115f, "HANGUL CHOSEONG FILLER"],
  [0x1160, 0x1160, "HANGUL JUNGSEONG FILLER"],
  [0x17b4, 0x17b5, "KHMER INHERENT VOWEL"],
  [0x180b, 0x180d, "MONGOLIAN FREE VARIATION SELECTOR"],
  [0x180e, 0x180e, "MONGOLIAN VOWEL SEPARATOR"],
  [0x180f, 0x180f, "MONGOLIAN FREE VARIATION SELECTOR FOUR"],
  [0x200b, 0x200b, "ZERO WIDTH SPACE"],
  [0x200c, 0x200c, "ZERO WIDTH NON-JOINER"],
  [0x200d, 0x200d, "ZERO WIDTH JOINER"],
  [0x200e, 0x200e, "LEFT-TO-RIGHT MARK"],
  [0x200f, 0x200f, "RIGHT-TO-LEFT MARK"],
  [0x2028, 0x2028, "LINE SEPARATOR"],
  [0x2029, 0x2029, "PARAGRAPH SEPARATOR"],
  [0x202a, 0x202a, "LEFT-TO-RIGHT EMBEDDING"],
  [0x202b, 0x202b, "RIGHT-TO-LEFT EMBEDDING"],
  [0x202c, 0x202c, "POP DIRECTIONAL FORMATTING"],
  [0x202d, 0x202d, "LEFT-TO-RIGHT OVERRIDE"],
  [0x202e, 0x202e, "RIGHT-TO-LEFT OVERRIDE"],
  [0x2060, 0x2060, "WORD JOINER"],
  [0x2061, 0x2061, "FUNCTION APPLICATION"],
  [0x2062, 0x2062, "INVISIBLE TIMES"],
  [0x2063, 0x2063, "INVISIBLE SEPARATOR"],
  [0x2064, 0x2064, "INVISIBLE PLUS"],
  [0x2065, 0x2065, "DEFAULT IGNORABLE (unassigned)"],
  [0x2066, 0x2066, "LEFT-TO-RIGHT ISOLATE"],
  [0x2067, 0x2067, "RIGHT-TO-LEFT ISOLATE"],
  [0x2068, 0x2068, "FIRST STRONG ISOLATE"],
  [0x2069, 0x2069, "POP DIRECTIONAL ISOLATE"],
  [0x206a, 0x206f, "DEPRECATED FORMAT CHARACTER"],
  [0x3164, 0x3164, "HANGUL FILLER"],
  [0xfe00, 0xfe0f, "VARIATION SELECTOR"],
  [0xfeff, 0xfeff, "ZERO WIDTH NO-BREAK SPACE"],
  [0xffa0, 0xffa0, "HALFWIDTH HANGUL FILLER"],
  [0xfff0, 0xfff8, "DEFAULT IGNORABLE (unassigned)"],
  [0xfff9, 0xfffb, "INTERLINEAR ANNOTATION CHARACTER"],
  [0x13430, 0x1343f, "EGYPTIAN HIEROGLYPH FORMAT CONTROL"],
  [0x1bca0, 0x1bca3, "SHORTHAND FORMAT CONTROL"],
  [0x1d173, 0x1d17a, "MUSICAL SYMBOL FORMAT CONTROL"],
  [0xe0000, 0xe00ff, "TAG CHARACTER"],
  [0xe0100, 0xe01ef, "VARIATION SELECTOR"],
  [0xe01f0, 0xe0fff, "DEFAULT IGNORABLE (unassigned)"],
];
const hexEscape = (cp) => `\\u{${cp.toString(16)}}`;
const INVISIBLE_CLASS = `[${INVISIBLE_RANGES.map(([a, b]) => (a === b ? hexEscape(a) : `${hexEscape(a)}-${hexEscape(b)}`)).join("")}]`;
// A run of more than MAX_MARKS combining marks on one character: 400000 of them stacked paint
// over the page and hang the renderer. Such a run is shown as a count, `a◌́×400000`. The
// invisible marks (variation selectors, the grapheme joiner) are not part of a run: each is
// escaped. And a run of more than MAX_MARKS of one invisible character is counted too,
// `\u200b×349000`, not drawn as that many boxes.
const MAX_MARKS = 4;
const SPECIAL_CHARS = `(?<inv>${INVISIBLE_CLASS})(?<rep>\\k<inv>{${MAX_MARKS},})?|(?<marks>(?:(?!${INVISIBLE_CLASS})\\p{M}){${MAX_MARKS + 1},})`;
const INVISIBLE = new RegExp(SPECIAL_CHARS, "u");
const INVISIBLES = new RegExp(SPECIAL_CHARS, "gu");

/** The table's name of an invisible code point. */
function invisibleName(cp) {
  const range = INVISIBLE_RANGES.find(([a, b]) => cp >= a && cp <= b);
  if (!range) return "INVISIBLE CHARACTER";
  if (range[2] === "VARIATION SELECTOR") return `VARIATION SELECTOR-${cp < 0xe0100 ? cp - 0xfe00 + 1 : cp - 0xe0100 + 17}`;
  return range[2];
}

/** A run of combining marks, counted: `◌́×400000` (the first three kinds, each on a dotted circle). */
function marksText(run) {
  const kinds = [...new Set(run)];
  const shown = kinds.slice(0, 3).map((m) => `◌${m}`).join("") + (kinds.length > 3 ? "…" : "");
  return `${shown}×${[...run].length}`;
}

/** `\u202e` (or `\u{e0041}` beyond the BMP): how an invisible character is shown. */
function escapeCp(cp) {
  const hex = cp.toString(16);
  return cp > 0xffff ? `\\u{${hex}}` : `\\u${hex.padStart(4, "0")}`;
}

/** How one match of INVISIBLES is shown: its class, its text and its tooltip. */
function describe(m) {
  const g = m.groups;
  if (g.marks !== undefined) {
    const n = [...g.marks].length;
    return ["marks", marksText(g.marks),
      `${n} combining marks on one character, counted: drawn stacked they would paint over the page`];
  }
  const cp = g.inv.codePointAt(0);
  const at = `U+${cp.toString(16).toUpperCase().padStart(4, "0")} ${invisibleName(cp)}`;
  if (g.rep === undefined) return ["invisible", escapeCp(cp), `${at}: shown escaped; the bytes hold the character itself`];
  const n = [...m[0]].length;
  return ["invisible", `${escapeCp(cp)}×${n}`, `${at}, ${n} times in a row: shown escaped and counted; the bytes hold the characters themselves`];
}

/** `text` with its invisible characters escaped, as plain text (for titles and menus). */
function plain(text) {
  return INVISIBLE.test(text) ? text.replace(INVISIBLES, (...args) => describe({ 0: args[0], groups: args.at(-1) })[1]) : text;
}

/**
 * `text` as one node: plain text, and each invisible character escaped in a span of its own,
 * gathered in a fragment (never spread into one call: a string of 300000 of them would pass
 * the engine's limit on arguments).
 */
function visible(text) {
  if (!INVISIBLE.test(text)) return document.createTextNode(text);
  const out = document.createDocumentFragment();
  let at = 0;
  for (const m of text.matchAll(INVISIBLES)) {
    if (m.index > at) out.appendChild(document.createTextNode(text.slice(at, m.index)));
    at = m.index + m[0].length;
    const [cls, shown, title] = describe(m);
    const span = document.createElement("span");
    span.className = cls;
    span.title = title;
    span.textContent = shown;
    out.appendChild(span);
  }
  if (at < text.length) out.appendChild(document.createTextNode(text.slice(at)));
  return out;
}

/** Set an element's text, invisible characters shown. */
function setText(el, text) {
  el.replaceChildren(visible(String(text)));
}

/** Build an element: h("a", {href: "#x", class: "y"}, "text", child, …). Text children and
 * titles show their invisible characters. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") setText(el, v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "title") el.setAttribute(k, plain(String(v)));
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    if (c instanceof Node) el.append(c);
    else if (tag === "option") el.append(plain(String(c)));
    else el.append(visible(String(c)));
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
    h("li", {}, isArray ? null : foldable(JSON.stringify(k), "k"), isArray ? null : ": ",
      jsonNode(v[k], depth + 1))));
  const label = isArray ? `[${keys.length} item${keys.length === 1 ? "" : "s"}]`
    : `{${keys.length} key${keys.length === 1 ? "" : "s"}}`;
  return h("details", { open: depth < 2 }, h("summary", {}, label), list);
}

function stringNode(s) {
  if (REF_PATTERN.test(s)) return h("span", { class: "s" }, refView(s));
  return foldable(JSON.stringify(s), "s");
}

/** A quoted string or key, folded to FOLD_CHARS characters until opened. */
function foldable(quoted, cls) {
  if (quoted.length <= FOLD_CHARS) return h("span", { class: cls }, quoted);
  const span = h("span", { class: cls }, quoted.slice(0, FOLD_CHARS) + "…");
  const more = h("button", { type: "button", class: "more" }, `show all ${quoted.length} chars`);
  more.addEventListener("click", () => {
    const open = more.dataset.open === "1";
    setText(span, open ? quoted.slice(0, FOLD_CHARS) + "…" : quoted);
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

// Not in sessionStorage: whatever serves this origin's page after a reload (a process that
// took the port of a daemon that stopped) could read it there.
let secret = null;

function credential() {
  return secret;
}

/** What a request the page did not send says. */
const NOT_SENT = "not sent: the daemon this page signed in to no longer answers here (disconnected); Reconnect once it is back";

class NotSent extends Error {
  constructor() {
    super(NOT_SENT);
    this.reason = NOT_SENT;
  }
}

/** An answer to a request sent with a credential the page has since forgotten: it is dropped,
 * never shown under the next credential. */
class Superseded extends Error {
  constructor() {
    super("signed out while the request was in flight");
  }
}

/**
 * Before the credential goes out after the page saw its daemon go away: is the daemon that
 * answers now the one serving the same store? Throws NotSent (and says "disconnected") if not.
 */
async function ensureDaemon() {
  if (!state.gone) return;
  const signin = state.signin;
  const same = await rejoin();
  if (signin !== state.signin) throw new Superseded();
  if (!same || state.gone) {
    disconnected();
    throw new NotSent();
  }
  // Back: follow the log again too.
  if (!state.stream && state.started) follow();
}

function authHeaders(extra = {}) {
  const c = credential();
  return c ? { Authorization: `Bearer ${c}`, ...extra } : extra;
}

/**
 * A request with the credential, and the controller that ends it. Signed out (and maybe in
 * again) before it answers, it throws Superseded: nothing read with a forgotten credential
 * reaches the page, and its refusal does not sign out the next credential.
 */
async function request(path, extra) {
  const signin = state.signin;
  await ensureDaemon();
  if (signin !== state.signin) throw new Superseded();
  const ctl = new AbortController();
  // Timed until the answer's head arrives; its body is timed by its progress (readAll).
  const timer = setTimeout(() => ctl.abort(timeoutError(NO_ANSWER)), REQUEST_TIMEOUT_MS);
  let res;
  try {
    res = await fetch(path, { headers: authHeaders(extra), cache: "no-store", credentials: "omit",
      signal: ctl.signal });
  } catch (e) {
    if (signin !== state.signin) throw new Superseded();
    // Nothing answered: the daemon may be gone, and the port anyone's.
    state.gone = true;
    throw noAnswer(e);
  } finally {
    clearTimeout(timer);
  }
  if (signin !== state.signin) throw new Superseded();
  if (!res.ok) {
    let cls = "", message = "";
    try {
      const body = JSON.parse(await readAll(res, ctl));
      cls = body.error?.class || "";
      message = body.error?.message || "";
    } catch { /* not the envelope */ }
    if (signin !== state.signin) throw new Superseded();
    const err = new ApiError(res.status, cls, message);
    if (res.status === 401) signedOut(err);
    throw err;
  }
  return { res, ctl };
}

function timeoutError(message) {
  return new DOMException(message, "TimeoutError");
}

/**
 * The whole body of `res` as text. Ends the request (ctl) when none of it arrives for
 * REQUEST_TIMEOUT_MS: a body that keeps arriving, however slowly, is read to its end.
 */
async function readAll(res, ctl) {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks = [];
  let timer;
  const wait = () => {
    clearTimeout(timer);
    timer = setTimeout(() => ctl.abort(timeoutError(STALLED)), REQUEST_TIMEOUT_MS);
  };
  try {
    for (;;) {
      wait();
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
    }
  } catch (e) {
    // The stream's error may be a plain AbortError: the reason it was ended for says more.
    throw ctl.signal.aborted && ctl.signal.reason ? ctl.signal.reason : e;
  } finally {
    clearTimeout(timer);
  }
  return new Blob(chunks).text();
}

/** A request's timeout, said as what it means; any other error as it is. */
function noAnswer(e) {
  if (e && e.name === "TimeoutError") return new Error(e.message || NO_ANSWER);
  return e;
}

/** The body of a request's answer, read while the credential it was sent with is still the page's. */
async function body(path, read) {
  const signin = state.signin;
  const { res, ctl } = await request(path);
  let v;
  try {
    v = read(await readAll(res, ctl));
  } catch (e) {
    if (signin !== state.signin) throw new Superseded();
    // The answer stopped midway (nothing more of it for 30 s, or the connection dropped).
    if (e && (e.name === "TimeoutError" || e.name === "TypeError")) state.gone = true;
    throw noAnswer(e);
  }
  if (signin !== state.signin) throw new Superseded();
  return v;
}

const api = {
  json: (path) => body(path, (text) => JSON.parse(text)),
  text: (path) => body(path, (text) => text),
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
  me: null, // {episode, operator} of the credential, from GET /v1/budget
  episodeView: 0, // generation of the episode view, so a stale answer does not paint
  signin: 0, // generation of the credential: forget() moves it on, and what was in flight with the old one is dropped
  daemon: null, // the absolute path of the daemon's store, from GET /workbench/daemon at sign-in
  tip: null, // {index, hash} of entry next − 1, the last the page has: the log it holds ends there
  rewound: null, // the `rewound` event of the stream just read: the daemon's log is not the page's
  damage: null, // {index, message} of the `Damaged` error the stream just read ended with
  loaded: 0, // generation of the loaded log: a reload after a rollback moves it on
  scanning: false, // older pages are being scanned
  differs: new Map(), // index → the fields its summary said otherwise than its verified record
  window: WINDOW, // the most entries held: WINDOW, or as many as Load older entries brought in
  gone: false, // the page saw the daemon go away: the credential waits for the check
  checking: null, // the check under way, shared by the requests that wait for it
};

// ---------------------------------------------------------------------------------------
// Sign in and out.

function showLogin(message) {
  state.started = false;
  state.daemon = null;
  state.gone = false;
  $("reconnect").hidden = true;
  $("who").hidden = true;
  $("login").hidden = false;
  document.querySelectorAll(".view").forEach((v) => { v.hidden = true; });
  $("signout").hidden = true;
  $("nav").hidden = true;
  const err = $("login-error");
  err.hidden = !message;
  setText(err, message || "");
  setLive("offline", "");
  $("credential").focus();
}

/** Who the credential is, in the top bar. */
function showWho() {
  const el = $("who");
  const me = state.me;
  el.hidden = !me;
  if (!me) return;
  // Two parts: a long episode name is cut short, the role never is.
  el.replaceChildren(h("span", { class: "who-episode" }, me.episode),
    ...(me.operator ? [h("span", { class: "who-role" }, " · operator")] : []));
  el.title = me.operator ? `An operator credential (episode ${me.episode}): it reads every episode`
    : `An agent credential of episode ${me.episode}: it reads its own episode`;
  el.classList.toggle("operator", me.operator);
}

async function learnWho() {
  const signin = state.signin;
  let me = null;
  try {
    const b = await api.json("/v1/budget");
    me = { episode: b.episode, operator: b.operator === true };
  } catch { /* shown without a badge; a refusal has already signed out */ }
  if (signin !== state.signin) return;
  state.me = me;
  showWho();
}

/** Drop the credential and everything read with it: the next one may see other episodes.
 * What is still in flight with it is dropped when it answers (state.signin moves on). */
function forget() {
  state.signin++;
  state.verifying++;
  state.episodeView++;
  stopStream();
  secret = null;
  state.me = null;
  showWho();
  dropLoaded();
  logNotice(null);
  for (const id of ["filter-episode", "filter-tool"]) $(id).replaceChildren(h("option", { value: "" }, "all"));
  $("filter-outcome").value = "";
  for (const id of ["view-episode", "view-plugins", "view-metrics"]) $(id).replaceChildren();
  $("detail").replaceChildren(detailEmpty);
}

function signedOut(err) {
  forget();
  showLogin(`The daemon refused the credential: ${err.reason || err.message}`);
}

async function signIn(text) {
  // As an MCP client's configuration shows it (quickstart prints it so): `Bearer <hex>`.
  const c = text.trim().replace(/^bearer\s+/i, "");
  if (!/^[0-9a-fA-F]{64}$/.test(c)) {
    showLogin("A credential is 64 hexadecimal digits.");
    return;
  }
  secret = c;
  const signin = state.signin;
  try {
    await start();
  } catch (e) {
    // Signed out meanwhile: this sign-in is over, and whatever the page shows now is not its.
    if (signin !== state.signin) return;
    if (!(e instanceof ApiError && e.status === 401)) {
      // Not signed in: the credential is not kept for whatever answers next.
      forget();
      showLogin(`Could not reach the daemon: ${e.message}`);
    }
  }
}

function signOut() {
  forget();
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

/**
 * A position `GET /v1/log/summaries` names under `damaged` (a row that no longer decodes), held
 * beside the summaries: listed in the timeline, and opened as a broken entry.
 */
function damagedRow(d) {
  return { damaged: true, index: d.index, reason: String(d.reason || ""), header: { entryIndex: d.index }, outcome: null };
}

/** The damaged positions of a summaries page (the member is absent when there are none). */
function damagedOf(page) {
  return Array.isArray(page.damaged)
    ? page.damaged.filter((d) => d && d.damaged === true && Number.isSafeInteger(d.index) && d.index >= 0).map(damagedRow)
    : [];
}

function toolLabel(s) {
  if (s.damaged) return "damaged row";
  if (s.tool) return s.tool;
  if (s.header.writtenBy === "world:genesis") return "genesis";
  return `commit by ${s.header.writtenBy}`;
}

function row(s, fresh) {
  const i = s.header.entryIndex;
  const a = h("a", { href: `#entry/${i}`, "data-index": i, "aria-current": state.selected === i ? "true" : "false" },
    h("span", { class: "idx" }, `#${i}`),
    s.damaged ? badge("damaged", s.reason) : badge(s.outcome, s.reason),
    // The mark beside the name, not in it: a long name is cut short with an ellipsis, the mark
    // never is.
    h("span", { class: "what" }, h("span", { class: "tool" }, toolLabel(s)), differsMark(state.differs.get(i))),
    s.damaged ? h("span", { class: "sub", title: s.reason }, s.reason)
      : h("span", { class: "sub", title: s.invocationId || s.entryHash },
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

/** `entries 1991–2040`: the part of the log scanned into the timeline ("" before any). */
function scannedRange() {
  return state.scannedFrom === null ? "" : `entries ${state.scannedFrom}–${Math.max(state.next - 1, 0)}`;
}

function renderTimelineState(shownCount) {
  const empty = $("timeline-empty");
  const total = state.entries.size;
  const range = scannedRange();
  empty.hidden = shownCount > 0;
  // "None" only once the whole log was scanned: before that, only a window of it was.
  empty.textContent = total > 0 ? "No loaded entry matches these filters."
    : state.scanning ? `Scanning older entries for ones you can see… (${range} scanned so far)`
      : state.scannedFrom > 0 ? `No entries you can see among ${range}. Load older entries scans further back.`
        : "No entries you can see yet. Calls appear here as they are committed.";
  $("older").hidden = !(state.scannedFrom > 0);
  $("older").disabled = state.scanning;
  $("timeline-status").textContent = `${shownCount} shown of ${total} loaded${range ? ` · ${range} scanned` : ""}`;
}

/** Say something about the loaded log above the list, or (null) hide it. */
function logNotice(text) {
  const el = $("log-notice");
  setText(el, text || "");
  el.hidden = !text;
}

/** Forget the loaded part of the log (signed out, or the daemon's log is another now). */
function dropLoaded() {
  state.loaded++;
  state.entries.clear();
  state.differs.clear();
  state.scannedFrom = null;
  state.next = 0;
  state.tip = null;
  state.scanning = false;
  state.window = WINDOW;
  $("entries").replaceChildren();
}

/**
 * Hold at most `state.window` entries: drop the oldest from the timeline and its list, and
 * scan from above them again, so Load older entries fetches them anew. Not while Load older
 * entries is scanning: its request was built on the scanned range as it was, and would end
 * below entries dropped meanwhile, leaving a gap it says it scanned. The scan widens the
 * window to what it holds, or (failing) drops what overflows once it ends.
 */
function dropOldest() {
  if (state.scanning) return;
  const over = state.entries.size - state.window;
  if (over <= 0) return;
  const oldest = [...state.entries.keys()].sort((a, b) => a - b).slice(0, over);
  const list = $("entries");
  for (const i of oldest) {
    state.entries.delete(i);
    state.differs.delete(i);
    list.querySelector(`li[data-index='${i}']`)?.remove();
  }
  state.scannedFrom = Math.max(state.scannedFrom, oldest.at(-1) + 1);
}

/** One new entry from the stream: add it on top without redrawing the list. */
function arrived(s) {
  const i = s.header.entryIndex;
  if (state.entries.has(i)) return;
  remember(s);
  if (i + 1 >= state.next) {
    state.next = i + 1;
    // The tip is the entry the page checks the daemon's log by, with its hash: a damaged row
    // has none, so the tip stays the last intact entry (and the stream resumes by index).
    if (!s.damaged) state.tip = { index: i, hash: s.entryHash };
  }
  if (matches(s)) {
    const list = $("entries");
    const first = list.firstElementChild;
    if (!first || Number(first.dataset.index) < i) list.prepend(row(s, true));
    else renderTimeline();
  }
  dropOldest();
  renderTimelineState($("entries").children.length);
}

/**
 * The newest page of the log. Its last entry (which this credential may not list) is the tip
 * the page checks when it reconnects: the log the daemon serves then must still hold it.
 */
async function loadNewest() {
  const signin = state.signin;
  const loaded = state.loaded;
  const page = await api.json(`/v1/log/summaries?limit=${PAGE}`);
  if (signin !== state.signin) throw new Superseded();
  const damaged = damagedOf(page);
  const tip = await newestIntact(page, new Set(damaged.map((d) => d.index)));
  if (signin !== state.signin) throw new Superseded();
  if (loaded !== state.loaded) return;
  state.entries.clear();
  for (const s of [...page.items, ...damaged]) remember(s);
  state.scannedFrom = page.from;
  state.next = page.next;
  state.head = page.head;
  state.tip = tip;
  renderTimeline();
  // Nothing of this credential's among the newest entries (an agent's calls are older than
  // other episodes' newest): scan further back rather than say there are none.
  if (state.entries.size === 0) scanOlder(SCAN);
}

/**
 * The tip of a summaries page: its newest entry that is not a damaged row, with its entry
 * hash (from the page, or from `GET /v1/log/{i}` for an entry this credential may not list);
 * null when the page holds none. A damaged row (named under `damaged`) has no hash to check
 * the daemon's log by, and `GET /v1/log/{i}` answers it 500 `Damaged`.
 */
async function newestIntact(page, damaged) {
  for (let i = page.next - 1; i >= page.from; i--) {
    if (damaged.has(i)) continue;
    const hash = page.items.find((s) => s.header.entryIndex === i)?.entryHash;
    return { index: i, hash: hash !== undefined ? hash : (await api.json(`/v1/log/${i}`)).entryHash };
  }
  return null;
}

/**
 * Scan back from the oldest entry scanned until an entry this credential may see is loaded,
 * or entry 0: the first page `first` entries, the next ones as many as a page may scan.
 */
async function scanOlder(first = PAGE) {
  if (state.scanning || !(state.scannedFrom > 0)) return;
  const signin = state.signin;
  const loaded = state.loaded;
  const had = state.entries.size;
  const mine = () => signin === state.signin && loaded === state.loaded;
  state.scanning = true;
  renderTimelineState($("entries").children.length);
  let step = first;
  try {
    while (state.scannedFrom > 0) {
      const from = Math.max(0, state.scannedFrom - step);
      const page = await api.json(`/v1/log/summaries?from=${from}&limit=${state.scannedFrom - from}`);
      // Another credential's page, or a page of a log since reloaded, is not this timeline's.
      if (!mine()) return;
      for (const s of [...page.items, ...damagedOf(page)]) remember(s);
      // Asked for: held beside the newest, however many that makes (with those the stream
      // brought while the request was out, none of which were dropped).
      state.window = Math.max(state.window, state.entries.size);
      state.scannedFrom = from;
      if (state.entries.size > had) break;
      step = SCAN;
      renderTimelineState($("entries").children.length);
    }
    state.scanning = false;
    renderTimeline();
  } catch (e) {
    if (!mine()) return;
    state.scanning = false;
    // What the stream brought while the request was out was held: the window slides now.
    dropOldest();
    renderTimeline();
    setText($("timeline-status"), `Could not load older entries: ${e.message}`);
  }
}

function loadOlder() {
  return scanOlder(PAGE);
}

// ---------------------------------------------------------------------------------------
// The live stream: fetch (so the bearer header can be sent), parsed as Server-Sent Events,
// resumed with Last-Event-ID after a drop: the tip's index and hash, as the stream's ids are,
// so that a daemon whose log was rolled back meanwhile says `rewound` instead of resuming at an
// index that holds other entries now.

function stopStream() {
  if (state.stream) state.stream.abort();
  state.stream = null;
  streamProblem(null);
}

/**
 * The absolute path of the store of the daemon answering on this page's port, asked without
 * the credential (`GET /v1/health`, then `GET /workbench/daemon`); null when nothing answers
 * as a worldd does. `/v1/health`'s `db_path` is the path as the daemon was told it: the same
 * `.world/db` for every daemon started in its own directory.
 */
async function daemonHere(signal) {
  try {
    const ask = async (path) => {
      const timeout = AbortSignal.timeout(PROBE_TIMEOUT_MS);
      const res = await fetch(path, { cache: "no-store", credentials: "omit",
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
      const v = res.ok ? await res.json() : null;
      return v && v.status === "ok" ? v : null;
    };
    if (!(await ask("/v1/health"))) return null;
    const d = await ask("/workbench/daemon");
    return d && typeof d.store === "string" ? d.store : null;
  } catch {
    return null;
  }
}

/**
 * Is the daemon answering on this page's port the one serving the store the page signed in
 * to? When it is, the page may send the credential again (`state.gone` is cleared).
 */
async function ourDaemonHere(signal) {
  const here = await daemonHere(signal);
  const same = here !== null && here === state.daemon;
  if (same) state.gone = false;
  return same;
}

/**
 * After the page saw its daemon go away: is the daemon answering now the one it signed in to
 * (the same store), and does it still serve the log the page holds? A store restored from a
 * backup is the same path but another history: the entries the page loaded after the backup
 * are gone, and new ones take their indices. The page's last entry (its tip) must still be in
 * the daemon's log with the same entry hash (a hash chain: then so is everything before it);
 * if not, what the page loaded is dropped and the newest page loaded again, and the page says
 * so. One check at a time, shared by whoever waits for it (the stream, the clicks).
 */
function rejoin() {
  if (!state.checking) {
    state.checking = (async () => {
      if (!(await ourDaemonHere())) return false;
      const tip = state.tip;
      if (!tip) return true;
      const signin = state.signin;
      try {
        const res = await fetch(`/v1/log/${tip.index}`, { headers: authHeaders(), cache: "no-store",
          credentials: "omit", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
        if (signin !== state.signin) return false;
        if (res.status === 401) {
          const body = await res.json().catch(() => ({}));
          signedOut(new ApiError(401, body.error?.class, body.error?.message));
          return false;
        }
        let now = null;
        if (res.ok) now = (await res.json()).entryHash;
        else if (res.status === 500) {
          // The tip's row may have been damaged since (a flipped byte, a restore): the
          // summaries page still says what stands at its index.
          now = await tipOnPage(tip.index);
          if (now === DAMAGED) {
            // Nor can the stream check its hash: it resumes after it by index.
            if (signin === state.signin && state.tip === tip) state.tip = { ...tip, damaged: true };
            return signin === state.signin;
          }
        } else if (res.status !== 404) throw new ApiError(res.status, "", "");
        if (signin !== state.signin) return false;
        if (now === tip.hash) return true;
        await reloadRolledBack(tip, now === null);
        return signin === state.signin;
      } catch {
        // No answer to the question: treated as gone, like any request that got none.
        state.gone = true;
        return false;
      }
    })().finally(() => {
      state.checking = null;
    });
  }
  return state.checking;
}

const DAMAGED = Symbol("damaged");

/**
 * What `GET /v1/log/summaries` says stands at `index`, for the tip check when the entry route
 * answers 500: DAMAGED when it names the row under `damaged` (the row is there, but has no
 * hash to compare: the page takes it as the log it holds), the entry hash of the summary it
 * lists there, or null when the log ends before `index`. Anything else is no answer (thrown).
 * Sent as rejoin's own request is, not through `api`, which waits for rejoin.
 */
async function tipOnPage(index) {
  const res = await fetch(`/v1/log/summaries?from=${index}&limit=1`, { headers: authHeaders(), cache: "no-store",
    credentials: "omit", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  if (!res.ok) throw new ApiError(res.status, "", "");
  const page = await res.json();
  if (damagedOf(page).some((d) => d.index === index)) return DAMAGED;
  const listed = (page.items || []).find((s) => s.header?.entryIndex === index);
  if (listed) return listed.entryHash;
  if (Number.isSafeInteger(page.head) && page.head < index) return null;
  throw new Error(`entry ${index} is neither served nor listed`);
}

/** The daemon's log is not the one the page loaded: drop it, load the newest page, say so. */
async function reloadRolledBack(tip, gone) {
  dropLoaded();
  renderTimeline();
  await loadNewest();
  logNotice(`The daemon's log is not the one this page had loaded: entry #${tip.index} ` +
    `${gone ? "is no longer in it" : "is another entry now"} (the store was restored from a backup?). ` +
    `What was loaded is dropped and the log reloaded: its newest entry is #${state.head}.`);
  // An entry open meanwhile is shown again, from the log as it is now.
  if (state.started) setTimeout(route, 0);
}

/** The daemon went away: nothing is sent again until it is back. */
function disconnected() {
  state.gone = true;
  stopStream();
  setLive("disconnected", "");
  $("reconnect").hidden = false;
}

/** Say why the live log is not followed, or (null) hide it. */
function streamProblem(text) {
  const el = $("stream-problem");
  setText(el, text || "");
  el.hidden = !text;
}

async function follow() {
  stopStream();
  $("reconnect").hidden = true;
  const ctl = new AbortController();
  state.stream = ctl;
  // The daemon this page signed in to, or one serving the same store (restarted) and the log
  // the page holds: anything else on the port is not sent the credential, even when the
  // operator asks to reconnect.
  const same = await rejoin();
  if (state.stream !== ctl) return;
  if (!same) {
    disconnected();
    return;
  }
  let refused = null;
  // The damaged rows this stream passed over: said until the page follows the log anew.
  const passed = [];
  while (state.stream === ctl) {
    try {
      const tip = state.tip;
      const resume = tip && tip.index === state.next - 1 && !tip.damaged ? `${tip.index} ${tip.hash}` : String(state.next - 1);
      const headers = authHeaders(state.next > 0 ? { "Last-Event-ID": resume } : {});
      const path = state.next > 0 ? "/v1/log/stream" : "/v1/log/stream?from=0";
      const res = await fetch(path, { headers, cache: "no-store", credentials: "omit", signal: ctl.signal });
      if (res.status === 401) {
        const body = await res.json().catch(() => ({}));
        signedOut(new ApiError(401, body.error?.class, body.error?.message));
        return;
      }
      if (!res.ok || !res.body) {
        // Said, not only retried: a stream refused (every place taken, the daemon stopping)
        // is something the operator can act on.
        const body = await res.json().catch(() => ({}));
        refused = new ApiError(res.status, body.error?.class, body.error?.message);
        throw refused;
      }
      refused = null;
      streamProblem(passedNotice(passed));
      setLive("live", "on");
      state.retry = 0;
      state.rewound = null;
      state.damage = null;
      await readEvents(res.body, ctl);
      if (ctl.signal.aborted) return;
      const damage = state.damage;
      state.damage = null;
      // The stream ended at a row that no longer decodes: the daemon is there, and the log goes
      // on after that row, so the stream resumes past it at once.
      if (damage && damage.index >= state.next) {
        await passDamaged(damage);
        if (state.stream !== ctl) return;
        passed.push(damage);
        streamProblem(passedNotice(passed));
        continue;
      }
      // A row the page has passed already, named again: resuming at once would only repeat
      // it; said, and tried again later, as a refusal is (the daemon is not gone).
      if (damage) refused = new Error(damage.message);
      const rewound = state.rewound;
      if (rewound) {
        // The log this page followed was rolled back: what it loaded goes, the newest page is
        // loaded, and the stream resumes after that, at once.
        state.rewound = null;
        await reloadRolledBack({ index: rewound.entryIndex }, rewound.now === null);
        continue;
      }
      // The stream ended: the daemon may be gone.
      if (!refused) state.gone = true;
    } catch (e) {
      if (ctl.signal.aborted) return;
      // Not an answer but a dropped connection: the daemon may be gone.
      if (e !== refused) state.gone = true;
      if (e instanceof Silent) streamProblem(e.message);
    }
    if (state.stream !== ctl) return;
    state.retry = Math.min(state.retry + 1, 5);
    setLive("reconnecting…", "wait");
    const wait = 500 * 2 ** state.retry;
    if (refused) streamProblem(`The live log is not followed: ${refused.message}. Trying again in ${Math.round(wait / 1000)} s.`);
    await new Promise((r) => setTimeout(r, wait));
    // Before the credential goes out again: is it still this daemon that answers? One that
    // stopped leaves its port to whatever binds it next, which must not be sent the
    // credential unasked; the operator reconnects once the daemon is back.
    if (state.stream !== ctl) return;
    const same = await rejoin();
    if (state.stream !== ctl) return;
    if (!same) {
      disconnected();
      return;
    }
  }
}

/** A stream that sent nothing, not even its keep-alive, for two keep-alive intervals. */
class Silent extends Error {
  constructor() {
    super(`The daemon sent nothing on the live log for ${STREAM_SILENCE_MS / 1000} s, not even its keep-alive: reconnecting.`);
  }
}

/** The next chunk of the stream, or Silent when none comes in time. */
async function nextChunk(reader) {
  let timer;
  const silent = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Silent()), STREAM_SILENCE_MS);
  });
  try {
    return await Promise.race([reader.read(), silent]);
  } catch (e) {
    if (e instanceof Silent) reader.cancel().catch(() => {});
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

async function readEvents(body, ctl) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { type: "message", data: [] };
  for (;;) {
    const { value, done } = await nextChunk(reader);
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
  } else if (type === "rewound") {
    // The daemon's last word on this stream: acted on once it has ended (follow).
    state.rewound = v;
  } else if (type === "error") {
    const cls = v.error?.class || "";
    const index = cls === "Damaged" ? damagedIndex(v.error) : null;
    if (cls.startsWith("Session")) signedOut(new ApiError(401, cls, v.error?.message));
    // The stream's last word: acted on once it has ended (follow).
    else if (index !== null) state.damage = { index, message: String(v.error.message || "") };
    else setLive(`stream error: ${v.error?.message || cls}`, "wait");
  }
}

/**
 * The log position a stream's `Damaged` error names: its `index`, or (from a daemon that sends
 * none) the `I` of its message `log entry I is damaged: …`; null when it names none.
 */
function damagedIndex(error) {
  if (Number.isSafeInteger(error.index) && error.index >= 0) return error.index;
  const m = /^log entry (\d+) is damaged/.exec(String(error.message || ""));
  const i = m ? Number(m[1]) : NaN;
  return Number.isSafeInteger(i) ? i : null;
}

/**
 * The stream ended at a damaged row (`damage`): list it as a summaries page lists one, with
 * any entry before it the stream did not send (a daemon that ends its batch at the damage),
 * and move the page's next position past it, so the stream resumes after it.
 */
async function passDamaged(damage) {
  const signin = state.signin;
  const loaded = state.loaded;
  if (damage.index > state.next) {
    const from = Math.max(state.next, damage.index - SCAN);
    const page = await api.json(`/v1/log/summaries?from=${from}&limit=${damage.index - from}`);
    if (signin !== state.signin || loaded !== state.loaded) return;
    const rows = [...page.items, ...damagedOf(page)].filter((s) => s.header.entryIndex < damage.index);
    for (const s of rows.sort((a, b) => a.header.entryIndex - b.header.entryIndex)) arrived(s);
  }
  arrived(damagedRow({ index: damage.index, reason: damage.message }));
}

/** The notice of the damaged rows the live log passed over (their indices, the last's reason). */
function passedNotice(passed) {
  if (!passed.length) return null;
  const last = passed.at(-1);
  const which = passed.length === 1 ? `Entry #${last.index} is` : `Entries ${passed.map((d) => `#${d.index}`).join(", ")} are`;
  return `${which} damaged in the daemon's store, and the live log goes on after ${passed.length === 1 ? "it" : "them"}: ${last.message}`;
}

// ---------------------------------------------------------------------------------------
// One entry's chain.

async function summaryOf(index) {
  if (state.entries.has(index)) return state.entries.get(index);
  const page = await api.json(`/v1/log/summaries?from=${index}&limit=1`);
  // The page scans the one row at `index`: a summary it lists is that row's even when its
  // header names another index (a copy of another entry), which verification then shows broken.
  return page.items.find((s) => s.header.entryIndex === index) ||
    (page.from === index && page.items.length === 1 ? page.items[0] : null) ||
    // A row that no longer decodes has no summary; the page names it among the damaged.
    damagedOf(page).find((d) => d.index === index) || null;
}

/**
 * The plugin that ran an effect, as its record names it, cross-checked against the library
 * this daemon loads now (`catalog` is the answer of GET /v1/handlers, or `{error}`). A record
 * that names another build is not broken: a past call may have run on an older one.
 */
function pluginRow(l, catalog) {
  const dd = h("dd", { class: "plugin" });
  const say = (check, ...parts) => {
    dd.dataset.pluginCheck = check;
    dd.append(...parts);
    return [h("dt", {}, "plugin"), dd];
  };
  const hd = l.handler;
  if (!l.allowed && !hd) return say("none", h("span", { class: "muted" }, "none: the broker denied the effect, nothing ran"));
  if (!hd) return say("unnamed", h("span", { class: "muted" }, "not named (the record predates plugin identities)"));
  const who = [h("span", { class: "plugin-name" }, `${hd.plugin} ${hd.version}`), " ", refView(hd.library)];
  if (!l.allowed) who.push(h("span", { class: "muted" }, " declined the request before admission; nothing ran"));
  if (catalog.error) {
    return say("unknown", ...who, h("span", { class: "muted" }, ` (not cross-checked: GET /v1/handlers: ${catalog.error.message})`));
  }
  const loaded = (catalog.plugins || []).find((p) => p.name === hd.plugin);
  if (loaded && loaded.library === hd.library) {
    return say("same", ...who, h("span", { class: "check ok", title: "handler.library equals the library GET /v1/handlers reports" },
      "✓ the build this daemon loads"));
  }
  const now = loaded ? ["it loads ", h("span", { class: "ref-text", title: loaded.library }, short(loaded.library)), ` (${loaded.version}) now`]
    : [`no plugin named ${hd.plugin} is loaded now`];
  return say("other-build", ...who, h("span", { class: "check note" },
    `ℹ ${l.allowed ? "ran" : "declined"} by a build this daemon no longer loads: `, ...now));
}

function linkItem(l, catalog) {
  const mark = l.ok === null ? "…" : l.ok ? "✓" : "✗";
  const li = h("li", { class: `link ${l.ok ? "good" : "bad"}`, "data-kind": l.kind, "data-ok": String(l.ok), "data-failure": l.ok ? null : l.failure || "invalid" },
    h("div", { class: "link-head" },
      h("span", { class: "mark", "aria-label": l.ok ? "verified" : "broken" }, mark),
      h("span", { class: "kind" }, l.kind),
      h("span", { class: "ref" }, refView(l.ref)),
      h("span", { class: "why" }, l.detail)));
  if (l.note) li.append(h("p", { class: "link-note" }, `note: ${l.note}`));
  if (l.fields) {
    li.append(h("dl", { class: "fields" }, l.fields.map(([k, v, note]) => [
      h("dt", {}, k),
      h("dd", {}, REF_PATTERN.test(v) ? refView(v) : v, note ? h("span", { class: "muted" }, ` (${note})`) : null),
    ]), l.kind === "effect" ? pluginRow(l, catalog) : null));
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
    await ensureDaemon();
    s = await summaryOf(index);
  } catch (e) {
    if (gen !== state.verifying) return;
    setText(verdict, `Could not read entry #${index}: ${e.message}`);
    verdict.className = "verdict bad";
    return;
  }
  if (gen !== state.verifying) return;
  if (!s) {
    verdict.className = "verdict pending";
    verdict.textContent = `Entry #${index} does not exist or is not visible to this credential.`;
    return;
  }
  // A damaged row has no header to show: its entry link says what the daemon reports.
  const damagedRow = s.damaged === true;
  let head = damagedRow ? [h("h2", {}, `Entry #${index}`)] : entryHeader(index, s, null);
  const links = h("ol", { class: "links", id: "links" });
  pane.replaceChildren(back, ...head, verdict, links);

  // What this daemon loads now, to cross-check the plugin each effect record names.
  const catalog = api.json("/v1/handlers").catch((error) => ({ error }));
  let result;
  try {
    result = await verifyEntry(api, index, damagedRow ? null : s.worldRef);
  } catch (e) {
    if (gen !== state.verifying) return;
    verdict.className = "verdict bad";
    setText(verdict, `Verification stopped: ${e.message}`);
    return;
  }
  if (gen !== state.verifying) return;
  const loaded = result.links.some((l) => l.kind === "effect" && l.handler) ? await catalog : {};
  if (gen !== state.verifying) return;
  // The links first, then the header as they say it, then the verdict: a verdict on screen
  // means the links are too, and the header above it is checked against them.
  links.replaceChildren(...result.links.map((l) => linkItem(l, loaded)));
  if (!damagedRow) {
    const checked = entryHeader(index, s, result.facts);
    for (const [i, el] of head.entries()) el.replaceWith(checked[i]);
    head = checked;
  }
  const n = result.links.length;
  const broken = result.links.filter((l) => !l.ok).length;
  verdict.className = `verdict ${broken ? "bad" : "ok"}`;
  verdict.textContent = broken
    ? `✗ ${broken} of ${n} link${n === 1 ? "" : "s"} broken: ${brokenBecause(result.links.filter((l) => !l.ok))}`
    : `✓ ${n} link${n === 1 ? "" : "s"} verified`;
  verdict.dataset.links = String(n);
  verdict.dataset.broken = String(broken);
}

// Why links broke, in the verdict: alone, and counted beside another cause.
const FAILURES = [
  ["mismatch", "the daemon served bytes that do not match their address", "served bytes that do not match their address"],
  ["damaged", "the daemon reports its stored bytes damaged and did not serve them", "reported damaged by the daemon"],
  ["unserved", "not served by the daemon (an error or no answer), so not checked; nothing served was found altered", "not served"],
  ["invalid", "the daemon served records that do not read as, or fit, what refers to them", "served records that do not fit what refers to them"],
];

/** The verdict's reason: a bytes mismatch is not worded as a 404, nor the other way round. */
function brokenBecause(broken) {
  const counts = FAILURES.map(([failure, alone, counted]) =>
    [broken.filter((l) => (l.failure || "invalid") === failure).length, alone, counted]).filter(([c]) => c > 0);
  if (counts.length === 1) return counts[0][1];
  return counts.map(([c, , counted]) => `${c} ${counted}`).join(", ");
}

// The header's fields: label, the summary's value, the verified value.
const HEADER_FIELDS = [
  ["outcome", (s) => outcomeText(s.outcome, s.reason), (f) => ("outcome" in f ? outcomeText(f.outcome, f.reason) : undefined)],
  ["tool", (s) => s.tool, (f) => f.tool],
  ["episode", (s) => s.episode, (f) => f.episode],
  ["invocation", (s) => s.invocationId, (f) => f.invocationId],
  ["written by", (s) => s.header.writtenBy, (f) => f.writtenBy],
];

function outcomeText(outcome, reason) {
  return outcome ? `${outcome}${reason ? ` (${reason})` : ""}` : null;
}

/**
 * The title, fields and check line of an entry. The summary (`GET /v1/log/summaries`) is read
 * as stored, not verified: until `facts` (what the verified links say) are known the header
 * says so; then it shows the verified values, and names each field where the summary said
 * otherwise, or that could not be verified.
 */
function entryHeader(index, s, facts) {
  const show = (v) => (v === null || v === undefined ? "none" : v);
  const differs = [];
  const unverified = [];
  const v = {};
  for (const [name, said, verified] of HEADER_FIELDS) {
    const a = said(s) ?? null;
    const b = facts ? verified(facts) : undefined;
    if (b === undefined) {
      v[name] = a;
      unverified.push(name);
      continue;
    }
    v[name] = b;
    // The journal's word: a failed handler that could not tell whether its effect happened.
    const refined = name === "outcome" && a === "indeterminate (handler)" && b === "failed (handler)";
    if (a !== b && !refined) differs.push([name, a, b]);
    if (refined) v[name] = a;
  }
  const outcome = facts && "outcome" in facts && !(s.outcome === "indeterminate" && facts.outcome === "failed")
    ? [facts.outcome, facts.reason] : [s.outcome, s.reason];
  const tool = v.tool ?? (v["written by"] === "world:genesis" ? "genesis" : `commit by ${v["written by"]}`);
  const mark = (name) => (facts && unverified.includes(name) ? h("span", { class: "unverified" }, " (the summary's word, not verified)") : null);
  const permalink = `${location.origin}${location.pathname}#entry/${index}`;
  const title = h("h2", {}, `Entry #${index}`, badge(outcome[0], outcome[1]));
  const meta = h("dl", { class: "meta" },
    h("dt", {}, "tool"), h("dd", {}, tool, mark("tool")),
    h("dt", {}, "episode"), h("dd", {}, v.episode || "—", mark("episode")),
    h("dt", {}, "invocation"), h("dd", {}, v.invocation || "—", v.invocation ? copyButton(v.invocation) : null, mark("invocation")),
    h("dt", {}, "outcome"), h("dd", {}, v.outcome || "not a call", mark("outcome")),
    h("dt", {}, "written by"), h("dd", {}, v["written by"], mark("written by")),
    h("dt", {}, "permalink"), h("dd", {}, h("a", { href: `#entry/${index}` }, `#entry/${index}`), copyButton(permalink)));
  let check;
  if (!facts) {
    check = h("p", { id: "header-check", class: "header-check pending", "data-check": "pending" },
      "Header from the daemon's summary (GET /v1/log/summaries), not verified yet.");
  } else if (differs.length || unverified.length) {
    check = h("div", { id: "header-check", class: `header-check ${differs.length ? "bad" : "note"}`,
      "data-check": differs.length ? "mismatch" : "unverified" },
    differs.length ? [
      h("p", {}, `⚠ The daemon's summary of entry #${index} does not match its verified record; shown above are the verified values.`),
      h("ul", {}, differs.map(([name, a, b]) => h("li", { "data-field": name },
        `${name}: the summary says ${show(a)}, the verified record says ${show(b)}`))),
    ] : null,
    unverified.length ? h("p", {}, `ℹ Not verified, as the links they rest on are broken: ${unverified.join(", ")}; shown as the daemon's summary says.`) : null);
  } else {
    check = h("p", { id: "header-check", class: "header-check ok", "data-check": "ok" },
      "✓ The header matches the verified record.");
  }
  if (facts && differs.length) markRow(index, differs);
  return [title, meta, check];
}

/** `⚠ not as verified`, naming the fields in its title (null when none differ). */
function differsMark(names) {
  if (!names) return null;
  return h("span", { class: "differs", title: `The summary differs from the verified record: ${names.join(", ")}` }, "⚠ not as verified");
}

/** The timeline row of an entry whose summary the verified record contradicts (kept for the
 * row's next drawing too: a filter change redraws the list). */
function markRow(index, differs) {
  const names = differs.map((d) => d[0]);
  state.differs.set(index, names);
  const a = $("entries").querySelector(`a[data-index='${index}']`);
  if (!a || a.querySelector(".differs")) return;
  a.querySelector(".what").append(differsMark(names));
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

function intentsTable(pending, whose) {
  if (pending === undefined) return h("p", { class: "muted" }, "This daemon does not report indeterminate intents.");
  if (pending.length === 0) return h("p", { class: "empty" }, `None: every effect of ${whose} has an outcome.`);
  // A call the daemon still runs (`inFlight`) is no crash's leftover: its outcome may still come.
  return table(["invocation", "effect", "cost", "request"], pending.map((p) => [
    p.inFlight ? h("span", {}, p.invocationId, h("span", { class: "muted", title: "The daemon is still running this call: ask again later, and do not resend it" }, " (in flight)"))
      : p.invocationId,
    `${p.effect}@${p.scope}`, String(p.cost), refView(p.requestRef)]), [2]);
}

function intentsCard(pending, whose) {
  return h("section", { class: "card", id: "intents" }, h("h2", {}, "Indeterminate intents"),
    h("p", { class: "muted" }, "Effects whose intent is durable but whose outcome is not: they may have run, are never retried, and their budget stays spent. One marked in flight is a call the daemon is still running: its outcome may still come."),
    intentsTable(pending, whose));
}

/** Show the timeline filtered to one episode. */
function filterTo(ep) {
  return (ev) => {
    ev.preventDefault();
    $("filter-episode").value = ep;
    location.hash = "#log";
    renderTimeline();
  };
}

/** The episodes in the loaded part of the log; an operator can open each one's spend. */
function episodesCard(me) {
  const counts = new Map();
  for (const s of state.entries.values()) if (s.episode) counts.set(s.episode, (counts.get(s.episode) || 0) + 1);
  const rows = [...counts].sort().map(([ep, n]) => [
    h("span", {}, h("a", { href: "#log", "data-episode": ep, title: `Show ${ep}'s entries in the log`, onclick: filterTo(ep) }, ep),
      ep === me.episode ? h("span", { class: "muted" }, " (this credential's)") : null),
    String(n),
    ...(me.operator ? [ep === me.episode ? "" : h("a", { href: `#episode/${ep}`, class: "spend" }, "spend →")] : []),
  ]);
  const note = me.operator
    ? "An operator credential reads every episode: open one to see what it has spent."
    : "Only your episode's calls, and the entries of no episode, are visible to this credential.";
  // Which part of the log the counts are of, always: on a large log the newest pages alone
  // are loaded, and an episode whose calls are all older is not listed at all.
  const range = scannedRange();
  const counted = `Counted in the loaded part of the log${range ? `: ${range}` : ""}.` +
    (state.scannedFrom > 0 ? " Older entries are not loaded: Load older entries, on the Log, scans further back." : "");
  return h("section", { class: "card", id: "episodes" }, h("h2", {}, "Episodes in the log"),
    h("p", { class: "muted", id: "episodes-range" }, counted),
    h("p", { class: "muted" }, note),
    rows.length ? table(["episode", "entries loaded", ...(me.operator ? [""] : [])], rows, [1])
      : h("p", { class: "empty" }, "No calls in the loaded part of the log."));
}

async function showEpisode(other) {
  const view = $("view-episode");
  const gen = ++state.episodeView;
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let b;
  try {
    b = await api.json(other ? `/v1/budget?episode=${encodeURIComponent(other)}` : "/v1/budget");
  } catch (e) {
    if (gen !== state.episodeView) return;
    view.replaceChildren(h("h1", {}, other ? `Episode ${other}` : "Episode"),
      h("p", { class: "error", id: "episode-error" }, `Could not read the budget: ${e.reason || e.message}`),
      h("p", {}, h("a", { href: "#episode" }, "← this credential's episode")));
    return;
  }
  if (gen !== state.episodeView) return;
  if (!b.grants) {
    showSpend(view, b);
    return;
  }
  state.me = { episode: b.episode, operator: b.operator === true };
  showWho();
  const me = state.me;
  const expires = b.expiresAt ? new Date(b.expiresAt * 1000).toISOString().replace(".000Z", "Z") : "—";
  const grants = (b.grants || []).map((g) => {
    const frac = g.granted ? g.remaining / g.granted : 0;
    return [
      h("span", {}, h("code", {}, g.effect), " ", h("span", { class: "muted" }, `@${g.scope}`)),
      String(g.granted), String(g.spent),
      h("span", {}, String(g.remaining),
        meter(frac, `${g.remaining} of ${g.granted} left`)),
    ];
  });

  const who = me.operator
    ? [h("strong", {}, "Operator credential"), ` of episode ${b.episode}: it reads every episode's entries and objects.`]
    : [h("strong", {}, "Agent credential"), ` of episode ${b.episode}: it reads its episode's calls and the entries of no episode.`];
  view.replaceChildren(
    h("h1", {}, `Episode ${b.episode}`),
    h("div", { class: "notice", id: "budget-scope" },
      h("p", {}, ...who, ` Credential expires ${expires}.`),
      h("p", {}, "A budget is granted per credential and spent per episode: below are this credential's grants, " +
        `each against what episode ${b.episode} has spent under any of its credentials. ` +
        "Another credential of the episode has its own grants and the same spend; a new credential does not refill it.")));
  const budget = h("section", { class: "card wide" }, h("h2", {}, "This credential's budget"),
    grants.length ? table(["effect", "granted", "spent", "remaining"], grants, [1, 2, 3])
      : h("p", { class: "empty" }, me.operator ? "None: this credential reads, but runs no tool and commits nothing."
        : "This credential holds no grants."));
  const intents = intentsCard(b.indeterminate, "this episode");
  // An operator comes here for the other episodes; an agent for its own budget.
  view.append(h("div", { class: "grid2" },
    me.operator ? [episodesCard(me), intents, budget] : [budget, intents, episodesCard(me)]));
}

/** Another episode, as an operator reads it: its spend and intents, no grants. */
function showSpend(view, b) {
  const rows = (b.spent || []).map((x) => [
    h("span", {}, h("code", {}, x.effect), " ", h("span", { class: "muted" }, `@${x.scope}`)), String(x.spent)]);
  const loaded = [...state.entries.values()].filter((s) => s.episode === b.episode).length;
  view.replaceChildren(
    h("p", { class: "crumb" }, h("a", { href: "#episode" }, "← this credential's episode")),
    h("h1", {}, `Episode ${b.episode}`),
    h("p", { class: "notice", id: "budget-scope" },
      `What episode ${b.episode} has spent, under any of its credentials (from the journal). ` +
      "Grants belong to credentials, so what remains is per credential: ", h("code", {}, "worldd session list"),
      " shows each credential's grants, and ", h("code", {}, "worldd budget"), " run with one of them what it has left."),
    h("div", { class: "grid2" },
      h("section", { class: "card", id: "spent" }, h("h2", {}, "Spent"),
        rows.length ? table(["effect", "spent"], rows, [1])
          : h("p", { class: "empty" }, "Nothing spent.")),
      intentsCard(b.indeterminate, "this episode"),
      h("section", { class: "card" }, h("h2", {}, "Entries"),
        h("p", {}, `${loaded} in the loaded part of the log${scannedRange() ? ` (${scannedRange()})` : ""}. `,
          h("a", { href: "#log", "data-episode": b.episode, onclick: filterTo(b.episode) }, "Show them in the log")))));
}

async function showPlugins() {
  const signin = state.signin;
  const view = $("view-plugins");
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let v;
  try {
    v = await api.json("/v1/handlers");
  } catch (e) {
    if (signin !== state.signin) return;
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
  // What another credential was told (an operator sees where each library lies) is not this one's.
  if (signin !== state.signin) return;
  const plugins = (v.plugins || []).map((p) => h("section", { class: "card plugin", "data-plugin": p.name },
    h("h2", {}, `${p.name} ${p.version || ""}`),
    h("dl", { class: "meta" },
      h("dt", {}, "identity"), h("dd", {}, p.identity || "—"),
      h("dt", {}, "library"), h("dd", { class: "library" }, h("code", { class: "ref-full" }, p.library || "—"),
        p.library ? copyButton(p.library) : null,
        h("div", { class: "muted" }, "the sha256 of the bytes loaded: effect records name it as handler.library")),
      h("dt", {}, "path"), h("dd", { class: "path" }, h("code", {}, p.path || "—"), p.path ? copyButton(p.path) : null)),
    table(["effect", "class"], (p.effects || []).map((e) => [h("code", {}, e.effect), e.class]))));
  const declined = (v.declined || []).map((d) => h("div", { class: "declined-item", "data-declined": d.name },
    h("h3", {}, d.name),
    h("dl", { class: "meta" },
      h("dt", {}, "path"), h("dd", { class: "path" }, h("code", {}, d.path), copyButton(d.path)),
      h("dt", {}, "why"), h("dd", { class: "error why-declined" }, d.reason))));
  const tools = (v.tools || []).map((t) => [h("code", {}, t.name), (t.effects || []).join(", "),
    t.canRun ? "yes" : h("span", { class: "error" }, `no: ${t.reason || ""}`)]);
  view.replaceChildren(h("h1", {}, "Plugins"),
    h("p", { class: "muted" }, "Fixed when the daemon started. From GET /v1/handlers."),
    plugins.length ? h("div", { class: "grid2" }, plugins) : h("p", { class: "empty" }, "No plugin is loaded: every tool call is refused (rule R8)."),
    h("section", { class: "card", id: "declined" }, h("h2", {}, "Declined to start"),
      declined.length
        ? [h("p", { class: "muted" }, "Found in the plugin directory but not started, in the plugin's own words; their tools are refused (rule R8)."),
          declined]
        : h("p", { class: "empty" }, "None: every plugin found started.")),
    h("section", { class: "card", id: "tools" }, h("h2", {}, "Tools this credential sees"),
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
  const signin = state.signin;
  const view = $("view-metrics");
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let samples;
  try {
    samples = parseMetrics(await api.text("/v1/metrics"));
  } catch (e) {
    if (signin !== state.signin) return;
    // [server] metrics_for = "operators": the counters tell every episode's calls, so an
    // agent's credential is refused (403); a 401 has signed the page out already.
    if (e instanceof ApiError && (e.status === 403 || e.status === 401)) {
      view.replaceChildren(h("h1", {}, "Metrics"),
        h("p", { class: "empty", id: "metrics-for-operators" },
          "Metrics are for operators on this daemon: sign in with an operator credential to see them."),
        h("p", { class: "muted" }, `GET /v1/metrics: ${e.reason || e.message}`));
      return;
    }
    view.replaceChildren(h("p", { class: "error" }, `Could not read the metrics: ${e.message}`));
    return;
  }
  if (signin !== state.signin) return;
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
  const other = /^episode\/([a-z0-9][a-z0-9-]{0,63})$/.exec(hash);
  const view = m ? "log" : other ? "episode" : ["episode", "plugins", "metrics"].includes(hash) ? hash : "log";
  for (const name of ["log", "episode", "plugins", "metrics"]) $(`view-${name}`).hidden = name !== view;
  for (const a of $("nav").querySelectorAll("a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (m) {
    showEntry(Number(m[1]));
  } else {
    clearEntry();
    if (view === "log") $("detail").replaceChildren(detailEmpty);
  }
  if (view === "episode") showEpisode(other && other[1] !== state.me?.episode ? other[1] : null);
  if (view === "plugins") showPlugins();
  if (view === "metrics") showMetrics();
}

function clearEntry() {
  state.selected = null;
  state.verifying++;
  document.body.classList.remove("entry-open");
  markSelected();
}

/** Back to the timeline at once, not when the hashchange comes: a key pressed meanwhile
 * (`j`) must already see no entry selected. */
function closeEntry() {
  clearEntry();
  $("detail").replaceChildren(detailEmpty);
  location.hash = "#log";
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
      else if (state.selected !== null) closeEntry();
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

/**
 * Sign in with the credential just set. Each step may find the page signed out meanwhile (the
 * operator clicked Sign out, or the daemon refused the credential: revoked, expired, unknown
 * under --open-reads): then the page is at the sign-in form and this sign-in stops there.
 */
async function start() {
  const signin = state.signin;
  const over = () => signin !== state.signin;
  $("login").hidden = true;
  $("signout").hidden = false;
  $("nav").hidden = false;
  setLive("connecting…", "wait");
  // The daemon the credential is for: the credential goes to no other once this one is gone.
  const daemon = await daemonHere();
  if (over()) throw new Superseded();
  state.daemon = daemon;
  state.gone = false;
  if (state.daemon === null) throw new Error("no worldd answers GET /v1/health and GET /workbench/daemon here");
  await loadNewest();
  if (over()) throw new Superseded();
  await learnWho();
  if (over()) throw new Superseded();
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
  $("reconnect").addEventListener("click", () => follow());
  $("older").addEventListener("click", loadOlder);
  for (const id of ["filter-episode", "filter-tool", "filter-outcome"]) $(id).addEventListener("change", renderTimeline);
  $("help-button").addEventListener("click", () => { $("help").hidden = !$("help").hidden; });
  $("help-close").addEventListener("click", () => { $("help").hidden = true; });
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", onKey);
  // Earlier versions kept the credential in sessionStorage, where a page served by whatever
  // owns the port after a reload could read it.
  sessionStorage.removeItem(CREDENTIAL_KEY);
  showLogin("");
}

init();
