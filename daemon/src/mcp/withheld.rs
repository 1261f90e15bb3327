//! What an MCP answer becomes when the reply budget has no room for it after its requests ran
//! ([`crate::edge::reply::Withheld`]): each reply too large to keep is replaced by an error of
//! the same id that says it was answered and, for a call, carries its result's `_meta` as
//! `data` (its invocation id, outcome and output ref), so that the agent learns what ran and
//! where its result is. A bare `503` told it nothing, for calls whose units were spent.

use super::jsonrpc::{Reply, INTERNAL_ERROR};
use super::methods::MethodResult;

/// Replies up to this size are kept as they are: a short reply (a denial, a refusal with its
/// reason) says more than its stand-in, which is not much shorter.
pub(super) const KEPT_BYTES: usize = 4096;

/// What stands for a call's reply: said of a committed call, denied or refused ones included,
/// and of the budget as a whole, which the stand-in is built before asking.
pub(super) const CALL_TEXT: &str = "not sent: this call's reply was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); the call was answered and committed: `data` is its result's _meta (world/outcome says how it ended); read its output by world/outputRef (GET /v1/objects/REF?payload=true), or reconcile it by world/invocationId; sending it again with its idempotency key runs nothing twice";

/// What stands for another request's reply (a listing): it ran nothing.
pub(super) const OTHER_TEXT: &str = "not sent: this request was answered, but its reply was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); send it again shortly, after reading any other answers of yours";

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
