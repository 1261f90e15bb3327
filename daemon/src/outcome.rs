//! What a call's outcome means for an agent deciding its next step: one closed,
//! machine-readable classification shared by MCP (`_meta`), A2A (`metadata`) and the
//! reconciliation route.
//!
//! The committed output object is never touched: its bytes are the contract and are hashed
//! into the log. The classification travels *beside* it.
//!
//! | `kind` | `reason` | meaning | `retryable` |
//! |---|---|---|---|
//! | `ok` | — | the effect ran and the tool did what was asked | `true` only for reads |
//! | `refused` | `plan` | the arguments were refused by the plan; nothing ran, no budget spent | `false` |
//! | `refused` | `policy` | the effect ran and its policy said no (`"ok": false`); one unit spent | `false` |
//! | `refused` | `capacity` | every execution slot stayed busy, or the session's refusals and denials outran their rate; nothing ran | `true` |
//! | `refused` | `busy` | an earlier call of the episode was still running (its queue was full, or it outlasted this call's deadline); nothing ran | `true` |
//! | `refused` | `store-full` | the world store is past its reserve; nothing ran, nothing spent, until an operator makes room | `false` |
//! | `refused` | `key-conflict` | the idempotency key (task id) was used with other arguments | `false` |
//! | `refused` | `deadline` | too little of the call's deadline was left to start its handler, or its preflight overran it; nothing ran, journaled or spent | `true` |
//! | `refused` | `unavailable` | this daemon cannot run the tool (no handler, no world); nothing ran | `false` |
//! | `denied` | `denied:budget`, `denied:scope`, `denied:expired`, `denied:effect-name` | the broker refused the effect; nothing ran, nothing spent (`remaining` for budget) | `false` |
//! | `denied` | `denied:handler` | the effect's handler declined the request before admission (its preflight: e.g. a read whose result would exceed the limit); nothing ran, nothing spent; the output says why | `false` |
//! | `failed` | `handler` | the handler itself failed; a write may have partly run | `true` only for reads |
//! | `indeterminate` | `pending`, `unrecorded`, `in-flight`, `timeout`, `canceled`, `host` | the effect may have run and the call is not confirmed committed | `false` |
//!
//! `retryable` is `true` only when sending the identical call again is safe (it can repeat no
//! write) and might produce something new; it is `false` whenever a write may have run.

use broker_core::broker::{Denial, DECLINED};
use broker_core::coordinator::{CallError, CallOutput, EffectSummary, Surface};
use broker_core::object::Ref;
use broker_core::session::Session;
use broker_core::task;
use handler_api::EffectClass;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};

use crate::state::{AppState, InvokeFailure};

/// The closed set of `kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ok,
    Refused,
    Denied,
    Failed,
    Indeterminate,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ok => "ok",
            Kind::Refused => "refused",
            Kind::Denied => "denied",
            Kind::Failed => "failed",
            Kind::Indeterminate => "indeterminate",
        }
    }
}

/// Every `reason` this module can produce (documented in `docs/agents.md`).
#[cfg(test)]
const REASONS: &[&str] = &[
    "plan",
    "policy",
    "capacity",
    "refusal-rate",
    "busy",
    "store",
    "store-full",
    "key-conflict",
    "deadline",
    "unavailable",
    "denied:budget",
    "denied:scope",
    "denied:expired",
    "denied:effect-name",
    "denied:handler",
    "handler",
    "pending",
    "unrecorded",
    "in-flight",
    "timeout",
    "canceled",
    "host",
];

/// One classification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub kind: Kind,
    /// Its reason (the list in `docs/agents.md`); `None` only for `ok`.
    pub reason: Option<&'static str>,
    pub retryable: bool,
    /// Units left on the denied grant, for `denied:budget`.
    pub remaining: Option<u64>,
}

impl Outcome {
    fn new(kind: Kind, reason: &'static str, retryable: bool) -> Outcome {
        Outcome {
            kind,
            reason: Some(reason),
            retryable,
            remaining: None,
        }
    }

