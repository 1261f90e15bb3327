//! `tools/call`: its params, the tool it names, the call, and the errors that answer a call
//! that did not commit.

use broker_core::coordinator::{Call, CallError, Surface};
use broker_core::registry::RegistryEntry;
use broker_core::task;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::super::jsonrpc::{quote, Reply, INTERNAL_ERROR, INVALID_PARAMS, SESSION_REVOKED};
use super::super::IDEMPOTENCY_KEY;
use super::call_result::call_result;
use super::tools_list::refused;
use super::{Ctx, Envelope, HostFailure};
use crate::outcome::{self, Outcome};
use crate::state::{InvokeFailure, REVOKED_WHILE_WAITING};
use crate::tools::{self, Unresolved};

/// The parsed params of a `tools/call`.
#[derive(Debug, PartialEq)]
struct CallParams {
    name: String,
    arguments: Value,
    /// `_meta["world/idempotencyKey"]`, validated.
    key: Option<String>,
}

/// `name`, `arguments` and the optional idempotency key of a `tools/call`; the error is the
/// `-32602` text.
fn call_params(params: Option<Value>) -> Result<CallParams, String> {
    let Some(Value::Object(mut p)) = params else {
        return Err(
            "invalid params: tools/call params must be an object with \"name\" and optional \"arguments\""
                .into(),
        );
    };
    let name = match p.remove("name") {
        Some(Value::String(s)) => s,
        Some(_) => return Err("invalid params: \"name\" must be a string".into()),
        None => return Err("invalid params: \"name\" is missing".into()),
    };
    // Absent and null both mean no arguments, as a Go map decoded from null does upstream.
    let arguments = match p.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err("invalid params: \"arguments\" must be an object".into()),
    };
    // A `_meta` of another type would hide the key it may carry: the call would run unkeyed
    // (at least once) where the client asked for at most once.
    let meta = match p.get("_meta") {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(_)) => Some(m),
        Some(_) => return Err("invalid params: \"_meta\" must be an object".into()),
    };
    // A null key is refused like any other non-string: a client whose key variable was unset
    // (None, nil, null) asked for at most once, and unkeyed the call would run at least once.
    let key = match meta.and_then(|m| m.get(IDEMPOTENCY_KEY)) {
        None => None,
        Some(Value::String(k)) if task::valid_task_id(k) => Some(k.clone()),
        Some(_) => {
            return Err(format!(
                "invalid params: _meta {} must be 1-128 characters of A-Z a-z 0-9 . _ -",
                quote(IDEMPOTENCY_KEY)
            ))
        }
    };
    Ok(CallParams {
        name,
        arguments,
        key,
    })
}

pub(super) async fn tools_call(
    ctx: &Ctx<'_>,
    id: &Value,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    let CallParams {
        name,
        arguments: args,
        key,
    } = match call_params(params) {
        Ok(p) => p,
        Err(text) => return Ok(Reply::error(id, INVALID_PARAMS, text)),
    };
    let entry = match tool_named(ctx, id, &name).await? {
        Ok(entry) => entry,
        Err(reply) => return Ok(reply),
    };
    let remaining = ctx.deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        tracing::warn!(episode = %ctx.session.episode, tool = %name, "mcp: POST deadline passed before the call started");
        return Err(HostFailure::TimedOut);
    }
    let class = tools::tool_class(ctx.state, &entry.transition);
    let keyed_args = key.as_ref().map(|_| args.clone());
    let call = Call {
        surface: Surface::Mcp,
        session: ctx.session.clone(),
        skill_id: entry.transition.id.clone(),
        // Without a key, MCP ids give no idempotency: the coordinator mints a fresh random
        // task id. With one, the key is the task id, and the journal makes the call
        // exactly-once within the episode.
        task_id: key.clone(),
        args,
        transition_fn: None,
    };
    let tool = entry.transition.id.as_str();
    let episode = ctx.session.episode.as_str();
    match ctx.state.invoke(call, ctx.deadline, ctx.body_bytes).await {
        Ok(out) => {
            let outcome = outcome::of_output(&out, class);
            call_result(
                ctx,
                id,
                tool,
                &entry.transition.output_schema,
                out,
                outcome,
                key.as_deref(),
            )
        }
        Err(failure) => {
            if let (Some(k), Some(a), InvokeFailure::Call(e)) =
                (key.as_deref(), keyed_args.as_ref(), &failure)
            {
                if let Some(reply) = keyed_error(ctx, id, k, tool, a, e).await {
                    return Ok(reply);
                }
            }
            let root = ctx.state.coordinator().workspace_root();
            match answer(episode, root, &name, &failure) {
                Answer::Refused(code, text, data) => {
                    tracing::info!(%episode, %tool, rpc_id = %id, "mcp tools/call: {text}");
                    Ok(match data {
                        Some(data) => Reply::error_with_data(id, code, text, data),
                        None => Reply::error(id, code, text),
                    })
                }
                Answer::Host(host, line, cause) => {
                    log_host_failure(ctx.state.metrics(), episode, tool, id, &host, line, &cause);
                    Err(host)
                }
            }
        }
    }
}

