//! The world's tables (schema 6; `docs/data-model.md` §8.2): their names, slots and codecs, and
//! the key layouts more than one module writes. The storage layer knows only the names
//! ([`crate::storage::Layout`]); what the rows mean is each owning module's.

use heed::types::{Bytes, Str};

use crate::object::{ObjectView, Ref};
use crate::storage::{Seq, StoreError, Table};

/// The schema this build reads and writes. A store of schema 1, 2, 3, 4 or 5 is migrated when
/// it is opened ([`crate::migrate`]); any other version is refused unmodified.
pub const SCHEMA_VERSION: u32 = 6;

/// The tables, by slot (each constant below names its slot).
pub(crate) const TABLES: &[&str] = &[
    "object_rows",
    "refs",
    "semantic_ids",
    "entries",
    "journal",
    "invocations",
    "resolutions",
    "pending",
    "spend",
    "sessions",
    "registry_heads",
    "readers",
    "ref_index",
    "invocation_rows",
    "readers_tail",
];

/// object sequence (insertion order) → ref(32) ‖ object envelope ([`crate::objects`]).
pub(crate) const OBJECTS: Table<Seq, Bytes> = Table::new(0, "object_rows");
/// ref(32) ‖ kind → u64 BE: an object's sequence ([`OBJECT`]), an entry's index by its hash
/// ([`ENTRY_HASH`]) or by the ref of the world it selected ([`WORLD_REF`]), an invocation
/// row's sequence by the digest of its id ([`INVOCATION`]). The keys of the newest rows are
/// not here yet ([`crate::ref_tail`]).
pub(crate) const REFS: Table<Bytes, Seq> = Table::new(1, "refs");
/// [`semantic_prefix`] ‖ object sequence → (): the semantic-id index, in insertion order. The
/// newest objects are not here yet ([`crate::semantic_index`]).
pub(crate) const SEMANTIC_IDS: Table<Bytes, Bytes> = Table::new(2, "semantic_ids");
/// entry index → log row: world ref, entry JSON and world JSON ([`crate::log`]).
pub(crate) const LOG: Table<Seq, Bytes> = Table::new(3, "entries");
/// journal sequence → canonical journal record JSON ([`crate::journal`]).
pub(crate) const JOURNAL: Table<Seq, Bytes> = Table::new(4, "journal");
/// invocation id → journal state and task state of its first durable point, for the
/// invocations of schema 3 and before: read where `invocation_rows` has no row, and rewritten
/// in place, never added to ([`crate::invocations`]).
pub(crate) const INVOCATIONS: Table<Str, Bytes> = Table::new(5, "invocations");
/// intent sequence → the journal state and task state that resolved that intent.
pub(crate) const RESOLUTIONS: Table<Seq, Bytes> = Table::new(6, "resolutions");
/// invocation id → intent sequence, for intents that have no outcome yet.
pub(crate) const PENDING: Table<Str, Seq> = Table::new(7, "pending");
/// episode \0 effect \0 scope → units spent.
pub(crate) const SPEND: Table<Bytes, Seq> = Table::new(8, "spend");
/// credential id (64 hex) → canonical session JSON ([`crate::session`]).
pub(crate) const SESSIONS: Table<Str, Bytes> = Table::new(9, "sessions");
/// registry name → registry revision ref(32) ([`crate::registry`]).
pub(crate) const REGISTRY_HEADS: Table<Str, Bytes> = Table::new(10, "registry_heads");
/// episode \0 object sequence → (): which episode may read which object ([`crate::access`]);
/// the newest grants wait in `readers_tail`.
pub(crate) const READERS: Table<Bytes, Bytes> = Table::new(11, "readers");
/// `<kind>_indexed_<partition>` → below which row that partition's keys are in `refs`;
/// `appender` → the token of the store handle that claimed the tail ([`crate::ref_tail`]);
/// `semantic_indexed` → below which object the semantic-id index is whole
/// ([`crate::semantic_index`]).
pub(crate) const REF_INDEX: Table<Str, Seq> = Table::new(12, "ref_index");
/// invocation sequence (arrival order) → the invocation's id and its row
/// ([`crate::invocation_row`]), found by id through `refs` ([`INVOCATION`]).
pub(crate) const INVOCATION_ROWS: Table<Seq, Bytes> = Table::new(13, "invocation_rows");
/// object sequence (u64 BE) ‖ episode → (): grants of `readers` not merged into it yet, in
/// object order ([`crate::access`]).
pub(crate) const READERS_TAIL: Table<Bytes, Bytes> = Table::new(14, "readers_tail");