    /// An outcome whose effect may have run and whose commit is not confirmed.
    pub fn indeterminate(reason: &'static str) -> Outcome {
        Outcome::new(Kind::Indeterminate, reason, false)
    }

    /// This daemon cannot run the tool (no handler, no world); nothing ran.
    pub fn unavailable() -> Outcome {
        Outcome::new(Kind::Refused, "unavailable", false)
    }

    /// Nothing ran: the call's deadline left its handler too little time to start.
    pub fn too_late() -> Outcome {
        Outcome::new(Kind::Refused, "deadline", true)
    }

    pub fn capacity() -> Outcome {
        Outcome::new(Kind::Refused, "capacity", true)
    }

    /// Nothing was committed: the credential's plan refusals and denials outran their rate.
    /// Not retryable: the same call would be refused or denied again, and an agent that
    /// resends it only keeps the bucket empty.
    pub fn refusal_rate() -> Outcome {
        Outcome::new(Kind::Refused, "refusal-rate", false)
    }

    /// Nothing ran: the episode was busy with an earlier call.
    pub fn busy() -> Outcome {
        Outcome::new(Kind::Refused, "busy", true)
    }

    /// Nothing ran and nothing stays spent: the call's intent was committed but the store could
    /// not make it durable, so it was withdrawn before its handler started. Retryable under a
    /// new key once the store's writes succeed again.
    pub fn store_not_durable() -> Outcome {
        Outcome::new(Kind::Refused, "store", true)
    }

    /// Nothing ran: the store is past its reserve until an operator makes room.
    pub fn store_full() -> Outcome {
        Outcome::new(Kind::Refused, "store-full", false)
    }

    /// The idempotency key names another call.
    pub fn key_conflict() -> Outcome {
        Outcome::new(Kind::Refused, "key-conflict", false)
    }

    /// `{"kind", "reason"?, "remaining"?, "retryable"}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// Written directly where an answer is (MCP's `_meta`), its members in the order a JSON map
/// keeps them.
impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", self.kind.as_str())?;
        if let Some(r) = self.reason {
            m.serialize_entry("reason", r)?;
        }
        if let Some(n) = self.remaining {
            m.serialize_entry("remaining", &n)?;
        }
        m.serialize_entry("retryable", &self.retryable)?;
        m.end()
    }
}

/// The classification of a call that produced no committed result; `None` for refusals of
/// the request itself (bad params, not authorized, pin mismatch, a revoked credential), where
/// nothing ran and the error text says what to fix. A reused task id is classified as a
/// conflict here; see [`reuse`] to tell a conflict from a call still in flight.
///
/// The one table of failures: A2A's `data`, and MCP's (a host failure's under 2026-07-28, a
/// keyed call's named errors), are read from it.
pub fn of_failure(f: &InvokeFailure) -> Option<Outcome> {
    Some(match f {
        InvokeFailure::Capacity => Outcome::capacity(),
        InvokeFailure::RefusalRate => Outcome::refusal_rate(),
        InvokeFailure::Busy => Outcome::busy(),
        InvokeFailure::TimedOut => Outcome::indeterminate("timeout"),
        InvokeFailure::Canceled => Outcome::indeterminate("canceled"),
        // Refused like a request without a valid credential: the text says what to do.
        InvokeFailure::Revoked => return None,
        InvokeFailure::Call(e) => return of_call_error(e),
    })
}

