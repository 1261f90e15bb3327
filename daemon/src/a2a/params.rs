//! A send's params, checked before anything runs: `tasks/send`'s (the contract's
//! `id`, `metadata.skill_id`, one `{"type":"data"}` part), and `message/send`'s and
//! `SendMessage`'s message (its role, parts, `contextId`, `taskId` and `messageId`) and
//! configuration. A wrong shape is `-32602 invalid params`, content no skill takes `-32005`.

use axum::response::Response;
use broker_core::object::Ref;
use serde_json::{json, Value};

use super::errors::{error_info, error_with_data};
use super::version::Method;

/// The parsed params of any of the three methods.
pub(super) struct TaskSend {
    /// The idempotency key: the task id of the call and of the answer.
    pub(super) task_id: String,
    pub(super) skill_id: String,
    pub(super) args: Value,
    pub(super) transition_fn: Option<Ref>,
    /// 1.0: the `taskId` of a message that names a task other than its own message id, which
    /// must be an existing task (A2A 1.0 3.4.2: a client does not choose a new task's id).
    pub(super) continues: Option<String>,
}

/// What a send method's params ask for, or the JSON-RPC error that answers them (boxed: a
/// response is large beside what it stands in for).
pub(super) fn sent(
    method: Method,
    req: &Value,
    id: &Value,
    episode: &str,
) -> Result<TaskSend, Box<Response>> {
    let params = req.get("params").unwrap_or(&Value::Null);
    let parsed = match method {
        Method::TasksSend => parse_params(params).map_err(NotTaken::Invalid),
        _ => parse_message_params(method, params, episode),
    };
    // The contract's message, and in `data` what was wrong with the params.
    let invalid = |why: String| {
        Box::new(error_with_data(
            id,
            -32602,
            "invalid params".into(),
            json!({ "why": why }),
            method.version(),
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
        NotTaken::Push(member) => {
            let why = format!("push notifications are not supported (the agent card's capabilities.pushNotifications is false), so params.configuration.{member} cannot be honoured; nothing ran: send the message without it, and read the task back by its id");
            Box::new(error_info(
                id,
                -32003,
                "Push Notification is not supported",
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
                &[("member", member), ("why", &why)],
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

/// Why a send's params were not taken; nothing runs for either.
#[derive(Debug)]
enum NotTaken {
    /// `-32602 invalid params`: their shape is wrong; `data.why` says how.
    Invalid(String),
    /// `-32005`, A2A's `ContentTypeNotSupportedError`: well-formed content of a media type no
    /// skill here takes, or output modes that exclude the one this agent answers in. The
    /// `ErrorInfo` metadata says which, and `why` what to send instead.
    ContentType(Vec<(&'static str, String)>),
    /// `-32003`, A2A's `PushNotificationNotSupportedError`: the configuration asks for push
    /// notifications (the member named), which the card declines. A send that ran and never
    /// pushed would leave the client waiting for a webhook that never comes.
    Push(&'static str),
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
    // A task it continues is named back in the answer: not one longer than any task id.
    if continues
        .as_ref()
        .is_some_and(|t| t.chars().count() > super::tasks::MAX_TASK_ID_CHARS)
    {
        return Err(super::tasks::too_long("params.message.taskId").into());
    }
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

/// The string member `name` of `v`, non-empty; `at` names it in the refusal.
pub(super) fn string_at(v: &Value, name: &str, at: &str) -> Result<String, String> {
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
        // A `null` metadata is no metadata, as every other null member of a send is absent
        // (serializers write an unset optional as `null`).
        let m = match place {
            Value::Null => continue,
            Value::Object(m) => m,
            _ => return Err(()),
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
pub(super) fn count_at(value: Option<&Value>, at: &str) -> Result<(), String> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(()),
        Some(_) => Err(format!("{at} must be a count (0 or more)")),
    }
}

/// The members of `params.configuration` that ask for push notifications: 0.3's
/// `pushNotificationConfig` and 1.0's `taskPushNotificationConfig` (either is read under
/// either version: a push asked for under the other's name is still asked for).
const PUSH_MEMBERS: [&str; 2] = ["pushNotificationConfig", "taskPushNotificationConfig"];

/// The output modes `params.configuration` accepts (empty when it names none, which accepts
/// any), after checking its members' types: `acceptedOutputModes` an array of strings,
/// `historyLength` a count, the version's flag (`blocking`, `returnImmediately`) a boolean,
/// and a push notification config an object, which is then refused ([`NotTaken::Push`]).
fn accepted_output_modes(method: Method, params: &Value) -> Result<Vec<String>, NotTaken> {
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
        return Err(format!("params.configuration.{flag} must be true or false").into());
    }
    let not_modes =
        "params.configuration.acceptedOutputModes must be an array of media types (strings)";
    let modes = match configuration.get("acceptedOutputModes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(modes)) => modes
            .iter()
            .map(|m| m.as_str().map(str::to_owned).ok_or(not_modes))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(not_modes.into()),
    };
    // Every member's type is checked first: an ill-typed one is `-32602` whatever else is asked.
    let mut asked = None;
    for member in PUSH_MEMBERS {
        match configuration.get(member) {
            None | Some(Value::Null) => {}
            Some(Value::Object(_)) => asked = asked.or(Some(member)),
            Some(_) => {
                return Err(format!(
                    "params.configuration.{member} must be an object (a push notification config)"
                )
                .into())
            }
        }
    }
    match asked {
        Some(member) => Err(NotTaken::Push(member)),
        None => Ok(modes),
    }
}
