//! The invocation row: what the journal and the task table know of one invocation id.
//!
//! An effectful call writes its journal state (intent, then outcome) and its task state
//! (pending, then committed) in its two transactions. The states of the first durable point
//! share one row (schema 1 kept `journal_by_invocation` and `tasks` apart, two leaves). Since
//! schema 4 rows are stored in arrival order (`invocation_rows`, sequence → id ‖ row,
//! [`crate::invocation_row`]) and found by id through the content-address index and its tail
//! ([`crate::ref_tail`]), so a group commit's new rows share the pages at the end of one table
//! instead of one randomly placed leaf each (ids are random: a task id within its episode).
//! Rows written before schema 4 stay in `invocations`, keyed by id, and are rewritten there. The
//! states that resolve an intent (its outcome, the task's end) do not rewrite that row: they go
//! to `resolutions`, keyed by the intent's journal sequence, which is always near the end of
//! that table when the outcome is written — the outcome commit adds to the pages the other
//! outcomes of its group commit write anyway, instead of one more random leaf per call.
//! Readers see the resolution's parts over the row's. An intent whose outcome comes in the same
//! group commit (a read runs beside its intent) is the exception: no reader saw its row, whose
//! page that transaction has copied already, so the resolving states are written into the row
//! and `resolutions` is not touched ([`resolving`]).
//!
//! Row layout (both tables): `u64 BE intent sequence (0: none) | u32 BE length of the journal
//! part (u32::MAX: none) | journal part | task part` (the rest; empty: none). Each part is the
//! canonical JSON its module writes.

use crate::invocation_row;
use crate::ref_tail;
use crate::schema::{INVOCATIONS, INVOCATION_ROWS, RESOLUTIONS};
use crate::storage::{ReadCtx, StoreError, WriteCtx};

const NONE: u32 = u32::MAX;

/// The parts of a row, borrowed from the stored bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Row<'a> {
    /// The journal sequence of the invocation's intent, for rows written with it.
    pub intent: Option<u64>,
    pub journal: Option<&'a [u8]>,
    pub task: Option<&'a [u8]>,
}

impl<'a> Row<'a> {
    /// `bytes` as a row, or what about them does not decode. Beyond the layout, a stored row
    /// holds at least one part, and a journal part is never empty: every write puts a part's
    /// canonical JSON ([`put_initial`], [`put_resolution`]), so bytes that read as neither are
    /// damage, not an invocation without states.
    pub(crate) fn checked(bytes: &'a [u8]) -> Result<Row<'a>, String> {
        let row = Row::decode(bytes).ok_or_else(|| Row::undecodable(bytes))?;
        match (row.journal, row.task) {
            (Some([]), _) => Err("its journal part is empty".into()),
            (None, None) => Err("it holds neither a journal state nor a task state".into()),
            _ => Ok(row),
        }
    }

    /// Why bytes [`Row::decode`] refused do not decode.
    fn undecodable(bytes: &[u8]) -> String {
        match bytes.get(8..12) {
            None => format!(
                "it is {} byte(s), shorter than the 12 of its intent sequence and journal length",
                bytes.len()
            ),
            Some(len) => format!(
                "its journal part's length says {} byte(s), but {} follow",
                u32::from_be_bytes(len.try_into().unwrap_or_default()),
                bytes.len() - 12
            ),
        }
    }

    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Row<'a>> {
        let intent = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let len = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?);
        let rest = bytes.get(12..)?;
        let (journal, task) = if len == NONE {
            (None, rest)
        } else {
            let len = usize::try_from(len).ok()?;
            (Some(rest.get(..len)?), rest.get(len..)?)
        };
        Some(Row {
            intent: (intent != 0).then_some(intent),
            journal,
            task: (!task.is_empty()).then_some(task),
        })
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let j = self.journal.unwrap_or_default();
        let t = self.task.unwrap_or_default();
        let mut out = Vec::with_capacity(12 + j.len() + t.len());
        out.extend_from_slice(&self.intent.unwrap_or(0).to_be_bytes());
        let len = match self.journal {
            Some(j) => u32::try_from(j.len()).unwrap_or(NONE - 1),
            None => NONE,
        };
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(j);
        out.extend_from_slice(t);
        out
    }

    /// This row with one part replaced.
    fn with(self, part: Part, bytes: &'a [u8]) -> Row<'a> {
        match part {
            Part::Journal => Row {
                journal: Some(bytes),
                ..self
            },
            Part::Task => Row {
                task: Some(bytes),
                ..self
            },
        }
    }
}

