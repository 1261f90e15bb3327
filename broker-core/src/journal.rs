//! The durable effect journal.
//!
//! Before a handler runs, its **intent** is journaled in the same transaction that raises the
//! episode's spend counter, so spend per (episode, effect, scope) always equals the sum of
//! intents. After the handler, an **outcome** closes the intent. An intent without an outcome
//! is **indeterminate**: the effect may or may not have happened. It is reported, never retried,
//! and its budget stays spent. An intent whose handler was never started is closed
//! **withdrawn**, in the transaction that gives its units back: spend per (episode, effect,
//! scope) is the sum of the intents not withdrawn.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::canon::{CanonError, Members};
use crate::invocations::{self, Part};
use crate::object::Ref;
use crate::schema::{JOURNAL, PENDING, SPEND};
use crate::storage::{shown_bytes, ReadCtx, Store, StoreError, WriteCtx};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invocation {0} already has a journaled intent")]
    AlreadyJournaled(String),
    #[error("invocation {0} has no journaled intent")]
    NoIntent(String),
    #[error("invocation {0} already has an outcome")]
    AlreadyResolved(String),
    #[error("budget exhausted: {remaining} unit(s) left, {cost} needed")]
    BudgetExhausted { remaining: u64, cost: u64 },
    /// Only the coordinator withdraws an intent, and only one whose handler it never started:
    /// a withdrawal gives the intent's units back.
    #[error("invocation {0}: an intent is withdrawn only by the coordinator, for a handler it never started")]
    NotWithdrawable(String),
    #[error("journal is damaged: {0}")]
    Corrupt(String),
}

/// What an intent promises: this effect, at this cost, for this invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    pub invocation_id: String,
    pub episode: String,
    pub effect: String,
    pub scope: String,
    pub cost: u64,
    pub request_ref: Ref,
}

/// How an intent ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeStatus {
    /// The handler returned an output.
    Succeeded,
    /// The handler failed; the effect may have partly run.
    Failed,
    /// The handler could not tell whether the effect happened.
    Indeterminate,
    /// A REST commit landed.
    Committed,
    /// The handler was never started (the call's deadline passed while its intent was on its
    /// way to the disk): the effect did not run, and the intent's units were given back in the
    /// transaction that closed it.
    Withdrawn,
}

/// The journal's view of one invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalState {
    pub intent: Intent,
    pub intent_seq: u64,
    pub outcome_seq: Option<u64>,
    pub status: Option<OutcomeStatus>,
    /// The effect record (effects) or the selected world (REST commits).
    pub result_ref: Option<Ref>,
}

/// What a receipt says about an invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    NotStarted,
    Indeterminate,
    Resolved {
        status: OutcomeStatus,
        result_ref: Option<Ref>,
    },
}

impl Receipt {
    pub fn state(&self) -> &'static str {
        match self {
            Receipt::NotStarted => "not-started",
            Receipt::Indeterminate => "indeterminate",
            Receipt::Resolved { .. } => "resolved",
        }
    }
}

/// A journal row's serde shape: the writer writes it directly ([`intent_row`],
/// [`outcome_row`]), and the tests hold the two writings equal.
#[cfg(test)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Record {
    Intent {
        seq: u64,
        #[serde(flatten)]
        intent: Intent,
    },
    Outcome {
        seq: u64,
        #[serde(rename = "invocationId")]
        invocation_id: String,
        status: OutcomeStatus,
        #[serde(rename = "resultRef")]
        result_ref: Option<Ref>,
    },
}

fn spend_key(episode: &str, effect: &str, scope: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(episode.len() + effect.len() + scope.len() + 2);
    k.extend_from_slice(episode.as_bytes());
    k.push(0);
    k.extend_from_slice(effect.as_bytes());
    k.push(0);
    k.extend_from_slice(scope.as_bytes());
    k
}

impl OutcomeStatus {
    fn name(self) -> &'static str {
        match self {
            OutcomeStatus::Succeeded => "succeeded",
            OutcomeStatus::Failed => "failed",
            OutcomeStatus::Indeterminate => "indeterminate",
            OutcomeStatus::Committed => "committed",
            OutcomeStatus::Withdrawn => "withdrawn",
        }
    }
}

#[cfg(test)]
impl Record {
    fn to_bytes(&self) -> Result<Vec<u8>, JournalError> {
        match self {
            Record::Intent { seq, intent } => intent_row(*seq, intent),
            Record::Outcome {
                seq,
                invocation_id,
                status,
                result_ref,
            } => outcome_row(*seq, invocation_id, *status, result_ref.as_ref()),
        }
    }
}

// The store's writer encodes two records and two states per effect: each is written as the
// canonical form of its serde value directly (the tests compare the two).

/// The bytes of [`Record::Intent`], from a borrowed intent: the writer does not copy it.
fn intent_row(seq: u64, intent: &Intent) -> Result<Vec<u8>, JournalError> {
    let m = Members::new()
        .integer("cost", intent.cost)?
        .string("effect", &intent.effect)
        .string("episode", &intent.episode)
        .string("invocationId", &intent.invocation_id)
        .plain("kind", "intent")
        .plain("requestRef", intent.request_ref)
        .string("scope", &intent.scope)
        .integer("seq", seq)?;
    Ok(m.finish().into_bytes())
}

/// The bytes of [`Record::Outcome`], from borrowed parts.
fn outcome_row(
    seq: u64,
    invocation_id: &str,
    status: OutcomeStatus,
    result_ref: Option<&Ref>,
) -> Result<Vec<u8>, JournalError> {
    let m = Members::new()
        .string("invocationId", invocation_id)
        .plain("kind", "outcome")
        .plain_or_null("resultRef", result_ref)
        .integer("seq", seq)?
        .plain("status", status.name());
    Ok(m.finish().into_bytes())
}

