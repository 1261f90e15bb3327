//! A2A: `POST /a2a/` and the agent card at `GET /.well-known/agent-card.json` (and the older
//! `/.well-known/agent.json`).
//!
//! Three methods reach the same invocation path, each answering in its own version's shape:
//!
//! | method | version | params | result |
//! |---|---|---|---|
//! | `tasks/send` | the contract (pre-0.2) | `id`, `metadata.skill_id`, one `{"type":"data"}` part | a task, `status.state: "completed"` |
//! | `message/send` | 0.3 | `message` with one `{"kind":"data"}` part | a task with `"kind":"task"`, states like `completed` |
//! | `SendMessage` | 1.0 (`A2A-Version: 1.0`) | `message` with one `{"data":…}` part | `{"task": …}`, states like `TASK_STATE_COMPLETED` |
//!
//! For the message methods the skill is named by `skill_id` (or `skillId`) in the request's
//! `metadata` or in `message.metadata`, and the idempotency key is `message.taskId` when
//! present, else `message.messageId` (0.3), or `message.messageId` (1.0, where a `taskId` must
//! name an existing task); the task id of the answer is that key. A committed
//! task's state follows the outcome classification ([`crate::outcome`]): `ok` → completed,
//! `refused`/`denied` → rejected, `failed` → failed (`tasks/send` keeps `completed`).
//!
//! `A2A-Version` (a header, or a query parameter) names `1.0` or `0.3` exactly
//! (`requested_version`); absent, 0.3. Any other value is the specification's
//! `VersionNotSupportedError` (-32009) for every method, and so is a method sent under the
//! version it is not of ([`METHODS`]). Tasks are read back by id, never canceled
//! ([`tasks`]); the methods of what the card declines (streaming, push notifications, the
//! extended card, listing) answer the specification's errors ([`Unsupported`]).
//!
//! Errors are JSON-RPC errors in an HTTP 200, with the fixed messages of the contract; the
//! message methods add `data` with the outcome classification where the question "did it
//! run?" has an answer. The task id is the idempotency key within the episode: resending a
//! committed task id returns the committed result without running the tool again.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use broker_core::coordinator::{Call, CallError, CallOutput, Surface};
use broker_core::object::Ref;
use broker_core::registry::RegistryEntry;
use broker_core::session::{AuthError, Session};
use broker_core::store::StoreError;
use handler_api::EffectClass;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use tokio::time::Instant;

use crate::edge::body::{BodyError, BodyShare};
use crate::json_bounds::{self, Refused};
use crate::outcome::{self, Kind, Outcome};
use crate::rest::ApiError;
use crate::state::{AppState, AuthFailure, InvokeFailure};
use crate::tools;

/// The protocol versions the card advertises for the JSON-RPC binding at `/a2a/`.
pub const A2A_VERSIONS: [&str; 2] = ["1.0", "0.3"];

/// The header naming the client's A2A protocol version (absent means 0.3).
const VERSION_HEADER: &str = "a2a-version";

/// The A2A code for a protocol version a method does not serve.
const VERSION_NOT_SUPPORTED: i64 = -32009;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/a2a/", post(a2a))
        .route("/a2a", post(a2a))
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
}

mod tasks;

/// A JSON-RPC result in an HTTP 200.
fn rpc_result(id: &Value, result: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    (StatusCode::OK, Json(body)).into_response()
}

/// Where a committed call's output goes in a task ([`committed_task`]): a string no other
/// member of an answer holds, replaced by the output's own bytes when the answer is written.
const OUTPUT_MARK: &str = "\u{0}world/committed-output\u{0}";

/// [`rpc_result`] of a task holding [`OUTPUT_MARK`], with the committed `output` written in
/// its place byte for byte: a serde_json value would write its numbers again in its own form
/// (`1e+237` as `1e237`), and the data would no longer be the bytes `outputRef` names.
fn rpc_result_verbatim(id: &Value, mut result: Value, output: &RawValue) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let text = body.to_string();
    let mark = Value::String(OUTPUT_MARK.to_owned()).to_string();
    if text.matches(mark.as_str()).count() == 1 {
        let text = text.replacen(mark.as_str(), output.get(), 1);
        return (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            text,
        )
            .into_response();
    }
    // The mark also in a string of the caller's (its request id): the output as a value.
    let data = serde_json::from_str(output.get()).unwrap_or(Value::Null);
    for at in [
        "/artifacts/0/parts/0/data",
        "/task/artifacts/0/parts/0/data",
    ] {
        if let Some(slot) = result.pointer_mut(at) {
            *slot = data;
            break;
        }
    }
    rpc_result(id, result)
}

/// An A2A-specific error (`-32001` to `-32099`) with the `google.rpc.ErrorInfo` in `data` that
/// A2A 1.0 requires of them (9.5): `reason` names the error, `metadata` says about what.
fn error_info(
    id: &Value,
    code: i64,
    message: &str,
    reason: &str,
    metadata: &[(&str, &str)],
) -> Response {
    let metadata: serde_json::Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect();
    let info = json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": metadata,
    });
    rpc_error_with_data(id, code, message.to_owned(), json!([info]))
}

/// A JSON-RPC error reply in an HTTP 200.
fn rpc_error(id: &Value, code: i64, message: impl Into<String>) -> Response {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}});
    (StatusCode::OK, Json(body)).into_response()
}

/// A JSON-RPC error reply with `data`, in an HTTP 200.
fn rpc_error_with_data(id: &Value, code: i64, message: String, data: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id,
                      "error": {"code": code, "message": message, "data": data}});
    (StatusCode::OK, Json(body)).into_response()
}

/// Which method, hence which version's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// `tasks/send`, the contract's method.
    TasksSend,
    /// `message/send`, A2A 0.3.
    MessageSend,
    /// `SendMessage`, A2A 1.0.
    SendMessage,
}

fn auth_error(id: &Value, f: AuthFailure) -> Response {
    match f {
        AuthFailure::Denied(AuthError::Absent) => rpc_error(
            id,
            -32001,
            "session credential is absent: send Authorization: Bearer <session-credential>",
        ),
        AuthFailure::Denied(AuthError::Malformed) => rpc_error(
            id,
            -32600,
            "malformed Authorization header: expected Bearer <64-hex-credential>",
        ),
        AuthFailure::Denied(AuthError::Unknown) => {
            rpc_error(id, -32001, "unknown session credential")
        }
        AuthFailure::Denied(AuthError::Expired) => {
            rpc_error(id, -32001, "session credential has expired")
        }
        AuthFailure::Internal => rpc_error(
            id,
            -32603,
            "transition invocation is not available in this daemon",
        ),
    }
}