/// Which part of the row a write replaces.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part {
    Journal,
    Task,
}

/// `bytes` decoded as a row ([`Row::checked`]); `what` names them if they are damaged (built
/// only then: rows are read several times per call), and the error says what did not decode.
fn decode<'t>(
    bytes: Option<&'t [u8]>,
    what: impl FnOnce() -> String,
) -> Result<Option<Row<'t>>, StoreError> {
    bytes
        .map(|b| {
            Row::checked(b)
                .map_err(|why| StoreError::Corrupt(format!("{} is damaged: {why}", what())))
        })
        .transpose()
}

/// Where an invocation's row is stored.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// `invocation_rows`, at this sequence.
    Sequence(u64),
    /// `invocations`, under its id (a row written before schema 4).
    ById,
}

/// `id`'s row as stored, and where. A row the index names must hold `id` itself: an index
/// pointing elsewhere is damage, never another invocation.
fn located<'t>(r: &ReadCtx<'t>, id: &str) -> Result<Option<(Place, &'t [u8])>, StoreError> {
    if let Some((seq, bytes)) = ref_tail::find_row(r, &invocation_row::key(id.as_bytes()))? {
        let bytes = bytes.ok_or_else(|| {
            StoreError::Corrupt(format!("invocation row {id} is indexed but missing"))
        })?;
        return match named(bytes) {
            Ok((stored, row)) if stored == id => Ok(Some((Place::Sequence(seq), row))),
            Ok(_) => Err(StoreError::Corrupt(format!(
                "invocation row {id} is indexed at the row of another invocation"
            ))),
            Err(why) => Err(StoreError::Corrupt(format!(
                "invocation row {id} is damaged: row {seq} of invocation_rows, where the index finds it, names no invocation: {why}"
            ))),
        };
    }
    Ok(INVOCATIONS.get(r, id)?.map(|row| (Place::ById, row)))
}

/// [`located`], for a row that must exist (the raw rewrites).
#[cfg(any(test, feature = "fixtures"))]
fn existing<'t>(r: &ReadCtx<'t>, id: &str) -> Result<(Place, &'t [u8]), StoreError> {
    located(r, id)?.ok_or_else(|| StoreError::Corrupt(format!("no invocation row {id}")))
}

/// The parts of `id`'s row as [`located`] found it.
#[cfg(any(test, feature = "fixtures"))]
fn parts<'t>(id: &str, found: Option<(Place, &'t [u8])>) -> Result<Option<Row<'t>>, StoreError> {
    decode(found.map(|(_, row)| row), || format!("invocation row {id}"))
}

/// Write `id`'s row where it is stored, or (`None`) as the next row of `invocation_rows`,
/// whose key waits in the tail of the content-address index. The caller has claimed the tail
/// ([`ref_tail::claim`]) before it looked for the row.
fn put_row(
    w: &mut WriteCtx<'_, '_>,
    id: &str,
    place: Option<Place>,
    row: &[u8],
) -> Result<(), StoreError> {
    match place {
        Some(Place::Sequence(seq)) => INVOCATION_ROWS.put(w, &seq, &invocation_row::join(id, row)?),
        Some(Place::ById) => INVOCATIONS.put(w, id, row),
        None => {
            let seq = INVOCATION_ROWS
                .last(&w.reader())?
                .map_or(0, |(last, _)| last + 1);
            INVOCATION_ROWS.append(w, &seq, &invocation_row::join(id, row)?)?;
            ref_tail::note(w, &[invocation_row::key(id.as_bytes())], seq)
        }
    }
}

#[cfg(any(test, feature = "fixtures"))]
fn resolution<'t>(r: &ReadCtx<'t>, intent: u64) -> Result<Option<Row<'t>>, StoreError> {
    decode(RESOLUTIONS.get(r, &intent)?, || {
        format!("the resolution of intent {intent}")
    })
}

