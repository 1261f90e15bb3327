//! One line of the live log: a log entry with what a reader wants to see beside it — the
//! world it selected, the invocation id, tool and episode of its call, and the call's outcome
//! class. Shared by `GET /v1/log/stream` and `GET /v1/log/summaries`.
//!
//! A summary is read from the store as stored, not verified: verification is the reader's
//! (`worldd why`, the workbench). The outcome class follows [`crate::outcome::of_committed`]
//! (the classification the caller was given) with one refinement the journal allows: an effect
//! whose handler could not tell whether it ran is `indeterminate`, not `failed`.
//!
//! | `outcome` | meaning |
//! |---|---|
//! | `ok` | the effect ran and the tool did what was asked |
//! | `refused` | the plan refused the arguments (`reason` `plan`) or the effect's policy said no (`policy`) |
//! | `denied` | the broker refused the effect, or its plugin declined the request before it ran (`reason` is the denial label: `denied:handler` for a plugin's) |
//! | `failed` | the handler failed (`handler`) |
//! | `indeterminate` | the handler could not tell whether its effect happened (`handler`) |
//! | `null` | not a call: the genesis or a client-built commit |

use std::borrow::Cow;

use broker_core::coordinator::EffectSummary;
use broker_core::journal::{self, OutcomeStatus};
use broker_core::log::{self, Entry, LogError};
use broker_core::object::Ref;
use broker_core::store::{ReadCtx, StoreError};
use handler_api::EffectClass;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::outcome::{self, Kind};
use crate::visibility::{self, Reader};

/// The most entries one page may scan.
pub const MAX_PAGE: usize = 500;
/// Entries one page scans when the caller names no limit.
pub const DEFAULT_PAGE: usize = 100;

/// One summarised entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub entry: Entry,
    pub world_ref: Option<Ref>,
    pub invocation_id: Option<String>,
    pub tool: Option<String>,
    pub episode: Option<String>,
    /// `(kind, reason)`; `None` for entries that are not calls.
    pub outcome: Option<(&'static str, Option<&'static str>)>,
}

impl Summary {
    pub fn index(&self) -> u64 {
        self.entry.header.entry_index
    }

    /// The entry's own JSON (`header`, `entryHash`, `transitionRef`) plus `worldRef`,
    /// `invocationId`, `tool`, `episode`, `outcome` and `reason`.
    pub fn to_json(&self) -> Value {
        let mut v = self.entry.to_value();
        v["worldRef"] = json!(self.world_ref);
        v["invocationId"] = json!(self.invocation_id);
        v["tool"] = json!(self.tool);
        v["episode"] = json!(self.episode);
        v["outcome"] = json!(self.outcome.map(|o| o.0));
        v["reason"] = json!(self.outcome.and_then(|o| o.1));
        v
    }
}

/// The fields of an invocation record a summary shows.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordFields<'a> {
    #[serde(borrow, default)]
    invocation_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    episode_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    skill_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    output: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    effects: Vec<Cow<'a, str>>,
}

/// The fields of an effect record the outcome needs (other fields are ignored, so records
/// that carry more, such as a plugin identity, still classify).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EffectFields {
    effect: String,
    allowed: bool,
    failed: bool,
    #[serde(default)]
    denial: String,
    #[serde(default)]
    budget_after: u64,
}

/// Only `ok` of an output: the rest, often the bulk of the bytes, is skipped.
#[derive(Deserialize)]
struct OutputOk {
    #[serde(default)]
    ok: Option<bool>,
}

/// Summarise entry `index` for `reader`: `Ok(None)` when it does not exist or the reader may
/// not see it.
pub fn summarise(
    r: &ReadCtx<'_>,
    index: u64,
    reader: &Reader,
) -> Result<Option<Summary>, LogError> {
    let Some(entry) = log::entry(r, index)? else {
        return Ok(None);
    };
    summarise_entry(r, index, entry, reader)
}