/// The tool this session may call under the MCP name `name` ([`tools::resolve`]), or the
/// protocol error that answers the call instead.
async fn tool_named(
    ctx: &Ctx<'_>,
    id: &Value,
    name: &str,
) -> Result<Result<RegistryEntry, Reply>, HostFailure> {
    match tools::resolve(ctx.state, ctx.session, name, Surface::Mcp).await {
        Ok(entry) => Ok(Ok(entry)),
        // The surface refused as `tools/list` refuses it.
        Err(Unresolved::Surface(e)) => Ok(Err(Reply::error(id, INTERNAL_ERROR, refused(ctx, e)?))),
        // The contract's message, with the hint in `data`. The name is quoted to at most 256
        // bytes as sent (escapes counted): a name of megabytes made a reply of them.
        Err(Unresolved::Unknown { why }) => Ok(Err(Reply::error_with_data(
            id,
            INVALID_PARAMS,
            format!("unknown tool {}", crate::spelling::quote_sent(name)),
            json!({ "why": why }),
        ))),
    }
}

/// `data.why` of a call whose tool left the session's tools between its lookup and its
/// preparation.
const WITHDRAWN_WHILE_PREPARED: &str = "this session no longer sees this tool: it was replaced or withdrawn while the call was prepared, and nothing ran; tools/list shows this session's tools";

/// How a call that did not commit is answered, its key's named errors aside.
#[derive(Debug)]
enum Answer {
    /// Nothing ran or was journaled, and the table of failures classifies nothing: a protocol
    /// error (code, text, data), never the host-failure envelope, which says the effect may
    /// have run.
    Refused(i64, String, Option<Value>),
    /// The host-failure envelope, how the operator's log takes it, and its cause for that log
    /// (including the effect record refs of an EffectsUnrecorded failure: never on the wire).
    Host(HostFailure, Line, String),
}

/// [`Answer`] of a failed call. Its classification is [`outcome::of_failure`]'s, the table A2A
/// answers from too.
fn answer(
    episode: &str,
    root: Option<&std::path::Path>,
    name: &str,
    failure: &InvokeFailure,
) -> Answer {
    match (failure, outcome::of_failure(failure)) {
        // The credential was revoked while the call waited: an authentication error.
        (InvokeFailure::Revoked, _) => {
            Answer::Refused(SESSION_REVOKED, REVOKED_WHILE_WAITING.to_owned(), None)
        }
        // The tool was no longer this session's when its call was prepared (a publish replaced
        // or withdrew it after the lookup): answered as the lookup answers a tool the session
        // does not see, MCP's one word for it (A2A's is `not authorized`); nothing ran.
        (InvokeFailure::Call(CallError::NotAuthorized), _) => Answer::Refused(
            INVALID_PARAMS,
            format!("unknown tool {}", crate::spelling::quote_sent(name)),
            Some(json!({ "why": WITHDRAWN_WHILE_PREPARED })),
        ),
        // Refused before anything was journaled (arguments or a task id the host cannot
        // accept, a tool no longer this session's by the time it was prepared, as when a
        // publish replaced it, a pin that does not match): `-32602` with the coordinator's
        // text, as A2A answers it.
        (InvokeFailure::Call(e), None) => Answer::Refused(INVALID_PARAMS, e.to_string(), None),
        (failure, outcome) => {
            let (envelope, line, cause) = classified(episode, root, failure);
            // The table classifies every other failure; were one left out, it is the host's,
            // and may have run.
            let outcome = outcome.unwrap_or_else(|| Outcome::indeterminate("host"));
            Answer::Host(HostFailure::Call { envelope, outcome }, line, cause)
        }
    }
}

