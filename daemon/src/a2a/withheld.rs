//! What an A2A answer carrying a committed task becomes when the reply budget has no room for it
//! ([`crate::edge::reply::Withheld`]): the same JSON-RPC envelope and task (its id, context,
//! status with its state, and metadata: invocation id, outcome, output ref), its output left out
//! and a text part in its place saying that the call was answered and committed and how to read
//! the output. The call already ran (its units spent, its entry committed): a bare `503` told
//! the agent nothing of it. The words follow MCP's stand-in ([`crate::mcp`]'s `withheld`).
//!
//! The statement stands in the output's place, not in the task's status message, because that
//! is what an A2A client hands the agent as a completed task's result: the a2a-sdk gives the
//! task as sent, and agent frameworks built on it (the ADK's remote A2A agent among them) turn
//! a task's last artifact's parts into the agent's message, falling back to the status message
//! only when the task has no artifact. An artifact with its part left out would reach the
//! agent as an empty message. A text part, where the output is always a data part, also tells
//! a program reading it that this is no output.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::task::{rpc_result, rpc_result_json, CommittedTask};
use crate::edge::reply::{Withheld, UNCOUNTED_BYTES, WITHHELD_MOST_BYTES};

/// An output up to this size is kept: as MCP keeps its replies up to 4 KiB (a short output
/// says more than the stand-in, which is not much shorter).
pub(super) const KEPT_BYTES: usize = 4096;

/// What stands in a withheld task's output part. Said of a committed call, rejected ones
/// included (the state and `metadata.outcome` say how it ended), and of the budget as a whole,
/// which the stand-in is built before asking.
pub(super) const TEXT: &str = "not sent: this task's output was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); the call was answered and committed: the task's status and metadata are as committed (metadata.outcome says how it ended); read its output by metadata.output_ref (GET /v1/objects/REF?payload=true), or read the task again later with tasks/get (GetTask); sending the same message again runs nothing twice (its task id is the idempotency key)";

/// The answer carrying the committed `task` (under 1.0's send, `sent`, in `{"task": …}`), with
/// its withheld form where the reply budget may have to withhold it: an answer of more than
/// [`UNCOUNTED_BYTES`] (the budget never counts a smaller one, so no stand-in is built for it),
/// its output left out when it passes [`KEPT_BYTES`], else the answer as it is (an answer whose
/// output is short can still be counted, by a long `metadata.effects` or request id: without
/// a form of its own it got a bare `503` after its call ran), and that form within
/// [`WITHHELD_MOST_BYTES`] (past the bound the answer gets the `503` as before). Only the answer of the send that ran the call has
/// one: a read-back (`tasks/get`) or a replay (its task id resent) ran nothing and costs nothing
/// to ask again, and errors ran nothing.
pub(super) fn committed(id: &Value, mut task: CommittedTask<'_>, sent: bool) -> Response {
    let mut answer = rpc_result(id, task.result(sent));
    let size = axum::body::HttpBody::size_hint(answer.body()).exact();
    let counted = size.is_some_and(|n| n > UNCOUNTED_BYTES as u64);
    if !counted {
        return answer;
    }
    if task.output_bytes() > KEPT_BYTES {
        task.withhold_output(TEXT);
    }
    match rpc_result_json(id, task.result(sent)) {
        Ok(body) if body.len() > WITHHELD_MOST_BYTES => answer,
        Ok(body) => {
            answer.extensions_mut().insert(Withheld {
                // Every A2A answer, error or not, is an HTTP 200.
                status: StatusCode::OK,
                body: body.into(),
            });
            answer
        }
        // Unreachable (string keys only); the answer is sent, or replaced by 503, as before.
        Err(e) => {
            tracing::error!("a2a: a withheld task could not be written: {e}");
            answer
        }
    }
}

#[cfg(test)]
mod tests {
    use broker_core::coordinator::{CallOutput, EffectSummary};
    use broker_core::object::Ref;
    use handler_api::EffectClass;
    use serde_json::json;

    use super::super::task::committed_task;
    use super::super::version::Method;
    use super::*;
    use crate::outcome;