/// [`of_failure`] of the coordinator's error.
pub fn of_call_error(e: &CallError) -> Option<Outcome> {
    Some(match e {
        CallError::InvalidTaskId
        | CallError::InvalidArguments(_)
        | CallError::NotAuthorized
        | CallError::PinMismatch => return None,
        CallError::TaskIdReused => Outcome::key_conflict(),
        CallError::StoreFull(_) => Outcome::store_full(),
        CallError::NotCommitted | CallError::KeyPending | CallError::EffectUnrecordable => {
            Outcome::indeterminate("pending")
        }
        // Its intent withdrawn before the handler started, for the store's sync, not a
        // deadline.
        CallError::IntentNotDurable => Outcome::store_not_durable(),
        CallError::EffectsUnrecorded { .. } => Outcome::indeterminate("unrecorded"),
        // Committed, only the store's sync failing: the host's fault, and a resend of the
        // same key replays the call once a sync succeeds.
        CallError::NotConfirmed => Outcome::indeterminate("host"),
        // Never met here: `state::answer` turns both into failures of their own first. Read
        // from those rows, so that the table holds one row for each.
        CallError::HandlerTimedOut => return of_failure(&InvokeFailure::TimedOut),
        CallError::RefusalRate => return of_failure(&InvokeFailure::RefusalRate),
        CallError::NoTimeToStart
        | CallError::NotStarted
        | CallError::Withdrawn
        | CallError::PreflightTimedOut => Outcome::too_late(),
        CallError::NoHandler | CallError::NoWorktree(_) | CallError::NoWorld => {
            Outcome::unavailable()
        }
        CallError::Store(_)
        | CallError::Registry(_)
        | CallError::Log(_)
        | CallError::Journal(_)
        | CallError::Canon(_)
        | CallError::Internal(_) => Outcome::indeterminate("host"),
    })
}

/// One of every failure a call can meet, every [`CallError`] among them, for the tests of the
/// surfaces that answer them. `arm` stops compiling when a variant is added, and the count
/// then fails until the list holds one of it too.
#[cfg(test)]
pub(crate) fn every_failure() -> Vec<InvokeFailure> {
    use broker_core::canon::CanonError;
    use broker_core::capacity::Full;
    use broker_core::journal::JournalError;
    use broker_core::log::LogError;
    use broker_core::registry::RegistryError;
    use broker_core::store::StoreError;
    let arm = |e: &CallError| match e {
        CallError::InvalidTaskId => 0,
        CallError::InvalidArguments(_) => 1,
        CallError::NotAuthorized => 2,
        CallError::PinMismatch => 3,
        CallError::TaskIdReused => 4,
        CallError::NotCommitted => 5,
        CallError::KeyPending => 6,
        CallError::IntentNotDurable => 7,
        CallError::NoHandler => 8,
        CallError::NoWorktree(_) => 9,
        CallError::NoWorld => 10,
        CallError::RefusalRate => 11,
        CallError::StoreFull(_) => 12,
        CallError::EffectsUnrecorded { .. } => 13,
        CallError::EffectUnrecordable => 14,
        CallError::NotConfirmed => 15,
        CallError::HandlerTimedOut => 16,
        CallError::NotStarted => 17,
        CallError::Withdrawn => 18,
        CallError::NoTimeToStart => 19,
        CallError::PreflightTimedOut => 20,
        CallError::Store(_) => 21,
        CallError::Registry(_) => 22,
        CallError::Log(_) => 23,
        CallError::Journal(_) => 24,
        CallError::Canon(_) => 25,
        CallError::Internal(_) => 26,
    };
    let errors = vec![
        CallError::InvalidTaskId,
        CallError::InvalidArguments("x".into()),
        CallError::NotAuthorized,
        CallError::PinMismatch,
        CallError::TaskIdReused,
        CallError::NotCommitted,
        CallError::KeyPending,
        CallError::IntentNotDurable,
        CallError::NoHandler,
        CallError::NoWorktree("w".into()),
        CallError::NoWorld,
        CallError::RefusalRate,
        CallError::StoreFull(Full::Disk {
            free: 1,
            reserve: 2,
        }),
        CallError::EffectsUnrecorded {
            records: vec![Ref::of(b"r")],
        },
        CallError::EffectUnrecordable,
        CallError::NotConfirmed,
        CallError::HandlerTimedOut,
        CallError::NotStarted,
        CallError::Withdrawn,
        CallError::NoTimeToStart,
        CallError::PreflightTimedOut,
        CallError::Store(StoreError::MapResized),
        // A write that found no room: A2A words it as the store-full refusal.
        CallError::Store(StoreError::DiskFull("d".into())),
        CallError::Registry(RegistryError::Duplicate("r".into())),
        CallError::Log(LogError::Corrupt("l".into())),
        CallError::Journal(JournalError::Corrupt("j".into())),
        CallError::Canon(CanonError::NonFinite),
        CallError::Internal("i".into()),
    ];
    let mut arms: Vec<usize> = errors.iter().map(arm).collect();
    arms.dedup();
    assert_eq!(arms, (0..27).collect::<Vec<_>>(), "one of each CallError");
    let others = [
        InvokeFailure::Capacity,
        InvokeFailure::RefusalRate,
        InvokeFailure::Busy,
        InvokeFailure::TimedOut,
        InvokeFailure::Canceled,
        InvokeFailure::Revoked,
    ];
    let arm = |f: &InvokeFailure| match f {
        InvokeFailure::Call(_) => 0,
        InvokeFailure::Capacity => 1,
        InvokeFailure::RefusalRate => 2,
        InvokeFailure::Busy => 3,
        InvokeFailure::TimedOut => 4,
        InvokeFailure::Canceled => 5,
        InvokeFailure::Revoked => 6,
    };
    assert_eq!(
        others.iter().map(arm).collect::<Vec<_>>(),
        (1..7).collect::<Vec<_>>(),
        "one of each InvokeFailure"
    );
    errors
        .into_iter()
        .map(InvokeFailure::Call)
        .chain(others)
        .collect()
}

