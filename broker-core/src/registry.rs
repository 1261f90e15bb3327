//! The transition registry: a content-addressed chain of revisions.
//!
//! Each transition document is stored as a `world/transition/v1` object (its ref is the tool's
//! `transitionFn`). A registry revision (`world/transition-registry/v2`) lists every tool of a
//! named registry by its `id`, `transitionFn`, `interpreter` and `semanticsEpoch`, and links to
//! the revision it replaces through `parent`: the tool's descriptor is its transition object,
//! stored once however many revisions list it. (Revisions of earlier builds,
//! `world/transition-registry/v1`, copied every descriptor into every revision: a one-document
//! publication stored the whole registry again. They are read as they are.) Publishing the
//! same set again changes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::canon::{self, CanonError};
use crate::log::{interpreter_ref, SEMANTICS_EPOCH};
use crate::object::{sid, Object, Ref};
use crate::schema::REGISTRY_HEADS;
use crate::storage::{shown_bytes, ReadCtx, Store, StoreError, WriteCtx};
use crate::transition::{Transition, TransitionError};

/// The registry the daemon serves tools from.
pub const DEFAULT_REGISTRY: &str = "tools";

/// The largest registry, as the canonical JSON of a revision holding every tool's descriptor
/// whole (revisions list refs; the measure is what `tools/list` carries). Publications merge
/// into the registry (a tool is replaced by id, never removed), and every session's
/// `tools/list` carries what it may see of it, so the merged whole is bounded, not only each
/// document: 8 MiB is about 250 times the shipped tools.
pub const MAX_REGISTRY_BYTES: usize = 8 << 20;

/// The most one plugin's shipped tools may take of a registry revision, as the canonical JSON
/// of their entries ([`entry_bytes`]): an eighth of [`MAX_REGISTRY_BYTES`]. Shipped tools are
/// published at every start whatever the registry's size ([`publish_shipped`]), so without a
/// bound of their own one plugin could fill the registry and refuse every publisher.
pub const MAX_SHIPPED_BYTES: usize = MAX_REGISTRY_BYTES / 8;

/// The most the shipped tools of all the plugins found may take together: half of
/// [`MAX_REGISTRY_BYTES`], the other half left to publishers.
pub const MAX_ALL_SHIPPED_BYTES: usize = MAX_REGISTRY_BYTES / 2;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("registry revision {0} is damaged: {1}")]
    Corrupt(Ref, String),
    /// A transition document the revision lists is missing or does not hash to its address:
    /// named for what it is, with the revision that lists it.
    #[error("transition document {transition} (listed by registry revision {revision}) is damaged: {detail}")]
    TransitionDamaged {
        transition: Ref,
        revision: Ref,
        detail: String,
    },
    #[error("transition {0}: {1}")]
    Transition(String, TransitionError),
    #[error("transition document cannot be canonicalised: {0}")]
    Canon(#[from] CanonError),
    #[error("duplicate transition id {0:?} in one publication")]
    Duplicate(String),
    /// A document that may not enter a registry ([`Transition::check_entering`]), by its place
    /// in the publication.
    #[error("transitions[{index}]: {source}")]
    NotEntering {
        index: usize,
        source: TransitionError,
    },
    #[error(
        "registry {name:?} would be {bytes} bytes with this publication; the limit is {}",
        MAX_REGISTRY_BYTES
    )]
    TooLarge { name: String, bytes: usize },
}

/// One published tool.
#[derive(Debug, Clone)]
pub struct RegistryEntry {
    pub transition: Arc<Transition>,
    pub transition_fn: Ref,
}

/// One revision of a named registry, loaded.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub name: String,
    pub revision: u64,
    /// The revision object's ref; `None` for a registry never published.
    pub reference: Option<Ref>,
    entries: BTreeMap<String, RegistryEntry>,
}

impl Registry {
    pub fn get(&self, id: &str) -> Option<&RegistryEntry> {
        self.entries.get(id)
    }

    /// Tools in id order.
    pub fn entries(&self) -> impl Iterator<Item = &RegistryEntry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The outcome of a publication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub reference: Ref,
    pub revision: u64,
    /// False when the documents were already the registry's content.
    pub changed: bool,
}