    /// A committed output of `n` bytes (a string member padding it out).
    fn output(n: usize) -> CallOutput {
        let text = format!(r#"{{"ok":true,"text":"{}"}}"#, "x".repeat(n - 21));
        assert_eq!(text.len(), n);
        CallOutput {
            invocation_id: "a2a:ep-1:t-1".into(),
            output_ref: Ref::of(text.as_bytes()),
            output: text.into_bytes(),
            entry_index: 3,
            world_ref: Ref::of(b"world"),
            replayed: false,
            effects: vec![],
        }
    }

    fn withheld_of(answer: &Response) -> Option<Value> {
        let w = answer.extensions().get::<Withheld>()?;
        assert_eq!(w.status, StatusCode::OK);
        Some(serde_json::from_slice(&w.body).unwrap())
    }

    /// Each version's withheld task: the answer's envelope and task, its output part replaced
    /// by a text part of that version, nothing else changed.
    #[tokio::test]
    async fn each_versions_withheld_task_is_its_task_with_a_text_part_for_its_output() {
        let out = output(40_000);
        let o = outcome::of_output(&out, EffectClass::Read);
        let expected = [
            (Method::TasksSend, json!({"text": TEXT, "type": "text"})),
            (Method::MessageSend, json!({"kind": "text", "text": TEXT})),
            (
                Method::SendMessage,
                json!({"mediaType": "text/plain", "text": TEXT}),
            ),
        ];
        for (method, part) in expected {
            let answer = super::super::task::success(&json!(7), method, "t-1", "ep-1", &out, &o);
            let withheld = withheld_of(&answer).unwrap_or_else(|| panic!("{method:?}"));
            let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
                .await
                .unwrap();
            let mut whole: Value = serde_json::from_slice(&bytes).unwrap();
            let task = match method {
                Method::SendMessage => &mut whole["result"]["task"],
                _ => &mut whole["result"],
            };
            task["artifacts"][0]["parts"][0] = part;
            assert_eq!(withheld, whole, "{method:?}");
        }
    }

    /// An answer the budget never counts carries no withheld form: it is sent as ever.
    #[test]
    fn small_answers_carry_no_withheld_form() {
        let small = output(15_000);
        let o = outcome::of_output(&small, EffectClass::Read);
        let task = committed_task(Method::MessageSend, "t-1", "ep-1", &small, &o).unwrap();
        assert!(withheld_of(&committed(&json!(1), task, false)).is_none());
        let large = output(KEPT_BYTES + 1_000 + UNCOUNTED_BYTES);
        let o = outcome::of_output(&large, EffectClass::Read);
        let task = committed_task(Method::MessageSend, "t-1", "ep-1", &large, &o).unwrap();
        assert!(withheld_of(&committed(&json!(1), task, false)).is_some());
    }

    /// An answer past 16 KiB whose output is short (a long request id, a long
    /// `metadata.effects`) had no withheld form, so it got the bare `503` after its call ran.
    /// Its form is the answer as it is, output kept, within [`WITHHELD_MOST_BYTES`]; past it,
    /// none. A read-back or a replay still has none.
    #[tokio::test]
    async fn a_counted_answer_with_a_short_output_is_its_own_withheld_form() {
        let short = output(KEPT_BYTES);
        let o = outcome::of_output(&short, EffectClass::Read);
        for method in [Method::TasksSend, Method::MessageSend, Method::SendMessage] {
            let task = committed_task(method, "t-1", "ep-1", &short, &o).unwrap();
            let id = json!("i".repeat(20_000));
            let answer = committed(&id, task, method == Method::SendMessage);
            let withheld = withheld_of(&answer).unwrap_or_else(|| panic!("{method:?}"));
            let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
                .await
                .unwrap();
            let whole: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(withheld, whole, "{method:?}");
            let task = match method {
                Method::SendMessage => &whole["result"]["task"],
                _ => &whole["result"],
            };
            assert_ne!(
                task["artifacts"][0]["parts"][0]["text"], TEXT,
                "{method:?}: its output is kept"
            );
        }
        // Long by its effects, its id short.
        let mut effects = output(KEPT_BYTES);
        effects.effects = (0..200)
            .map(|i| EffectSummary {
                id: format!("effect-{i:03}-{}", "e".repeat(80)),
                effect: "Workspace.Read".into(),
                status: "ok".into(),
                record: Ref::of(format!("record-{i}").as_bytes()),
                budget_after: 1,
                denial: None,
            })
            .collect();
        let o = outcome::of_output(&effects, EffectClass::Read);
        let task = committed_task(Method::MessageSend, "t-1", "ep-1", &effects, &o).unwrap();
        let answer = committed(&json!(1), task, false);
        let size = axum::body::HttpBody::size_hint(answer.body())
            .exact()
            .unwrap();
        assert!(size > UNCOUNTED_BYTES as u64, "{size}");
        let form = answer
            .extensions()
            .get::<Withheld>()
            .expect("its own form")
            .clone();
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(form.body, bytes);
        // Past the bound: none.
        let task = committed_task(Method::MessageSend, "t-1", "ep-1", &short, &o).unwrap();
        let id = json!("i".repeat(WITHHELD_MOST_BYTES));
        assert!(withheld_of(&committed(&id, task, false)).is_none());
    }

    /// A withheld task had no bound: the request's id is echoed in it, so an id of any length
    /// made a withheld form of that length, counted against the whole budget only. One that
    /// would pass [`WITHHELD_MOST_BYTES`] is not attached (the answer gets the `503`, as the
    /// budget would refuse it); at the bound it is.
    #[test]
    fn a_withheld_task_past_its_bound_is_not_attached() {
        let large = output(KEPT_BYTES + 1_000 + UNCOUNTED_BYTES);
        let o = outcome::of_output(&large, EffectClass::Read);
        // The bytes of the withheld form of the answer to a request of id `n` bytes of `i`.
        let form = |n: usize| {
            let task = committed_task(Method::MessageSend, "t-1", "ep-1", &large, &o).unwrap();
            let answer = committed(&json!("i".repeat(n)), task, false);
            answer.extensions().get::<Withheld>().map(|w| w.body.len())
        };
        // An id longer by a byte makes the form longer by one.
        let short = form(0).unwrap();
        assert_eq!(form(WITHHELD_MOST_BYTES - short), Some(WITHHELD_MOST_BYTES));
        assert_eq!(form(WITHHELD_MOST_BYTES - short + 1), None);
    }
}
