//! The request checks a worktree-scoped effect makes before it touches
//! anything, with the texts worldd's own plugins use.
//!
//! Every failure here is an [`Outcome::failed`] (the plan sent something the
//! effect never accepts; nothing ran), worded `broker: <effect> refused: …`:
//!
//! | check | message |
//! |---|---|
//! | scope | `broker: <E> refused: scope "<s>" is not "worktree"` |
//! | payload | `broker: <E> refused: payload is not a JSON object` |
//! | key aliases | `broker: <E> refused: key "OP" aliases "op"` |
//! | op | `broker: <E> refused: payload key "op" must be a string`, `… payload has no "op"` |
//! | op allowlist | `broker: <E> refuses op "<op>": not in this effect's op allowlist` |
//! | worktree | `broker: <E> refused: the request binds no worktree (scope "worktree" needs one)`, `… the bound worktree is not an absolute path` |
//!
//! [`check`] runs the first five in that order; [`Checked`] carries the
//! result and offers the later, per-op checks (the worktree, payload keys,
//! string arguments) with the same wording.
//!
//! ```
//! use handler_kit::serde_json::json;
//! use handler_kit::request::{check, Quote, Rules};
//! use handler_kit::{Outcome, Request};
//!
//! const RULES: Rules<'static> = Rules {
//!     ops: &["read"],
//!     known_keys: &["op", "path"],
//!     quote: Quote::Plain,
//! };
//!
//! let request = Request {
//!     invocation_id: "inv-1".into(),
//!     episode: "ep".into(),
//!     worktree: Some("/srv/work/ep".into()),
//!     effect: "Demo.Read".into(),
//!     scope: "worktree".into(),
//!     cost: 1,
//!     payload: json!({"op": "read", "PATH": "a.txt"}),
//!     deadline_ms: 10_000,
//! };
//! let Err(Outcome::Failed { message }) = check(&request, &RULES) else { panic!() };
//! assert_eq!(message, "broker: Demo.Read refused: key \"PATH\" aliases \"path\"");
//! ```

use std::path::Path;

use handler_api::serde_json::Value;

use crate::{JsonObject, Outcome, Request};

/// How a check writes a value taken from the request (a scope, a key, an op)
/// into its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quote {
    /// Verbatim between double quotes: `"value"`.
    Plain,
    /// A JSON string literal (quotes, backslashes and control characters
    /// escaped), cut at 256 bytes with `…` before the closing quote: safe for
    /// values an agent controls. See [`json_quote`].
    Json,
}

impl Quote {
    /// `s`, quoted in this style.
    pub fn quote(self, s: &str) -> String {
        match self {
            Quote::Plain => format!("\"{s}\""),
            Quote::Json => json_quote(s),
        }
    }
}

/// `s` as a JSON string literal, cut at the last character boundary at or
/// below 256 bytes, with `…` before the closing quote when it was cut
/// ([`dialect::quote::quote`]).
pub use dialect::quote::quote as json_quote;

/// `failed("broker: <effect> refused: <why>")`.
pub fn refused(effect: &str, why: impl std::fmt::Display) -> Outcome {
    Outcome::failed(format!("broker: {effect} refused: {why}"))
}

/// `failed("broker: <effect> refuses op <op>: not in this effect's op allowlist")`.
pub fn op_not_allowed(effect: &str, op: &str, quote: Quote) -> Outcome {
    Outcome::failed(format!(
        "broker: {effect} refuses op {}: not in this effect's op allowlist",
        quote.quote(op)
    ))
}

/// What [`check`] enforces for one effect.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// The effect's op allowlist.
    pub ops: &'a [&'a str],
    /// The payload keys the handler reads. A key that differs from one of them
    /// only by case is refused: an alias could otherwise smuggle a second
    /// value past a plan that checked the first.
    pub known_keys: &'a [&'a str],
    /// How request values are quoted in the messages.
    pub quote: Quote,
}

/// A request that passed [`check`].
#[derive(Debug, Clone, Copy)]
pub struct Checked<'r> {
    /// The request's effect name.
    pub effect: &'r str,
    /// The payload object.
    pub payload: &'r JsonObject,
    /// The payload's `op`, one of the effect's allowlist.
    pub op: &'r str,
    /// How request values are quoted in the messages.
    pub quote: Quote,
    worktree: Option<&'r str>,
}