/// The object for a transition document.
pub fn transition_object(t: &Transition, provenance: &str) -> Result<Object, CanonError> {
    Object::json(sid::TRANSITION, provenance, t.to_value())
}

fn descriptor(t: &Transition, transition_fn: &Ref, interpreter: &Ref) -> Value {
    json!({
        "id": t.id,
        "transitionFn": transition_fn,
        "interpreter": interpreter,
        "semanticsEpoch": SEMANTICS_EPOCH,
        "inputSchema": t.input_schema,
        "outputSchema": t.output_schema,
        "access": t.access,
        "declaredEffects": t.declared_effects,
        "title": t.title,
        "description": t.description,
    })
}

/// The bytes `t` adds to the registry's size as [`MAX_REGISTRY_BYTES`] measures it: its
/// descriptor as canonical JSON and the comma that separates it from the next (the refs it
/// binds are of fixed length).
pub fn entry_bytes(t: &Transition) -> Result<usize, CanonError> {
    Ok(canon::to_vec(&descriptor_parts(t))?.len() + 1)
}

/// The registry head ref of `name`.
pub fn head(r: &ReadCtx<'_>, name: &str) -> Result<Option<Ref>, StoreError> {
    match REGISTRY_HEADS.get(r, name)? {
        None => Ok(None),
        Some(b) => Ref::from_slice(b)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("registry head {name} is not a ref"))),
    }
}

/// Check every registry head: each must name a stored revision whose transitions load
/// ([`load_in`]). Returns one finding per head that does not, for `worldd doctor`.
pub(crate) fn audit(r: &ReadCtx<'_>) -> Result<Vec<String>, StoreError> {
    let mut findings = Vec::new();
    for item in REGISTRY_HEADS.raw().iter(r)? {
        let (name, _) = item?;
        let shown = shown_bytes(name);
        let Ok(name) = std::str::from_utf8(name) else {
            findings.push(format!("registry {shown}: its name is not UTF-8"));
            continue;
        };
        match load_in(r, name) {
            Ok(_) => {}
            // The store failing underneath is not a finding about the registry.
            Err(RegistryError::Store(StoreError::Corrupt(e))) => {
                findings.push(format!("registry {shown}: {e}"));
            }
            Err(RegistryError::Store(e)) => return Err(e),
            Err(e) => findings.push(format!("registry {shown}: {e}")),
        }
    }
    Ok(findings)
}

/// Load the current revision of `name` (empty when never published).
pub fn load(store: &Store, name: &str) -> Result<Registry, RegistryError> {
    store.read(|r| load_in(r, name))
}

/// Load inside an open read transaction.
pub fn load_in(r: &ReadCtx<'_>, name: &str) -> Result<Registry, RegistryError> {
    let Some(reference) = head(r, name)? else {
        return Ok(Registry {
            name: name.to_owned(),
            ..Registry::default()
        });
    };
    let corrupt = |m: &str| RegistryError::Corrupt(reference, m.to_owned());
    let obj = r.object(&reference)?.ok_or_else(|| corrupt("missing"))?;
    if !obj.verify() {
        return Err(corrupt("does not hash to its address"));
    }
    let doc = canon::parse(&obj.payload).map_err(|e| corrupt(&e.to_string()))?;
    let revision = doc["revision"]
        .as_u64()
        .ok_or_else(|| corrupt("no revision"))?;
    let mut entries = BTreeMap::new();
    for e in doc["entries"]
        .as_array()
        .ok_or_else(|| corrupt("no entries"))?
    {
        let tf: Ref = e["transitionFn"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| corrupt("entry without transitionFn"))?;
        let damaged = |detail: String| RegistryError::TransitionDamaged {
            transition: tf,
            revision: reference,
            detail,
        };
        let tobj = r
            .object(&tf)?
            .ok_or_else(|| damaged("missing from the store".into()))?;
        if !tobj.verify() {
            return Err(damaged(format!(
                "its stored bytes hash to {}, not to its address",
                Ref::of(&tobj.payload)
            )));
        }
        let t = Transition::from_slice(&tobj.payload)
            .map_err(|err| RegistryError::Transition(tf.to_string(), err))?;
        entries.insert(
            t.id.clone(),
            RegistryEntry {
                transition: Arc::new(t),
                transition_fn: tf,
            },
        );
    }
    Ok(Registry {
        name: name.to_owned(),
        revision,
        reference: Some(reference),
        entries,
    })
}

