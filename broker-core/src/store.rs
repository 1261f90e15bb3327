//! The world's store: the storage layer (the crate's `storage` module) opened with the world's
//! tables (its `schema` module), with its genesis entry written and its indeterminate intents
//! reported.
//!
//! [`Store::open`] is where the layers meet: the storage layer opens (or creates, or migrates)
//! the tables, then [`crate::log`] writes the genesis of a new store and [`crate::journal`]
//! reports the intents left without an outcome. Everything a call does afterwards goes
//! through [`Store::read`] and [`Store::write`] and the world modules built on them (log,
//! journal, tasks, sessions, registry, access).

use crate::journal::{self, JournalError, JournalState};
use crate::log;
use crate::migrate;
use crate::ref_tail;
use crate::schema;
use crate::storage::{Layout, RawEnv, Upgrade};

pub use crate::objects::{Objects, Refs};
pub use crate::ref_tail::MERGE_AT as REF_MERGE_AT;
pub use crate::schema::SCHEMA_VERSION;
pub use crate::semantic_index::MERGE_AT as SEMANTIC_MERGE_AT;
pub use crate::storage::{
    crashed_reading, opening, refuses_writes, say_faults_in_store_maps, CommitObserver, OnFailing,
    Opening, ReadCtx, Store, StoreError, StoreOptions, Submitted, WriteCtx, WriterStats,
    DEFAULT_MAP_SIZE, DEFAULT_RESIDENT_BYTES, DISK_ADVICE,
};

/// The world's layout, as the storage layer opens it.
static LAYOUT: Layout = Layout {
    version: SCHEMA_VERSION,
    tables: schema::TABLES,
    // Either schema's log: a store with entries but no version is not ours.
    occupied: &["log", "entries"],
    upgrades: &[
        Upgrade {
            from: "1",
            run: upgrade_from_1,
        },
        Upgrade {
            from: "2",
            run: migrate::schema_2_to_6,
        },
        Upgrade {
            from: "3",
            run: migrate::schema_3_to_6,
        },
        Upgrade {
            from: "4",
            run: migrate::schema_4_to_6,
        },
        Upgrade {
            from: "5",
            run: migrate::schema_5_to_6,
        },
    ],
    state: ref_tail::state,
    ended: ref_tail::ended,
    log_tip: crate::log::tip,
    keeps_older: migrate::keeping,
};

fn upgrade_from_1(env: &RawEnv, map_size: usize) -> Result<(), StoreError> {
    migrate::schema_1_to_2(env, map_size).map(drop)
}

impl Store {
    /// Open (or with `create`, create) the store in `dir`. A new store gets its genesis entry;
    /// a schema-1 store is migrated first ([`crate::migrate`]).
    pub fn open(dir: &std::path::Path, options: StoreOptions) -> Result<Store, StoreError> {
        // A crash while the store opens is said as the store's likely doing.
        let _opening = crate::storage::opening();
        let store = Store::open_layout(dir, options, &LAYOUT)?;
        // The first reads of its rows are part of opening it: damage they meet is said so.
        ref_tail::load(&store).map_err(|e| e.said_at_first_read(dir))?;
        log::ensure_genesis(&store).map_err(|e| e.said_at_first_read(dir))?;
        journal::report_pending(&store);
        Ok(store)
    }

    /// Check the newest log row whole (`log::check_head`): every append continues it, so a
    /// daemon refuses to serve a store whose head is damaged rather than write over committed
    /// entries or chain onto a hash no entry has. And that a sequence number follows the
    /// journal's last row (`journal::check_last`): every call journals its intent
    /// first, so without one the daemon would start only to fail each call. Said as the
    /// damaged store, naming what was found and `worldd doctor`. Verbs that only read a store
    /// (`doctor`, `why`) do not ask.
    pub fn check_head(&self) -> Result<(), StoreError> {
        self.read(|r| {
            log::check_head(r)?;
            crate::journal::check_last(r)
        })
        .map_err(|e| e.said_at_first_read(self.path()))
    }

    /// Create the store in `dir` if absent, with default options.
    pub fn create(dir: &std::path::Path) -> Result<Store, StoreError> {
        Store::open(
            dir,
            StoreOptions {
                create: true,
                ..StoreOptions::default()
            },
        )
    }

    /// Intents without an outcome (indeterminate effects).
    pub fn indeterminate(&self) -> Result<Vec<JournalState>, JournalError> {
        self.read(journal::pending)
    }

    /// Log every indeterminate effect, one line each.
    pub fn report_indeterminate_each(&self) {
        journal::report_pending_each(self);
    }
}