/// The parsed params of any of the three methods.
struct TaskSend {
    /// The idempotency key: the task id of the call and of the answer.
    task_id: String,
    skill_id: String,
    args: Value,
    transition_fn: Option<Ref>,
    /// 1.0: the `taskId` of a message that names a task other than its own message id, which
    /// must be an existing task (A2A 1.0 3.4.2: a client does not choose a new task's id).
    continues: Option<String>,
}

fn parse_params(params: &Value) -> Result<TaskSend, String> {
    let task_id = string_at(params, "id", "params.id")?;
    let metadata = params
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or("params.metadata must be an object naming the skill (\"skill_id\")")?;
    let skill_id = match metadata.get("skill_id") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err("params.metadata.skill_id must be a string, the tool's id".into()),
    };
    let parts = params
        .get("message")
        .and_then(|m| m.get("parts"))
        .and_then(Value::as_array)
        .ok_or("params.message.parts must be an array of one data part")?;
    let part = one_part(parts)?;
    if part.get("type").and_then(Value::as_str) != Some("data") {
        return Err("the part must be {\"type\": \"data\", \"data\": {…}} (tasks/send parts carry \"type\"; message/send's carry \"kind\")".into());
    }
    let args = data_of(part)?;
    let transition_fn = match metadata.get("transition_fn") {
        None => None,
        Some(v) => Some(pin(v)?),
    };
    Ok(TaskSend {
        task_id,
        skill_id,
        args,
        transition_fn,
        continues: None,
    })
}

/// The string member `name` of `v`, non-empty; `at` names it in the refusal.
fn string_at(v: &Value, name: &str, at: &str) -> Result<String, String> {
    match v.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("{at} must not be empty")),
        Some(_) => Err(format!("{at} must be a string")),
        None => Err(format!("{at} is missing")),
    }
}

/// The one part of a message: a call takes its arguments from exactly one data part.
fn one_part(parts: &[Value]) -> Result<&Value, String> {
    match parts {
        [part] => Ok(part),
        _ => Err(format!(
            "the message must hold exactly one part (a data part with the arguments), not {}",
            parts.len()
        )),
    }
}

/// A data part's arguments: a JSON object.
fn data_of(part: &Value) -> Result<Value, String> {
    match part.get("data") {
        Some(args @ Value::Object(_)) => Ok(args.clone()),
        Some(_) => Err("the data part's \"data\" must be an object: the tool's arguments".into()),
        None => Err("the part has no \"data\": a call takes its arguments from a data part".into()),
    }
}

/// A `transition_fn` pin: a `sha256:` ref.
fn pin(v: &Value) -> Result<Ref, String> {
    v.as_str()
        .and_then(|s| s.parse::<Ref>().ok())
        .ok_or_else(|| "metadata transition_fn must be a sha256:<64 hex> ref".to_owned())
}

/// One string member of the request's or the message's `metadata`, under either spelling;
/// `Err` when the two places disagree or the value is not a string.
fn metadata_string(params: &Value, names: [&str; 2]) -> Result<Option<String>, ()> {
    let mut found: Option<String> = None;
    for place in [
        params.get("metadata"),
        params.get("message").and_then(|m| m.get("metadata")),
    ]
    .into_iter()
    .flatten()
    {
        let Some(m) = place.as_object() else {
            return Err(());
        };
        for name in names {
            match m.get(name) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => match &found {
                    Some(f) if f != s => return Err(()),
                    _ => found = Some(s.clone()),
                },
                Some(_) => return Err(()),
            }
        }
    }
    Ok(found)
}