/// `doc` read as a transition that is to enter a registry: [`Transition::from_value`], then
/// [`Transition::check_entering`]. A publisher reads its documents with this to refuse one in
/// its own words before publishing (a plugin's shipped tools are refused at load, and reported
/// by `worldd handlers`, which publishes nothing); [`publish`] and [`publish_shipped`] check
/// every document again, so one read otherwise cannot enter unchecked.
pub fn entering(doc: Value) -> Result<Transition, TransitionError> {
    let t = Transition::from_value(doc)?;
    t.check_entering()?;
    Ok(t)
}

/// Add or replace `docs` in registry `name`, producing a new revision when anything changed;
/// refused when the revision would pass [`MAX_REGISTRY_BYTES`], or when a document may not
/// enter a registry ([`entering`]).
pub fn publish(
    store: &Store,
    name: &str,
    docs: Vec<Transition>,
    provenance: &str,
) -> Result<Published, RegistryError> {
    publish_within(store, name, docs, provenance, Some(MAX_REGISTRY_BYTES))
}

/// [`publish`] for the tools the loaded plugins ship, which a daemon publishes at every start:
/// never refused for the registry's size. Publishers may have filled the registry to its
/// limit with smaller versions of the same ids (replacing a shipped tool is theirs to do, and
/// a restart puts it back); refusing the shipped documents then would keep the daemon from
/// starting at all. What they add past the limit is bounded by the shipped documents' own
/// size, and further publications are refused until the registry is under it again.
pub fn publish_shipped(
    store: &Store,
    name: &str,
    docs: Vec<Transition>,
    provenance: &str,
) -> Result<Published, RegistryError> {
    publish_within(store, name, docs, provenance, None)
}

fn publish_within(
    store: &Store,
    name: &str,
    docs: Vec<Transition>,
    provenance: &str,
    limit: Option<usize>,
) -> Result<Published, RegistryError> {
    // The entering checks hang here, on the only way into a registry, so that no publisher
    // can skip them; all of them come before the duplicate check, as a publisher's do.
    for (index, t) in docs.iter().enumerate() {
        t.check_entering()
            .map_err(|source| RegistryError::NotEntering { index, source })?;
    }
    let mut objects = Vec::with_capacity(docs.len());
    let mut seen = std::collections::BTreeSet::new();
    for t in &docs {
        if !seen.insert(t.id.clone()) {
            return Err(RegistryError::Duplicate(t.id.clone()));
        }
        objects.push((
            t.id.clone(),
            transition_object(t, provenance)?,
            descriptor_parts(t),
        ));
    }
    let name = name.to_owned();
    let provenance = provenance.to_owned();
    // The writer may run the operation twice (store::Store::write): it gets its own copy.
    store.write(move |w| publish_in(w, &name, objects.clone(), &provenance, limit))
}

type Part = (String, Object, Value);

fn descriptor_parts(t: &Transition) -> Value {
    // Everything of the descriptor except the refs, which are bound in the writer.
    descriptor(t, &Ref::ZERO, &Ref::ZERO)
}

/// A revision's entry for one tool: its id and refs. The entry of a `v1` revision (a whole
/// descriptor) is read as the same four fields.
fn entry_ref(e: &Value) -> Option<(String, Value)> {
    let id = e["id"].as_str()?;
    Some((
        id.to_owned(),
        json!({
            "id": id,
            "transitionFn": e["transitionFn"],
            "interpreter": e["interpreter"],
            "semanticsEpoch": e["semanticsEpoch"],
        }),
    ))
}