/// How the operator's log takes a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Load, not a fault: counted in /v1/metrics, never logged above debug.
    Load,
    /// A tool no loaded plugin can run: the deployment's choice, logged at most once per
    /// episode every 10 s.
    Unavailable,
    /// A slow call.
    Slow,
    /// A fault the operator must see.
    Fault,
}

/// The envelope a failed call is answered with (its fixed message), how it is logged, and its
/// cause for the operator's log. Its classification is not here: [`outcome::of_failure`].
fn classified(
    episode: &str,
    root: Option<&std::path::Path>,
    failure: &InvokeFailure,
) -> (Envelope, Line, String) {
    match failure {
        // The agent's text names no host path; the operator's line names the directory this
        // daemon looked for, which may not be where `session new` made one (another root).
        InvokeFailure::Call(e @ CallError::NoWorktree(_)) => (
            Envelope::Failed,
            Line::Unavailable,
            match root {
                Some(root) => format!(
                    "{e} (this daemon looked for {})",
                    root.join(episode).display()
                ),
                None => e.to_string(),
            },
        ),
        // Nothing ran: the store is past its reserve (the operator's log says why).
        InvokeFailure::Call(e @ CallError::StoreFull(_)) => {
            (Envelope::Capacity, Line::Load, e.to_string())
        }
        // Nothing ran either: no plugin here runs the tool, or there is no world.
        InvokeFailure::Call(e @ (CallError::NoHandler | CallError::NoWorld)) => {
            (Envelope::Failed, Line::Unavailable, e.to_string())
        }
        // Nothing ran: too little of the deadline was left to start the handler.
        InvokeFailure::Call(
            e @ (CallError::NoTimeToStart
            | CallError::NotStarted
            | CallError::Withdrawn
            | CallError::PreflightTimedOut),
        ) => (Envelope::TimedOut, Line::Slow, e.to_string()),
        // Any other coordinator error is a fault the operator must see: a store failing its
        // syncs among them, though nothing ran (`IntentNotDurable`).
        InvokeFailure::Call(e) => (Envelope::Failed, Line::Fault, e.to_string()),
        InvokeFailure::Capacity => (
            Envelope::Capacity,
            Line::Load,
            "all execution slots stayed busy".to_owned(),
        ),
        InvokeFailure::RefusalRate => (
            Envelope::Capacity,
            Line::Load,
            "the credential's plan refusals and denials outran their rate; nothing was committed"
                .to_owned(),
        ),
        InvokeFailure::Busy => (
            Envelope::Capacity,
            Line::Load,
            "an earlier call of this episode is still running (queue full, or it outlasted this call's deadline); nothing ran".to_owned(),
        ),
        InvokeFailure::TimedOut => (
            Envelope::TimedOut,
            Line::Slow,
            "the handler overran its deadline (its outcome is journaled when it returns; the call is not committed), or the POST deadline passed (the call may still commit)"
                .to_owned(),
        ),
        InvokeFailure::Canceled => (
            Envelope::Canceled,
            Line::Fault,
            "the invocation task was canceled or panicked".to_owned(),
        ),
        // Answered before this ([`answer`]); never a host failure in fact.
        InvokeFailure::Revoked => (
            Envelope::Failed,
            Line::Fault,
            REVOKED_WHILE_WAITING.to_owned(),
        ),
    }
}