#[cfg(any(test, feature = "fixtures"))]
pub use fixtures::RawTable;

/// Raw access to any table's rows, past every hash check: a tamper test's way to damage a
/// store on purpose. Built only for tests (the `fixtures` feature), so no build of the
/// daemon can write a row its checks never see.
#[cfg(any(test, feature = "fixtures"))]
mod fixtures {
    use super::{log, schema, Store, StoreError};
    use crate::invocations::{self, Part};
    use crate::object::Ref;
    use crate::objects::object_row;
    use crate::schema::{
        JOURNAL, OBJECTS, REFS, REGISTRY_HEADS, RESOLUTIONS, SEMANTIC_IDS, SESSIONS, SPEND,
    };
    use crate::task;

    impl Store {
        /// Stored bytes overwritten as given, for tamper tests: an object's envelope (by ref), an entry's JSON (by index, u64 BE), a world's JSON (by
        /// world ref), a journal record (by seq, u64 BE), the journal or task state of an
        /// invocation (the rest of its row is kept), or an invocation row or a resolution whole
        /// (see [`RawTable`]).
        #[doc(hidden)]
        pub fn raw_overwrite(
            &self,
            table: RawTable,
            key: Vec<u8>,
            value: Vec<u8>,
        ) -> Result<(), StoreError> {
            self.write(move |w| -> Result<(), StoreError> {
                match table {
                    RawTable::Objects => {
                        let r = raw_ref(&key)?;
                        let (seq, _) = object_row(&w.reader(), &r)?
                            .ok_or_else(|| StoreError::Corrupt(format!("no object {r}")))?;
                        let mut row = key.clone();
                        row.extend_from_slice(&value);
                        OBJECTS.put(w, &seq, &row)
                    }
                    RawTable::Worlds => {
                        let world_ref = raw_ref(&key)?;
                        let index = log::index_of_world(&w.reader(), &world_ref)?
                            .ok_or_else(|| StoreError::Corrupt(format!("no world {world_ref}")))?;
                        log::overwrite_row(w, index, None, Some(&value))
                    }
                    RawTable::Log => log::overwrite_row(w, raw_index(&key)?, Some(&value), None),
                    RawTable::LogRow if value.is_empty() => {
                        schema::LOG.delete(w, &raw_index(&key)?).map(|_| ())
                    }
                    RawTable::LogRow => schema::LOG.put(w, &raw_index(&key)?, &value),
                    RawTable::Journal => JOURNAL.put(w, &raw_index(&key)?, &value),
                    RawTable::JournalIndex => {
                        invocations::overwrite_visible(w, str_key(&key)?, Part::Journal, &value)
                    }
                    RawTable::Tasks => {
                        let id = task_invocation(&key)?;
                        invocations::overwrite_visible(w, &id, Part::Task, &value)
                    }
                    RawTable::Invocations => invocations::overwrite_row(w, str_key(&key)?, &value),
                    RawTable::Resolutions => RESOLUTIONS.put(w, &raw_index(&key)?, &value),
                    RawTable::SemanticIds if value.is_empty() => {
                        SEMANTIC_IDS.delete(w, &key).map(|_| ())
                    }
                    RawTable::SemanticIds => SEMANTIC_IDS.put(w, &key, &[]),
                    RawTable::Refs if value.is_empty() => REFS.delete(w, &key).map(|_| ()),
                    // As given: a value of another length is damage doctor must report.
                    RawTable::Refs => REFS.raw().put(w, &key, &value),
                    RawTable::Spend => SPEND.raw().put(w, &key, &value),
                    RawTable::Sessions => SESSIONS.raw().put(w, &key, &value),
                    RawTable::RegistryHeads => REGISTRY_HEADS.raw().put(w, &key, &value),
                    RawTable::ReadersTail => schema::READERS_TAIL.put(w, &key, &value),
                }
            })
        }