/// [`summarise`] of the decoded entry at `index`.
fn summarise_entry(
    r: &ReadCtx<'_>,
    index: u64,
    entry: Entry,
    reader: &Reader,
) -> Result<Option<Summary>, LogError> {
    let world_ref = log::world_ref_at(r, index)?;
    let call = entry.header.written_by.starts_with(log::COORDINATOR_PREFIX);
    // A coordinator's entry names its invocation record: that is its kind, whatever kind the
    // stored row says. Objects are deduplicated by content and the first writer's semantic id
    // sticks, so an agent can send, as the arguments of an earlier call, the exact bytes a
    // later call's record will have; requiring the stored kind let it turn that call into
    // "not a call" in every timeline.
    let record = if call {
        r.object_view(&entry.transition_ref)?
            .and_then(|o| serde_json::from_slice::<RecordFields<'_>>(o.payload).ok())
    } else {
        None
    };
    let episode = record
        .as_ref()
        .and_then(|rec| rec.episode_id.as_deref())
        .map(str::to_owned);
    if !visibility::may_see(r, reader, &entry)? {
        return Ok(None);
    }
    // An agent may read the record's bytes because it stored them first (as its own
    // arguments), not because the call is its episode's: another episode's call stays
    // unlisted, as it would have been had those bytes not been guessed.
    if let (Reader::Episode(mine), Some(theirs)) = (reader, episode.as_deref()) {
        if mine != theirs {
            return Ok(None);
        }
    }
    let Some(rec) = record else {
        return Ok(Some(Summary {
            entry,
            world_ref,
            invocation_id: None,
            tool: None,
            episode,
            outcome: None,
        }));
    };
    let invocation_id = rec.invocation_id.as_deref().map(str::to_owned);
    let outcome = classify(r, &rec, invocation_id.as_deref())?;
    Ok(Some(Summary {
        world_ref,
        invocation_id,
        tool: rec.skill_id.as_deref().map(str::to_owned),
        episode,
        outcome,
        entry,
    }))
}

fn classify(
    r: &ReadCtx<'_>,
    rec: &RecordFields<'_>,
    invocation_id: Option<&str>,
) -> Result<Option<(&'static str, Option<&'static str>)>, StoreError> {
    let mut effects = Vec::with_capacity(rec.effects.len());
    for text in &rec.effects {
        let Ok(reference) = text.parse::<Ref>() else {
            return Ok(None);
        };
        let Some(fields) = r
            .object_view(&reference)?
            .and_then(|o| serde_json::from_slice::<EffectFields>(o.payload).ok())
        else {
            return Ok(None);
        };
        let status = match (fields.allowed, fields.failed) {
            (false, _) => "denied",
            (true, true) => "failed",
            (true, false) => "ok",
        };
        effects.push(EffectSummary {
            id: format!("e{}", effects.len() + 1),
            effect: fields.effect,
            status: status.into(),
            record: reference,
            budget_after: fields.budget_after,
            denial: (!fields.denial.is_empty()).then_some(fields.denial),
        });
    }
    // `ok: false` matters only after an effect that ran ok (a policy refusal).
    let output = match effects.first() {
        Some(e) if e.status == "ok" => {
            let ok = rec
                .output
                .as_deref()
                .and_then(|t| t.parse::<Ref>().ok())
                .map(|o| r.object_view(&o))
                .transpose()?
                .flatten()
                .and_then(|o| serde_json::from_slice::<OutputOk>(o.payload).ok())
                .and_then(|o| o.ok);
            json!({ "ok": ok })
        }
        _ => Value::Null,
    };
    let o = outcome::of_committed(&effects, &output, EffectClass::Unknown);
    if o.kind == Kind::Failed {
        if let Some(id) = invocation_id {
            let status = journal::state(r, id)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?
                .and_then(|s| s.status);
            if status == Some(OutcomeStatus::Indeterminate) {
                return Ok(Some((Kind::Indeterminate.as_str(), Some("handler"))));
            }
        }
    }
    Ok(Some((o.kind.as_str(), o.reason)))
}

/// A page of summaries: the visible entries among `[from, from + scanned)`.
#[derive(Debug, Clone)]
pub struct Page {
    pub items: Vec<Summary>,
    /// The first index this page scanned.
    pub from: u64,
    /// The first index this page did not scan: where the next page (or a stream) starts.
    pub next: u64,
    /// The index of the head entry when the page was read.
    pub head: u64,
    /// The positions among those scanned whose row no longer decodes as an entry, each with
    /// what does not: listed to every reader (entry headers are public), so one damaged row
    /// is named where it is instead of failing every page that spans it.
    pub damaged: Vec<Damaged>,
}

/// A log row that no longer decodes as an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Damaged {
    pub index: u64,
    pub cause: String,
}

impl Damaged {
    /// `{"index", "damaged": true, "reason"}`: the reason is what `GET /v1/log/{index}` says.
    pub fn to_json(&self) -> Value {
        json!({
            "index": self.index,
            "damaged": true,
            "reason": format!("log entry {} is damaged: {}; run worldd doctor", self.index, self.cause),
        })
    }
}

/// What does not decode, when `e` is a row of the log that does not.
pub fn undecodable(e: &LogError) -> Option<&str> {
    match e {
        LogError::Corrupt(why) | LogError::Store(StoreError::Corrupt(why)) => Some(why),
        _ => None,
    }
}

/// Scan up to `limit` entries from `from` (default: the last `limit` entries) in one read
/// transaction and keep those `reader` may see.
pub fn page(
    r: &ReadCtx<'_>,
    from: Option<u64>,
    limit: usize,
    reader: &Reader,
) -> Result<Page, LogError> {
    let head = log::head(r)?.map(|h| h.world.revision).unwrap_or(0);
    let limit = limit.clamp(1, MAX_PAGE) as u64;
    let from = from.unwrap_or_else(|| (head + 1).saturating_sub(limit));
    let end = from
        .saturating_add(limit)
        .min(head.saturating_add(1))
        .max(from);
    let mut items = Vec::new();
    let mut damaged = Vec::new();
    for i in from..end {
        let entry = match log::entry(r, i) {
            Ok(Some(entry)) => entry,
            Ok(None) => continue,
            Err(e) => match undecodable(&e) {
                Some(why) => {
                    damaged.push(Damaged {
                        index: i,
                        cause: why.to_owned(),
                    });
                    continue;
                }
                None => return Err(e),
            },
        };
        if let Some(s) = summarise_entry(r, i, entry, reader)? {
            items.push(s);
        }
    }
    Ok(Page {
        items,
        from,
        next: end,
        head,
        damaged,
    })
}

/// The index of the head entry.
pub fn head_index(r: &ReadCtx<'_>) -> Result<Option<u64>, StoreError> {
    Ok(log::head(r)?.map(|h| h.world.revision))
}