/// What is known of `id`: its row, with the parts of its resolution (if any) over it.
pub(crate) fn get<'t>(r: &ReadCtx<'t>, id: &str) -> Result<Option<Row<'t>>, StoreError> {
    match stored(r, id)? {
        None => Ok(None),
        Some((row, resolution)) => visible(id, row, resolution).map(Some),
    }
}

/// An invocation's row and its intent's resolution (if any), as stored bytes.
pub(crate) type Stored<'t> = (&'t [u8], Option<&'t [u8]>);

/// The bytes of `id`'s row and of its intent's resolution (if any), exactly as stored: what
/// `GET /v1/invocations/{id}/rows` serves. A row too damaged to name its intent comes without
/// a resolution; [`visible`] reports the damage.
pub(crate) fn stored<'t>(r: &ReadCtx<'t>, id: &str) -> Result<Option<Stored<'t>>, StoreError> {
    let Some((_, bytes)) = located(r, id)? else {
        return Ok(None);
    };
    let resolution = match Row::decode(bytes).and_then(|r| r.intent) {
        Some(seq) => RESOLUTIONS.get(r, &seq)?,
        None => None,
    };
    Ok(Some((bytes, resolution)))
}

/// What readers see of `id`, from the bytes of its row and of its intent's resolution: the
/// store reads its own through this, and a remote verifier the bytes a daemon served, so a
/// served row is decoded and merged by the same code as a stored one.
pub(crate) fn visible<'a>(
    id: &str,
    row: &'a [u8],
    resolution: Option<&'a [u8]>,
) -> Result<Row<'a>, StoreError> {
    let row = decode(Some(row), || format!("invocation row {id}"))?.unwrap_or_default();
    let Some(resolution) = resolution else {
        return Ok(row);
    };
    // A store keys resolutions by the row's intent; one given for a row without an intent
    // resolves nothing of it.
    let Some(seq) = row.intent else {
        return Err(StoreError::Corrupt(format!(
            "a resolution is given for invocation row {id}, which journals no intent"
        )));
    };
    let r = decode(Some(resolution), || {
        format!("the resolution of intent {seq}")
    })?
    .unwrap_or_default();
    Ok(Row {
        intent: row.intent,
        journal: r.journal.or(row.journal),
        task: r.task.or(row.task),
    })
}

/// Every invocation's id and what readers see of it, in storage order (`invocation_rows`,
/// then the rows of `invocations` written before schema 4), for the audit. A row that does not
/// decode, or names no id, goes to `damaged` with what failed, instead: the audit reports it
/// (a lookup by id finds no row whose id cannot be read, so its invocation reads as absent).
pub(crate) fn for_each_visible<'t>(
    r: &ReadCtx<'t>,
    mut f: impl FnMut(&str, Row<'t>),
    mut damaged: impl FnMut(String),
) -> Result<(), StoreError> {
    let seen = |id: &str, row: &'t [u8]| -> Result<Result<Row<'t>, String>, StoreError> {
        let resolution = match Row::decode(row).and_then(|row| row.intent) {
            Some(seq) => RESOLUTIONS.get(r, &seq)?,
            None => None,
        };
        match visible(id, row, resolution) {
            Ok(row) => Ok(Ok(row)),
            Err(StoreError::Corrupt(why)) => Ok(Err(why)),
            Err(e) => Err(e),
        }
    };
    for item in INVOCATION_ROWS.iter(r)? {
        let (seq, bytes) = item?;
        match named(bytes) {
            Ok((id, row)) => match seen(id, row)? {
                Ok(row) => f(id, row),
                Err(why) => damaged(why),
            },
            Err(why) => damaged(format!(
                "row {seq} of invocation_rows names no invocation: {why}"
            )),
        }
    }
    for item in INVOCATIONS.iter(r)? {
        let (id, row) = item?;
        match seen(id, row)? {
            Ok(row) => f(id, row),
            Err(why) => damaged(why),
        }
    }
    Ok(())
}

