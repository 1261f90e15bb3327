// Canonical JSON (RFC 8785, JCS) and sha256 refs, as the daemon computes them.
//
// JCS was chosen because JavaScript produces it almost for free: JSON.stringify already
// prints strings with JCS's escapes and numbers in ECMAScript form, and Array.prototype.sort
// orders keys by UTF-16 code units, as JCS requires. Only the key order needs doing by hand.
// A browser test checks this module against the daemon's own canonicaliser.

/** The canonical text of a JSON value (as parsed by JSON.parse). */
export function canonicalize(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("non-finite number has no JSON form");
    return JSON.stringify(value); // -0 prints as 0, as JCS requires
  }
  if (Array.isArray(value)) {
    return "[" + value.map(canonicalize).join(",") + "]";
  }
  if (typeof value === "object") {
    return "{" + Object.keys(value).sort()
      .map((k) => JSON.stringify(k) + ":" + canonicalize(value[k])).join(",") + "}";
  }
  throw new Error("not a JSON value: " + typeof value);
}

const utf8 = new TextEncoder();

/** `sha256:` + lowercase hex of the SHA-256 of `bytes` (a Uint8Array or a string as UTF-8). */
export async function refOf(bytes) {
  const data = typeof bytes === "string" ? utf8.encode(bytes) : bytes;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  let hex = "";
  for (const b of digest) hex += b.toString(16).padStart(2, "0");
  return "sha256:" + hex;
}

/** The ref of a JSON document's canonical bytes. */
export function refOfJson(value) {
  return refOf(canonicalize(value));
}

/** The bytes of a base64 text (the `payload` of `/v1/objects/{ref}?payload=true`). */
export function fromBase64(text) {
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export const ZERO_REF = "sha256:" + "0".repeat(64);
export const REF_PATTERN = /^sha256:[0-9a-f]{64}$/;