/// A reused task id (or idempotency key): a conflict when the task table holds another
/// call (other tool or other arguments) under it, else a call with the same arguments that
/// is still running (`in-flight`).
pub async fn reuse(
    state: &AppState,
    session: &Session,
    surface: Surface,
    key: &str,
    skill_id: &str,
    args: &Value,
) -> Outcome {
    let input = Ref::of_json(args).ok();
    let other = |skill: &str, input_ref: Ref| skill != skill_id || Some(input_ref) != input;
    // The call running under the key, if any, says what it is before its first row is
    // written: racing resends with other arguments are conflicts, not waits for the winner.
    let running = state
        .coordinator()
        .running_attempt(surface, &session.episode, key);
    if let Some(a) = running {
        return if other(&a.skill_id, a.input_ref) {
            Outcome::key_conflict()
        } else {
            Outcome::indeterminate("in-flight")
        };
    }
    let store = state.store().clone();
    let episode = session.episode.clone();
    let task_key = surface.task_key(key);
    let stored = crate::durable_answers::spawn_read(move || {
        store.read(|r| task::get(r, &episode, &task_key))
    })
    .await
    .ok()
    .and_then(Result::ok)
    .flatten();
    match stored {
        Some(s) if other(&s.skill_id, s.input_ref) => Outcome::key_conflict(),
        _ => Outcome::indeterminate("in-flight"),
    }
}

/// Classify a committed call from its effects and its output object. `class` is the tool's
/// effect class ([`crate::tools::tool_class`]): only reads are ever retryable.
pub fn of_committed(effects: &[EffectSummary], output: &Value, class: EffectClass) -> Outcome {
    classify(
        effects,
        || output.get("ok") == Some(&Value::Bool(false)),
        class,
    )
}

/// [`of_committed`], asking whether the output says `"ok": false` only when an effect ran.
fn classify(
    effects: &[EffectSummary],
    says_not_ok: impl FnOnce() -> bool,
    class: EffectClass,
) -> Outcome {
    let read = class == EffectClass::Read;
    let Some(effect) = effects.first() else {
        // Zero effects: the plan refused (the only zero-effect commit).
        return Outcome::new(Kind::Refused, "plan", false);
    };
    match effect.status.as_str() {
        "denied" => {
            let label: &'static str = match effect.denial.as_deref() {
                Some(DECLINED) => DECLINED,
                other => other
                    .and_then(Denial::from_label)
                    .map(Denial::label)
                    .unwrap_or("denied:effect-name"),
            };
            let mut o = Outcome::new(Kind::Denied, label, false);
            if label == Denial::Budget.label() {
                o.remaining = Some(effect.budget_after);
            }
            o
        }
        "ok" if says_not_ok() => Outcome::new(Kind::Refused, "policy", false),
        "ok" => Outcome {
            kind: Kind::Ok,
            reason: None,
            retryable: read,
            remaining: None,
        },
        // "failed", and anything this daemon does not know: the handler may have partly run.
        _ => Outcome::new(Kind::Failed, "handler", read),
    }
}

