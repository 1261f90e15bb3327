//! Client-built commits (`POST /v1/commit`) and their receipts.
//!
//! A REST commit is an operator's act, not an agent's (seed 004: agents "never call POST
//! /v1/commit"). It carries the whole entry, the next world and the objects it names. Unlike
//! the reference, the store recomputes and checks every hash and link
//! ([`crate::log::commit_exact`]) and the head must be the client's `observedHead`
//! (compare-and-swap).
//!
//! What a client may not claim: a `writtenBy` of the coordinator (`coordinator:…`) or of the
//! store (`world:…`), in any letter case, or an invocation record in the coordinator's
//! namespaces (`a2a:…`, `mcp:…`). Those are written only by the coordinator, and `worldd why`
//! checks them against the journal and task state only the coordinator writes. Nor may it
//! pass for them: `writtenBy` and a record's `invocationId` are ASCII (no lookalike letters),
//! and the id does not spell `a2a:`, `mcp:` or `rest:` in another letter case.
//!
//! Every commit spends one unit of the operator's `World.Commit=log:N` grant, journaled like
//! any effect (an intent under the operator's episode, raising its spend counter, checked
//! inside the single writer): budgets hold across restarts and two concurrent commits never
//! both spend the last unit. The intent, the commit and its outcome share ONE transaction, so
//! a refused commit spends nothing and leaves no trace. A commit that names an invocation id
//! (`rest:<id>`) is journaled under that id, so `GET /v1/receipts/rest:<id>` answers
//! `resolved` exactly when it landed and `not-started` otherwise; resending the same id with
//! the same commit is an idempotent no-op that spends nothing. Without an id the journal key is
//! `commit:<episode>:<entry hash hex>`.

use crate::canon;
use crate::journal::{self, Intent, JournalError, OutcomeStatus, Receipt};
use crate::log::{self, Committed, Entry, LogError, World};
use crate::object::{Object, Ref};
use crate::schema::SESSIONS;
use crate::store::{Store, StoreError, WriteCtx};

/// The effect a commit spends: a grant `World.Commit=log:N` allows N commits.
pub const REST_EFFECT: &str = "World.Commit";
/// The scope of the commit grant.
pub const COMMIT_SCOPE: &str = "log";
/// Units one commit spends.
pub const COMMIT_COST: u64 = 1;
/// The journal "episode" of REST commits journaled by earlier builds (cost 0).
pub const REST_EPISODE: &str = "<rest>";
/// Invocation-id namespaces of the coordinator: a client commit may not carry their records.
pub const COORDINATOR_NAMESPACES: [&str; 2] = ["a2a:", "mcp:"];
/// Every namespace an invocation id of the daemon's starts with: the coordinator's and the
/// receipts' of REST commits. A client record's id may not imitate one in another letter case.
const DAEMON_NAMESPACES: [&str; 3] = ["a2a:", "mcp:", "rest:"];

/// True when `id` is in one of the coordinator's namespaces, byte for byte.
pub fn in_coordinator_namespace(id: &str) -> bool {
    COORDINATOR_NAMESPACES.iter().any(|ns| id.starts_with(ns))
}

/// True when `id` starts with one of the daemon's namespaces in another letter case
/// (`MCP:…`, `Rest:…`): read by a person, it passes for that namespace.
pub fn imitates_a_namespace(id: &str) -> bool {
    DAEMON_NAMESPACES.iter().any(|ns| {
        id.get(..ns.len())
            .is_some_and(|p| p != *ns && p.eq_ignore_ascii_case(ns))
    })
}

/// Whose budget a commit spends: the operator's episode and its `World.Commit=log` grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitGrant {
    pub episode: String,
    /// The grant's whole budget (the journal knows how much of it is spent).
    pub budget: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("invocationId must start with \"rest:\"")]
    BadInvocationId,
    #[error("invocation id {0} was already used for another commit")]
    Reused(String),
    #[error("invalid commit: writtenBy {0:?} is reserved: coordinator:* and world:* entries are written only by the daemon itself")]
    ReservedWriter(String),
    #[error("invalid commit: {what} holds {}, which a terminal acts on instead of showing (operators read it in worldd log tail and worldd why); write it as plain text", unicode_name(*.found))]
    NotPlainText { what: String, found: char },
    #[error("invalid commit: transitionRef is an invocation record of the coordinator ({0}); only the coordinator commits those")]
    ReservedInvocation(String),
    #[error("invalid commit: {what} holds {}, which is not ASCII: writtenBy and a record's invocationId are ASCII, so that no lookalike letter can pass for the coordinator's names (coordinator:a2a, a2a:…, mcp:…)", unicode_name(*.found))]
    NotAscii { what: String, found: char },
    #[error("invalid commit: the record's invocationId {0:?} is spelled like a daemon's id (a2a:, mcp:, rest:) in another letter case; only the coordinator writes a2a: and mcp: ids, and a client's rest: ids are in lower case")]
    ImitatedInvocation(String),
    /// The credential the commit was sent with was revoked before the commit's transaction:
    /// nothing was committed or spent.
    #[error("session credential was revoked before this commit was written: nothing was committed and nothing was spent")]
    Revoked,
    #[error("denied:budget: the World.Commit=log grant has {remaining} commit(s) left")]
    Budget { remaining: u64 },
    #[error(transparent)]
    Log(LogError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("journal: {0}")]
    Journal(String),
}

