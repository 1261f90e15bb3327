//! Where the verifier reads: one small trait, [`Source`].
//!
//! `why` and `doctor` never touch the store directly: every read of a verification goes
//! through these methods, and everything read is re-hashed and cross-checked by the caller, so
//! a source is trusted for nothing but availability. [`LocalSource`] reads an LMDB store in one
//! read transaction (a consistent snapshot). A remote source, for `worldd why --addr`, answers
//! the same questions over the daemon's REST routes; each method says which route serves it.

use std::borrow::Cow;

use crate::journal::{self, JournalError, JournalState};
use crate::log::{self, LogError};
use crate::object::Ref;
use crate::store::{ReadCtx, StoreError};
use crate::task::{self, TaskState};

/// A stored object as a source hands it over: its semantic id and payload bytes (borrowed from
/// the store when it can). The verifier checks that the payload hashes to the ref it asked for.
#[derive(Debug, Clone)]
pub struct StoredObject<'a> {
    pub semantic_id: Cow<'a, str>,
    pub payload: Cow<'a, [u8]>,
}

/// A source could not answer (I/O, a damaged row, a remote that failed). Reported on the link
/// that needed the answer, as a broken link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

impl SourceError {
    /// True when the source could not answer because a row it holds (or served) is damaged:
    /// an integrity failure, not a failure to reach the source. Told by the text the store's,
    /// log's and journal's `Corrupt` errors begin with, the only form that survives a
    /// conversion into this error (and a remote source's answer).
    pub fn is_damage(&self) -> bool {
        let prefixes = [
            StoreError::Corrupt(String::new()).to_string(),
            LogError::Corrupt(String::new()).to_string(),
            JournalError::Corrupt(String::new()).to_string(),
        ];
        prefixes.iter().any(|p| self.0.starts_with(p.as_str()))
    }
}

impl From<StoreError> for SourceError {
    fn from(e: StoreError) -> Self {
        SourceError(e.to_string())
    }
}

impl From<JournalError> for SourceError {
    fn from(e: JournalError) -> Self {
        SourceError(e.to_string())
    }
}

impl From<LogError> for SourceError {
    fn from(e: LogError) -> Self {
        SourceError(e.to_string())
    }
}

/// The reads a verification makes. Answers are raw stored bytes or the coordinator's own rows;
/// nothing a source says is trusted without being recomputed.
pub trait Source {
    /// The stored bytes of log entry `index` (canonical JSON). Remote: `GET /v1/log/{index}`,
    /// canonicalised.
    fn entry(&self, index: u64) -> Result<Option<Cow<'_, [u8]>>, SourceError>;

    /// An object by ref. Remote: `GET /v1/objects/{ref}?payload=true`.
    fn object(&self, reference: &Ref) -> Result<Option<StoredObject<'_>>, SourceError>;

    /// The stored bytes of a world (canonical JSON). Remote: `GET /v1/worlds/{ref}` without its
    /// `ref` member, canonicalised.
    fn world(&self, reference: &Ref) -> Result<Option<Cow<'_, [u8]>>, SourceError>;

    /// The selected head's world ref. Remote: `GET /v1/head`.
    fn head(&self) -> Result<Option<Ref>, SourceError>;

    /// The journal's state of one invocation: its intent and outcome. Only the coordinator
    /// writes it for `a2a:`/`mcp:` invocations. Remote: `GET /v1/invocations/{id}/rows`, the
    /// stored invocation row, resolution and journal rows checked by
    /// [`InvocationRows::journal_state`](super::InvocationRows).
    fn journal(&self, invocation_id: &str) -> Result<Option<JournalState>, SourceError>;

    /// The task (idempotency) state of `task` (`<surface>:<task id>`) in `episode`, written by
    /// the coordinator in the same transaction as the entry. Remote:
    /// `GET /v1/invocations/{surface}:{episode}:{task id}/rows`, the stored invocation row and
    /// resolution decoded by [`InvocationRows::task_state`](super::InvocationRows).
    fn task(&self, episode: &str, task: &str) -> Result<Option<TaskState>, SourceError>;

    /// Is `prev` the entry hash of entry `index`? The default reads that entry and recomputes
    /// its hash (a served entry's `entryHash` is only a claim); a store answers from its
    /// entry-hash index, which it wrote from recomputed hashes.
    fn links(&self, prev: &Ref, index: u64) -> Result<bool, SourceError> {
        recomputed_hash_is(self.entry(index)?.as_deref(), prev, index)
    }

