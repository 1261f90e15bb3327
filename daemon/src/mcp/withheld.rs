//! What an MCP answer becomes when the reply budget has no room for it after its calls ran
//! ([`crate::edge::reply::Withheld`]): each reply too large to keep is replaced by an error of
//! the same id that says it was answered and, for a call, carries its result's `_meta` as
//! `data` (its invocation id, outcome and output ref), so that the agent learns what ran and
//! where its result is. A bare `503` told it nothing, for calls whose units were spent.
//!
//! Only an answer that holds a call's result ([`ran`]) has a withheld form. One that ran
//! nothing (listings, pings, errors alone) gets the `503` as before: asking again costs
//! nothing, and a withheld form, counted against the whole budget only, would let a credential
//! whose share is full hold more of the budget than its share at no cost.

use super::jsonrpc::{Reply, INTERNAL_ERROR};
use super::methods::MethodResult;

/// Replies up to this size are kept as they are: a short reply (a denial, a refusal with its
/// reason) says more than its stand-in, which is not much shorter.
pub(super) const KEPT_BYTES: usize = 4096;

/// What stands for a call's reply: said of a committed call, denied or refused ones included,
/// and of the budget as a whole, which the stand-in is built before asking.
pub(super) const CALL_TEXT: &str = "not sent: this call's reply was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); the call was answered and committed: `data` is its result's _meta (world/outcome says how it ended); read its output by world/outputRef (GET /v1/objects/REF?payload=true), or reconcile it by world/invocationId; sending it again with its idempotency key runs nothing twice";

/// What stands for another request's reply in a batch that holds a call (a listing): it ran
/// nothing.
pub(super) const OTHER_TEXT: &str = "not sent: this request was answered, but its reply was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); send it again shortly, after reading any other answers of yours";

/// What begins the message that stands for a long error's in a batch that holds a call, before
/// the first [`ERROR_KEPT_BYTES`] of its own message.
pub(super) const ERROR_TEXT: &str = "not sent whole: this error's reply was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); its code is as sent, its data left out, and its message cut to its first 256 bytes: ";

/// Bytes of a long error's message kept after [`ERROR_TEXT`].
pub(super) const ERROR_KEPT_BYTES: usize = 256;

/// Whether `reply` answers a call that ran: a `tools/call`'s result (a committed entry, denied
/// and refused calls included). A replay (a committed key resent) ran nothing, and costs
/// nothing to ask again: without this, resends of one large call were a free way to fill the
/// budget outside the share.
///
/// Errors are not counted, though some answer a call whose effect ran: a keyed call whose
/// effect ran but whose outcome could not be stored (`EffectUnrecordable`,
/// `EffectsUnrecorded`, `-32603` with an `indeterminate` outcome in `data`). Counted, they
/// would open that free way again: a resend of such a key, which runs nothing, is answered
/// by the same errors (`EffectsUnrecorded` again, or `NotCommitted` with the same
/// `indeterminate`/`pending` outcome), and nothing in the reply tells it from the first.
/// Nor is anything lost by the `503`: such an error is short (kept whole in any withheld
/// form), the agent holds the key, and a resend of it answers, without running anything,
/// that the effect may have run and where to reconcile it. (A
/// handler past its deadline, and any unkeyed failure, answers the whole POST with the short
/// host-failure envelope, which the budget never counts.)
pub(super) fn ran(reply: &Reply) -> bool {
    matches!(
        reply,
        Reply::Result {
            result: MethodResult::Call(call),
            ..
        } if !call.replayed()
    )
}

/// The reply that stands for `reply`, whose JSON takes `written` bytes, in the withheld form of
/// an answer of that reply alone; `None` where it has none: it is short (kept as it is), or
/// not a call's result (the answer ran nothing: the `503` as before).
pub(super) fn stand_in(reply: &Reply, written: usize) -> Option<Reply> {
    if !ran(reply) {
        return None;
    }
    in_batch(reply, written)
}