/// A row of `invocation_rows` as its id and row, or why its id cannot be read.
fn named(bytes: &[u8]) -> Result<(&str, &[u8]), String> {
    let (id, row) = invocation_row::split(bytes).ok_or_else(|| match bytes.get(..2) {
        Some(len) => format!(
            "its id length says {} byte(s), where {} follow",
            u16::from_be_bytes([len[0], len[1]]),
            bytes.len() - 2
        ),
        None => format!("it is {} byte(s), shorter than its id length", bytes.len()),
    })?;
    let id = std::str::from_utf8(id).map_err(|_| "its id is not UTF-8".to_string())?;
    Ok((id, row))
}

/// The longest invocation id a row can begin with that [`unnamed_rows`] hands over.
const ID_START: usize = 512;

/// The rows of `invocation_rows` whose id cannot be read, each with why and the bytes where
/// its id would begin (at most [`ID_START`]): a lookup by id cannot find such a row, so the
/// invocation it holds reads as absent; when only the id's length was damaged, the id still
/// stands there. Reads every row: for a reader that found no row of an invocation that must
/// have one, never on a call's path.
pub(crate) fn unnamed_rows(r: &ReadCtx<'_>) -> Result<Vec<(u64, String, Vec<u8>)>, StoreError> {
    let mut found = Vec::new();
    for item in INVOCATION_ROWS.iter(r)? {
        let (seq, bytes) = item?;
        if let Err(why) = named(bytes) {
            let start = bytes.get(2..).unwrap_or_default();
            found.push((seq, why, start[..start.len().min(ID_START)].to_vec()));
        }
    }
    Ok(found)
}

/// Write a state of the invocation's first durable point into its row (keeping the other
/// part); `intent` is the journal sequence of its intent, when this write journals it.
pub(crate) fn put_initial(
    w: &mut WriteCtx<'_, '_>,
    id: &str,
    part: Part,
    bytes: &[u8],
    intent: Option<u64>,
) -> Result<(), StoreError> {
    let looked = look(w, id)?;
    looked.put_initial(w, part, bytes, intent)
}

/// An invocation's row as an operation found it, so that the same operation writes it
/// without looking again (a lookup of an id not stored costs four B-tree searches).
pub(crate) struct Looked<'i> {
    id: &'i str,
    place: Option<Place>,
    /// The stored bytes, copied only when there is a row.
    row: Option<Vec<u8>>,
}

/// Look for `id`'s row, claiming the tail of the content-address index first (a row not
/// found is written there).
pub(crate) fn look<'i>(w: &mut WriteCtx<'_, '_>, id: &'i str) -> Result<Looked<'i>, StoreError> {
    ref_tail::claim(w)?;
    let found = located(&w.reader(), id)?;
    Ok(Looked {
        id,
        place: found.map(|(place, _)| place),
        row: found.map(|(_, row)| row.to_vec()),
    })
}

/// [`look`] for an id no row can hold: one this process minted from 128 random bits for a
/// call that brought none (`coordinator`). Nothing is looked up; the tail of the
/// content-address index is still claimed, for the row's key.
pub(crate) fn minted<'i>(w: &mut WriteCtx<'_, '_>, id: &'i str) -> Result<Looked<'i>, StoreError> {
    ref_tail::claim(w)?;
    Ok(Looked {
        id,
        place: None,
        row: None,
    })
}

impl Looked<'_> {
    /// The row's parts as found (without its resolution's).
    pub(crate) fn parts(&self) -> Result<Option<Row<'_>>, StoreError> {
        decode(self.row.as_deref(), || {
            format!("invocation row {}", self.id)
        })
    }

    /// [`put_initial`] into the row as found.
    pub(crate) fn put_initial(
        self,
        w: &mut WriteCtx<'_, '_>,
        part: Part,
        bytes: &[u8],
        intent: Option<u64>,
    ) -> Result<(), StoreError> {
        self.put_initial_parts(w, &[(part, bytes)], intent)
    }

    /// [`Looked::put_initial`] of several parts in one write of the row: an intent's journal
    /// state and its task state, which would otherwise each find and write the row.
    pub(crate) fn put_initial_parts(
        self,
        w: &mut WriteCtx<'_, '_>,
        parts: &[(Part, &[u8])],
        intent: Option<u64>,
    ) -> Result<(), StoreError> {
        let current = self.parts()?.unwrap_or_default();
        let mut next = parts
            .iter()
            .fold(current, |row, &(part, bytes)| row.with(part, bytes));
        next.intent = intent.or(current.intent);
        let encoded = next.encode();
        put_row(w, self.id, self.place, &encoded)
    }
}

