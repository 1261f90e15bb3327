// Re-verify one log entry's chain in the browser, link by link: every address is recomputed
// with WebCrypto SHA-256 over the bytes the daemon serves, the entry hash and the world ref
// over their canonical JSON, and each document is checked against those that refer to it.
// Nothing is taken on the daemon's word, but less is checked than `worldd why` checks, which
// has the store's rows, this build's interpreter and its genesis: not the journal and task
// state, not the replay of the plan, not each effect's request and record against the planned
// effect (only how many there are), not the output's body against the handler's result, not
// the genesis document against this build's, and a client's commit only as opaque objects.
// docs/workbench.md ("One entry's chain") lists both.

import { refOf, refOfJson, fromBase64, ZERO_REF, REF_PATTERN } from "./canon.js";

export const SID = {
  input: "world/invocation-input/v1",
  output: "world/invocation-output/v1",
  record: "world/invocation-record/v2",
  plan: "world/effect-plan/v1",
  request: "world/effect-request/v1",
  result: "world/effect-result/v1",
  effect: "world/effect-record/v1",
  genesis: "world/genesis/v1",
};

const GENESIS_WRITER = "world:genesis";
// The fields of an effect record, as the daemon reads it (any other field makes it unreadable).
const EFFECT_FIELDS = ["effect", "scope", "cost", "budgetBefore", "budgetAfter", "allowed",
  "failed", "denial", "requestRef", "resultRef", "handler"];
const BROKER_DENIALS = ["denied:effect-name", "denied:scope", "denied:expired", "denied:budget"];
const DECLINED = "denied:handler";

/** Why `bytes` do not read as an object of kind `sid` (null when they do), as `worldd why` judges. */
function readsAs(bytes, sid) {
  // A broker request is length-prefixed fields, not JSON.
  if (sid === SID.request) return /^[0-9]+:/.test(preview(bytes.slice(0, 24))) ? null : "not a broker request";
  if (sid === SID.result || sid === SID.input) return null;
  let doc;
  try {
    doc = JSON.parse(strictUtf8.decode(bytes));
  } catch (e) {
    return `not JSON: ${e.message}`;
  }
  const isObject = doc !== null && typeof doc === "object" && !Array.isArray(doc);
  if (sid === SID.plan) return isObject && doc.plan === SID.plan ? null : `its "plan" is not ${SID.plan}`;
  if ([SID.record, SID.output, SID.effect].includes(sid)) return isObject ? null : "not a JSON object";
  return null;
}

// Characters the page draws as a count, not one by one (combining marks, invisible and format
// characters): a cut never ends inside a run of them, so the count is of the whole run.
const COUNTED = /[\p{M}\p{Cf}\p{Cc}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}]/u;

/**
 * The first `n` code points of `text` (never half a surrogate pair), then "…" when cut. A run of
 * counted characters reaching the cut is kept whole: the page shows it as one count.
 */
export function cut(text, n) {
  const cps = [...text];
  if (cps.length <= n) return text;
  let end = n;
  while (end < cps.length && COUNTED.test(cps[end]) && COUNTED.test(cps[end - 1])) end += 1;
  return end === cps.length ? text : cps.slice(0, end).join("") + "…";
}

const PREVIEW_STRING = 40; // a string value longer than this (in code points) is cut
const PREVIEW_KEYS = 8; // keys shown before "… N more"

/** One top-level member of an input, short: `path: "notes.md"`, `content (200 chars): "xxxx"…`,
 * `files: [2 items]`. */
function previewMember(key, v) {
  const k = cut(key, PREVIEW_STRING);
  if (typeof v === "string") {
    const n = [...v].length;
    const c = n <= PREVIEW_STRING ? v : cut(v, 24);
    // A run of counted characters can take the cut to the end: then the whole is shown.
    return c === v ? `${k}: ${JSON.stringify(v)}` : `${k} (${n} chars): ${JSON.stringify(c.slice(0, -1))}…`;
  }
  return `${k}: ${previewValue(v)}`;
}

