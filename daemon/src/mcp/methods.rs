//! The MCP methods: `initialize` and `ping` (handshake revisions), `server/discover`
//! (2026-07-28), `tools/list` and `tools/call` (every revision). This file holds what every
//! method runs with and the table of methods; each method lives in the sub-module named for it.
//!
//! Protocol problems are JSON-RPC errors inside a normal reply; failures of the host (the
//! coordinator, deadlines, callback slots, the registry underneath) are a [`HostFailure`],
//! which the transport turns into the fixed envelope for the whole POST. A `tools/call` that
//! carries an idempotency key (`params._meta["world/idempotencyKey"]`) gets named errors
//! instead for the outcomes only a key can have: a conflicting reuse, a call still in flight,
//! a first call that is not confirmed committed.

use std::sync::Arc;

use broker_core::session::Session;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use super::jsonrpc::{Reply, METHOD_NOT_FOUND};
use super::MODERN_VERSION;
use crate::outcome::Outcome;
use crate::state::AppState;

mod call_result;
mod handshake;
mod modern_fields;
mod server_info;
mod tools_call;
mod tools_list;

use call_result::CallToolResult;
use handshake::{DiscoverResult, InitializeResult};
use tools_list::ToolsList;

/// What one request runs with.
pub(super) struct Ctx<'a> {
    pub state: &'a AppState,
    pub session: &'a Arc<Session>,
    /// The aggregate deadline of the POST.
    pub deadline: Instant,
    /// The protocol revision in force for this POST.
    pub version: &'static str,
    /// The POST's body size: what each call it carries counts as, for the large-call lane.
    pub body_bytes: usize,
}

impl Ctx<'_> {
    /// True under the stateless 2026-07-28 revision.
    pub(super) fn modern(&self) -> bool {
        self.version == MODERN_VERSION
    }
}

/// A failure of the host: the fixed message the wire carries ([`HostFailure::message`]) and
/// its classification ([`HostFailure::outcome`], sent in `data` under 2026-07-28).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HostFailure {
    /// A fault of the host outside a call's run (the tool surface unreadable, a committed
    /// output that cannot be sent): `host callback failed`, `indeterminate` / `host`.
    Failed,
    /// The POST's deadline passed before its call was answered: `host callback timed out`,
    /// `indeterminate` / `timeout`.
    TimedOut,
    /// A call that did not commit: the envelope its failure is answered with, and the
    /// classification [`crate::outcome::of_failure`] gives it, the one table A2A answers from
    /// too, so that both surfaces tell an agent the same of the same failure.
    Call {
        envelope: Envelope,
        outcome: Outcome,
    },
}

/// The fixed message of a host failure: all the seed puts on the wire, never its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Envelope {
    Failed,
    TimedOut,
    Canceled,
    Capacity,
}

impl Envelope {
    fn message(self) -> &'static str {
        match self {
            Envelope::Failed => "host callback failed",
            Envelope::TimedOut => "host callback timed out",
            Envelope::Canceled => "host callback canceled",
            Envelope::Capacity => "host callback capacity exceeded",
        }
    }
}

impl HostFailure {
    pub(super) fn message(&self) -> &'static str {
        match self {
            HostFailure::Failed => Envelope::Failed.message(),
            HostFailure::TimedOut => Envelope::TimedOut.message(),
            HostFailure::Call { envelope, .. } => envelope.message(),
        }
    }

    /// The classification of the failure.
    pub(super) fn outcome(&self) -> Outcome {
        match self {
            HostFailure::Failed => Outcome::indeterminate("host"),
            HostFailure::TimedOut => Outcome::indeterminate("timeout"),
            HostFailure::Call { outcome, .. } => outcome.clone(),
        }
    }
}

/// Run one request.
pub(super) async fn dispatch(
    ctx: &Ctx<'_>,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    match (method, ctx.modern()) {
        ("initialize", false) => Ok(handshake::initialize(id, params.as_ref())),
        ("ping", false) => Ok(handshake::ping(id)),
        ("server/discover", true) => Ok(handshake::discover(id)),
        ("tools/list", _) => tools_list::tools_list(ctx, id, params.as_ref()).await,
        ("tools/call", _) => tools_call::tools_call(ctx, id, params).await,
        (other, _) => Ok(Reply::error(
            id,
            METHOD_NOT_FOUND,
            // Quoted to at most 256 bytes as sent: the method is the client's text, of any size.
            format!("method not found: {}", crate::spelling::quote_sent(other)),
        )),
    }
}

/// The `result` member of a successful reply.
#[derive(Debug)]
pub(super) enum MethodResult {
    Initialize(InitializeResult),
    Discover(DiscoverResult),
    Empty(Empty),
    Tools(ToolsList),
    Call(CallToolResult),
}

impl MethodResult {
    /// Append this result to `out` as compact JSON.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            MethodResult::Initialize(r) => serde_json::to_writer(out, r),
            MethodResult::Discover(r) => serde_json::to_writer(out, r),
            MethodResult::Empty(r) => serde_json::to_writer(out, r),
            MethodResult::Tools(r) => serde_json::to_writer(out, r),
            MethodResult::Call(r) => r.write_json(out),
        }
    }
}

/// `{}` (a braced struct without fields serializes as an empty object, not `null`).
#[derive(Debug, Serialize)]
pub(super) struct Empty {}