/// Why a send's params were not taken; nothing runs for either.
#[derive(Debug)]
enum NotTaken {
    /// `-32602 invalid params`: their shape is wrong; `data.why` says how.
    Invalid(String),
    /// `-32005`, A2A's `ContentTypeNotSupportedError`: well-formed content of a media type no
    /// skill here takes, or output modes that exclude the one this agent answers in. The
    /// `ErrorInfo` metadata says which, and `why` what to send instead.
    ContentType(Vec<(&'static str, String)>),
}

impl From<String> for NotTaken {
    fn from(why: String) -> Self {
        NotTaken::Invalid(why)
    }
}

impl From<&str> for NotTaken {
    fn from(why: &str) -> Self {
        NotTaken::Invalid(why.to_owned())
    }
}

/// The one media type every skill here takes and answers in (the card's input and output
/// modes).
const JSON_MEDIA_TYPE: &str = "application/json";

/// Whether a media type (or range) is JSON's, its parameters aside.
fn names_json(media_type: &str, ranges: bool) -> bool {
    let bare = media_type.split(';').next().unwrap_or("").trim();
    bare.eq_ignore_ascii_case(JSON_MEDIA_TYPE)
        || (ranges && (bare == "*/*" || bare.eq_ignore_ascii_case("application/*")))
}

/// What one part of a message holds.
enum Content {
    /// A data part's arguments.
    Data(Value),
    /// A well-formed part no skill here takes: what kind of part, and its media type when
    /// the part names one (or its kind implies one).
    Unsupported {
        what: &'static str,
        media_type: Option<String>,
    },
}

/// The content of one part of a `message/send` (`kind`-discriminated: `data`, `text`, `file`)
/// or a `SendMessage` (one of `text`, `raw`, `url`, `data`, with an optional `mediaType`).
/// `Err` when the part is malformed; a well-formed text or file part is [`Content::Unsupported`].
fn part_content(method: Method, part: &Value) -> Result<Content, String> {
    if !part.is_object() {
        return Err("the part must be an object".into());
    }
    let string = |name: &str, what: &str| match part.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(format!("{what}'s \"{name}\" must be a string")),
    };
    if method == Method::MessageSend {
        return match part.get("kind").and_then(Value::as_str) {
            Some("data") => data_of(part).map(Content::Data),
            Some("text") => string("text", "a text part").map(|_| Content::Unsupported {
                what: "a text part",
                media_type: Some("text/plain".into()),
            }),
            Some("file") => {
                let file = part
                    .get("file")
                    .and_then(Value::as_object)
                    .ok_or("a file part's \"file\" must be an object with \"bytes\" or \"uri\"")?;
                let content = ["bytes", "uri"]
                    .iter()
                    .filter(|k| file.get(**k).is_some_and(Value::is_string))
                    .count();
                if content != 1 {
                    return Err(
                        "a file part's \"file\" must hold one of \"bytes\" or \"uri\", a string"
                            .into(),
                    );
                }
                let media_type = match file.get("mimeType") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(m)) => Some(m.clone()),
                    Some(_) => return Err("a file part's \"mimeType\" must be a string".into()),
                };
                Ok(Content::Unsupported {
                    what: "a file part",
                    media_type,
                })
            }
            _ => Err("the part must be {\"kind\": \"data\", \"data\": {…}} (message/send parts carry \"kind\"; tasks/send's carry \"type\")".into()),
        };
    }
    let media_type = match part.get("mediaType") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if !m.is_empty() => Some(m.clone()),
        Some(Value::String(_)) => None,
        Some(_) => return Err("the part's \"mediaType\" must be a string".into()),
    };
    let held: Vec<&str> = ["text", "raw", "url", "data"]
        .into_iter()
        .filter(|k| part.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    match held.as_slice() {
        ["data"] => {
            let args = data_of(part)?;
            match media_type {
                Some(m) if !names_json(&m, false) => Ok(Content::Unsupported {
                    what: "a data part of another media type",
                    media_type: Some(m),
                }),
                _ => Ok(Content::Data(args)),
            }
        }
        ["text"] => string("text", "a text part").map(|_| Content::Unsupported {
            what: "a text part",
            media_type: media_type.or(Some("text/plain".into())),
        }),
        ["raw"] => string("raw", "a file part").map(|_| Content::Unsupported {
            what: "a file part (raw)",
            media_type,
        }),
        ["url"] => string("url", "a file part").map(|_| Content::Unsupported {
            what: "a file part (url)",
            media_type,
        }),
        [] => Err("the part has no \"data\": a call takes its arguments from a data part".into()),
        more => Err(format!(
            "a part holds only one of \"text\", \"raw\", \"url\" and \"data\"; this one holds {}",
            more.iter()
                .map(|k| format!("\"{k}\""))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The arguments of a message's parts: its one data part's. A part no skill takes is `-32005`
/// (it is so whatever else the message holds); more parts or none are `-32602`.
fn arguments_of(contents: Vec<Content>) -> Result<Value, NotTaken> {
    let n = contents.len();
    let mut data = None;
    for content in contents {
        match content {
            Content::Data(args) => data = Some(args),
            Content::Unsupported { what, media_type } => {
                let why = format!("{what} is not taken: every skill here takes one data part, the arguments object ({JSON_MEDIA_TYPE}, the card's inputModes); send that part alone");
                let mut metadata = vec![("supported", JSON_MEDIA_TYPE.to_owned())];
                if let Some(m) = media_type {
                    metadata.insert(0, ("mediaType", m));
                }
                metadata.push(("why", why));
                return Err(NotTaken::ContentType(metadata));
            }
        }
    }
    match (n, data) {
        (1, Some(args)) => Ok(args),
        _ => Err(NotTaken::Invalid(format!(
            "the message must hold exactly one part (a data part with the arguments), not {n}"
        ))),
    }
}

/// `value`, when present, is a count (0 or more); `at` names it in the refusal. The send's
/// `configuration.historyLength` and the task read's `historyLength` are checked alike.
fn count_at(value: Option<&Value>, at: &str) -> Result<(), String> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(()),
        Some(_) => Err(format!("{at} must be a count (0 or more)")),
    }
}

/// The output modes `params.configuration` accepts (empty when it names none, which accepts
/// any), after checking its members' types: `acceptedOutputModes` an array of strings,
/// `historyLength` a count, and the version's flag (`blocking`, `returnImmediately`) a boolean.
fn accepted_output_modes(method: Method, params: &Value) -> Result<Vec<String>, String> {
    let configuration = match params.get("configuration") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(c)) => c,
        Some(_) => return Err("params.configuration must be an object".into()),
    };
    count_at(
        configuration.get("historyLength"),
        "params.configuration.historyLength",
    )?;
    let flag = match method {
        Method::SendMessage => "returnImmediately",
        _ => "blocking",
    };
    if !matches!(
        configuration.get(flag),
        None | Some(Value::Null | Value::Bool(_))
    ) {
        return Err(format!("params.configuration.{flag} must be true or false"));
    }
    let not_modes =
        "params.configuration.acceptedOutputModes must be an array of media types (strings)";
    match configuration.get("acceptedOutputModes") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(modes)) => modes
            .iter()
            .map(|m| m.as_str().map(str::to_owned).ok_or(not_modes.to_owned()))
            .collect(),
        Some(_) => Err(not_modes.into()),
    }
}