/// The checks every worktree-scoped request goes through first, in this
/// order: the scope is `worktree`; the payload is an object; no payload key is
/// a case-variant alias of a known key; `op` is a string; `op` is in the
/// allowlist. The first that fails is the `Err`.
pub fn check<'r>(request: &'r Request, rules: &Rules<'_>) -> Result<Checked<'r>, Outcome> {
    let effect = request.effect.as_str();
    let quote = rules.quote;
    if request.scope != "worktree" {
        return Err(refused(
            effect,
            format_args!("scope {} is not \"worktree\"", quote.quote(&request.scope)),
        ));
    }
    let Some(payload) = request.payload.as_object() else {
        return Err(refused(effect, "payload is not a JSON object"));
    };
    for key in payload.keys() {
        let lower = key.to_lowercase();
        if let Some(known) = rules.known_keys.iter().find(|k| **k != key && **k == lower) {
            return Err(refused(
                effect,
                format_args!("key {} aliases \"{known}\"", quote.quote(key)),
            ));
        }
    }
    let op = match payload.get("op") {
        Some(Value::String(op)) => op.as_str(),
        Some(_) => return Err(refused(effect, "payload key \"op\" must be a string")),
        None => return Err(refused(effect, "payload has no \"op\"")),
    };
    if !rules.ops.contains(&op) {
        return Err(op_not_allowed(effect, op, quote));
    }
    Ok(Checked {
        effect,
        payload,
        op,
        quote,
        worktree: request.worktree.as_deref(),
    })
}

impl<'r> Checked<'r> {
    /// `failed("broker: <effect> refused: <why>")`.
    pub fn refused(&self, why: impl std::fmt::Display) -> Outcome {
        refused(self.effect, why)
    }

    /// The bound worktree: present and absolute.
    pub fn worktree(&self) -> Result<&'r str, Outcome> {
        let Some(worktree) = self.worktree else {
            return Err(
                self.refused("the request binds no worktree (scope \"worktree\" needs one)")
            );
        };
        if !Path::new(worktree).is_absolute() {
            return Err(self.refused("the bound worktree is not an absolute path"));
        }
        Ok(worktree)
    }

    /// Every payload key is one of `keys`:
    /// `op "<op>" takes no payload key "<key>"` otherwise.
    pub fn only_keys(&self, keys: &[&str]) -> Result<(), Outcome> {
        match self.payload.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(key) => Err(self.refused(format_args!(
                "op {} takes no payload key \"{key}\"",
                self.quote.quote(self.op)
            ))),
            None => Ok(()),
        }
    }

    /// A string argument that may be absent:
    /// `payload key "<key>" of op "<op>" must be a string` when it is not one.
    pub fn optional_string(&self, key: &str) -> Result<Option<&'r str>, Outcome> {
        match self.payload.get(key) {
            Some(Value::String(s)) => Ok(Some(s)),
            None => Ok(None),
            Some(_) => Err(self.refused(format_args!(
                "payload key \"{key}\" of op {} must be a string",
                self.quote.quote(self.op)
            ))),
        }
    }

    /// A string argument the op needs: as [`Checked::optional_string`], and
    /// `op "<op>" needs payload key "<key>"` when it is absent.
    pub fn string(&self, key: &str) -> Result<&'r str, Outcome> {
        match self.optional_string(key)? {
            Some(s) => Ok(s),
            None => Err(self.refused(format_args!(
                "op {} needs payload key \"{key}\"",
                self.quote.quote(self.op)
            ))),
        }
    }

    /// `failed("broker: <effect> failed: the episode's worktree cannot be
    /// opened: <errno text>")`: the daemon checked the worktree when it bound
    /// it, so the effect could not run at all. No host path in the text.
    pub fn worktree_unopenable(&self, error: &std::io::Error) -> Outcome {
        Outcome::failed(format!(
            "broker: {} failed: the episode's worktree cannot be opened: {}",
            self.effect,
            super::output::errno_text(error)
        ))
    }
}