/** A value other than a string, short: `[2 items]`, `{1 key}`, `12`. */
function previewValue(v) {
  if (Array.isArray(v)) return `[${v.length} item${v.length === 1 ? "" : "s"}]`;
  if (v !== null && typeof v === "object") {
    const k = Object.keys(v).length;
    return `{${k} key${k === 1 ? "" : "s"}}`;
  }
  return cut(JSON.stringify(v), PREVIEW_STRING);
}

/**
 * An input's detail line: for an object every top-level key (up to PREVIEW_KEYS) with its value
 * shortened, values shown whole first, so a long `content` cannot push the `path` out of sight;
 * anything else its JSON, cut. Every cut ends in "…".
 */
export function inputPreview(doc, text) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) return cut(text, 120);
  const parts = Object.keys(doc).map((k) => {
    const v = doc[k];
    const whole = typeof v !== "string" || [...v].length <= PREVIEW_STRING;
    return { whole, text: previewMember(k, v) };
  });
  const ordered = [...parts.filter((p) => p.whole), ...parts.filter((p) => !p.whole)];
  const shown = ordered.slice(0, PREVIEW_KEYS).map((p) => p.text);
  if (ordered.length > PREVIEW_KEYS) shown.push(`… ${ordered.length - PREVIEW_KEYS} more keys`);
  return shown.length ? shown.join(", ") : "{}";
}

/** `sha256:1234abcd…` */
export function short(ref) {
  return typeof ref === "string" && ref.startsWith("sha256:") ? ref.slice(0, 15) + "…" : String(ref);
}

/**
 * A broken link: why, what was served (so it can still be shown), and the kind of failure —
 * `unserved` (the daemon answered an error, or nothing), `mismatch` (bytes or a hash chain
 * that do not match their address), `invalid` (bytes that match but do not read as, or fit,
 * what the record says).
 */
class Broken extends Error {
  constructor(message, served, failure = "invalid") {
    super(message);
    this.served = served;
    this.failure = failure;
  }
}

const unserved = (message, served) => new Broken(message, served, "unserved");
const mismatch = (message, served) => new Broken(message, served, "mismatch");
const damaged = (message, served) => new Broken(message, served, "damaged");

/**
 * A failed fetch as a broken link: the daemon's `500 Damaged` says its stored bytes are
 * altered (it never serves them), which is damage found, not a link left unchecked.
 */
function notServed(prefix, err, served) {
  const message = `${prefix}: ${err.message}`;
  return err.status === 500 && err.cls === "Damaged" ? damaged(message, served) : unserved(message, served);
}