impl JournalState {
    #[cfg(test)]
    fn to_bytes(&self) -> Result<Vec<u8>, JournalError> {
        state_row(
            &self.intent.view(),
            self.intent_seq,
            self.outcome_seq,
            self.result_ref.as_ref(),
            self.status,
        )
    }
}

impl Intent {
    /// The intent borrowed, as [`state_row`] writes it.
    fn view(&self) -> IntentView<'_> {
        IntentView {
            invocation_id: Cow::Borrowed(&self.invocation_id),
            episode: Cow::Borrowed(&self.episode),
            effect: Cow::Borrowed(&self.effect),
            scope: Cow::Borrowed(&self.scope),
            cost: self.cost,
            request_ref: self.request_ref,
        }
    }
}

/// A [`JournalState`] as stored, its strings borrowed from the bytes where they need no
/// unescaping: an outcome reads its intent's state and writes it back resolved, and parsing it
/// into owned strings cost the store's writer about 3 % of its time.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateView<'a> {
    #[serde(borrow)]
    intent: IntentView<'a>,
    intent_seq: u64,
    // Read to refuse a damaged state as `JournalState` would; the tests write them back.
    #[cfg_attr(not(test), allow(dead_code))]
    outcome_seq: Option<u64>,
    status: Option<OutcomeStatus>,
    #[cfg_attr(not(test), allow(dead_code))]
    result_ref: Option<Ref>,
}

/// [`Intent`], borrowed: as [`StateView`] reads it, or from an intent ([`Intent::view`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IntentView<'a> {
    #[serde(borrow)]
    invocation_id: Cow<'a, str>,
    #[serde(borrow)]
    episode: Cow<'a, str>,
    #[serde(borrow)]
    effect: Cow<'a, str>,
    #[serde(borrow)]
    scope: Cow<'a, str>,
    cost: u64,
    request_ref: Ref,
}

/// The bytes of a [`JournalState`], from a borrowed intent: the writer does not copy it.
fn state_row(
    i: &IntentView<'_>,
    intent_seq: u64,
    outcome_seq: Option<u64>,
    result_ref: Option<&Ref>,
    status: Option<OutcomeStatus>,
) -> Result<Vec<u8>, JournalError> {
    let m = Members::new()
        .object("intent", |m| {
            Ok(m.integer("cost", i.cost)?
                .string("effect", &i.effect)
                .string("episode", &i.episode)
                .string("invocationId", &i.invocation_id)
                .plain("requestRef", i.request_ref)
                .string("scope", &i.scope))
        })?
        .integer("intentSeq", intent_seq)?
        .integer_or_null("outcomeSeq", outcome_seq)?
        .plain_or_null("resultRef", result_ref)
        .plain_or_null("status", status.map(OutcomeStatus::name));
    Ok(m.finish().into_bytes())
}

impl From<CanonError> for JournalError {
    fn from(e: CanonError) -> Self {
        JournalError::Corrupt(e.to_string())
    }
}

/// The sequence number after the journal's last row. A last row at `u64::MAX` (which no run of
/// the daemon reaches: a stray or tampered row) leaves none: wrapping to 0 would write the next
/// rows over the journal's first, and a call's outcome over its own intent.
fn next_seq(w: &WriteCtx<'_, '_>) -> Result<u64, JournalError> {
    match JOURNAL.last(&w.reader())? {
        None => Ok(1),
        // Store damage, as the call's answer says it (not a journal refusal of the call).
        Some((k, _)) => k.checked_add(1).ok_or_else(|| {
            JournalError::Store(StoreError::Corrupt(format!(
                "the journal's last row is #{k}, and no sequence number follows it: run worldd doctor"
            )))
        }),
    }
}

/// The check of the journal's last row made once when a daemon opens the store to serve it
/// ([`crate::store::Store::check_head`]): a sequence number must follow it ([`next_seq`]), or
/// the daemon would start and then fail every call at its intent. One cursor step.
pub(crate) fn check_last(r: &ReadCtx<'_>) -> Result<(), StoreError> {
    match JOURNAL.last(r)? {
        Some((k, _)) if k.checked_add(1).is_none() => Err(StoreError::Corrupt(format!(
            "the journal's last row is #{k}, and no sequence number follows it: no call could be journaled, so the daemon takes none; run `worldd doctor` on the store to see what else is damaged"
        ))),
        _ => Ok(()),
    }
}

/// Write journal row `seq`, which [`next_seq`] chose past every row: appended, never put over
/// a row (LMDB refuses a key that is not past the last one), so the journal is append-only
/// even if the sequence were wrong.
fn write_row(w: &mut WriteCtx<'_, '_>, seq: u64, row: &[u8]) -> Result<(), JournalError> {
    JOURNAL.append(w, &seq, row).map_err(|e| {
        JournalError::Store(StoreError::Corrupt(format!(
            "journal row #{seq} could not be appended past the journal's last row: {e}"
        )))
    })
}

fn read_state(r: &ReadCtx<'_>, id: &str) -> Result<Option<JournalState>, JournalError> {
    match invocations::get(r, id)?.and_then(|row| row.journal) {
        None => Ok(None),
        // Written canonical by this module; a typed parse straight from the bytes is all a
        // read needs (and the verifier reads one per entry).
        Some(b) => parse_state(b).map(Some),
    }
}

/// A journal state as stored.
fn parse_state(bytes: &[u8]) -> Result<JournalState, JournalError> {
    serde_json::from_slice(bytes).map_err(|e| JournalError::Corrupt(e.to_string()))
}