    /// Does the source's own index of entry hashes (where it has one, which [`Source::links`]
    /// answers from) name entry `index` under `hash`, its recomputed hash? A source without
    /// such an index has nothing there to be damaged.
    fn indexes(&self, hash: &Ref, index: u64) -> Result<bool, SourceError> {
        let _ = (hash, index);
        Ok(true)
    }

    /// The index of the entry with this hash, when the source has an index of them; `None`
    /// makes `why` find the entry by scanning back from the head instead.
    fn entry_index(&self, entry_hash: &Ref) -> Result<Option<u64>, SourceError> {
        let _ = entry_hash;
        Ok(None)
    }

    /// The ref of the world that entry `index` selected, when the source keeps that index. Only
    /// client commits need it (a coordinator entry's world follows from its record); without
    /// it their world is found only when it is the head. Remote: `GET /v1/log/{index}/world`.
    fn world_at(&self, index: u64) -> Result<Option<Ref>, SourceError> {
        let _ = index;
        Ok(None)
    }

    /// The source's invocation rows whose id cannot be read, each as its row number, what
    /// failed, and the first bytes where its id would begin. A lookup by id cannot find such a
    /// row, so it is asked only when an invocation the log holds has no task state, to tell a
    /// damaged row from an absent one. A source that cannot list them (a daemon's routes serve
    /// rows by id) has none to report.
    fn unnamed_invocation_rows(&self) -> Result<Vec<(u64, String, Vec<u8>)>, SourceError> {
        Ok(Vec::new())
    }
}

/// Whether `bytes`, entry `index` as a source holds it, hash to `prev` when recomputed. Its
/// `entryHash` text is not asked: where that text is what is damaged, entry `index`'s own link
/// says so, and the next entry, whose `prevEntryHash` names the hash the entry's fields do
/// have, is not blamed for it (on every source alike).
fn recomputed_hash_is(bytes: Option<&[u8]>, prev: &Ref, index: u64) -> Result<bool, SourceError> {
    let Some(bytes) = bytes else {
        return Ok(false);
    };
    Ok(log::Entry::from_bytes(bytes).is_ok_and(|e| {
        e.header.entry_index == index
            && log::Entry::compute_hash(&e.header, &e.transition_ref).is_ok_and(|h| h == *prev)
    }))
}

/// A store, read in one read transaction.
pub struct LocalSource<'r, 't> {
    r: &'r ReadCtx<'t>,
}

impl<'r, 't> LocalSource<'r, 't> {
    pub fn new(r: &'r ReadCtx<'t>) -> Self {
        LocalSource { r }
    }
}