/// [`of_committed`]'s policy refusal, read from a committed output's bytes: the effect ran
/// and the output says `"ok": false`. The output's top level is walked, not parsed: the
/// metrics and the answer each ask this of every call (`json_scan`).
pub fn refused_by_policy(output: &[u8]) -> bool {
    crate::json_scan::top_level_member(output, b"ok") == Some(b"false")
}

/// [`of_committed`] for a [`CallOutput`] whose output bytes are the committed JSON object.
///
/// A replayed result is never retryable: the key holds its committed answer, so sending the
/// identical call again gets it again (an agent that resent a replayed read failure by the
/// rule "retryable: send it again" would loop); a new attempt needs a new key.
pub fn of_output(out: &CallOutput, class: EffectClass) -> Outcome {
    let mut o = classify(&out.effects, || refused_by_policy(&out.output), class);
    o.retryable &= !out.replayed;
    o
}

/// The effects of a call as agents see them: `[{"id","effect","status","record",
/// "budgetAfter","denial"?}]`.
pub fn effects_json(effects: &[EffectSummary]) -> Value {
    serde_json::to_value(Effects(effects)).unwrap_or_default()
}

/// A call's effects, `[{"budgetAfter", "denial"?, "effect", "id", "record", "status"}]`,
/// written directly where an answer is (MCP's `_meta`), each effect's members in the order a
/// JSON map keeps them.
pub struct Effects<'a>(pub &'a [EffectSummary]);

impl Serialize for Effects<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Effect))
    }
}

struct Effect<'a>(&'a EffectSummary);

impl Serialize for Effect<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("budgetAfter", &e.budget_after)?;
        if let Some(d) = &e.denial {
            m.serialize_entry("denial", d)?;
        }
        m.serialize_entry("effect", &e.effect)?;
        m.serialize_entry("id", &e.id)?;
        m.serialize_entry("record", &e.record)?;
        m.serialize_entry("status", &e.status)?;
        m.end()
    }
}