/// Journal an intent and raise the spend counter, in the caller's transaction. `budget` is the
/// grant's total budget: the spend check is repeated here, inside the single writer, so no two
/// writers (threads or processes) can both spend the last unit.
pub fn append_intent(
    w: &mut WriteCtx<'_, '_>,
    intent: &Intent,
    budget: u64,
) -> Result<u64, JournalError> {
    // The row is looked up once: to refuse a second intent, then to be written.
    let looked = invocations::look(w, &intent.invocation_id)?;
    append_intent_to(w, intent, budget, looked, None)
}

/// [`append_intent`] with the invocation's task state (`task`, its stored bytes) written in
/// the same write of its row. `minted`: the invocation id was minted by this process for a
/// call that brought none (128 random bits), so no row can hold it and none is looked for.
pub(crate) fn append_intent_with_task(
    w: &mut WriteCtx<'_, '_>,
    intent: &Intent,
    budget: u64,
    minted: bool,
    task: &[u8],
) -> Result<u64, JournalError> {
    let looked = if minted {
        invocations::minted(w, &intent.invocation_id)?
    } else {
        invocations::look(w, &intent.invocation_id)?
    };
    append_intent_to(w, intent, budget, looked, Some(task))
}

fn append_intent_to(
    w: &mut WriteCtx<'_, '_>,
    intent: &Intent,
    budget: u64,
    looked: invocations::Looked<'_>,
    task: Option<&[u8]>,
) -> Result<u64, JournalError> {
    if let Some(journal) = looked.parts()?.and_then(|row| row.journal) {
        // A damaged state is reported as such, as a read of it would.
        parse_state(journal)?;
        return Err(JournalError::AlreadyJournaled(intent.invocation_id.clone()));
    }
    let key = spend_key(&intent.episode, &intent.effect, &intent.scope);
    let spent = SPEND.get(&w.reader(), &key)?.unwrap_or(0);
    let remaining = budget.saturating_sub(spent);
    if intent.cost > remaining {
        return Err(JournalError::BudgetExhausted {
            remaining,
            cost: intent.cost,
        });
    }
    let seq = next_seq(w)?;
    write_row(w, seq, &intent_row(seq, intent)?)?;
    let state = state_row(&intent.view(), seq, None, None, None)?;
    match task {
        Some(task) => looked.put_initial_parts(
            w,
            &[(Part::Journal, &state[..]), (Part::Task, task)],
            Some(seq),
        )?,
        None => looked.put_initial(w, Part::Journal, &state, Some(seq))?,
    }
    PENDING.put(w, &intent.invocation_id, &seq)?;
    SPEND.put(w, &key, &(spent + intent.cost))?;
    Ok(seq)
}

/// Close an intent with its outcome (any but [`OutcomeStatus::Withdrawn`], which gives units
/// back: only the coordinator withdraws an intent, for a handler it never started).
pub fn append_outcome(
    w: &mut WriteCtx<'_, '_>,
    invocation_id: &str,
    status: OutcomeStatus,
    result_ref: Option<Ref>,
) -> Result<u64, JournalError> {
    if status == OutcomeStatus::Withdrawn {
        return Err(JournalError::NotWithdrawable(invocation_id.to_owned()));
    }
    append_outcome_to(w, invocation_id, status, result_ref, None)
}

/// Close an intent withdrawn, its units given back: for the coordinator alone, and only for a
/// handler it never started.
pub(crate) fn withdraw(
    w: &mut WriteCtx<'_, '_>,
    invocation_id: &str,
    record: Ref,
) -> Result<u64, JournalError> {
    append_outcome_to(
        w,
        invocation_id,
        OutcomeStatus::Withdrawn,
        Some(record),
        None,
    )
}

/// [`append_outcome`] with the invocation's resolved task state (`task`, its stored bytes)
/// written in the same write of its intent's resolution, as the commit that carries the
/// outcome would otherwise write it after finding the row again.
pub(crate) fn append_outcome_with_task(
    w: &mut WriteCtx<'_, '_>,
    invocation_id: &str,
    status: OutcomeStatus,
    result_ref: Option<Ref>,
    task: &[u8],
) -> Result<u64, JournalError> {
    append_outcome_to(w, invocation_id, status, result_ref, Some(task))
}

fn append_outcome_to(
    w: &mut WriteCtx<'_, '_>,
    invocation_id: &str,
    status: OutcomeStatus,
    result_ref: Option<Ref>,
    task: Option<&[u8]>,
) -> Result<u64, JournalError> {
    let seq = next_seq(w)?;
    // The row is read once: for the state, and for where the resolving states go (the row
    // itself when this transaction journaled its intent, else the intent's resolution). They
    // are encoded before anything is written, while the row's bytes are borrowed.
    invocations::claim(w)?;
    let reader = w.reader();
    let no_intent = || JournalError::NoIntent(invocation_id.to_owned());
    let found = invocations::resolving(&reader, invocation_id)?.ok_or_else(no_intent)?;
    let state = found.visible.journal.ok_or_else(no_intent)?;
    let state: StateView<'_> =
        serde_json::from_slice(state).map_err(|e| JournalError::Corrupt(e.to_string()))?;
    if state.status.is_some() {
        return Err(JournalError::AlreadyResolved(invocation_id.to_owned()));
    }
    // A withdrawn intent's units go back to its grant, in the transaction that closes it.
    let given_back = match status {
        OutcomeStatus::Withdrawn => {
            let i = &state.intent;
            let key = spend_key(&i.episode, &i.effect, &i.scope);
            let spent = SPEND.get(&reader, &key)?.unwrap_or(0);
            Some((key, spent.saturating_sub(i.cost)))
        }
        _ => None,
    };
    let bytes = state_row(
        &state.intent,
        state.intent_seq,
        Some(seq),
        result_ref.as_ref(),
        Some(status),
    )?;
    let resolved = match task {
        Some(task) => found.with(&[(Part::Journal, &bytes[..]), (Part::Task, task)]),
        None => found.with(&[(Part::Journal, &bytes[..])]),
    };
    write_row(
        w,
        seq,
        &outcome_row(seq, invocation_id, status, result_ref.as_ref())?,
    )?;
    resolved.put(w, invocation_id)?;
    PENDING.delete(w, invocation_id)?;
    if let Some((key, spent)) = given_back {
        SPEND.put(w, &key, &spent)?;
    }
    Ok(seq)
}