/// The object in a row of [`OBJECTS`] (ref ‖ envelope) stored at sequence `seq`.
pub(crate) fn decode_object_row(seq: u64, row: &[u8]) -> Result<ObjectView<'_>, StoreError> {
    row.split_at_checked(32)
        .and_then(|(r, envelope)| ObjectView::decode(Ref::from_slice(r)?, envelope))
        .ok_or_else(|| StoreError::Corrupt(format!("object row {seq} is damaged")))
}

/// `refs` key kinds: the same digest may name an object, an entry and a world at once.
pub(crate) const OBJECT: u8 = b'o';
pub(crate) const ENTRY_HASH: u8 = b'e';
pub(crate) const WORLD_REF: u8 = b'w';
pub(crate) const INVOCATION: u8 = b'i';

/// The `refs` key of `r` as a `kind`.
pub(crate) fn ref_key(r: &Ref, kind: u8) -> [u8; 33] {
    let mut key = [0u8; 33];
    key[..32].copy_from_slice(r.as_bytes());
    key[32] = kind;
    key
}

/// The key prefix of a semantic id in `semantic_ids`: its length (u16 BE) then its bytes, so
/// that no semantic id's range contains another's.
pub(crate) fn semantic_prefix(semantic_id: &str) -> Result<Vec<u8>, StoreError> {
    let len = u16::try_from(semantic_id.len()).map_err(|_| {
        StoreError::Corrupt(format!(
            "a semantic id of {} bytes is longer than the store keeps",
            semantic_id.len()
        ))
    })?;
    let mut key = Vec::with_capacity(semantic_id.len() + 10);
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(semantic_id.as_bytes());
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each table constant's slot is its name's place in [`TABLES`], and no slot is taken twice.
    #[test]
    fn every_table_sits_at_its_slot() {
        let tables = [
            (OBJECTS.slot(), OBJECTS.name()),
            (REFS.slot(), REFS.name()),
            (SEMANTIC_IDS.slot(), SEMANTIC_IDS.name()),
            (LOG.slot(), LOG.name()),
            (JOURNAL.slot(), JOURNAL.name()),
            (INVOCATIONS.slot(), INVOCATIONS.name()),
            (RESOLUTIONS.slot(), RESOLUTIONS.name()),
            (PENDING.slot(), PENDING.name()),
            (SPEND.slot(), SPEND.name()),
            (SESSIONS.slot(), SESSIONS.name()),
            (REGISTRY_HEADS.slot(), REGISTRY_HEADS.name()),
            (READERS.slot(), READERS.name()),
            (REF_INDEX.slot(), REF_INDEX.name()),
            (INVOCATION_ROWS.slot(), INVOCATION_ROWS.name()),
            (READERS_TAIL.slot(), READERS_TAIL.name()),
        ];
        assert_eq!(tables.len(), TABLES.len());
        for (i, (slot, name)) in tables.into_iter().enumerate() {
            assert_eq!((slot, name), (i, TABLES[i]));
        }
    }

    /// `docs/data-model.md` §8.1–§8.2 give the schema version and how many named databases the
    /// store uses: the tables here plus the storage layer's `meta`.
    #[test]
    fn the_data_model_page_gives_the_schema_and_its_tables() {
        use crate::storage::META_TABLE;
        let page = include_str!("../../docs/data-model.md");
        let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
        let tables = TABLES.len();
        let used = tables + 1;
        for said in [
            format!(
                "| named databases | up to 32 ({used} used: the {tables} tables of §8.2 and `{META_TABLE}`) |"
            ),
            format!("### 8.2 Named databases Schema {SCHEMA_VERSION}. "),
            format!("| `meta` | `schema_version` | ASCII decimal, `{SCHEMA_VERSION}` |"),
            format!("`meta[\"schema_version\"]` is `{SCHEMA_VERSION}` for this build"),
        ] {
            assert!(
                page.contains(&said),
                "docs/data-model.md §8 should say {said:?}"
            );
        }
    }
}