/** The hash an entry's header and transition ref give it, whatever its `entryHash` member says. */
function recomputedHash(e) {
  const h = e.header || {};
  return refOfJson({
    entryIndex: h.entryIndex, semanticsEpoch: h.semanticsEpoch, transitionFn: h.transitionFn,
    interpreter: h.interpreter, prevEntryHash: h.prevEntryHash, writtenBy: h.writtenBy,
    transitionRef: e.transitionRef,
  });
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

function parseJson(bytes) {
  try {
    return JSON.parse(strictUtf8.decode(bytes));
  } catch (e) {
    throw new Broken("unreadable JSON: " + e.message);
  }
}

/**
 * Verify entry `index`. `api.json(path)` answers the parsed JSON of a 2xx reply and throws an
 * Error whose message names the status otherwise (with `status` and the error class as `cls`
 * when the daemon answered). `worldRef` is the ref of the world that
 * selected the entry (from its summary). Returns `{entry, links, facts}`, each link
 * `{kind, ref, ok, detail, doc, text, fields}`; `facts` are what the verified links say of the
 * entry's header (see `factsOf`).
 */
export async function verifyEntry(api, index, worldRef) {
  const links = [];
  const push = (kind, ref, ok, detail, extra = {}) => links.push({ kind, ref, ok, detail, ...extra });

  // Run one link's check: a Broken (or any error) becomes a ✗ with its reason.
  async function link(kind, ref, check) {
    try {
      const r = await check();
      push(kind, ref, true, r.detail, r);
      return r;
    } catch (e) {
      const served = e.served || {};
      push(kind, ref, false, e.message, { ...served, failure: e.failure || "invalid" });
      return null;
    }
  }

  async function object(ref, sid) {
    if (typeof ref !== "string" || !REF_PATTERN.test(ref)) throw new Broken(`not a ref: ${JSON.stringify(ref)}`);
    let o;
    try {
      o = await api.json(`/v1/objects/${ref}?payload=true`);
    } catch (e) {
      throw notServed("not served", e);
    }
    const bytes = fromBase64(o.payload || "");
    const actual = await refOf(bytes);
    const served = { bytes, text: preview(bytes), meta: o };
    if (actual !== ref) {
      throw mismatch(`the bytes served hash to ${actual}, not to their address`, served);
    }
    if (sid && o.semanticId !== sid) {
      // Objects are deduplicated by content, first writer wins: the same bytes stored earlier
      // as another kind (anyone's call arguments can equal another call's plan) keep that
      // writer's semantic id. The kind is the referring record's word; the bytes must read as it.
      const why = readsAs(bytes, sid);
      if (why) throw new Broken(`semantic id is ${o.semanticId}, expected ${sid}, and the bytes do not read as one: ${why}`, served);
      served.note = `${short(ref)} was first stored as ${o.semanticId} (objects are deduplicated by content); it reads as ${sid}, the kind its record gives it`;
    }
    return served;
  }

  async function json(ref, sid) {
    const o = await object(ref, sid);
    o.doc = parseJson(o.bytes);
    return o;
  }

  // The entry: its hash recomputed, its place in the chain. `entryHash` is the recomputed
  // hash, the one the world selecting this entry names even when the served text is damaged.
  let entry = null;
  let entryHash = null;
  await link("entry", null, async () => {
    let e;
    try {
      e = await api.json(`/v1/log/${index}`);
    } catch (err) {
      throw notServed("not served", err);
    }
    const h = e.header || {};
    // A row whose header names another index holds no entry of this position: the links past
    // it would check that other entry's chain, so the walk ends here, as `worldd why`'s does.
    if (h.entryIndex !== index) {
      const n = h.entryIndex;
      // A copy of another entry (a bad restore, a tamper) is named as one, as `worldd why`
      // names it: the entry it copies is intact, and its own page says so.
      let copy = false;
      if (Number.isSafeInteger(n) && n >= 0) {
        try {
          copy = JSON.stringify(await api.json(`/v1/log/${n}`)) === JSON.stringify(e);
        } catch {
          copy = false;
        }
      }
      throw new Broken(copy
        ? `this row holds a copy of entry ${n} (its header says index ${n} at position ${index})`
        : `header says index ${n} at position ${index}`, { doc: e });
    }
    entry = e;
    const recomputed = await recomputedHash(e);
    entryHash = recomputed;
    if (recomputed !== e.entryHash) {
      throw mismatch(`entryHash ${e.entryHash} does not match the recomputed ${recomputed}`, { doc: e });
    }
    let linked;
    if (index === 0) {
      linked = h.prevEntryHash === ZERO_REF;
    } else {
      let prev;
      try {
        prev = await api.json(`/v1/log/${index - 1}`);
      } catch (err) {
        throw notServed(`entry ${index - 1} not served`, err, { doc: e });
      }
      // Entry i−1's hash is what its header recomputes to, as `worldd why` links it: a damaged
      // `entryHash` text there breaks that entry, not this one.
      linked = (await recomputedHash(prev)) === h.prevEntryHash;
    }
    if (!linked) {
      throw mismatch(`prevEntryHash ${h.prevEntryHash} is not the hash of entry ${Math.max(0, index - 1)}`, { doc: e });
    }
    // The document shown is what the hash covers, nothing the daemon added beside it: extra
    // members would sit under the ✓ unverified.
    const covered = {
      entryHash: e.entryHash,
      header: {
        entryIndex: h.entryIndex, semanticsEpoch: h.semanticsEpoch, transitionFn: h.transitionFn,
        interpreter: h.interpreter, prevEntryHash: h.prevEntryHash, writtenBy: h.writtenBy,
      },
      transitionRef: e.transitionRef,
    };
    // Own members only: `in` also finds what every object inherits (`constructor`,
    // `toString`, `__proto__`…), and a member so named would go unnamed.
    const extra = [
      ...Object.keys(e).filter((k) => !Object.hasOwn(covered, k)),
      ...Object.keys(h).filter((k) => !Object.hasOwn(covered.header, k)).map((k) => `header.${k}`),
    ];
    const result = {
      doc: covered,
      detail: `#${index} writtenBy ${h.writtenBy} prev ${short(h.prevEntryHash)} transitionFn ` +
        `${short(h.transitionFn)} interpreter ${short(h.interpreter)} (recomputed)`,
    };
    if (extra.length) {
      result.note = `the daemon also served ${extra.map((k) => JSON.stringify(k)).join(", ")}, ` +
        "which the entry hash does not cover: not shown";
    }
    return result;
  });
  if (!entry) return { entry: null, links, facts: {} };
  links[0].ref = entry.entryHash;

  // The world that selects the entry; `stateRoot` is checked against `expectRoot` when known.
  async function world(expectRoot) {
    return link("world", worldRef, async () => {
      if (!worldRef) throw new Broken("no world ref is known for this entry");
      let w;
      try {
        w = await api.json(`/v1/worlds/${worldRef}`);
      } catch (e) {
        throw notServed("not served", e);
      }
      const doc = { revision: w.revision, stateRoot: w.stateRoot, logHead: w.logHead };
      const recomputed = await refOfJson(doc);
      if (recomputed !== worldRef) throw mismatch(`the world served hashes to ${recomputed}, not to its ref`, { doc });
      if (w.revision !== index || w.logHead !== entryHash) throw new Broken("the world does not select this entry", { doc });
      if (expectRoot && w.stateRoot !== expectRoot) throw new Broken(`stateRoot ${w.stateRoot} is not the output ${expectRoot}`, { doc });
      return {
        doc, stateRoot: w.stateRoot,
        detail: `revision ${w.revision}, stateRoot ${short(w.stateRoot)}, logHead ${short(w.logHead)} (recomputed)`,
      };
    });
  }

  const h = entry.header;
  if (index === 0 || h.writtenBy === GENESIS_WRITER) {
    await link("output", entry.transitionRef, async () => {
      // The genesis writer writes entry 0 and nothing else, as `worldd why` holds it.
      if (index !== 0) throw new Broken(`writtenBy ${GENESIS_WRITER} belongs to entry 0 only`);
      if (h.writtenBy !== GENESIS_WRITER) throw new Broken(`entry 0 is the genesis, but it says writtenBy ${h.writtenBy}`);
      const o = await json(entry.transitionRef, SID.genesis);
      return { ...o, detail: `${o.bytes.length} B genesis document` };
    });
    await world(entry.transitionRef);
    return finish(entry, links, notACall(h));
  }

  if (!String(h.writtenBy).startsWith("coordinator:")) {
    await link("record", entry.transitionRef, async () => {
      const o = await object(entry.transitionRef, null);
      return { ...o, detail: `client commit by ${h.writtenBy}: ${o.meta.semanticId} (${o.bytes.length} B)` };
    });
    const w = await world(null);
    if (w) {
      await link("output", w.stateRoot, async () => {
        const o = await object(w.stateRoot, null);
        return { ...o, detail: `${o.bytes.length} B = world.stateRoot (${o.meta.semanticId})` };
      });
    }
    return finish(entry, links, notACall(h));
  }

  // A call: the invocation record and everything it names.
  const record = await link("record", entry.transitionRef, async () => {
    const o = await json(entry.transitionRef, SID.record);
    const r = o.doc;
    if (r.transitionFn !== h.transitionFn || r.interpreter !== h.interpreter) {
      throw new Broken("transitionFn or interpreter differ from the entry's", o);
    }
    return { ...o, detail: `${SID.record} invocation ${r.invocationId} episode ${r.episodeId} skill ${r.skillId}` };
  });
  if (!record) {
    await world(null);
    return finish(entry, links, { writtenBy: h.writtenBy });
  }
  const rec = record.doc;

  await link("input", rec.input, async () => {
    const o = await json(rec.input, SID.input);
    return { ...o, detail: inputPreview(o.doc, o.text) };
  });

  const plan = await link("plan", rec.plan, async () => {
    const o = await json(rec.plan, SID.plan);
    const effects = Array.isArray(o.doc.effects) ? o.doc.effects : [];
    const desc = effects.map((e) => `${e.id} ${e.effect}@${e.scope} cost ${e.cost}`).join(", ");
    return { ...o, detail: `${effects.length} effect(s)${desc ? ": " + desc : ""}` };
  });
  const recorded = Array.isArray(rec.effects) ? rec.effects : null;
  if (plan && recorded && Array.isArray(plan.doc.effects) && plan.doc.effects.length !== recorded.length) {
    push("plan", rec.plan, false, `plan has ${plan.doc.effects.length} effect(s) but the record lists ${recorded.length}`);
  }
  if (!recorded) push("effect", null, false, "effects is not a list");

  const effectDocs = [];
  for (const [i, ref] of (recorded || []).entries()) {
    const verified = await link("effect", ref, async () => {
      const o = await json(ref, SID.effect);
      const e = o.doc;
      const unknown = Object.keys(e).filter((k) => !EFFECT_FIELDS.includes(k));
      if (unknown.length) throw new Broken(`not an effect record: unknown field ${JSON.stringify(unknown[0])}`, o);
      const handler = e.handler === undefined ? null : e.handler;
      if (handler !== null && !isHandler(handler)) {
        throw new Broken("not an effect record: handler is not {plugin, version, library}", o);
      }
      // A denied effect ran nothing: the broker's denials name no plugin, a handler's decline
      // (denied:handler) names the plugin that declined.
      const denial = BROKER_DENIALS.includes(e.denial) ? handler === null : e.denial === DECLINED && handler !== null;
      const lawful = (e.allowed === false && e.failed === false && e.resultRef === "" && denial)
        || (e.allowed === true && e.failed === false && REF_PATTERN.test(e.resultRef) && e.denial === "")
        || (e.allowed === true && e.failed === true && e.resultRef === "" && e.denial === "");
      if (!lawful) throw new Broken("record is not one of the three lawful shapes", o);
      let req;
      try {
        req = await object(e.requestRef, SID.request);
      } catch (err) {
        throw new Broken(`request ${e.requestRef}: ${err.message}`, o, err.failure);
      }
      let res = null;
      if (e.resultRef) {
        try {
          res = await object(e.resultRef, SID.result);
        } catch (err) {
          throw new Broken(`result ${e.resultRef}: ${err.message}`, o, err.failure);
        }
      }
      const verdict = e.allowed ? (e.failed ? "failed" : "allowed") : e.denial;
      const fields = [
        ["effect", `${e.effect}@${e.scope}`],
        ["cost", String(e.cost)],
        ["budget", `${e.budgetBefore} → ${e.budgetAfter}`],
        ["verdict", verdict],
        ["request", e.requestRef, `${req.bytes.length} B, verified`],
      ];
      if (res) fields.push(["result", e.resultRef, `${res.bytes.length} B, verified`]);
      return {
        ...o, fields, result: res, handler, allowed: e.allowed === true,
        detail: `e${i + 1} ${verdict} ${e.effect}@${e.scope} cost ${e.cost} budget ${e.budgetBefore}→${e.budgetAfter} ` +
          `request ${req.bytes.length} B${res ? ` result ${res.bytes.length} B` : ""}` +
          (handler ? `, ${e.allowed ? "ran" : "declined"} by ${handler.plugin} ${handler.version}` : ""),
      };
    });
    effectDocs.push(verified ? verified.doc : null);
  }

  const output = await link("output", rec.output, async () => {
    const o = await json(rec.output, SID.output);
    const w = (o.doc && o.doc.world) || {};
    if (w.plan !== rec.plan) throw new Broken("the result's world.plan is not the record's plan", o);
    const listed = (Array.isArray(w.effects) ? w.effects : []).map((e) => e && e.record);
    const names = recorded || [];
    if (listed.length !== names.length || listed.some((r, i) => r !== names[i])) {
      throw new Broken("the result's world.effects do not name the record's effects", o);
    }
    return { ...o, detail: `${o.bytes.length} B = world.stateRoot; the result is these exact bytes` };
  });
  await world(rec.output);
  return finish(entry, links, {
    writtenBy: h.writtenBy,
    invocationId: str(rec.invocationId),
    episode: str(rec.episodeId),
    tool: str(rec.skillId),
    ...outcomeOf(recorded ? effectDocs : null, output ? output.doc : null),
  });
}

const str = (v) => (typeof v === "string" ? v : null);

/** The header of an entry that is not a call (the genesis, a client-built commit). */
function notACall(h) {
  return { writtenBy: h.writtenBy, invocationId: null, episode: null, tool: null, outcome: null, reason: null };
}

/**
 * A call's outcome class as the daemon's summary computes it (`log_summary.rs`), from
 * verified effect records and output only: `{}` (not known) when one it needs is broken.
 * The first effect decides: none, the plan refused; denied, its denial; ran and the output
 * says `"ok": false`, the policy refused; failed, the handler.
 */
function outcomeOf(effects, output) {
  if (!effects) return {};
  const first = effects[0];
  if (first === undefined) return { outcome: "refused", reason: "plan" };
  if (first === null) return {};
  if (first.allowed !== true) {
    const label = first.denial === DECLINED || BROKER_DENIALS.includes(first.denial) ? first.denial : "denied:effect-name";
    return { outcome: "denied", reason: label };
  }
  if (first.failed === true) return { outcome: "failed", reason: "handler" };
  if (!output) return {};
  if (output.ok === false) return { outcome: "refused", reason: "policy" };
  return { outcome: "ok", reason: null };
}

/** `{plugin, version, library}`, exactly: the identity a succeeded or failed record carries. */
function isHandler(h) {
  return h !== null && typeof h === "object" && !Array.isArray(h)
    && Object.keys(h).sort().join(",") === "library,plugin,version"
    && typeof h.plugin === "string" && typeof h.version === "string"
    && typeof h.library === "string" && REF_PATTERN.test(h.library);
}

/**
 * `facts`: what the verified links say of the fields a summary shows — `writtenBy` (the
 * entry), `invocationId`, `episode`, `tool` (the record), `outcome` and `reason` (the effect
 * records and output). A field that is absent could not be verified: a link it rests on is
 * broken.
 */
function finish(entry, links, facts) {
  // World first, as `worldd why` prints it.
  const i = links.findIndex((l) => l.kind === "world");
  if (i > 0) links.unshift(links.splice(i, 1)[0]);
  const brokenKinds = new Set(links.filter((l) => !l.ok).map((l) => l.kind));
  const known = { ...facts };
  if (brokenKinds.has("entry")) return { entry, links, facts: {} };
  if (brokenKinds.has("record")) {
    for (const k of ["invocationId", "episode", "tool", "outcome", "reason"]) delete known[k];
  }
  return { entry, links, facts: known };
}

const lenient = new TextDecoder("utf-8");

/** Bytes as text for display (invalid UTF-8 shown with replacement characters). */
function preview(bytes) {
  return lenient.decode(bytes);
}