/// `U+001B`, as an error names a character it cannot show.
fn unicode_name(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

impl From<LogError> for CommitError {
    fn from(e: LogError) -> Self {
        match e {
            LogError::Store(s) => CommitError::Store(s),
            other => CommitError::Log(other),
        }
    }
}

impl From<JournalError> for CommitError {
    fn from(e: JournalError) -> Self {
        match e {
            JournalError::Store(s) => CommitError::Store(s),
            other => CommitError::Journal(other.to_string()),
        }
    }
}

/// A client-built commit.
#[derive(Debug, Clone)]
pub struct RestCommit {
    pub invocation_id: Option<String>,
    pub observed_head: Option<Ref>,
    pub objects: Vec<Object>,
    pub entry: Entry,
    pub world: World,
    pub world_ref: Ref,
}

impl RestCommit {
    /// What the intent promises: this entry selecting this world. (The observed head is not
    /// part of it: a commit refused for a stale head may be resent against the new head.)
    fn request_ref(&self) -> Ref {
        let text = format!("{}|{}", self.entry.entry_hash, self.world_ref);
        Ref::of(text.as_bytes())
    }
}

/// Apply a REST commit, spending one unit of `grant`; returns the selected world ref.
///
/// The intent (with its spend), the commit and the outcome are written in ONE transaction:
/// a receipt says `resolved` exactly when the commit landed, and a commit that was refused (a
/// stale head, a bad hash, a reserved claim, an exhausted budget) leaves nothing behind, so its
/// id can be used again for a commit rebuilt on the new head.
pub fn rest_commit(
    store: &Store,
    commit: RestCommit,
    grant: &CommitGrant,
) -> Result<Ref, CommitError> {
    commit_checked(store, commit, grant, None)
}

/// [`rest_commit`] on behalf of the credential whose id is `credential_id`, made only while
/// its session record exists: checked inside the commit's transaction, so a revocation (a
/// store write too) lands either before it, and the commit is refused [`CommitError::Revoked`],
/// or after it. The grant's liveness is the caller's to check, with its clock.
pub fn rest_commit_as(
    store: &Store,
    commit: RestCommit,
    grant: &CommitGrant,
    credential_id: &str,
) -> Result<Ref, CommitError> {
    commit_checked(store, commit, grant, Some(credential_id.to_owned()))
}

fn commit_checked(
    store: &Store,
    commit: RestCommit,
    grant: &CommitGrant,
    credential_id: Option<String>,
) -> Result<Ref, CommitError> {
    // Only the daemon writes as the coordinator or the store, in any letter case: a reader
    // takes `Coordinator:a2a` for the coordinator.
    if log::is_reserved_writer(&commit.entry.header.written_by.to_ascii_lowercase()) {
        return Err(CommitError::ReservedWriter(
            commit.entry.header.written_by.clone(),
        ));
    }
    // What the log keeps for people to read is plain text: `log tail` and `why` print it, and
    // a line break or an escape sequence there could forge what an operator reads.
    let readable = std::iter::once(("writtenBy".to_owned(), &commit.entry.header.written_by))
        .chain(commit.objects.iter().map(|o| {
            (
                format!("the semanticId of object {}", o.hash),
                &o.semantic_id,
            )
        }));
    for (what, text) in readable {
        if let Some(found) = crate::plain_text::first_acted_on(text) {
            return Err(CommitError::NotPlainText { what, found });
        }
    }
    // Lookalike letters (a Greek ο in `coordinatοr:a2a`) would pass for the coordinator's name.
    not_ascii("writtenBy", &commit.entry.header.written_by)?;
    // The commit must be self-consistent before anything else, including an idempotent resend.
    let recomputed = Entry::compute_hash(&commit.entry.header, &commit.entry.transition_ref)
        .map_err(|e| CommitError::Log(e.into()))?;
    if recomputed != commit.entry.entry_hash {
        return Err(CommitError::Log(LogError::Invalid(format!(
            "entryHash {} does not match the recomputed {recomputed}",
            commit.entry.entry_hash
        ))));
    }
    let recomputed = commit
        .world
        .reference()
        .map_err(|e| CommitError::Log(e.into()))?;
    if recomputed != commit.world_ref {
        return Err(CommitError::Log(LogError::Invalid(format!(
            "world ref {} does not match the recomputed {recomputed}",
            commit.world_ref
        ))));
    }
    if let Some(id) = &commit.invocation_id {
        if id.strip_prefix("rest:").is_none_or(str::is_empty) {
            return Err(CommitError::BadInvocationId);
        }
    }
    let request_ref = commit.request_ref();
    let grant = grant.clone();
    store.write(move |w| -> Result<Ref, CommitError> {
        if let Some(id) = &credential_id {
            // Before the idempotent resend too: a revoked credential is answered nothing.
            if SESSIONS.get(&w.reader(), id.as_str())?.is_none() {
                return Err(CommitError::Revoked);
            }
        }
        let c = &commit;
        if let Some(id) = &c.invocation_id {
            if let Some(state) = journal::state_in(w, id)? {
                if state.intent.request_ref != request_ref {
                    return Err(CommitError::Reused(id.clone()));
                }
                if state.status == Some(OutcomeStatus::Committed) {
                    // A resend confirms the commit durable (the answer to a commit whose sync
                    // failed asks for it): it writes nothing, so without this a sync that
                    // still fails would leave it answered 200.
                    w.answer_as_written();
                    return Ok(c.world_ref);
                }
            }
        }
        record_claim(w, c)?;
        let committed: Committed = log::commit_exact(
            w,
            &c.objects,
            c.observed_head,
            &c.entry,
            &c.world,
            &c.world_ref,
        )?;
        let id = c
            .invocation_id
            .clone()
            .unwrap_or_else(|| format!("commit:{}:{}", grant.episode, c.entry.entry_hash.hex()));
        if journal::state_in(w, &id)?.is_none() {
            let intent = Intent {
                invocation_id: id.clone(),
                episode: grant.episode.clone(),
                effect: REST_EFFECT.into(),
                scope: COMMIT_SCOPE.into(),
                cost: COMMIT_COST,
                request_ref,
            };
            // The spend check runs here, inside the single writer: two commits racing for the
            // last unit cannot both pass it.
            match journal::append_intent(w, &intent, grant.budget) {
                Ok(_) => {}
                Err(JournalError::BudgetExhausted { remaining, .. }) => {
                    return Err(CommitError::Budget { remaining })
                }
                Err(e) => return Err(e.into()),
            }
        }
        journal::append_outcome(w, &id, OutcomeStatus::Committed, Some(committed.world_ref))?;
        Ok(committed.world_ref)
    })
}

fn not_ascii(what: &str, text: &str) -> Result<(), CommitError> {
    match text.chars().find(|c| !c.is_ascii()) {
        Some(found) => Err(CommitError::NotAscii {
            what: what.to_owned(),
            found,
        }),
        None => Ok(()),
    }
}

/// The commit's record may not be, or pass for, one of the coordinator's: its `invocationId`
/// is not in the `a2a:` or `mcp:` namespace, is ASCII, and does not spell a daemon's namespace
/// in another letter case. The record is looked up among the commit's objects, then in the
/// store (a forger may reuse a genuine record's ref).
fn record_claim(w: &WriteCtx<'_, '_>, c: &RestCommit) -> Result<(), CommitError> {
    let Some(id) = record_invocation_id(w, c)? else {
        return Ok(());
    };
    if in_coordinator_namespace(&id) {
        return Err(CommitError::ReservedInvocation(id));
    }
    not_ascii("the record's invocationId", &id)?;
    if imitates_a_namespace(&id) {
        return Err(CommitError::ImitatedInvocation(id));
    }
    Ok(())
}

/// The `invocationId` the commit's record names, if it is JSON that names one.
fn record_invocation_id(
    w: &WriteCtx<'_, '_>,
    c: &RestCommit,
) -> Result<Option<String>, CommitError> {
    let target = c.entry.transition_ref;
    let stored;
    let payload = match c.objects.iter().find(|o| o.hash == target) {
        Some(o) => &o.payload,
        None => match w.object(&target)? {
            Some(o) => {
                stored = o;
                &stored.payload
            }
            None => return Ok(None),
        },
    };
    let Ok(value) = canon::parse(payload) else {
        return Ok(None);
    };
    Ok(value
        .get("invocationId")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned))
}