/// The operator's line of a failed call, at the level its kind deserves.
fn log_host_failure(
    metrics: &crate::metrics::Metrics,
    episode: &str,
    tool: &str,
    id: &Value,
    host: &HostFailure,
    line: Line,
    cause: &str,
) {
    let message = host.message();
    match line {
        // Capacity refusals are counted in /v1/metrics; a log line each would flood
        // stderr exactly when the daemon is busiest.
        Line::Load => {
            tracing::debug!(%episode, %tool, rpc_id = %id, "mcp tools/call: {message}: {cause}")
        }
        // A tool no loaded plugin can run is the deployment's choice, not a fault, and the
        // call stored nothing: an agent can send thousands a second. The line says what the
        // operator can do (which worktree was looked for), at most once per episode every
        // 10 s with how many went unlogged since; the metrics count each (`no_handler`).
        Line::Unavailable => match metrics.free_line_due(episode, "mcp_unavailable") {
            Some(0) => {
                tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call: {message}: {cause}")
            }
            Some(unlogged) => {
                tracing::warn!(%episode, %tool, rpc_id = %id, unlogged, "mcp tools/call: {message}: {cause}")
            }
            None => {}
        },
        Line::Slow => {
            tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call: {message}: {cause}")
        }
        Line::Fault => {
            tracing::error!(%episode, %tool, rpc_id = %id, "mcp tools/call: {message}: {cause}")
        }
    }
}

/// How a keyed call's agent is to reconcile it instead of resending.
fn reconcile(key: &str) -> String {
    format!("reconcile with GET /v1/calls/mcp/{key} (worldd calls get {key}) instead of retrying")
}

/// The code, message, classification and effect records of a keyed error the coordinator's
/// error alone decides (every one but a reused key); `None` for an error that is no key's.
/// The classification is the one table's ([`outcome::of_call_error`]).
fn keyed_answer(key: &str, error: &CallError) -> Option<(i64, String, Outcome, Option<Value>)> {
    let reconcile = reconcile(key);
    let q = quote(key);
    let (message, records) = match error {
        CallError::NotCommitted | CallError::KeyPending => (
            format!("idempotency key {q}: the first call with this key was not confirmed committed and its effect may have run; {reconcile}"),
            None,
        ),
        CallError::EffectUnrecordable => (
            format!("idempotency key {q}: an effect ran, but neither the call nor its outcome could be stored, so the effect may have run; {reconcile}"),
            None,
        ),
        CallError::EffectsUnrecorded { records } => (
            format!("idempotency key {q}: an effect ran but the call was not committed; {reconcile}"),
            Some(json!(records)),
        ),
        // The call's own answer: its intent's sync failed and it was withdrawn before its
        // handler started. Nothing ran, nothing stays spent, and the key is used for good.
        CallError::IntentNotDurable => (
            format!("idempotency key {q}: the call was not committed: the store could not make its intent durable, so its handler was never started: nothing ran and nothing was spent; send it again under another key"),
            None,
        ),
        // A resend of a call withdrawn before its handler started: nothing ran, and the key is
        // used for good. The journal keeps no why (its deadline, or its intent's failed sync),
        // so the words fit both; classified as a deadline's withdrawal, both being refused and
        // retryable, so that an agent does not take it for a call that may still commit.
        CallError::Withdrawn => (
            format!("idempotency key {q}: the first call with this key was withdrawn before its handler started (at its deadline, or because the store could not make its intent durable): nothing ran and nothing was spent; send it again under another key"),
            None,
        ),
        _ => return None,
    };
    let outcome = outcome::of_call_error(error)?;
    Some((INTERNAL_ERROR, message, outcome, records))
}