/// The reply that stands for `reply`, whose JSON takes `written` bytes, in the withheld form of
/// a batch's answer that holds a call's result; `None` where it is kept as it is (short). Every
/// reply over [`KEPT_BYTES`] is replaced, errors included, so that only a reply's id can make
/// its place in the withheld form larger than that (and the form as a whole is capped:
/// [`crate::edge::reply::WITHHELD_MOST_BYTES`]).
pub(super) fn in_batch(reply: &Reply, written: usize) -> Option<Reply> {
    if written <= KEPT_BYTES {
        return None;
    }
    Some(match reply {
        Reply::Result {
            id,
            result: MethodResult::Call(call),
        } => Reply::error_with_data(id, INTERNAL_ERROR, CALL_TEXT, call.meta_value()),
        Reply::Result { id, .. } => Reply::error(id, INTERNAL_ERROR, OTHER_TEXT),
        // Its code kept, which says how to take it (-32602: fix the request; -32001: the
        // credential is gone), and the start of its message, which says what was wrong; its
        // data, and the rest of its message, are what made it long (an echoed input), and are
        // left out. A fixed text alone would lose the reason, as the first stand-ins did for
        // short denials.
        Reply::Error { id, error } => {
            let mut cut = ERROR_KEPT_BYTES.min(error.message.len());
            while !error.message.is_char_boundary(cut) {
                cut -= 1;
            }
            Reply::error(
                id,
                error.code,
                format!("{ERROR_TEXT}{}", &error.message[..cut]),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::jsonrpc::INVALID_PARAMS;
    use super::*;
    use serde_json::{json, Value};

    fn written(reply: &Reply) -> usize {
        let mut out = Vec::new();
        reply.write_json(&mut out).unwrap();
        out.len()
    }

    fn json_of(reply: &Reply) -> Value {
        let mut out = Vec::new();
        reply.write_json(&mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    /// An error was kept at any size in a withheld batch: 63 long errors beside one large call
    /// made a withheld form of about 256 KiB, counted against the whole budget only. A long
    /// error is replaced now, its id and code kept, with the first 256 bytes of its message
    /// (cut at a character) after a text that says it was cut, and its data left out.
    #[test]
    fn a_long_error_in_a_withheld_batch_is_cut_to_its_code_and_the_start_of_its_message() {
        let message = format!("invalid params: {}", "é".repeat(5_000));
        let long = Reply::error_with_data(
            &json!(7),
            INVALID_PARAMS,
            message.clone(),
            json!({"why": "w".repeat(5_000)}),
        );
        let size = written(&long);
        assert!(size > 10_000, "{size}");
        let standing = in_batch(&long, size).expect("a long error is replaced");
        let mut kept = message[..256].to_owned();
        if !message.is_char_boundary(256) {
            kept = message[..255].to_owned();
        }
        assert_eq!(
            json_of(&standing),
            json!({"jsonrpc": "2.0", "id": 7, "error": {
                "code": INVALID_PARAMS, "message": format!("{ERROR_TEXT}{kept}")}})
        );
        assert!(written(&standing) <= KEPT_BYTES, "{}", written(&standing));
        // A short error is kept as it is, in a batch and alone.
        let short = Reply::error(&json!(8), INVALID_PARAMS, "invalid params: x");
        assert!(in_batch(&short, written(&short)).is_none());
        // An error alone ran nothing: never withheld, however long.
        assert!(stand_in(&long, size).is_none());
    }

    /// A listing's reply had a stand-in too, so an answer of listings alone, which ran
    /// nothing, was sent withheld, counted against the whole budget only, where its share was
    /// full. Alone it has none now (the `503` as before); in a batch that holds a call, its
    /// stand-in says it ran nothing.
    #[test]
    fn a_reply_that_ran_nothing_has_no_stand_in_of_its_own() {
        let listing = Reply::result(
            &json!(3),
            MethodResult::Empty(super::super::methods::Empty {}),
        );
        assert!(!ran(&listing));
        assert!(stand_in(&listing, 20_000).is_none());
        assert_eq!(
            json_of(&in_batch(&listing, 20_000).unwrap()),
            json!({"jsonrpc": "2.0", "id": 3,
                   "error": {"code": INTERNAL_ERROR, "message": OTHER_TEXT}})
        );
    }
}