/// The bytes the registry's tools take as descriptors (what every `tools/list` carries), as
/// canonical JSON of a revision that held them whole: the measure [`MAX_REGISTRY_BYTES`]
/// bounds. `known` holds the descriptor bytes of the tools being published; the others are
/// measured from their transition objects.
fn descriptor_bytes(
    w: &WriteCtx<'_, '_>,
    revision: Ref,
    envelope: &Value,
    entries: &BTreeMap<String, Value>,
    known: &BTreeMap<String, usize>,
) -> Result<usize, RegistryError> {
    let mut bytes = canon::to_vec(envelope)?.len() + entries.len().saturating_sub(1);
    for (id, e) in entries {
        if let Some(n) = known.get(id) {
            bytes += n;
            continue;
        }
        let corrupt = |m: String| RegistryError::Corrupt(revision, m);
        let tf: Ref = e["transitionFn"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| corrupt(format!("entry {id:?} without transitionFn")))?;
        let damaged = |detail: String| RegistryError::TransitionDamaged {
            transition: tf,
            revision,
            detail,
        };
        let tobj = w
            .object(&tf)?
            .ok_or_else(|| damaged("missing from the store".into()))?;
        let t = Transition::from_slice(&tobj.payload)
            .map_err(|err| RegistryError::Transition(tf.to_string(), err))?;
        let mut desc = descriptor_parts(&t);
        desc["transitionFn"] = e["transitionFn"].clone();
        desc["interpreter"] = e["interpreter"].clone();
        bytes += canon::to_vec(&desc)?.len();
    }
    Ok(bytes)
}

fn publish_in(
    w: &mut WriteCtx<'_, '_>,
    name: &str,
    parts: Vec<Part>,
    provenance: &str,
    limit: Option<usize>,
) -> Result<Published, RegistryError> {
    let interpreter = interpreter_ref()?;
    let parent = head(&w.reader(), name)?;
    // Current entries, by id, as the parent revision lists them.
    let mut entries: BTreeMap<String, Value> = BTreeMap::new();
    let mut revision = 0;
    if let Some(p) = parent {
        let obj = w
            .object(&p)?
            .ok_or_else(|| RegistryError::Corrupt(p, "missing".into()))?;
        let doc =
            canon::parse(&obj.payload).map_err(|e| RegistryError::Corrupt(p, e.to_string()))?;
        revision = doc["revision"].as_u64().unwrap_or(0);
        for e in doc["entries"].as_array().into_iter().flatten() {
            if let Some((id, entry)) = entry_ref(e) {
                entries.insert(id, entry);
            }
        }
    }
    let before = entries.clone();
    let mut known = BTreeMap::new();
    for (id, obj, mut desc) in parts {
        desc["transitionFn"] = json!(obj.hash);
        desc["interpreter"] = json!(interpreter);
        w.put_object(&obj)?;
        known.insert(id.clone(), canon::to_vec(&desc)?.len());
        if let Some((_, entry)) = entry_ref(&desc) {
            entries.insert(id, entry);
        }
    }
    if let Some(parent) = parent.filter(|_| entries == before) {
        return Ok(Published {
            reference: parent,
            revision,
            changed: false,
        });
    }
    let next = if parent.is_some() { revision + 1 } else { 1 };
    let mut doc = json!({
        "semanticId": sid::TRANSITION_REGISTRY_V2,
        "interfaceHash": Ref::of(sid::TRANSITION_REGISTRY_V2.as_bytes()),
        "name": name,
        "revision": next,
        "parent": parent.map(|p| p.to_string()).unwrap_or_default(),
        "entries": [],
    });
    if let Some(limit) = limit {
        let bytes = descriptor_bytes(w, parent.unwrap_or(Ref::ZERO), &doc, &entries, &known)?;
        if bytes > limit {
            // The batch's write is undone with this operation: nothing of it is stored.
            return Err(RegistryError::TooLarge {
                name: name.to_owned(),
                bytes,
            });
        }
    }
    doc["entries"] = json!(entries.into_values().collect::<Vec<_>>());
    let obj = Object::json(sid::TRANSITION_REGISTRY_V2, provenance, &doc)?;
    w.put_object(&obj)?;
    REGISTRY_HEADS.put(w, name, obj.hash.as_bytes())?;
    Ok(Published {
        reference: obj.hash,
        revision: next,
        changed: true,
    })
}