/// The journal state of one invocation.
pub fn state(r: &ReadCtx<'_>, invocation_id: &str) -> Result<Option<JournalState>, JournalError> {
    read_state(r, invocation_id)
}

/// One journal row, either kind, read flat (the tagged [`Record`] buffers its content).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    seq: u64,
    #[serde(borrow)]
    invocation_id: std::borrow::Cow<'a, str>,
    #[serde(default)]
    episode: Option<String>,
    #[serde(default)]
    effect: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(default)]
    request_ref: Option<Ref>,
    #[serde(default)]
    status: Option<OutcomeStatus>,
    #[serde(default)]
    result_ref: Option<Ref>,
}

/// The journal state of one invocation, checked against the journal rows it summarises: the
/// intent row at `intentSeq` must be this intent, and the outcome row at `outcomeSeq` this
/// status and result. A disagreement (a damaged or rewritten row) is [`JournalError::Corrupt`].
pub fn verified_state(
    r: &ReadCtx<'_>,
    invocation_id: &str,
) -> Result<Option<JournalState>, JournalError> {
    let Some(row) = invocations::get(r, invocation_id)? else {
        return Ok(None);
    };
    let Some(state) = row.journal else {
        return Ok(None);
    };
    state_from_rows(invocation_id, state, |seq| Ok(row_bytes(r, seq)?)).map(Some)
}

/// The stored bytes of journal row `seq` (an intent or an outcome).
pub fn row_bytes<'t>(r: &ReadCtx<'t>, seq: u64) -> Result<Option<&'t [u8]>, StoreError> {
    JOURNAL.get(r, &seq)
}

/// [`verified_state`] from bytes: the journal state of `invocation_id` (the journal part of
/// its invocation row, or of its intent's resolution) and a reader of the journal rows it
/// names. A store passes its own rows; a remote verifier passes the rows a daemon served, so
/// both recompute the same verdict from the same bytes.
pub fn state_from_rows<'r>(
    invocation_id: &str,
    state: &[u8],
    row: impl Fn(u64) -> Result<Option<&'r [u8]>, JournalError>,
) -> Result<JournalState, JournalError> {
    let state: JournalState =
        serde_json::from_slice(state).map_err(|e| JournalError::Corrupt(e.to_string()))?;
    // A store finds the state by this id; bytes from elsewhere must say so themselves.
    if state.intent.invocation_id != invocation_id {
        return Err(JournalError::Corrupt(format!(
            "the journal state given for {invocation_id} is {}'s",
            state.intent.invocation_id
        )));
    }
    let row = |seq: u64| -> Result<Row<'r>, JournalError> {
        let bytes = row(seq)?.ok_or_else(|| {
            JournalError::Corrupt(format!("journal row #{seq} of {invocation_id} is missing"))
        })?;
        serde_json::from_slice(bytes)
            .map_err(|e| JournalError::Corrupt(format!("journal row #{seq}: {e}")))
    };
    let i = &state.intent;
    let intent = row(state.intent_seq)?;
    if !(intent.kind == "intent"
        && intent.seq == state.intent_seq
        && intent.invocation_id == i.invocation_id
        && intent.episode.as_deref() == Some(i.episode.as_str())
        && intent.effect.as_deref() == Some(i.effect.as_str())
        && intent.scope.as_deref() == Some(i.scope.as_str())
        && intent.cost == Some(i.cost)
        && intent.request_ref == Some(i.request_ref))
    {
        return Err(JournalError::Corrupt(format!(
            "journal row #{} is not the intent the index records for {invocation_id}",
            state.intent_seq
        )));
    }
    match (state.outcome_seq, state.status) {
        (None, None) => {}
        (Some(at), Some(status)) => {
            let outcome = row(at)?;
            if !(outcome.kind == "outcome"
                && outcome.seq == at
                && outcome.invocation_id == invocation_id
                && outcome.status == Some(status)
                && outcome.result_ref == state.result_ref)
            {
                return Err(JournalError::Corrupt(format!(
                    "journal row #{at} is not the outcome the index records for {invocation_id}"
                )));
            }
        }
        _ => {
            return Err(JournalError::Corrupt(format!(
                "the journal index of {invocation_id} has an outcome sequence without a status, or the reverse"
            )))
        }
    }
    Ok(state)
}

/// Same, inside a write transaction.
pub fn state_in(
    w: &WriteCtx<'_, '_>,
    invocation_id: &str,
) -> Result<Option<JournalState>, JournalError> {
    read_state(&w.reader(), invocation_id)
}

/// The receipt law: never not-started while an intent exists.
pub fn receipt(r: &ReadCtx<'_>, invocation_id: &str) -> Result<Receipt, JournalError> {
    Ok(match state(r, invocation_id)? {
        None => Receipt::NotStarted,
        Some(s) => match s.status {
            None | Some(OutcomeStatus::Indeterminate) => Receipt::Indeterminate,
            Some(status) => Receipt::Resolved {
                status,
                result_ref: s.result_ref,
            },
        },
    })
}

/// What [`spent`]'s map says `grant`'s effect and scope have spent (0 when nothing).
pub fn spent_on(spent: &BTreeMap<(String, String), u64>, grant: &crate::grant::Grant) -> u64 {
    spent
        .get(&(grant.effect.clone(), grant.scope.clone()))
        .copied()
        .unwrap_or(0)
}