/// The receipt of a `rest:` invocation id.
pub fn receipt(store: &Store, id: &str) -> Result<Receipt, CommitError> {
    if !id.starts_with("rest:") {
        return Err(CommitError::BadInvocationId);
    }
    Ok(store.read(|r| journal::receipt(r, id))?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::log::EntryHeader;
    use crate::object::sid;

    fn eio() -> StoreError {
        StoreError::Io("Input/output error (os error 5)".into())
    }

    /// A commit of one record (`{"n": n}`) on the store's head, journaled under
    /// `invocation_id` when one is given.
    pub(crate) fn commit_on_head(store: &Store, invocation_id: Option<&str>, n: u64) -> RestCommit {
        let head = store.read(log::head).unwrap().unwrap();
        let note = serde_json::json!({ "n": n });
        let out = Object::json(sid::INVOCATION_OUTPUT, "rest:ops", &note).unwrap();
        let rec = Object::json(sid::INVOCATION_RECORD, "rest:ops", &note).unwrap();
        let entry = Entry::new(
            EntryHeader {
                entry_index: head.world.revision + 1,
                semantics_epoch: 1,
                transition_fn: Ref::of(b"fn"),
                interpreter: log::interpreter_ref().unwrap(),
                prev_entry_hash: head.world.log_head,
                written_by: "rest:ops".into(),
            },
            rec.hash,
        )
        .unwrap();
        let world = World {
            revision: entry.header.entry_index,
            state_root: out.hash,
            log_head: entry.entry_hash,
        };
        RestCommit {
            invocation_id: invocation_id.map(str::to_owned),
            observed_head: Some(head.world_ref),
            objects: vec![out, rec],
            world_ref: world.reference().unwrap(),
            entry,
            world,
        }
    }

    /// A commit whose sync failed is answered not durable, and asks to be sent again to
    /// confirm it. Sent again while syncs still failed, it found its journal status committed,
    /// wrote nothing and was answered 200 though nothing was durable. The resend's answer is
    /// about the sync too: not durable until a sync succeeds, then the selected head.
    #[test]
    fn a_resent_commit_is_answered_not_durable_until_a_sync_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let grant = CommitGrant {
            episode: "ops".into(),
            budget: 1,
        };
        let c = commit_on_head(&store, Some("rest:x"), 1);
        let world_ref = c.world_ref;
        store.stats().faults.fail_sync(eio());
        let first = rest_commit(&store, c.clone(), &grant);
        assert!(
            matches!(&first, Err(CommitError::Store(e)) if e.committed_not_durable()),
            "{first:?}"
        );
        store.stats().faults.fail_sync(eio());
        let again = rest_commit(&store, c.clone(), &grant);
        assert!(
            matches!(&again, Err(CommitError::Store(e)) if e.committed_not_durable()),
            "{again:?}"
        );
        // Synced: the same resend is answered the selected world, spending nothing more (the
        // grant's one unit went to the first send).
        assert_eq!(rest_commit(&store, c, &grant).unwrap(), world_ref);
        assert_eq!(store.read(log::head).unwrap().unwrap().world_ref, world_ref);
        assert!(!store.writes_failing());
    }

    /// Attack (an operator credential revoked while its commit's body was on its way): the
    /// commit's transaction finds the session record gone and commits and spends nothing; the
    /// same commit by a credential still minted lands.
    #[test]
    fn a_commit_by_a_credential_revoked_before_its_transaction_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let grant = CommitGrant {
            episode: "ops".into(),
            budget: 1,
        };
        let minted = |store: &Store| {
            let g = "World.Commit=log:1".parse().unwrap();
            crate::session::mint(store, "ops", vec![g], 60, 0)
                .unwrap()
                .session
                .credential_id
        };
        let revoked = minted(&store);
        crate::session::revoke(&store, &revoked).unwrap();
        let head = store.read(log::head).unwrap().unwrap().world_ref;
        let c = commit_on_head(&store, Some("rest:x"), 1);
        let refused = rest_commit_as(&store, c.clone(), &grant, &revoked);
        assert!(matches!(refused, Err(CommitError::Revoked)), "{refused:?}");
        assert_eq!(
            refused.unwrap_err().to_string(),
            "session credential was revoked before this commit was written: nothing was committed and nothing was spent"
        );
        assert_eq!(store.read(log::head).unwrap().unwrap().world_ref, head);
        assert!(store.read(|r| journal::spent(r, "ops")).unwrap().is_empty());
        assert!(matches!(
            receipt(&store, "rest:x").unwrap(),
            Receipt::NotStarted
        ));
        let live = minted(&store);
        assert_eq!(
            rest_commit_as(&store, c.clone(), &grant, &live).unwrap(),
            c.world_ref
        );
    }
}
