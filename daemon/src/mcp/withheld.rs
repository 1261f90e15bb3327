//! What an MCP answer becomes when the reply budget has no room for it after its requests ran
//! ([`crate::edge::reply::Withheld`]): each reply too large to keep is replaced by an error of
//! the same id that says it ran and, for a call, carries its result's `_meta` as `data` (its
//! invocation id and output ref), so that the agent learns what ran and where its result is.
//! A bare `503` told it nothing, for calls whose units were spent.

use super::jsonrpc::{Reply, INTERNAL_ERROR};
use super::methods::MethodResult;

/// Replies up to this size are kept as they are.
pub(super) const KEPT_BYTES: usize = 1024;

/// What stands for a call's reply.
pub(super) const CALL_TEXT: &str = "not sent: this call ran, but its reply was too large to hold while other answers to this credential wait unread (a quarter of [server] reply_budget_bytes); `data` is its result's _meta: read its output by world/outputRef (GET /v1/objects/REF?payload=true), or reconcile it by world/invocationId; sending it again with its idempotency key runs nothing twice";

/// What stands for another request's reply (a listing): it ran nothing.
pub(super) const OTHER_TEXT: &str = "not sent: this request was answered, but its reply was too large to hold while other answers to this credential wait unread (a quarter of [server] reply_budget_bytes); read them, then send it again";

/// The reply that stands for `reply`, whose JSON takes `written` bytes, in a withheld answer;
/// `None` where it is kept as it is (short, or an error).
pub(super) fn stand_in(reply: &Reply, written: usize) -> Option<Reply> {
    if written <= KEPT_BYTES {
        return None;
    }
    match reply {
        Reply::Result {
            id,
            result: MethodResult::Call(call),
        } => Some(Reply::error_with_data(
            id,
            INTERNAL_ERROR,
            CALL_TEXT,
            call.meta_value(),
        )),
        Reply::Result { id, .. } => Some(Reply::error(id, INTERNAL_ERROR, OTHER_TEXT)),
        Reply::Error { .. } => None,
    }
}