/// Units spent per (effect, scope) in an episode, from the spend counters.
pub fn spent(
    r: &ReadCtx<'_>,
    episode: &str,
) -> Result<BTreeMap<(String, String), u64>, JournalError> {
    let mut prefix = episode.as_bytes().to_vec();
    prefix.push(0);
    let mut out = BTreeMap::new();
    for item in SPEND.prefix(r, &prefix)? {
        let (k, v) = item?;
        let rest = &k[prefix.len()..];
        let mut parts = rest.splitn(2, |b| *b == 0);
        let effect = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let scope = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        out.insert((effect, scope), v);
    }
    Ok(out)
}

/// Intents without an outcome, oldest first.
pub fn pending(r: &ReadCtx<'_>) -> Result<Vec<JournalState>, JournalError> {
    let mut out = Vec::new();
    for item in PENDING.iter(r)? {
        let (id, _) = item?;
        if let Some(s) = read_state(r, id)? {
            out.push(s);
        }
    }
    out.sort_by_key(|s| s.intent_seq);
    Ok(out)
}

/// Intents without an outcome are indeterminate: said once when the store opens. They are
/// never retried; their budget stays spent.
pub(crate) fn report_pending(store: &Store) {
    match store.read(pending) {
        // One line on open; `report_pending_each` lists them (the daemon does).
        Ok(open) if !open.is_empty() => tracing::warn!(
            "{} indeterminate effect(s): intent journaled, no outcome; they are never retried",
            open.len()
        ),
        Ok(_) => {}
        Err(e) => tracing::error!("cannot read pending intents: {e}"),
    }
}

/// Log every indeterminate effect, one line each.
pub(crate) fn report_pending_each(store: &Store) {
    if let Ok(open) = store.read(pending) {
        for p in &open {
            tracing::warn!(
                invocation = %p.intent.invocation_id,
                episode = %p.intent.episode,
                effect = %p.intent.effect,
                "indeterminate effect: intent journaled, no outcome; it will not be retried"
            );
        }
    }
}

/// A spend or pending key as findings show it: `episode/effect/scope`, quoted and escaped.
fn shown_key(key: &[u8]) -> String {
    let slashed: Vec<u8> = key.iter().map(|&b| if b == 0 { b'/' } else { b }).collect();
    shown_bytes(&slashed)
}

/// An inconsistency found by [`audit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFinding(pub String);

/// Recompute every spend counter from the journal's intents (less the withdrawn ones) and
/// check the pending index, in `r`'s one snapshot; returns the findings (empty when consistent)
/// and the number of records read.
pub fn audit(r: &ReadCtx<'_>) -> Result<(Vec<AuditFinding>, u64), JournalError> {
    let mut walk = Walk::default();
    for item in JOURNAL.iter(r)? {
        let (seq, bytes) = item?;
        walk.row(seq, bytes);
    }
    walk.finish(r)
}

/// [`audit`] of a store a daemon may be serving (`worldd doctor`): the rows up to the last
/// one at the start are read a block at a time (`Table::read_in_blocks` says why), and the
/// rest with the counters and the pending index in one last snapshot.
pub fn audit_store(store: &Store) -> Result<(Vec<AuditFinding>, u64), JournalError> {
    const BLOCK: u64 = 8192;
    let mut walk = Walk::default();
    let from =
        JOURNAL.read_in_blocks::<JournalError>(store, BLOCK, |seq, bytes| walk.row(seq, bytes))?;
    store.read(|r| {
        for item in JOURNAL.range(r, &(from..))? {
            let (seq, bytes) = item?;
            walk.row(seq, bytes);
        }
        walk.finish(r)
    })
}

/// What [`audit`] has read of the journal's rows so far.
#[derive(Default)]
struct Walk {
    sums: BTreeMap<Vec<u8>, u64>,
    /// Each open intent's row, spend key and cost: a withdrawn outcome gives the cost back.
    open: BTreeMap<String, (u64, Vec<u8>, u64)>,
    findings: Vec<AuditFinding>,
    n: u64,
}

