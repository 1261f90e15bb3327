//! Which version a request speaks and which method it calls: the `A2A-Version` rules
//! (A2A 3.6) and [`METHODS`], the table of every method `/a2a/` answers, with what it asks
//! ([`Op`]) and the version it belongs to.

use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::Value;

use super::errors::{error_info, rpc_error};

/// The header naming the client's A2A protocol version (absent means 0.3).
const VERSION_HEADER: &str = "a2a-version";

/// The A2A code for a protocol version a method does not serve.
const VERSION_NOT_SUPPORTED: i64 = -32009;

/// The A2A versions this server speaks (the card's [`super::A2A_VERSIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    /// `SendMessage`.
    V1_0,
    /// `message/send`, and what no `A2A-Version` means.
    V0_3,
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

/// Which method, hence which version's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    /// `tasks/send`, the contract's method.
    TasksSend,
    /// `message/send`, A2A 0.3.
    MessageSend,
    /// `SendMessage`, A2A 1.0.
    SendMessage,
}

impl Method {
    /// The version whose shapes (errors included) the method answers in.
    pub(super) fn version(self) -> Version {
        match self {
            Method::SendMessage => Version::V1_0,
            Method::TasksSend | Method::MessageSend => Version::V0_3,
        }
    }
}

/// Which of the two task reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskRead {
    Get,
    Cancel,
}

/// What a method asks of `/a2a/`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    /// Call a tool: the send method, whose shapes the answer takes.
    Send(Method),
    /// Read a task back; the version's send method gives the task's shape.
    Read(TaskRead, Method),
    /// A method of the specification this agent does not offer (its card says so).
    Unsupported(Unsupported),
}

/// The methods a client may send that this agent's card declines.
#[derive(Debug, Clone, Copy)]
pub(super) enum Unsupported {
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
    pub(super) fn answer(self, id: &Value) -> Response {
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
pub(super) const METHODS: &[(&str, Version, Op, Option<&str>)] = {
    use Method::{MessageSend, SendMessage, TasksSend};
    use Op::{Read, Send};
    use TaskRead::{Cancel, Get};
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
pub(super) fn routed(
    req: &Value,
    asked: Result<Version, String>,
    id: &Value,
) -> Result<Op, Box<Response>> {
    // The envelope (`jsonrpc`, the id's and the method's types) was checked by [`super::request::envelope`].
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

/// The version the request names, by its `Major.Minor` exactly (A2A 3.6: a patch number,
/// which requests should not carry, is not considered), in the `A2A-Version` header or the
/// query parameter of that name (3.6.1), which must then agree; named nowhere (or empty), 0.3
/// (3.6.2). `Err` holds what was sent when it names no version spoken here: anything but
/// digits `Major.Minor[.Patch]` (trailing text, whitespace inside, signs, a major alone, a
/// list), another version (`1.2`, `2.0`, `01.0`), the field sent twice
/// ([`crate::edge::fields`]), a header and a parameter that disagree, or a query that does
/// not parse. Only the whitespace around a header's value, which is not part of it (HTTP), is
/// passed over.
pub(super) fn requested_version(headers: &HeaderMap, uri: &Uri) -> Result<Version, String> {
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