/// `message/send` (0.3: parts carry `kind`) and `SendMessage` (1.0: parts are unified, a data
/// part is `{"data": …}`), from a session of `episode`. Everything is checked before anything
/// runs: the shape first (`-32602`), then what the client sends and accepts (`-32005`).
fn parse_message_params(
    method: Method,
    params: &Value,
    episode: &str,
) -> Result<TaskSend, NotTaken> {
    let message = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or("params.message must be an object")?;
    // A message sent to an agent is the user's (0.3 "user", 1.0 "ROLE_USER").
    let (version, user) = match method {
        Method::SendMessage => ("1.0", "ROLE_USER"),
        _ => ("0.3", "user"),
    };
    let sent = match message.get("role") {
        Some(Value::String(role)) if role == user => None,
        Some(Value::String(role)) => Some(dialect::quote::quote(role)),
        Some(_) => Some("not a string".to_owned()),
        None => Some("missing".to_owned()),
    };
    if let Some(sent) = sent {
        return Err(format!(
            "params.message.role must be \"{user}\" (A2A {version}: a message sent to an agent is the user's); it is {sent}"
        )
        .into());
    }
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .ok_or("params.message.parts must be an array of one data part")?;
    let contents = parts
        .iter()
        .map(|part| part_content(method, part))
        .collect::<Result<Vec<_>, _>>()?;
    let both = "the metadata of the request and of the message disagree, or one is not a string";
    let skill_id = metadata_string(params, ["skill_id", "skillId"])
        .map_err(|()| format!("skill_id: {both}"))?
        .ok_or("metadata.skill_id (or skillId) must name the tool, in params.metadata or params.message.metadata")?;
    let transition_fn = match metadata_string(params, ["transition_fn", "transitionFn"])
        .map_err(|()| format!("transition_fn: {both}"))?
    {
        None => None,
        Some(p) => Some(pin(&Value::String(p))?),
    };
    let text = |name: &str| match message.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(format!("params.message.{name} must be a non-empty string")),
    };
    // The server defines contexts, and this one has one per session: its episode, which every
    // task answer names. A message naming another cannot be placed in it.
    if let Some(context) = text("contextId")? {
        if context != episode {
            return Err(format!(
                "params.message.contextId {} is no context of this agent: every task of this session is in the context {} (its episode); send that, or no contextId",
                dialect::quote::quote(&context),
                dialect::quote::quote(episode)
            )
            .into());
        }
    }
    let (task_id, continues) = match (method, text("taskId")?, text("messageId")?) {
        // 1.0: the message id names a new task and is its key; a task id names an existing one.
        (Method::SendMessage, t, Some(m)) => (m.clone(), t.filter(|t| *t != m)),
        (Method::SendMessage, _, None) => {
            return Err("params.message.messageId is missing: it names the task it starts".into())
        }
        (_, Some(t), _) => (t, None),
        (_, None, Some(m)) => (m, None),
        (_, None, None) => {
            return Err(
                "params.message needs a taskId (or a messageId, which then names the task)".into(),
            )
        }
    };
    let accepted = accepted_output_modes(method, params)?;
    let args = arguments_of(contents)?;
    // Every answer's artifact is JSON: a client that accepts none of it is told before
    // anything runs, rather than sent what it said it cannot read.
    if !accepted.is_empty() && !accepted.iter().any(|m| names_json(m, true)) {
        return Err(NotTaken::ContentType(vec![
            ("acceptedOutputModes", accepted.join(", ")),
            ("supported", JSON_MEDIA_TYPE.to_owned()),
            ("why", format!("every task's artifact is {JSON_MEDIA_TYPE} (the card's outputModes), which params.configuration.acceptedOutputModes does not list: accept {JSON_MEDIA_TYPE} (or */*), or send no acceptedOutputModes")),
        ]));
    }
    Ok(TaskSend {
        task_id,
        skill_id,
        args,
        transition_fn,
        continues,
    })
}

/// The A2A versions this server speaks (the card's [`A2A_VERSIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// `SendMessage`.
    V1_0,
    /// `message/send`, and what no `A2A-Version` means.
    V0_3,
}

/// The version the request names, by its `Major.Minor` exactly (A2A 3.6: a patch number,
/// which requests should not carry, is not considered), in the `A2A-Version` header or the
/// query parameter of that name (3.6.1), which must then agree; named nowhere (or empty), 0.3
/// (3.6.2). `Err` holds what was sent when it names no version spoken here: anything but
/// digits `Major.Minor[.Patch]` (trailing text, whitespace inside, signs, a major alone, a
/// list), another version (`1.2`, `2.0`, `01.0`), the field sent twice
/// ([`crate::edge::fields`]), a header and a parameter that disagree, or a query that does
/// not parse. Only the whitespace around a header's value, which is not part of it (HTTP), is
/// passed over.
fn requested_version(headers: &HeaderMap, uri: &Uri) -> Result<Version, String> {
    let header = header_version(headers)?;
    let parameter = query_version(uri)?;
    match (header, parameter) {
        (None, None) => Ok(Version::V0_3),
        (Some((v, _)), None) | (None, Some((v, _))) => Ok(v),
        (Some((a, _)), Some((b, _))) if a == b => Ok(a),
        (Some((_, a)), Some((_, b))) => Err(format!("{a}, {b}")),
    }
}

/// The `A2A-Version` header's version and text, `None` when absent or empty.
fn header_version(headers: &HeaderMap) -> Result<Option<(Version, String)>, String> {
    let asked = || crate::edge::fields::texts(headers, VERSION_HEADER).join(", ");
    let value = match crate::edge::fields::single(headers, VERSION_HEADER) {
        Err(_) => return Err(asked()),
        Ok(None) => return Ok(None),
        Ok(Some(value)) => value,
    };
    let Ok(text) = value.to_str() else {
        return Err(asked());
    };
    let text = text.trim_matches([' ', '\t']);
    if text.is_empty() {
        return Ok(None);
    }
    version_of(text)
        .map(|v| Some((v, text.to_owned())))
        .ok_or_else(asked)
}

/// The `A2A-Version` query parameter's version and text (its name matched without regard to
/// case, as the header's is), `None` when absent or empty.
fn query_version(uri: &Uri) -> Result<Option<(Version, String)>, String> {
    let Some(query) = uri.query() else {
        return Ok(None);
    };
    let Ok(axum::extract::Query(pairs)) =
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
    else {
        return Err(query.to_owned());
    };
    let mut named = pairs
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(VERSION_HEADER));
    let (first, second) = (named.next(), named.next());
    match (first, second) {
        (None, _) => Ok(None),
        (Some((_, a)), Some((_, b))) => Err(format!("{a}, {b}")),
        (Some((_, text)), None) if text.is_empty() => Ok(None),
        (Some((_, text)), None) => match version_of(&text) {
            Some(v) => Ok(Some((v, text))),
            None => Err(text),
        },
    }
}

/// `Major.Minor[.Patch]` in digits, naming a version spoken here.
fn version_of(text: &str) -> Option<Version> {
    let parts: Vec<&str> = text.split('.').collect();
    let number = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(number) {
        return None;
    }
    match (parts[0], parts[1]) {
        ("1", "0") => Some(Version::V1_0),
        ("0", "3") => Some(Version::V0_3),
        _ => None,
    }
}

impl Version {
    fn number(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V0_3 => "0.3",
        }
    }

    fn other(self) -> Version {
        match self {
            Version::V1_0 => Version::V0_3,
            Version::V0_3 => Version::V1_0,
        }
    }
}