/// The `metadata` of an A2A task: the contract's `invocation_id`, `world_ref` and
/// `entry_index`, plus `output_ref`, `replayed`, `effects` and `outcome`.
pub fn a2a_metadata(out: &CallOutput, outcome: &Outcome) -> Value {
    json!({
        "invocation_id": out.invocation_id,
        "world_ref": out.world_ref,
        "entry_index": out.entry_index,
        "output_ref": out.output_ref,
        "replayed": out.replayed,
        "effects": effects_json(&out.effects),
        "outcome": outcome.to_json(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use broker_core::object::Ref;

    fn effect(status: &str, denial: Option<&str>, budget_after: u64) -> EffectSummary {
        EffectSummary {
            id: "e1".into(),
            effect: "Workspace.Write".into(),
            status: status.into(),
            record: Ref::of(b"r"),
            budget_after,
            denial: denial.map(str::to_owned),
        }
    }

    /// A call refused before its intent for want of time to start its handler was classified
    /// like one whose handler overran (`indeterminate`: "it may have run; do not resend"),
    /// though nothing ran and its key is free.
    #[test]
    fn a_call_with_no_time_to_start_is_refused_and_retryable_not_indeterminate() {
        let o = of_failure(&InvokeFailure::Call(CallError::NoTimeToStart)).unwrap();
        assert_eq!(
            o.to_json(),
            serde_json::json!({"kind": "refused", "reason": "deadline", "retryable": true})
        );
        let o = of_failure(&InvokeFailure::Call(CallError::HandlerTimedOut)).unwrap();
        assert_eq!(o.kind, Kind::Indeterminate);
    }

    /// An intent withdrawn because the store could not make it durable was classified as a
    /// deadline (`refused` / `deadline`), though no deadline passed: it is the store's, and a
    /// resend of a pending key stays `pending`.
    #[test]
    fn an_intent_the_store_could_not_make_durable_is_refused_for_the_store_not_a_deadline() {
        let o = of_failure(&InvokeFailure::Call(CallError::IntentNotDurable)).unwrap();
        assert_eq!(
            o.to_json(),
            serde_json::json!({"kind": "refused", "reason": "store", "retryable": true})
        );
        let o = of_failure(&InvokeFailure::Call(CallError::KeyPending)).unwrap();
        assert_eq!(
            o.to_json(),
            serde_json::json!({"kind": "indeterminate", "reason": "pending", "retryable": false})
        );
    }

    #[test]
    fn the_table() {
        let w = EffectClass::Write;
        let r = EffectClass::Read;
        let ok = json!({"ok": true});
        let no = json!({"ok": false, "refused": "x"});
        let j = |o: Outcome| o.to_json();
        assert_eq!(
            j(of_committed(&[], &no, w)),
            json!({"kind": "refused", "reason": "plan", "retryable": false})
        );
        assert_eq!(
            j(of_committed(&[effect("ok", None, 3)], &no, r)),
            json!({"kind": "refused", "reason": "policy", "retryable": false})
        );
        assert_eq!(
            j(of_committed(&[effect("ok", None, 3)], &ok, r)),
            json!({"kind": "ok", "retryable": true})
        );
        assert_eq!(
            j(of_committed(&[effect("ok", None, 3)], &ok, w)),
            json!({"kind": "ok", "retryable": false})
        );
        assert_eq!(
            j(of_committed(
                &[effect("denied", Some("denied:budget"), 0)],
                &json!({}),
                r
            )),
            json!({"kind": "denied", "reason": "denied:budget", "retryable": false, "remaining": 0})
        );
        assert_eq!(
            j(of_committed(
                &[effect("denied", Some("denied:expired"), 4)],
                &json!({}),
                r
            )),
            json!({"kind": "denied", "reason": "denied:expired", "retryable": false})
        );
        assert_eq!(
            j(of_committed(
                &[effect("denied", Some("denied:handler"), 4)],
                &json!({"ok": false, "refused": "read x: too big"}),
                r
            )),
            json!({"kind": "denied", "reason": "denied:handler", "retryable": false})
        );
        assert_eq!(
            j(of_committed(&[effect("failed", None, 2)], &json!({}), w)),
            json!({"kind": "failed", "reason": "handler", "retryable": false})
        );
        assert_eq!(
            j(of_committed(&[effect("failed", None, 2)], &json!({}), r)),
            json!({"kind": "failed", "reason": "handler", "retryable": true})
        );
        assert_eq!(
            j(of_committed(
                &[effect("failed", None, 2)],
                &json!({}),
                EffectClass::Unknown
            )),
            json!({"kind": "failed", "reason": "handler", "retryable": false})
        );
        assert_eq!(
            j(Outcome::indeterminate("pending")),
            json!({"kind": "indeterminate", "reason": "pending", "retryable": false})
        );
        for o in [
            Outcome::capacity(),
            Outcome::store_full(),
            Outcome::key_conflict(),
            Outcome::indeterminate("host"),
        ] {
            assert!(REASONS.contains(&o.reason.unwrap()));
        }
    }

    #[test]
    fn effects_carry_budget_after_and_denial() {
        assert_eq!(
            effects_json(&[effect("denied", Some("denied:budget"), 0)]),
            json!([{"id": "e1", "effect": "Workspace.Write", "status": "denied",
                    "record": Ref::of(b"r"), "budgetAfter": 0, "denial": "denied:budget"}])
        );
    }
}