impl Source for LocalSource<'_, '_> {
    fn entry(&self, index: u64) -> Result<Option<Cow<'_, [u8]>>, SourceError> {
        Ok(log::stored_entry(self.r, index)?.map(Cow::Borrowed))
    }

    fn object(&self, reference: &Ref) -> Result<Option<StoredObject<'_>>, SourceError> {
        Ok(self.r.object_view(reference)?.map(|o| StoredObject {
            semantic_id: Cow::Borrowed(o.semantic_id),
            payload: Cow::Borrowed(o.payload),
        }))
    }

    fn world(&self, reference: &Ref) -> Result<Option<Cow<'_, [u8]>>, SourceError> {
        Ok(log::stored_world(self.r, reference)?.map(Cow::Borrowed))
    }

    fn head(&self) -> Result<Option<Ref>, SourceError> {
        Ok(log::head(self.r)?.map(|h| h.world_ref))
    }

    fn journal(&self, invocation_id: &str) -> Result<Option<JournalState>, SourceError> {
        // The journal state is checked against the journal rows it summarises.
        Ok(journal::verified_state(self.r, invocation_id)?)
    }

    fn task(&self, episode: &str, task: &str) -> Result<Option<TaskState>, SourceError> {
        Ok(task::get(self.r, episode, task)?)
    }

    fn links(&self, prev: &Ref, index: u64) -> Result<bool, SourceError> {
        // Entry `index`'s own bytes are checked when it is verified; the index says whose hash
        // `prev` is without parsing them again.
        if log::index_of_entry_hash(self.r, prev)? == Some(index) {
            return Ok(true);
        }
        // Otherwise the index may be what is damaged (entry `index`'s own link says so): the
        // entry's bytes decide, so that the next entry is not blamed for it.
        recomputed_hash_is(self.entry(index)?.as_deref(), prev, index)
    }

    fn indexes(&self, hash: &Ref, index: u64) -> Result<bool, SourceError> {
        Ok(log::index_of_entry_hash(self.r, hash)? == Some(index))
    }

    fn entry_index(&self, entry_hash: &Ref) -> Result<Option<u64>, SourceError> {
        Ok(log::index_of_entry_hash(self.r, entry_hash)?)
    }

    fn world_at(&self, index: u64) -> Result<Option<Ref>, SourceError> {
        Ok(log::world_ref_at(self.r, index)?)
    }

    fn unnamed_invocation_rows(&self) -> Result<Vec<(u64, String, Vec<u8>)>, SourceError> {
        Ok(crate::invocations::unnamed_rows(self.r)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Entry, EntryHeader};

    /// A source that holds one entry at index 0 and nothing else.
    struct OneEntry(Vec<u8>);

    impl Source for OneEntry {
        fn entry(&self, index: u64) -> Result<Option<Cow<'_, [u8]>>, SourceError> {
            Ok((index == 0).then_some(Cow::Borrowed(self.0.as_slice())))
        }
        fn object(&self, _: &Ref) -> Result<Option<StoredObject<'_>>, SourceError> {
            Ok(None)
        }
        fn world(&self, _: &Ref) -> Result<Option<Cow<'_, [u8]>>, SourceError> {
            Ok(None)
        }
        fn head(&self) -> Result<Option<Ref>, SourceError> {
            Ok(None)
        }
        fn journal(&self, _: &str) -> Result<Option<JournalState>, SourceError> {
            Ok(None)
        }
        fn task(&self, _: &str, _: &str) -> Result<Option<TaskState>, SourceError> {
            Ok(None)
        }
    }

    /// A genesis entry naming `prev` as the entry before it.
    fn genesis(prev: Ref) -> Entry {
        Entry::new(
            EntryHeader {
                entry_index: 0,
                semantics_epoch: 1,
                transition_fn: Ref::of(b"fn"),
                interpreter: Ref::of(b"interp"),
                prev_entry_hash: prev,
                written_by: "world:genesis".into(),
            },
            Ref::of(b"record"),
        )
        .unwrap()
    }

    /// Entry 0 has no entry before it: a genesis whose prevEntryHash is not the 64 zeros is
    /// told by that rule, not as "not the hash of entry 0".
    #[test]
    fn a_genesis_whose_prev_entry_hash_is_not_zero_is_told_by_the_genesis_rule() {
        let prev = Ref::of(b"the entry before");
        let entry = genesis(prev);
        let report = crate::verify::verify_entry_in(&OneEntry(entry.to_bytes().unwrap()), 0);
        let link = &report.links[0];
        assert_eq!((link.kind, link.ok), ("entry", false));
        assert_eq!(
            link.detail,
            format!(
                "prevEntryHash {prev} of entry 0 is not sha256:{}: entry 0 has no entry before it",
                "0".repeat(64)
            )
        );
    }

    /// An entry whose `entryHash` text was edited is broken on its own link; the entry after
    /// it, which names the hash its fields do have, links to it, as a store's index says
    /// (online and offline name the damage once, where it is).
    #[test]
    fn the_entry_after_one_whose_entry_hash_text_was_edited_links_to_its_recomputed_hash() {
        let entry = genesis(Ref::ZERO);
        let mut edited = entry.clone();
        edited.entry_hash = Ref::of(b"an edited entryHash text");
        let source = OneEntry(edited.to_bytes().unwrap());
        assert!(source.links(&entry.entry_hash, 0).unwrap());
        assert!(!source.links(&edited.entry_hash, 0).unwrap());
        let report = crate::verify::verify_entry_in(&source, 0);
        assert!(!report.links[0].ok);
        assert_eq!(
            report.links[0].detail,
            format!(
                "entryHash {} does not match the recomputed {}",
                edited.entry_hash, entry.entry_hash
            )
        );
    }

    #[test]
    fn a_served_entry_hash_links_only_when_it_recomputes() {
        let entry = genesis(Ref::ZERO);
        let genuine = OneEntry(entry.to_bytes().unwrap());
        assert!(genuine.links(&entry.entry_hash, 0).unwrap());
        assert!(!genuine.links(&entry.entry_hash, 1).unwrap());

        // A source that claims any hash it likes for the entry before: the claim is not a link.
        let claimed = Ref::of(b"what the next entry names");
        let mut lying = entry.clone();
        lying.entry_hash = claimed;
        let lying = OneEntry(lying.to_bytes().unwrap());
        assert!(!lying.links(&claimed, 0).unwrap());
    }
}