/// What a method asks of `/a2a/`.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Call a tool: the send method, whose shapes the answer takes.
    Send(Method),
    /// Read a task back; the version's send method gives the task's shape.
    Read(tasks::Read, Method),
    /// A method of the specification this agent does not offer (its card says so).
    Unsupported(Unsupported),
}

/// The methods a client may send that this agent's card declines.
#[derive(Debug, Clone, Copy)]
enum Unsupported {
    /// `capabilities.streaming: false`.
    Streaming,
    /// `capabilities.pushNotifications: false`.
    Push,
    /// 1.0's `GetExtendedAgentCard` under `capabilities.extendedAgentCard: false`.
    ExtendedCard,
    /// 0.3's `agent/getAuthenticatedExtendedCard` (`supportsAuthenticatedExtendedCard` unset).
    ExtendedCardNotConfigured,
    /// 1.0's `ListTasks`.
    Listing,
}

impl Unsupported {
    /// The specification's error for it, its message exactly, with why in the `ErrorInfo`.
    fn answer(self, id: &Value) -> Response {
        let (code, message, reason, why) = match self {
            Unsupported::Streaming => (-32004, "This operation is not supported", "UNSUPPORTED_OPERATION",
                "streaming is not supported (the agent card's capabilities.streaming is false): send the message without streaming, and read a task back by its id"),
            Unsupported::Push => (-32003, "Push Notification is not supported", "PUSH_NOTIFICATION_NOT_SUPPORTED",
                "push notifications are not supported (the agent card's capabilities.pushNotifications is false): read a task back by its id"),
            Unsupported::ExtendedCard => (-32004, "This operation is not supported", "UNSUPPORTED_OPERATION",
                "there is no extended agent card (the card's capabilities.extendedAgentCard is false): the card at /.well-known/agent-card.json, read with the credential, lists every tool this session may call"),
            Unsupported::ExtendedCardNotConfigured => (-32007, "Authenticated Extended Card not configured", "AUTHENTICATED_EXTENDED_CARD_NOT_CONFIGURED",
                "there is no extended agent card: the card at /.well-known/agent-card.json, read with the credential, lists every tool this session may call"),
            Unsupported::Listing => (-32004, "This operation is not supported", "UNSUPPORTED_OPERATION",
                "tasks are not listed: read each task back by its id with GetTask (the id its SendMessage answered with)"),
        };
        error_info(id, code, message, reason, &[("why", why)])
    }
}

/// Every method `/a2a/` answers: its name, the version whose method it is, what it asks, and
/// its counterpart in the other version, named when a request sends it under the wrong one.
/// `tasks/send`, the contract's method from before 0.2, is served under 0.3.
const METHODS: &[(&str, Version, Op, Option<&str>)] = {
    use tasks::Read::{Cancel, Get};
    use Method::{MessageSend, SendMessage, TasksSend};
    use Op::{Read, Send};
    use Unsupported::*;
    use Version::{V0_3, V1_0};
    &[
        ("tasks/send", V0_3, Send(TasksSend), Some("SendMessage")),
        ("message/send", V0_3, Send(MessageSend), Some("SendMessage")),
        ("SendMessage", V1_0, Send(SendMessage), Some("message/send")),
        ("tasks/get", V0_3, Read(Get, MessageSend), Some("GetTask")),
        ("GetTask", V1_0, Read(Get, SendMessage), Some("tasks/get")),
        (
            "tasks/cancel",
            V0_3,
            Read(Cancel, MessageSend),
            Some("CancelTask"),
        ),
        (
            "CancelTask",
            V1_0,
            Read(Cancel, SendMessage),
            Some("tasks/cancel"),
        ),
        (
            "message/stream",
            V0_3,
            Op::Unsupported(Streaming),
            Some("SendStreamingMessage"),
        ),
        (
            "SendStreamingMessage",
            V1_0,
            Op::Unsupported(Streaming),
            Some("message/stream"),
        ),
        (
            "tasks/resubscribe",
            V0_3,
            Op::Unsupported(Streaming),
            Some("SubscribeToTask"),
        ),
        (
            "SubscribeToTask",
            V1_0,
            Op::Unsupported(Streaming),
            Some("tasks/resubscribe"),
        ),
        (
            "tasks/pushNotificationConfig/set",
            V0_3,
            Op::Unsupported(Push),
            Some("CreateTaskPushNotificationConfig"),
        ),
        (
            "CreateTaskPushNotificationConfig",
            V1_0,
            Op::Unsupported(Push),
            Some("tasks/pushNotificationConfig/set"),
        ),
        (
            "tasks/pushNotificationConfig/get",
            V0_3,
            Op::Unsupported(Push),
            Some("GetTaskPushNotificationConfig"),
        ),
        (
            "GetTaskPushNotificationConfig",
            V1_0,
            Op::Unsupported(Push),
            Some("tasks/pushNotificationConfig/get"),
        ),
        (
            "tasks/pushNotificationConfig/list",
            V0_3,
            Op::Unsupported(Push),
            Some("ListTaskPushNotificationConfigs"),
        ),
        (
            "ListTaskPushNotificationConfigs",
            V1_0,
            Op::Unsupported(Push),
            Some("tasks/pushNotificationConfig/list"),
        ),
        (
            "tasks/pushNotificationConfig/delete",
            V0_3,
            Op::Unsupported(Push),
            Some("DeleteTaskPushNotificationConfig"),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            V1_0,
            Op::Unsupported(Push),
            Some("tasks/pushNotificationConfig/delete"),
        ),
        (
            "agent/getAuthenticatedExtendedCard",
            V0_3,
            Op::Unsupported(ExtendedCardNotConfigured),
            Some("GetExtendedAgentCard"),
        ),
        (
            "GetExtendedAgentCard",
            V1_0,
            Op::Unsupported(ExtendedCard),
            Some("agent/getAuthenticatedExtendedCard"),
        ),
        ("ListTasks", V1_0, Op::Unsupported(Listing), None),
    ]
};