/// Claim the tail of the content-address index for the writer's operation, before it reads a
/// row it will write ([`ref_tail::claim`]): [`resolving`] tells an intent of the transaction
/// under way only then.
pub(crate) fn claim(w: &mut WriteCtx<'_, '_>) -> Result<(), StoreError> {
    ref_tail::claim(w)
}

/// Where the states that resolve an invocation go.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Its row where it is stored, in place: a row that journals no intent, or one the
    /// transaction under way wrote with its intent (no reader has seen the intent's states,
    /// and its outcome's take their place in the row's own pages).
    Row(Place),
    /// The resolution of its intent, at this journal sequence: the row stays as the committed
    /// intent left it.
    Resolution(u64),
}

/// An invocation as the writer about to resolve it read it: what readers see of it, and where
/// the resolving states go.
pub(crate) struct Resolving<'t> {
    /// The row with its resolution's parts over it, as [`get`] reads it.
    pub(crate) visible: Row<'t>,
    /// What the resolving states are written over: the row, or the intent's resolution.
    under: Row<'t>,
    target: Target,
}

/// [`get`], for a writer about to resolve `id` (its outcome, the task's end): `None` when no
/// row holds it. The row of an intent this very transaction journaled takes the resolving
/// states itself ([`ref_tail::invocation_written_here`]; the writer's operation must have
/// claimed the tail for that, or the intent is taken as committed); any other intent's go to
/// its resolution.
pub(crate) fn resolving<'t>(
    r: &ReadCtx<'t>,
    id: &str,
) -> Result<Option<Resolving<'t>>, StoreError> {
    let Some((place, bytes)) = located(r, id)? else {
        return Ok(None);
    };
    let row = decode(Some(bytes), || format!("invocation row {id}"))?.unwrap_or_default();
    let written_here =
        || matches!(place, Place::Sequence(at) if ref_tail::invocation_written_here(r, at));
    let resolving = match row.intent {
        Some(intent) if !written_here() => {
            let resolution = RESOLUTIONS.get(r, &intent)?;
            Resolving {
                visible: visible(id, bytes, resolution)?,
                under: decode(resolution, || format!("the resolution of intent {intent}"))?
                    .unwrap_or_default(),
                target: Target::Resolution(intent),
            }
        }
        // No intent, or one this transaction journaled: the row takes the states itself.
        _ => Resolving {
            visible: row,
            under: row,
            target: Target::Row(place),
        },
    };
    Ok(Some(resolving))
}

/// A resolving write, encoded while the row is borrowed from the writer's view and made once
/// the reads are done ([`Resolving::with`]).
pub(crate) struct Resolved {
    target: Target,
    bytes: Vec<u8>,
}

impl Resolving<'_> {
    /// The resolving write of `parts` over what was read.
    pub(crate) fn with(&self, parts: &[(Part, &[u8])]) -> Resolved {
        let next = parts
            .iter()
            .fold(self.under, |row, &(part, bytes)| row.with(part, bytes));
        Resolved {
            target: self.target,
            bytes: next.encode(),
        }
    }
}

impl Resolved {
    /// Write it: into `id`'s row, or into its intent's resolution.
    pub(crate) fn put(self, w: &mut WriteCtx<'_, '_>, id: &str) -> Result<(), StoreError> {
        match self.target {
            Target::Row(place) => put_row(w, id, Some(place), &self.bytes),
            Target::Resolution(intent) => RESOLUTIONS.put(w, &intent, &self.bytes),
        }
    }
}

/// Write a state that resolves the invocation where [`resolving`] says it goes.
pub(crate) fn put_resolution(
    w: &mut WriteCtx<'_, '_>,
    id: &str,
    part: Part,
    bytes: &[u8],
) -> Result<(), StoreError> {
    claim(w)?;
    match resolving(&w.reader(), id)?.map(|found| found.with(&[(part, bytes)])) {
        Some(resolved) => resolved.put(w, id),
        // No row yet (a call that ran no effect): this state is its first.
        None => put_row(w, id, None, &Row::default().with(part, bytes).encode()),
    }
}

