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

/// A failure of the host; the caller sees only [`HostFailure::message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HostFailure {
    Failed,
    /// No loaded plugin handles the tool's effect (rule R8), or there is no world: the
    /// fixed "failed" message, classified `refused` / `unavailable`, since nothing ran.
    Unavailable,
    TimedOut,
    /// Too little of the call's deadline was left to start its handler: the timed-out
    /// envelope, classified `refused` / `deadline`, since nothing ran.
    TooLate,
    Canceled,
    Capacity,
    /// The credential's refusals and denials outran their rate: the capacity envelope,
    /// classified `refusal-rate` (not retryable: the same call is refused again).
    RefusalRate,
    /// The episode's queue was full or stayed busy past the deadline: the capacity envelope,
    /// classified `busy`.
    Busy,
    /// The store is past its reserve: the capacity message, classified `store-full`.
    StoreFull,
    /// The call's intent was committed but the store could not make it durable, so it was
    /// withdrawn before its handler started: the seed's failed envelope, classified
    /// `refused` / `store` (nothing ran, nothing stays spent), never `indeterminate`.
    NotDurable,
}

impl HostFailure {
    pub(super) fn message(self) -> &'static str {
        match self {
            HostFailure::Failed | HostFailure::Unavailable | HostFailure::NotDurable => {
                "host callback failed"
            }
            HostFailure::TimedOut | HostFailure::TooLate => "host callback timed out",
            HostFailure::Canceled => "host callback canceled",
            HostFailure::Capacity
            | HostFailure::RefusalRate
            | HostFailure::Busy
            | HostFailure::StoreFull => "host callback capacity exceeded",
        }
    }

    /// The classification of the failure: nothing ran only when admission refused it.
    pub(super) fn outcome(self) -> Outcome {
        match self {
            HostFailure::Failed => Outcome::indeterminate("host"),
            HostFailure::Unavailable => Outcome::unavailable(),
            HostFailure::TimedOut => Outcome::indeterminate("timeout"),
            HostFailure::TooLate => Outcome::too_late(),
            HostFailure::Canceled => Outcome::indeterminate("canceled"),
            HostFailure::Capacity => Outcome::capacity(),
            HostFailure::RefusalRate => Outcome::refusal_rate(),
            HostFailure::Busy => Outcome::busy(),
            HostFailure::StoreFull => Outcome::store_full(),
            HostFailure::NotDurable => Outcome::store_not_durable(),
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