/// The method a request names, when the version it was sent under is that method's; else
/// `-32601 method not found`, or the specification's `VersionNotSupportedError` (-32009),
/// which names the version to send or the other version's method (A2A 3.6.2: a request is
/// served by the semantics of the version it names, or refused).
fn routed(req: &Value, asked: Result<Version, String>, id: &Value) -> Result<Op, Box<Response>> {
    // The envelope (`jsonrpc`, the id's and the method's types) was checked by [`envelope`].
    let name = req.get("method").and_then(Value::as_str).unwrap_or("");
    let Some(&(name, own, op, counterpart)) = METHODS.iter().find(|m| m.0 == name) else {
        return Err(Box::new(rpc_error(id, -32601, "method not found")));
    };
    let asked_text = match &asked {
        Ok(v) if *v == own => return Ok(op),
        Ok(v) => v.number().to_owned(),
        Err(text) => text.clone(),
    };
    let quoted = dialect::quote::quote(&asked_text);
    let message = match (own, counterpart) {
        // The contract's message for the 0.3 senders under a version no method here serves.
        (Version::V0_3, _) if asked.is_err() => format!("A2A version {quoted} is not supported; supported: 1.0 (SendMessage), 0.3 (message/send; also when A2A-Version is absent)"),
        (own, Some(other)) => format!(
            "A2A version {quoted} is not supported by {name}; send A2A-Version: {} (or use {other} for {})",
            own.number(),
            own.other().number()
        ),
        (own, None) => format!(
            "A2A version {quoted} is not supported by {name}; send A2A-Version: {}",
            own.number()
        ),
    };
    Err(Box::new(error_info(
        id,
        VERSION_NOT_SUPPORTED,
        &message,
        "VERSION_NOT_SUPPORTED",
        &[("requested", &asked_text), ("supported", "1.0, 0.3")],
    )))
}

async fn a2a(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: axum::body::Body,
) -> Response {
    let deadline = Instant::now() + state.limits().call_deadline;
    // `_share` keeps the request's place in the body budget until it is answered: queued
    // behind its episode or the large-call lane, a call holds what was parsed from its body.
    let (session, req, body_bytes, _share) = match received(&state, &headers, body, deadline).await
    {
        Ok(received) => received,
        Err(answer) => return answer,
    };
    let id = match envelope(&req) {
        Ok(Some(id)) => id,
        // A notification: JSON-RPC gives it no answer, so nothing is run that no one hears of.
        Ok(None) => return StatusCode::ACCEPTED.into_response(),
        Err(why) => {
            return rpc_error(
                &Value::Null,
                -32600,
                format!("invalid JSON-RPC request: {why}"),
            )
        }
    };
    let method = match routed(&req, requested_version(&headers, &uri), &id) {
        Ok(Op::Send(method)) => method,
        Ok(Op::Read(read, shape)) => {
            let params = req.get("params").unwrap_or(&Value::Null);
            return tasks::answer(&state, &session, &id, read, shape, params).await;
        }
        Ok(Op::Unsupported(what)) => return what.answer(&id),
        Err(answer) => return *answer,
    };
    let send = match sent(method, &req, &id, &session.episode) {
        Ok(send) => send,
        Err(answer) => return *answer,
    };
    if let Some(task) = &send.continues {
        return tasks::continued(&state, &session, &id, task).await;
    }
    let class = match skill_class(&state, &session, &send.skill_id, &id).await {
        Ok(class) => class,
        Err(answer) => return answer,
    };
    // The one context of every task of this session (a send naming another was refused).
    let context_id = session.episode.clone();
    let call_session = session.clone();
    let call = Call {
        surface: Surface::A2a,
        session,
        skill_id: send.skill_id.clone(),
        task_id: Some(send.task_id.clone()),
        args: send.args.clone(),
        transition_fn: send.transition_fn,
    };
    match state.invoke(call, deadline, body_bytes).await {
        Ok(out) => {
            let outcome = outcome::of_output(&out, class);
            success(&id, method, &send.task_id, &context_id, &out, &outcome)
        }
        Err(f) if method == Method::TasksSend => invoke_error(&id, f),
        Err(f) => failed(&state, &call_session, &id, &send, f).await,
    }
}

/// The request's id (`None` for a notification), or why the message is no JSON-RPC 2.0
/// request: an id that is not a string, a number or null; a method that is not a string; a
/// message that is both a request and a response (`method` beside `result` or `error`),
/// which a proxy reading it as a response would let through while this daemon ran it.
fn envelope(req: &Value) -> Result<Option<Value>, &'static str> {
    let Some(m) = req.as_object() else {
        return Err("expected a JSON-RPC object");
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("\"jsonrpc\" must be \"2.0\"");
    }
    match m.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return Err("\"method\" must be a string"),
        None => return Err("a request needs \"method\""),
    }
    if m.contains_key("result") || m.contains_key("error") {
        return Err(
            "a message is a request (\"method\") or a response (\"result\", \"error\"), not both",
        );
    }
    match m.get("id") {
        None => Ok(None),
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Ok(Some(id.clone())),
        Some(_) => Err("\"id\" must be a string, a number or null"),
    }
}