/// Replace the part readers see of `id` (tamper tests): in its intent's resolution when
/// that holds the part, else in its row. Nothing is checked.
#[cfg(any(test, feature = "fixtures"))]
pub(crate) fn overwrite_visible(
    w: &mut WriteCtx<'_, '_>,
    id: &str,
    part: Part,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let reader = w.reader();
    let (place, row_bytes) = existing(&reader, id)?;
    let current = parts(id, Some((place, row_bytes)))?.unwrap_or_default();
    if let Some(seq) = current.intent {
        if let Some(r) = resolution(&reader, seq)? {
            let held = match part {
                Part::Journal => r.journal.is_some(),
                Part::Task => r.task.is_some(),
            };
            if held {
                let encoded = r.with(part, bytes).encode();
                return RESOLUTIONS.put(w, &seq, &encoded);
            }
        }
    }
    let encoded = current.with(part, bytes).encode();
    put_row(w, id, Some(place), &encoded)
}

/// Replace the bytes of `id`'s row where it is stored (tamper tests). Nothing is checked.
#[cfg(any(test, feature = "fixtures"))]
pub(crate) fn overwrite_row(
    w: &mut WriteCtx<'_, '_>,
    id: &str,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let (place, _) = existing(&w.reader(), id)?;
    put_row(w, id, Some(place), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// The outcome's states go to the resolution of the intent and leave the row as the intent
    /// wrote it; readers see the resolved parts. Without an intent, the row takes every write.
    #[test]
    fn resolving_an_intent_leaves_its_row_alone_and_reads_merge_both() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let raw_row = |id: &'static str| {
            store
                .read(|r| -> Result<_, StoreError> {
                    Ok(stored(r, id)?.map(|(row, _)| row.to_vec()))
                })
                .unwrap()
        };
        store
            .write(|w| -> Result<(), StoreError> {
                put_initial(w, "mcp:e:1", Part::Journal, b"intent", Some(41))?;
                put_initial(w, "mcp:e:1", Part::Task, b"pending", None)
            })
            .unwrap();
        let written = raw_row("mcp:e:1").unwrap();
        store
            .write(|w| -> Result<(), StoreError> {
                put_resolution(w, "mcp:e:1", Part::Journal, b"outcome")?;
                put_resolution(w, "mcp:e:1", Part::Task, b"committed")?;
                // No intent: the row itself is resolved.
                put_resolution(w, "mcp:e:2", Part::Task, b"refused")
            })
            .unwrap();
        assert_eq!(raw_row("mcp:e:1").unwrap(), written);
        let (one, two, resolution) = store
            .read(|r| -> Result<_, StoreError> {
                let one = get(r, "mcp:e:1")?.map(|x| {
                    (
                        x.intent,
                        x.journal.map(<[u8]>::to_vec),
                        x.task.map(<[u8]>::to_vec),
                    )
                });
                let two = get(r, "mcp:e:2")?.map(|x| {
                    (
                        x.intent,
                        x.journal.map(<[u8]>::to_vec),
                        x.task.map(<[u8]>::to_vec),
                    )
                });
                Ok((one, two, RESOLUTIONS.get(r, &41)?.is_some()))
            })
            .unwrap();
        assert_eq!(
            one,
            Some((
                Some(41),
                Some(b"outcome".to_vec()),
                Some(b"committed".to_vec())
            ))
        );
        assert_eq!(two, Some((None, None, Some(b"refused".to_vec()))));
        assert!(resolution);
    }

    /// An intent's row written by the transaction that resolves it takes the resolving states
    /// itself. A row an earlier transaction committed does not, even when the resolving
    /// transaction writes rows of its own, or follows one that was undone.
    #[test]
    fn an_intent_resolved_in_its_own_transaction_takes_the_states_in_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let read = |id: &'static str, intent: u64| {
            store
                .read(|r| -> Result<_, StoreError> {
                    let (row, _) = stored(r, id)?.expect("a row");
                    let resolution = RESOLUTIONS.get(r, &intent)?.map(<[u8]>::to_vec);
                    Ok((row.to_vec(), resolution))
                })
                .unwrap()
        };
        store
            .write(|w| -> Result<(), StoreError> {
                put_initial(w, "mcp:e:1", Part::Journal, b"intent", Some(41))?;
                put_initial(w, "mcp:e:1", Part::Task, b"pending", None)?;
                put_resolution(w, "mcp:e:1", Part::Journal, b"outcome")?;
                put_resolution(w, "mcp:e:1", Part::Task, b"committed")
            })
            .unwrap();
        let (row, resolution) = read("mcp:e:1", 41);
        let expected = Row {
            intent: Some(41),
            journal: Some(b"outcome"),
            task: Some(b"committed"),
        };
        assert_eq!(Row::decode(&row), Some(expected));
        assert_eq!(resolution, None);

        // An undone transaction's row number is taken again by the next one.
        let undone = store.write(|w| -> Result<(), StoreError> {
            put_initial(w, "mcp:e:2", Part::Journal, b"intent", Some(42))?;
            Err(StoreError::Corrupt("undo".into()))
        });
        assert!(undone.is_err());
        store
            .write(|w| -> Result<(), StoreError> {
                put_initial(w, "mcp:e:3", Part::Journal, b"intent", Some(43))?;
                put_resolution(w, "mcp:e:1", Part::Task, b"unrecorded")
            })
            .unwrap();
        let (again, resolution) = read("mcp:e:1", 41);
        assert_eq!(again, row, "a committed row is left as it was");
        let resolution = resolution.expect("the resolution of intent 41");
        assert_eq!(
            Row::decode(&resolution),
            Some(Row {
                intent: None,
                journal: None,
                task: Some(b"unrecorded"),
            })
        );
        let seen = store
            .read(|r| get(r, "mcp:e:1").map(|row| row.map(|row| row.task.map(<[u8]>::to_vec))))
            .unwrap();
        assert_eq!(seen, Some(Some(b"unrecorded".to_vec())));
    }

    #[test]
    fn rows_round_trip_with_either_part_absent_and_damage_is_refused() {
        for (intent, journal, task) in [
            (Some(3), Some(&b"{\"j\":1}"[..]), Some(&b"{\"t\":2}"[..])),
            (Some(u64::MAX), Some(&b"{}"[..]), None),
            (None, None, Some(&b"{\"t\":2}"[..])),
            (None, None, None),
        ] {
            let row = Row {
                intent,
                journal,
                task,
            };
            assert_eq!(Row::decode(&row.encode()), Some(row));
        }
        let full = Row {
            intent: Some(1),
            journal: Some(b"{\"j\":1}"),
            task: None,
        }
        .encode();
        assert_eq!(Row::decode(&full[..3]), None);
        assert_eq!(Row::decode(&full[..full.len() - 1]), None);
    }

    /// Bytes that lay out as a row but hold no state, or an empty journal part, are no row any
    /// write makes: a read says they are damaged, and what failed, instead of reading an
    /// invocation without states (one "never committed").
    #[test]
    fn a_row_without_a_state_is_damage_and_says_what_failed() {
        let checked = |bytes: &[u8]| Row::checked(bytes).map(|_| ()).unwrap_err();
        assert_eq!(
            checked(&[0; 12]),
            "its journal part is empty",
            "twelve zero bytes"
        );
        assert_eq!(
            checked(&Row::default().encode()),
            "it holds neither a journal state nor a task state"
        );
        assert_eq!(
            checked(b"garbage"),
            "it is 7 byte(s), shorter than the 12 of its intent sequence and journal length"
        );
        let mut long = vec![0; 8];
        long.extend_from_slice(&40u32.to_be_bytes());
        long.extend_from_slice(b"{}");
        assert_eq!(
            checked(&long),
            "its journal part's length says 40 byte(s), but 2 follow"
        );
        let task_only = Row {
            intent: None,
            journal: None,
            task: Some(b"{}"),
        };
        assert_eq!(Row::checked(&task_only.encode()), Ok(task_only));
        let e = decode(Some(&[0; 12]), || "invocation row mcp:e:t".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "store is damaged: invocation row mcp:e:t is damaged: its journal part is empty"
        );
    }
}