/// The named errors of a keyed call, for the coordinator outcomes only a key can have;
/// `None` leaves the error to the generic host-failure envelope.
async fn keyed_error(
    ctx: &Ctx<'_>,
    id: &Value,
    key: &str,
    tool: &str,
    args: &Value,
    error: &CallError,
) -> Option<Reply> {
    let episode = &ctx.session.episode;
    let q = quote(key);
    let (code, message, outcome, records) = match error {
        CallError::TaskIdReused => {
            // The coordinator says "reused" both for a key stored with other arguments and for
            // a key whose call is still running: the task table tells them apart.
            let o = outcome::reuse(ctx.state, ctx.session, Surface::Mcp, key, tool, args).await;
            if o.kind == outcome::Kind::Refused {
                (
                    INVALID_PARAMS,
                    format!(
                        "idempotency key {q} was already used with other arguments in this episode"
                    ),
                    o,
                    None,
                )
            } else {
                (
                    INTERNAL_ERROR,
                    format!("idempotency key {q} is held by a call that has not finished; do not resend yet: {}", reconcile(key)),
                    o,
                    None,
                )
            }
        }
        other => keyed_answer(key, other)?,
    };
    let mut data = match outcome.to_json() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    data.insert("idempotencyKey".into(), json!(key));
    data.insert(
        "invocationId".into(),
        json!(Surface::Mcp.invocation_id(episode, key)),
    );
    if let Some(r) = records {
        data.insert("records".into(), r);
    }
    // A reused key, or one whose first call is pending or was withdrawn, stored nothing and
    // cost nothing: logged at most once per episode and kind every 10 s, with how many went
    // unlogged since. An effect that ran and was not committed is logged every time.
    let free = match error {
        CallError::TaskIdReused => Some("mcp_key_reused"),
        // Only a resend: a first call answered NotCommitted may hold an intent and its units.
        CallError::KeyPending => Some("mcp_key_pending"),
        CallError::Withdrawn => Some("mcp_key_withdrawn"),
        _ => None,
    };
    match free.map(|kind| ctx.state.metrics().free_line_due(episode, kind)) {
        None | Some(Some(0)) => {
            tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call with key {key}: {error}")
        }
        Some(Some(unlogged)) => {
            tracing::warn!(%episode, %tool, rpc_id = %id, unlogged, "mcp tools/call with key {key}: {error}")
        }
        Some(None) => {}
    }
    Some(Reply::error_with_data(
        id,
        code,
        message,
        Value::Object(data),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plain(name: &str, arguments: Value) -> Result<CallParams, String> {
        Ok(CallParams {
            name: name.into(),
            arguments,
            key: None,
        })
    }

    #[test]
    fn call_params_shapes() {
        assert_eq!(
            call_params(Some(json!({"name": "t"}))),
            plain("t", json!({}))
        );
        assert_eq!(
            call_params(Some(json!({"name": "t", "arguments": null}))),
            plain("t", json!({}))
        );
        assert_eq!(
            call_params(Some(
                json!({"name": "t", "arguments": {"a": 1}, "_meta": {}})
            )),
            plain("t", json!({"a": 1}))
        );
        assert_eq!(
            call_params(Some(
                json!({"name": "t", "_meta": {"world/idempotencyKey": "k-1.x_y"}})
            )),
            Ok(CallParams {
                name: "t".into(),
                arguments: json!({}),
                key: Some("k-1.x_y".into())
            })
        );
        for bad in [
            json!(""),
            json!("a b"),
            json!(7),
            json!("x".repeat(129)),
            json!(null),
            json!(true),
            json!({}),
            json!([]),
        ] {
            assert_eq!(
                call_params(Some(json!({"name": "t", "_meta": {"world/idempotencyKey": bad}}))),
                Err("invalid params: _meta \"world/idempotencyKey\" must be 1-128 characters of A-Z a-z 0-9 . _ -".into())
            );
        }
        assert_eq!(
            call_params(Some(json!({"name": "t", "arguments": [1]}))),
            Err("invalid params: \"arguments\" must be an object".into())
        );
        assert_eq!(
            call_params(Some(json!({"arguments": {}}))),
            Err("invalid params: \"name\" is missing".into())
        );
        assert_eq!(
            call_params(Some(json!({"name": 1}))),
            Err("invalid params: \"name\" must be a string".into())
        );
        assert!(call_params(None).is_err());
        assert!(call_params(Some(json!(["t"]))).is_err());
    }

    /// The host-failure envelope of a call without a key.
    fn enveloped(failure: InvokeFailure) -> (HostFailure, Line, String) {
        match answer("ep", None, "t", &failure) {
            Answer::Host(host, line, cause) => (host, line, cause),
            other => panic!("{failure:?} was answered {other:?}"),
        }
    }

    /// An intent whose sync failed was withdrawn before its handler started, nothing spent;
    /// over MCP it reached the catch-all and was classified `indeterminate` / `host`, which
    /// tells an agent the effect may have run. It keeps the seed's fixed message, classified
    /// `refused` / `store`, retryable; every other store failure stays `indeterminate`.
    #[test]
    fn an_intent_the_store_could_not_make_durable_is_refused_for_the_store() {
        let (host, line, cause) = enveloped(InvokeFailure::Call(CallError::IntentNotDurable));
        assert_eq!(line, Line::Fault);
        assert_eq!(cause, "invocation was not committed; send a new task id");
        assert_eq!(host.message(), "host callback failed");
        assert_eq!(
            host.outcome().to_json(),
            json!({"kind": "refused", "reason": "store", "retryable": true})
        );
        let (host, _, _) = enveloped(InvokeFailure::Call(CallError::Internal("boom".into())));
        assert_eq!(host.message(), "host callback failed");
        assert_eq!(
            host.outcome().to_json(),
            json!({"kind": "indeterminate", "reason": "host", "retryable": false})
        );
    }

    /// MCP read its classification of a failed call from a table of its own, which said
    /// `indeterminate` / `host` of an effect that ran and was not committed (A2A: `unrecorded`)
    /// and of a call not committed or whose outcome could not be stored (A2A: `pending`), and
    /// "may have run" of a tool that was no longer the session's when it was prepared, though
    /// nothing ran (A2A: `-32602`, unclassified). Every failure is classified as A2A does now,
    /// from `outcome::of_failure`, under the seed's fixed messages: those of a refused request
    /// are `-32602`, as A2A's are.
    #[test]
    fn every_failure_is_classified_over_mcp_as_over_a2a() {
        for failure in outcome::every_failure() {
            let a2a = outcome::of_failure(&failure);
            match (answer("ep", None, "t", &failure), a2a) {
                (Answer::Host(host, _, _), Some(a2a)) => {
                    assert_eq!(host.outcome(), a2a, "{failure:?}");
                }
                (Answer::Refused(code, text, _), None) => {
                    let (want_code, want_text) = match &failure {
                        InvokeFailure::Revoked => (SESSION_REVOKED, REVOKED_WHILE_WAITING.into()),
                        // MCP's word for a tool the session does not see, as its lookup says.
                        InvokeFailure::Call(CallError::NotAuthorized) => {
                            (INVALID_PARAMS, "unknown tool \"t\"".into())
                        }
                        InvokeFailure::Call(e) => (INVALID_PARAMS, e.to_string()),
                        other => panic!("{other:?} is unclassified"),
                    };
                    assert_eq!((code, text), (want_code, want_text), "{failure:?}");
                }
                (mcp, a2a) => panic!("{failure:?}: MCP {mcp:?}, A2A {a2a:?}"),
            }
        }
        let data = |e: CallError| enveloped(InvokeFailure::Call(e)).0.outcome().to_json();
        let unrecorded = CallError::EffectsUnrecorded {
            records: vec![broker_core::object::Ref::of(b"r")],
        };
        assert_eq!(
            data(unrecorded),
            json!({"kind": "indeterminate", "reason": "unrecorded", "retryable": false})
        );
        for e in [CallError::NotCommitted, CallError::EffectUnrecordable] {
            assert_eq!(
                data(e),
                json!({"kind": "indeterminate", "reason": "pending", "retryable": false})
            );
        }
        // A tool withdrawn between the lookup and the preparation: what the lookup says of a
        // tool the session does not see, never A2A's `not authorized` or the host envelope.
        match answer(
            "ep",
            None,
            "ailang-read",
            &InvokeFailure::Call(CallError::NotAuthorized),
        ) {
            Answer::Refused(code, text, data) => {
                assert_eq!(
                    (code, text.as_str()),
                    (-32602, "unknown tool \"ailang-read\"")
                );
                assert_eq!(data, Some(json!({ "why": WITHDRAWN_WHILE_PREPARED })));
            }
            other => panic!("{other:?}"),
        }
    }

    /// The wire keeps the seed's fixed messages whatever the classification says.
    #[test]
    fn the_envelopes_keep_the_seed_messages() {
        let message = |f: InvokeFailure| enveloped(f).0.message();
        assert_eq!(
            message(InvokeFailure::Call(CallError::NotCommitted)),
            "host callback failed"
        );
        assert_eq!(
            message(InvokeFailure::Call(CallError::EffectsUnrecorded {
                records: vec![]
            })),
            "host callback failed"
        );
        assert_eq!(
            message(InvokeFailure::Call(CallError::EffectUnrecordable)),
            "host callback failed"
        );
        assert_eq!(
            message(InvokeFailure::Call(CallError::NoHandler)),
            "host callback failed"
        );
        assert_eq!(
            message(InvokeFailure::Call(CallError::NoTimeToStart)),
            "host callback timed out"
        );
        assert_eq!(message(InvokeFailure::TimedOut), "host callback timed out");
        assert_eq!(message(InvokeFailure::Canceled), "host callback canceled");
        assert_eq!(
            message(InvokeFailure::Busy),
            "host callback capacity exceeded"
        );
        assert_eq!(
            message(InvokeFailure::RefusalRate),
            "host callback capacity exceeded"
        );
        assert_eq!(
            message(InvokeFailure::Call(CallError::StoreFull(
                broker_core::capacity::Full::Disk {
                    free: 1,
                    reserve: 2
                }
            ))),
            "host callback capacity exceeded"
        );
    }

    /// Keyed, the same failure had no arm and was answered the host envelope: it is named,
    /// classified `refused` / `store`. A resend of its key (`Withdrawn`) was told the call was
    /// "withdrawn at its deadline" though no deadline passed: its words fit both withdrawals.
    #[test]
    fn a_keyed_intent_not_made_durable_and_its_resend_say_what_became_of_the_call() {
        let (code, message, outcome, records) =
            keyed_answer("k1", &CallError::IntentNotDurable).unwrap();
        assert_eq!(code, INTERNAL_ERROR);
        assert_eq!(
            message,
            "idempotency key \"k1\": the call was not committed: the store could not make its intent durable, so its handler was never started: nothing ran and nothing was spent; send it again under another key"
        );
        assert_eq!(
            outcome.to_json(),
            json!({"kind": "refused", "reason": "store", "retryable": true})
        );
        assert_eq!(records, None);
        let (code, message, outcome, _) = keyed_answer("k1", &CallError::Withdrawn).unwrap();
        assert_eq!(code, INTERNAL_ERROR);
        assert_eq!(
            message,
            "idempotency key \"k1\": the first call with this key was withdrawn before its handler started (at its deadline, or because the store could not make its intent durable): nothing ran and nothing was spent; send it again under another key"
        );
        assert_eq!(
            outcome.to_json(),
            json!({"kind": "refused", "reason": "deadline", "retryable": true})
        );
        // An error no key decides is left to the host envelope.
        assert!(keyed_answer("k1", &CallError::Internal("boom".into())).is_none());
    }
}