/// The caller's session, its request parsed strictly, the request body's size and its place
/// in the body budget. Authorization comes first, from the headers alone: an unauthorized
/// caller learns nothing about the transport, and no body is read for it (its id is unknown,
/// so errors carry null).
async fn received(
    state: &AppState,
    headers: &HeaderMap,
    body: axum::body::Body,
    deadline: Instant,
) -> Result<(Arc<Session>, Value, usize, BodyShare), Response> {
    let null = Value::Null;
    let session = state
        .authenticate(headers)
        .await
        .map_err(|f| auth_error(&null, f))?;
    let limit = state.limits().a2a_body_bytes;
    let read_by = deadline.min(Instant::now() + state.server().body_timeout);
    let body = match state.bodies().read(headers, body, limit, read_by).await {
        Ok(b) => b,
        Err(unread) => {
            let why = match unread {
                BodyError::Busy(busy) => return Err(rpc_error(&null, -32603, busy.text())),
                BodyError::TooLarge => format!("body exceeds {limit} bytes"),
                BodyError::TimedOut => "body not received in time".to_owned(),
                BodyError::Coded(coding) => coding.text(),
                BodyError::TooManyPieces(n) => crate::edge::body::too_many_pieces(n),
                BodyError::Unreadable(cause) => crate::edge::body::unreadable(&cause),
            };
            return Err(rpc_error(
                &null,
                -32600,
                format!("invalid JSON-RPC request: {why}"),
            ));
        }
    };
    let (bytes, mut share) = body.split();
    // What the parse builds is held in the body budget until the call is answered.
    match json_bounds::held(
        state,
        headers,
        &mut share,
        &bytes,
        json_bounds::parse_strict,
    ) {
        Ok(req) => Ok((session, req, bytes.len(), share)),
        Err(Refused::Busy(busy)) => Err(rpc_error(&null, -32603, busy.text())),
        // The parser's account says what and where (line, column, byte), in one bounded line.
        Err(Refused::Unparsed(e)) => Err(
            match crate::invalid_params::params_error(
                &bytes,
                &e,
                state.limits().json_values,
                crate::invalid_params::Envelope::Canonical,
            ) {
                Some(id) => rpc_error(&id, -32602, "invalid params"),
                // Text that is no JSON value (JSON-RPC's and A2A's `-32700`), as MCP answers it.
                None if not_json(&e) => rpc_error(
                    &null,
                    -32700,
                    format!(
                        "Parse error: {}; nothing was run",
                        crate::json_bounds::strict_account(&e)
                    ),
                ),
                // JSON this daemon does not take: past the value limit, or a number without an
                // exact canonical form.
                None => rpc_error(
                    &null,
                    -32600,
                    format!(
                        "invalid JSON-RPC request: {}",
                        crate::json_bounds::strict_account(&e)
                    ),
                ),
            },
        ),
    }
}

/// Whether the strict parser stopped because the text is no JSON value (or an object names a
/// member twice, which MCP answers the same way), rather than at a bound of this daemon's.
fn not_json(e: &broker_core::canon::CanonError) -> bool {
    use broker_core::canon::CanonError as E;
    match e {
        E::NotUtf8 | E::Syntax { .. } | E::DuplicateKey { .. } | E::LoneSurrogate => true,
        E::TooDeep { .. } | E::TrailingData => true,
        E::UnsafeInteger { .. } | E::NonFinite | E::NumberOutOfRange { .. } => false,
        E::TooManyValues { .. } => false,
    }
}

/// What a send method's params ask for, or the JSON-RPC error that answers them (boxed: a
/// response is large beside what it stands in for).
fn sent(method: Method, req: &Value, id: &Value, episode: &str) -> Result<TaskSend, Box<Response>> {
    let params = req.get("params").unwrap_or(&Value::Null);
    let parsed = match method {
        Method::TasksSend => parse_params(params).map_err(NotTaken::Invalid),
        _ => parse_message_params(method, params, episode),
    };
    // The contract's message, and in `data` what was wrong with the params.
    let invalid = |why: String| {
        Box::new(rpc_error_with_data(
            id,
            -32602,
            "invalid params".into(),
            json!({ "why": why }),
        ))
    };
    let send = parsed.map_err(|not| match not {
        NotTaken::Invalid(why) => invalid(why),
        NotTaken::ContentType(metadata) => {
            let metadata: Vec<(&str, &str)> =
                metadata.iter().map(|(k, v)| (*k, v.as_str())).collect();
            Box::new(error_info(
                id,
                -32005,
                "Incompatible content types",
                "CONTENT_TYPE_NOT_SUPPORTED",
                &metadata,
            ))
        }
    })?;
    if !broker_core::task::valid_task_id(&send.task_id) {
        return Err(invalid(
            "the task id must be 1-128 characters of A-Z a-z 0-9 . _ -".into(),
        ));
    }
    Ok(send)
}

/// The class of the skill, when this session sees it. Visibility is rebuilt for this request:
/// having seen a skill conveys no authority.
async fn skill_class(
    state: &AppState,
    session: &Session,
    skill_id: &str,
    id: &Value,
) -> Result<EffectClass, Response> {
    match tools::visible(state, session).await {
        Ok(v) => match v.iter().find(|e| e.transition.id == skill_id) {
            Some(e) => Ok(tools::tool_class(state, &e.transition)),
            None => Err(rpc_error(id, -32602, "not authorized")),
        },
        Err(e) => {
            tracing::error!("a2a refusal: {e}");
            Err(rpc_error(
                id,
                -32603,
                "transition invocation is not available in this daemon",
            ))
        }
    }
}

/// The JSON-RPC error of a `message/send` or `SendMessage` that did not commit, with the
/// outcome in its data where one is known.
async fn failed(
    state: &AppState,
    session: &Session,
    id: &Value,
    send: &TaskSend,
    f: InvokeFailure,
) -> Response {
    let mut o = outcome::of_failure(&f);
    if matches!(f, InvokeFailure::Call(CallError::TaskIdReused)) {
        o = Some(
            outcome::reuse(
                state,
                session,
                Surface::A2a,
                &send.task_id,
                &send.skill_id,
                &send.args,
            )
            .await,
        );
    }
    let records = match &f {
        InvokeFailure::Call(CallError::EffectsUnrecorded { records }) => Some(records.clone()),
        _ => None,
    };
    let (code, message) = error_text(f);
    match o {
        None => rpc_error(id, code, message),
        Some(o) => {
            let mut data = o.to_json();
            data["taskId"] = json!(send.task_id);
            if let Some(r) = records {
                data["records"] = json!(r);
            }
            rpc_error_with_data(id, code, message, data)
        }
    }
}

/// The A2A task state of a committed call.
fn task_state(method: Method, outcome: &Outcome) -> &'static str {
    let (v03, v10) = match outcome.kind {
        Kind::Ok => ("completed", "TASK_STATE_COMPLETED"),
        Kind::Refused | Kind::Denied => ("rejected", "TASK_STATE_REJECTED"),
        Kind::Failed | Kind::Indeterminate => ("failed", "TASK_STATE_FAILED"),
    };
    match method {
        // The contract: every committed result is a completed task.
        Method::TasksSend => "completed",
        Method::MessageSend => v03,
        Method::SendMessage => v10,
    }
}