        /// Raw stored bytes (see [`Store::raw_overwrite`]).
        #[doc(hidden)]
        pub fn raw_get(&self, table: RawTable, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.read(|r| {
                Ok(match table {
                    RawTable::Objects => object_row(r, &raw_ref(key)?)?.map(|(_, v)| v.to_vec()),
                    RawTable::Worlds => log::world_bytes(r, &raw_ref(key)?)?,
                    RawTable::Log => log::entry_bytes(r, raw_index(key)?)?,
                    RawTable::LogRow => schema::LOG.get(r, &raw_index(key)?)?.map(<[u8]>::to_vec),
                    RawTable::Journal => JOURNAL.get(r, &raw_index(key)?)?.map(<[u8]>::to_vec),
                    RawTable::JournalIndex => invocations::get(r, str_key(key)?)?
                        .and_then(|row| row.journal)
                        .map(<[u8]>::to_vec),
                    RawTable::Tasks => invocations::get(r, &task_invocation(key)?)?
                        .and_then(|row| row.task)
                        .map(<[u8]>::to_vec),
                    RawTable::Invocations => {
                        invocations::stored(r, str_key(key)?)?.map(|(row, _)| row.to_vec())
                    }
                    RawTable::Resolutions => {
                        RESOLUTIONS.get(r, &raw_index(key)?)?.map(<[u8]>::to_vec)
                    }
                    RawTable::Refs => REFS.raw().get(r, key)?.map(<[u8]>::to_vec),
                    RawTable::SemanticIds => SEMANTIC_IDS.get(r, key)?.map(<[u8]>::to_vec),
                    RawTable::Spend => SPEND.raw().get(r, key)?.map(<[u8]>::to_vec),
                    RawTable::Sessions => SESSIONS.raw().get(r, key)?.map(<[u8]>::to_vec),
                    RawTable::RegistryHeads => {
                        REGISTRY_HEADS.raw().get(r, key)?.map(<[u8]>::to_vec)
                    }
                    RawTable::ReadersTail => schema::READERS_TAIL.get(r, key)?.map(<[u8]>::to_vec),
                })
            })
        }
    }
    fn raw_ref(key: &[u8]) -> Result<Ref, StoreError> {
        Ref::from_slice(key).ok_or_else(|| StoreError::Corrupt("a ref key must be 32 bytes".into()))
    }

    fn raw_index(key: &[u8]) -> Result<u64, StoreError> {
        key.try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| StoreError::Corrupt("a u64 key must be 8 bytes".into()))
    }

    /// The invocation a task key (`episode \0 task`) belongs to.
    fn task_invocation(key: &[u8]) -> Result<String, StoreError> {
        let (episode, task) = str_key(key)?
            .split_once('\0')
            .ok_or_else(|| StoreError::Corrupt("a task key is `episode \\0 task`".into()))?;
        task::invocation_key(episode, task)
    }

    fn str_key(key: &[u8]) -> Result<&str, StoreError> {
        std::str::from_utf8(key).map_err(|_| StoreError::Corrupt("key is not UTF-8".into()))
    }

    /// Tables reachable through the raw maintenance accessors.
    #[doc(hidden)]
    #[derive(Debug, Clone, Copy)]
    pub enum RawTable {
        Objects,
        Worlds,
        Log,
        /// A log row whole, by index (u64 BE key), in the layout of `log_row`: world ref, entry
        /// length, entry hash, entry and world. Written as given; an empty value deletes the row,
        /// as a log cut short (a bad restore, a lost end) leaves it.
        LogRow,
        /// Journal rows by sequence (u64 big-endian key).
        Journal,
        /// An invocation's journal state as readers see it, by invocation id (UTF-8 key): the
        /// part of its resolution, else of its row (`docs/data-model.md` §8.2).
        JournalIndex,
        /// A task's state as readers see it, by `episode \0 task`: also a part of its
        /// invocation's resolution or row.
        Tasks,
        /// An invocation's row as stored, by invocation id (UTF-8 key): intent sequence, journal
        /// state and task state in the layout of `docs/data-model.md` §8.2.
        Invocations,
        /// The resolution of an intent as stored, by the intent's journal sequence (u64
        /// big-endian key), in the same layout.
        Resolutions,
        /// The content-address index: a 33-byte key (a ref and its kind: `o` object, `e` entry
        /// hash, `w` world, `i` the digest of an invocation id) → the row it names (u64
        /// big-endian value). The value is written as given, whatever its length; an empty one
        /// deletes the key.
        Refs,
        /// The semantic-id index: a key (`u16` BE length, the semantic id, the object's u64 BE
        /// sequence) → nothing. Any value but an empty one puts the key; an empty one deletes it.
        SemanticIds,
        /// Spend counters: `episode \0 effect \0 scope` → units spent (u64 big-endian), written
        /// as given whatever its length.
        Spend,
        /// Session records: credential id → canonical session JSON, written as given.
        Sessions,
        /// Registry heads: registry name → the ref of its current revision (32 bytes), written as
        /// given.
        RegistryHeads,
        /// Read grants waiting to be merged: object sequence (u64 BE) ‖ episode → empty, or the
        /// header the episode made the object's bytes under; key and value written as given.
        ReadersTail,
    }
}