impl Walk {
    /// One journal row, in sequence order.
    fn row(&mut self, seq: u64, bytes: &[u8]) {
        let (sums, open, findings) = (&mut self.sums, &mut self.open, &mut self.findings);
        self.n += 1;
        // A damaged row is a finding like any other, not a reason to stop auditing. Rows are
        // read flat (typed, from the bytes): the audit reads every one of them.
        let row = match serde_json::from_slice::<Row<'_>>(bytes) {
            Ok(row) => row,
            Err(e) => {
                findings.push(AuditFinding(format!("journal #{seq}: unreadable: {e}")));
                return;
            }
        };
        match (&*row.kind, &row.episode, &row.effect, &row.scope, row.cost) {
            ("intent", Some(episode), Some(effect), Some(scope), Some(cost)) => {
                let key = spend_key(episode, effect, scope);
                *sums.entry(key.clone()).or_default() += cost;
                open.insert(row.invocation_id.into_owned(), (seq, key, cost));
            }
            ("outcome", ..) if row.status.is_some() => match open.remove(&*row.invocation_id) {
                None => findings.push(AuditFinding(format!(
                    "journal #{seq}: outcome for {} without an open intent",
                    row.invocation_id
                ))),
                Some((_, key, cost)) if row.status == Some(OutcomeStatus::Withdrawn) => {
                    let sum = sums.entry(key).or_default();
                    *sum = sum.saturating_sub(cost);
                }
                Some(_) => {}
            },
            _ => findings.push(AuditFinding(format!(
                "journal #{seq}: unreadable: not an intent or an outcome"
            ))),
        }
    }

    /// The rows read against the spend counters and the pending index in `r`, whose snapshot
    /// holds every row read.
    fn finish(self, r: &ReadCtx<'_>) -> Result<(Vec<AuditFinding>, u64), JournalError> {
        let Walk {
            sums,
            open,
            mut findings,
            n,
        } = self;
        // Counters and the pending index are read as stored bytes too: a damaged row is a
        // finding, and the audit goes on.
        let mut counters: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for item in SPEND.raw().iter(r)? {
            let (k, v) = item?;
            match <[u8; 8]>::try_from(v) {
                Ok(v) => {
                    counters.insert(k.to_vec(), u64::from_be_bytes(v));
                }
                Err(_) => findings.push(AuditFinding(format!(
                    "spend {}: unreadable: a counter of {} bytes, not 8",
                    shown_key(k),
                    v.len()
                ))),
            }
        }
        for (k, sum) in &sums {
            let c = counters.get(k).copied().unwrap_or(0);
            if c != *sum {
                findings.push(AuditFinding(format!(
                    "spend {} is {c} but its intents sum to {sum}",
                    shown_key(k)
                )));
            }
        }
        for (k, c) in &counters {
            if !sums.contains_key(k) && *c != 0 {
                findings.push(AuditFinding(format!(
                    "spend {} is {c} with no intents",
                    shown_key(k)
                )));
            }
        }
        let mut indexed = BTreeMap::new();
        for item in PENDING.raw().iter(r)? {
            let (id, seq) = item?;
            match (std::str::from_utf8(id), <[u8; 8]>::try_from(seq)) {
                (Ok(id), Ok(seq)) => {
                    indexed.insert(id.to_owned(), u64::from_be_bytes(seq));
                }
                _ => findings.push(AuditFinding(format!(
                    "pending {}: unreadable: not an invocation id and an 8-byte sequence",
                    shown_key(id)
                ))),
            }
        }
        // Each row that differs is named, with what it says and what the journal says.
        for (id, seq) in &indexed {
            match open.get(id).map(|(intent, ..)| intent) {
                Some(intent) if intent == seq => {}
                Some(intent) => findings.push(AuditFinding(format!(
                    "pending row {id} names journal #{seq}, but its open intent is #{intent}"
                ))),
                None => findings.push(AuditFinding(format!(
                    "pending row {id} names journal #{seq}, but {id} has no intent without outcome"
                ))),
            }
        }
        for (id, (seq, ..)) in &open {
            if !indexed.contains_key(id) {
                findings.push(AuditFinding(format!(
                    "journal #{seq}: the intent of {id} has no outcome, but the pending index has no row for it"
                )));
            }
        }
        Ok((findings, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canon;
    use crate::task::{self, TaskPhase, TaskState};
    use proptest::prelude::*;

    /// Everything the journal and the invocation's row hold after each step, as stored bytes.
    fn rows(store: &Store, id: &str) -> Vec<Vec<u8>> {
        store
            .read(|r| {
                let mut out = Vec::new();
                let (row, resolution) = invocations::stored(r, id)?.expect("the row");
                out.push(row.to_vec());
                out.push(resolution.map(<[u8]>::to_vec).unwrap_or_default());
                for item in JOURNAL.range(r, &(0..))? {
                    out.push(item?.1.to_vec());
                }
                out.push(
                    PENDING
                        .get(r, id)?
                        .map(|s| s.to_be_bytes().to_vec())
                        .unwrap_or_default(),
                );
                Ok::<_, StoreError>(out)
            })
            .unwrap()
    }

    /// Two new stores, to write the same calls into in two ways (and their directories).
    fn two_stores() -> ([tempfile::TempDir; 2], Store, Store) {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let apart = Store::create(&dirs[0].path().join("db")).unwrap();
        let together = Store::create(&dirs[1].path().join("db")).unwrap();
        (dirs, apart, together)
    }

    /// One effectful call: its intent, its pending task state, and its task state once
    /// committed at entry `entry` (a skill id with quotes, so that escapes are written too).
    fn one_call(id: &str, episode: &str, entry: u64) -> (Intent, TaskState, TaskState) {
        let intent = Intent {
            invocation_id: id.into(),
            episode: episode.into(),
            effect: "Fs.Read".into(),
            scope: "worktree".into(),
            cost: 2,
            request_ref: Ref::of(b"request"),
        };
        let pending = TaskState {
            invocation_id: id.into(),
            skill_id: "read \"quoted\"".into(),
            input_ref: Ref::of(b"input"),
            phase: TaskPhase::Pending,
            output_ref: None,
            entry_index: None,
            world_ref: None,
            effect_records: Vec::new(),
        };
        let committed = TaskState {
            phase: TaskPhase::Committed,
            output_ref: Some(Ref::of(b"output")),
            entry_index: Some(entry),
            world_ref: Some(Ref::of(b"world")),
            effect_records: vec![Ref::of(b"record")],
            ..pending.clone()
        };
        (intent, pending, committed)
    }

    /// An intent written with its task state in one write of the row, and an outcome with the
    /// committed task state in one write of the resolution, leave exactly the bytes the
    /// separate writes (the journal's, then `task::put`'s) left.
    #[test]
    fn an_intent_and_an_outcome_written_with_their_task_states_leave_the_bytes_of_separate_writes()
    {
        for minted in [false, true] {
            let (_dirs, apart, together) = two_stores();
            let (id, episode, key) = ("mcp:ep:t1", "ep", "mcp:t1");
            let (intent, pending, committed) = one_call(id, episode, 7);
            let record = Ref::of(b"record");
            let (i, p) = (intent.clone(), pending.clone());
            apart
                .write(move |w| {
                    append_intent(w, &i, 10)?;
                    task::put(w, episode, key, &p)?;
                    Ok::<_, JournalError>(())
                })
                .unwrap();
            let (i, p) = (intent.clone(), task::stored_bytes(&pending).unwrap());
            together
                .write(move |w| append_intent_with_task(w, &i, 10, minted, &p).map(drop))
                .unwrap();
            assert_eq!(rows(&apart, id), rows(&together, id), "after the intent");
            let c = committed.clone();
            apart
                .write(move |w| {
                    append_outcome(w, id, OutcomeStatus::Succeeded, Some(record))?;
                    task::put(w, episode, key, &c)?;
                    Ok::<_, JournalError>(())
                })
                .unwrap();
            let c = task::stored_bytes(&committed).unwrap();
            together
                .write(move |w| {
                    append_outcome_with_task(w, id, OutcomeStatus::Succeeded, Some(record), &c)
                        .map(drop)
                })
                .unwrap();
            assert_eq!(rows(&apart, id), rows(&together, id), "after the outcome");
            let seen = together.read(|r| task::get(r, episode, key)).unwrap();
            assert_eq!(seen, Some(committed));
        }
    }

    /// A stray journal row at the last sequence number (a tamper, a byte-level repair) leaves
    /// no number for the next row: the next intent and outcome are refused as damage, and no
    /// row is written, where the sequence used to wrap to 0 and a call's outcome was written
    /// over its own intent.
    #[test]
    fn a_journal_append_never_writes_over_a_row_when_the_last_sequence_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let (first, ..) = one_call("mcp:ep:t1", "ep", 1);
        let (second, ..) = one_call("mcp:ep:t2", "ep", 2);
        let i = first.clone();
        store.write(move |w| append_intent(w, &i, 10)).unwrap();
        store
            .write(|w| JOURNAL.put(w, &u64::MAX, b"{\"kind\":\"stray\"}"))
            .unwrap();
        let before = store
            .read(|r| {
                JOURNAL
                    .iter(r)?
                    .map(|item| item.map(|(k, v)| (k, v.to_vec())))
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap();
        let said = "store is damaged: the journal's last row is #18446744073709551615, and no \
                    sequence number follows it: run worldd doctor";
        let i = second.clone();
        let e = store.write(move |w| append_intent(w, &i, 10)).unwrap_err();
        assert!(
            matches!(e, JournalError::Store(StoreError::Corrupt(_))),
            "{e:?}"
        );
        assert_eq!(e.to_string(), said);
        let e = store
            .write(|w| append_outcome(w, "mcp:ep:t1", OutcomeStatus::Succeeded, None))
            .unwrap_err();
        assert_eq!(e.to_string(), said);
        let after = store
            .read(|r| {
                JOURNAL
                    .iter(r)?
                    .map(|item| item.map(|(k, v)| (k, v.to_vec())))
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap();
        assert_eq!(after, before);
        assert_eq!(after.len(), 2);
        assert_eq!(after[0].0, 1);
    }

    /// A pending row that names another journal row than its call's open intent, one for a
    /// call with no open intent, and an open intent with no pending row are each named, with
    /// what the row says and what the journal says (not two equal counts).
    #[test]
    fn the_audit_names_a_wrong_pending_row_and_what_is_wrong_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let (open, ..) = one_call("mcp:ep:open", "ep", 1);
        let (done, ..) = one_call("mcp:ep:done", "ep", 2);
        let (i, j) = (open.clone(), done.clone());
        store
            .write(move |w| {
                append_intent(w, &i, 10)?;
                append_intent(w, &j, 10)?;
                append_outcome(w, "mcp:ep:done", OutcomeStatus::Succeeded, None).map(drop)
            })
            .unwrap();
        assert_eq!(store.read(audit).unwrap().0, Vec::new());
        let findings = |pending: &[(&str, u64)]| {
            let pending: Vec<(String, u64)> =
                pending.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            store
                .write(move |w| {
                    PENDING.clear(w)?;
                    for (id, seq) in &pending {
                        PENDING.put(w, id, seq)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .unwrap();
            let found = store.read(audit).unwrap().0;
            found.into_iter().map(|f| f.0).collect::<Vec<_>>()
        };
        assert_eq!(
            findings(&[("mcp:ep:open", 999)]),
            ["pending row mcp:ep:open names journal #999, but its open intent is #1"]
        );
        assert_eq!(
            findings(&[("mcp:ep:open", 1), ("mcp:ep:done", 2)]),
            [
                "pending row mcp:ep:done names journal #2, but mcp:ep:done has no intent without outcome"
            ]
        );
        assert_eq!(
            findings(&[]),
            ["journal #1: the intent of mcp:ep:open has no outcome, but the pending index has no row for it"]
        );
        assert_eq!(findings(&[("mcp:ep:open", 1)]), Vec::<String>::new());
    }

    /// An outcome written in the transaction that journaled its intent (a read's intent and
    /// entry sharing a group commit) resolves the invocation's row in place: no resolution
    /// row, no pending row left, and readers see exactly what they see of the same calls
    /// written in two transactions, whose row stays as the committed intent left it.
    #[test]
    fn an_outcome_in_its_intents_transaction_resolves_the_row_in_place() {
        for minted in [false, true] {
            let (_dirs, apart, together) = two_stores();
            let (id, episode, key) = ("mcp:ep:t1", "ep", "mcp:t1");
            let (intent, pending, committed) = one_call(id, episode, 1);
            let (p, c) = (
                task::stored_bytes(&pending).unwrap(),
                task::stored_bytes(&committed).unwrap(),
            );
            let record = Some(Ref::of(b"record"));
            let intend = move |w: &mut WriteCtx<'_, '_>| {
                append_intent_with_task(w, &intent, 10, minted, &p).map(drop)
            };
            let resolve = move |w: &mut WriteCtx<'_, '_>| {
                append_outcome_with_task(w, id, OutcomeStatus::Succeeded, record, &c).map(drop)
            };
            apart.write(intend.clone()).unwrap();
            let as_intended = rows(&apart, id);
            apart.write(resolve.clone()).unwrap();
            let (i, o) = (intend.clone(), resolve.clone());
            together
                .write(move |w| {
                    i(w)?;
                    o(w)
                })
                .unwrap();

            let (a, t) = (rows(&apart, id), rows(&together, id));
            assert_eq!(
                a[0], as_intended[0],
                "the committed intent's row is left alone"
            );
            assert!(!a[1].is_empty(), "its outcome went to a resolution");
            assert!(
                t[1].is_empty(),
                "no resolution for an intent of the same transaction"
            );
            assert_eq!(&a[2..], &t[2..], "the same journal records, no pending row");
            let merged = |rows: &[Vec<u8>]| {
                let row = invocations::visible(
                    id,
                    &rows[0],
                    Some(&rows[1][..]).filter(|r| !r.is_empty()),
                )
                .unwrap();
                (
                    row.intent,
                    row.journal.map(<[u8]>::to_vec),
                    row.task.map(<[u8]>::to_vec),
                )
            };
            assert_eq!(merged(&t), merged(&a), "readers see the same invocation");
            for store in [&apart, &together] {
                let seen = store
                    .read(|r| {
                        Ok::<_, JournalError>((
                            state(r, id)?,
                            task::get(r, episode, key)?,
                            receipt(r, id)?,
                            audit(r)?.0,
                        ))
                    })
                    .unwrap();
                assert_eq!(seen.0.unwrap().status, Some(OutcomeStatus::Succeeded));
                assert_eq!(seen.1, Some(committed.clone()));
                assert_eq!(
                    seen.2,
                    Receipt::Resolved {
                        status: OutcomeStatus::Succeeded,
                        result_ref: record
                    }
                );
                assert_eq!(seen.3, Vec::new());
            }
            // A second outcome is refused in either layout.
            for store in [&apart, &together] {
                let again = store.write(resolve.clone());
                assert!(
                    matches!(again, Err(JournalError::AlreadyResolved(_))),
                    "{again:?}"
                );
            }
        }
    }

    /// What the records were before they were written directly: the canonical form of their
    /// serde value.
    fn through_value<T: Serialize>(v: &T) -> Result<Vec<u8>, canon::CanonError> {
        canon::to_vec(&serde_json::to_value(v).unwrap())
    }

    fn same(direct: Result<Vec<u8>, JournalError>, through: Result<Vec<u8>, canon::CanonError>) {
        match (direct, through) {
            (Ok(a), Ok(b)) => assert_eq!(String::from_utf8(a), String::from_utf8(b)),
            (Err(JournalError::Corrupt(a)), Err(b)) => assert_eq!(a, b.to_string()),
            (a, b) => panic!("direct {a:?} but through a value {b:?}"),
        }
    }

    fn arb_ref() -> impl Strategy<Value = Ref> {
        any::<[u8; 32]>().prop_map(Ref::from_bytes)
    }

    fn arb_integer() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..1_000,
            (canon::MAX_SAFE_INTEGER - 1)..=(canon::MAX_SAFE_INTEGER + 1),
            any::<u64>(),
        ]
    }

    fn arb_status() -> impl Strategy<Value = OutcomeStatus> {
        prop_oneof![
            Just(OutcomeStatus::Succeeded),
            Just(OutcomeStatus::Failed),
            Just(OutcomeStatus::Indeterminate),
            Just(OutcomeStatus::Committed),
            Just(OutcomeStatus::Withdrawn),
        ]
    }

    fn arb_intent() -> impl Strategy<Value = Intent> {
        (
            any::<String>(),
            "[a-z0-9:\"\\\\\u{1}é😀-]{0,12}",
            "[A-Za-z.]{1,16}",
            any::<String>(),
            arb_integer(),
            arb_ref(),
        )
            .prop_map(
                |(invocation_id, episode, effect, scope, cost, request_ref)| Intent {
                    invocation_id,
                    episode,
                    effect,
                    scope,
                    cost,
                    request_ref,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn journal_records_are_written_as_the_canonical_form_of_their_serde_value(
            intent in arb_intent(),
            seq in arb_integer(),
            status in arb_status(),
            result_ref in proptest::option::of(arb_ref()),
        ) {
            let record = Record::Intent { seq, intent: intent.clone() };
            same(record.to_bytes(), through_value(&record));
            let record = Record::Outcome {
                seq,
                invocation_id: intent.invocation_id.clone(),
                status,
                result_ref,
            };
            same(record.to_bytes(), through_value(&record));
        }

        #[test]
        fn journal_states_are_written_as_the_canonical_form_of_their_serde_value(
            intent in arb_intent(),
            intent_seq in arb_integer(),
            outcome_seq in proptest::option::of(arb_integer()),
            status in proptest::option::of(arb_status()),
            result_ref in proptest::option::of(arb_ref()),
        ) {
            let state = JournalState { intent, intent_seq, outcome_seq, status, result_ref };
            same(state.to_bytes(), through_value(&state));
            if let Ok(bytes) = state.to_bytes() {
                // What an outcome reads of it, borrowed, writes the same bytes back.
                let view: StateView<'_> = serde_json::from_slice(&bytes).unwrap();
                let again = state_row(
                    &view.intent,
                    view.intent_seq,
                    view.outcome_seq,
                    view.result_ref.as_ref(),
                    view.status,
                );
                prop_assert_eq!(again.unwrap(), bytes.clone());
                prop_assert_eq!(parse_state(&bytes).unwrap(), state);
            }
        }
    }
}