fn success(
    id: &Value,
    method: Method,
    task_id: &str,
    context_id: &str,
    out: &CallOutput,
    outcome: &Outcome,
) -> Response {
    match committed_task(method, task_id, context_id, out, outcome) {
        // 1.0 answers a send with the task in `task` (a send may also answer a message).
        Ok((task, raw)) if method == Method::SendMessage => {
            rpc_result_verbatim(id, json!({ "task": task }), &raw)
        }
        Ok((task, raw)) => rpc_result_verbatim(id, task, &raw),
        Err(why) => rpc_error(id, -32603, why),
    }
}

/// The task of a committed call in `method`'s version, with [`OUTPUT_MARK`] where its output
/// goes, and the output, to be written there verbatim ([`rpc_result_verbatim`]).
fn committed_task(
    method: Method,
    task_id: &str,
    context_id: &str,
    out: &CallOutput,
    outcome: &Outcome,
) -> Result<(Value, Box<RawValue>), &'static str> {
    let not_an_object = "transition output is not a JSON object";
    let text = std::str::from_utf8(&out.output).map_err(|_| not_an_object)?;
    let output = RawValue::from_string(text.to_owned()).map_err(|_| not_an_object)?;
    let raw = OUTPUT_MARK;
    let metadata = outcome::a2a_metadata(out, outcome);
    let state = task_state(method, outcome);
    let task = match method {
        Method::TasksSend => json!({
            "id": task_id,
            "status": {"state": state},
            "artifacts": [{"parts": [{"type": "data", "data": raw}]}],
            "metadata": metadata,
        }),
        Method::MessageSend => json!({
            "kind": "task",
            "id": task_id,
            "contextId": context_id,
            "status": {"state": state},
            "artifacts": [{"artifactId": "output", "name": "output",
                           "parts": [{"kind": "data", "data": raw}]}],
            "metadata": metadata,
        }),
        Method::SendMessage => json!({
            "id": task_id,
            "contextId": context_id,
            "status": {"state": state},
            "artifacts": [{"artifactId": "output", "name": "output",
                           "parts": [{"data": raw, "mediaType": "application/json"}]}],
            "metadata": metadata,
        }),
    };
    Ok((task, output))
}

fn invoke_error(id: &Value, f: InvokeFailure) -> Response {
    let (code, message) = error_text(f);
    rpc_error(id, code, message)
}

/// The contract's code and message for a failed invocation.
fn error_text(f: InvokeFailure) -> (i64, String) {
    let (code, message) = match f {
        InvokeFailure::Call(e) => {
            let code = match e {
                CallError::InvalidTaskId | CallError::InvalidArguments(_) => -32602,
                CallError::NotAuthorized | CallError::PinMismatch | CallError::TaskIdReused => {
                    -32602
                }
                _ => -32603,
            };
            let message = match &e {
                CallError::InvalidTaskId | CallError::InvalidArguments(_) => {
                    "invalid params".to_owned()
                }
                // The contract's timeout text; the classification says nothing ran.
                CallError::NoTimeToStart | CallError::PreflightTimedOut => {
                    "invocation exceeded its deadline".to_owned()
                }
                // No room to write: the store-full text; the log says "disk full" or the map size.
                CallError::Store(s)
                    if s.is_disk_full() || matches!(s, StoreError::MapFull { .. }) =>
                {
                    tracing::error!("a2a refusal: {e}");
                    broker_core::capacity::Full::AGENT_MESSAGE.to_owned()
                }
                CallError::Store(_) | CallError::Registry(_) | CallError::Internal(_) => {
                    tracing::error!("a2a refusal: {e}");
                    "transition invocation is not available in this daemon".to_owned()
                }
                other => other.to_string(),
            };
            (code, message)
        }
        InvokeFailure::Capacity => (-32603, "host callback capacity exceeded".to_owned()),
        InvokeFailure::Busy => (
            -32603,
            "episode busy: an earlier call of this episode has not finished; nothing ran; retry later"
                .to_owned(),
        ),
        InvokeFailure::TimedOut => (-32603, "invocation exceeded its deadline".to_owned()),
        InvokeFailure::Canceled => (
            -32603,
            "invocation outcome is not confirmed; resend the same task id".to_owned(),
        ),
        InvokeFailure::Revoked => (-32001, crate::state::REVOKED_WHILE_WAITING.to_owned()),
    };
    (code, message)
}

async fn agent_card(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = state
        .authenticate(&headers)
        .await
        .map_err(ApiError::from_auth)?;
    // Never built from the request: its Host header is the attacker's to choose.
    let base = state.server().public_base();
    let tools = tools::visible(&state, &session)
        .await
        .map_err(|e| ApiError::internal("agent card", e))?;
    let skills: Vec<(&RegistryEntry, EffectClass)> = tools
        .iter()
        .map(|e| (e, tools::tool_class(&state, &e.transition)))
        .collect();
    Ok(Json(card(&base, &skills)).into_response())
}

/// The agent card for these tools, each with its effect class. One document serves both
/// client generations: the 0.3 fields (`url`, `protocolVersion`, `preferredTransport`, the
/// `securitySchemes` with `type`, `security`) and the 1.0 `supportedInterfaces`, which 1.0
/// clients prefer (the 0.3 members are then ignored). Each skill's `tags` hold its effect
/// class: `read`, `write` or `unknown`.
pub fn card(base: &str, tools: &[(&RegistryEntry, EffectClass)]) -> Value {
    let skills: Vec<Value> = tools
        .iter()
        .map(|(e, class)| {
            let t = &e.transition;
            json!({
                "id": t.id,
                "name": t.title,
                "description": t.description,
                "tags": [tools::class_name(*class)],
                "examples": [],
                "inputModes": ["application/json"],
                "outputModes": ["application/json"],
            })
        })
        .collect();
    let url = format!("{base}/a2a/");
    let interfaces: Vec<Value> = A2A_VERSIONS
        .iter()
        .map(|v| json!({"url": url, "protocolBinding": "JSONRPC", "protocolVersion": v}))
        .collect();
    json!({
        "name": "worldd",
        "description": "World effect broker: every tool call is planned, admitted against capability grants, executed by a plugin and committed to a verifiable log.",
        "url": url,
        "version": env!("CARGO_PKG_VERSION"),
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "supportedInterfaces": interfaces,
        "capabilities": {"streaming": false, "pushNotifications": false, "stateTransitionHistory": false, "extendedAgentCard": false},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "the worldd session credential (worldd session new)"}},
        "security": [{"bearer": []}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
    })
}
