//! What each episode holds in the store: the calls it recorded, the objects its calls stored or
//! were granted, and their bytes. It answers the operator's question when the store fills up:
//! which episode's calls filled it.
//!
//! An object is stored once however many episodes made it (the store is content-addressed),
//! and each episode that made it holds a grant to read it ([`crate::access`]). So an episode's
//! **held** bytes count every object it holds, shared or not, and its **own** bytes only those
//! no other episode holds: what its calls added to the store that nobody else's did. Public
//! objects (tools, registry revisions) and operator commits belong to no episode and are
//! counted in no holding.
//!
//! Reading every grant takes time in proportion to the store's objects (0.3 s for a store of
//! 927 MB and 884,000 objects), and memory for one sequence number and one episode a grant: an
//! operator's verb (`worldd usage`), never a request's.
//!
//! ```
//! # use broker_core::store::Store;
//! # let dir = tempfile::tempdir().unwrap();
//! # let store = Store::create(&dir.path().join("db")).unwrap();
//! let holdings = store.read(|r| broker_core::holdings::holdings(r)).unwrap();
//! assert!(holdings.is_empty()); // a new store holds no episode's objects
//! ```

use std::collections::HashMap;

use crate::access;
use crate::invocation_row;
use crate::schema::{INVOCATIONS, INVOCATION_ROWS, OBJECTS};
use crate::storage::{ReadCtx, StoreError};

/// One episode's calls and objects in the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    pub episode: String,
    /// Calls the store records for it (committed, refused or unrecorded; not those turned away
    /// before anything was written, for capacity or the refusal rate).
    pub calls: u64,
    /// Objects it holds, and their stored bytes.
    pub objects: u64,
    pub bytes: u64,
    /// Of those, the objects no other episode holds, and their bytes.
    pub own_objects: u64,
    pub own_bytes: u64,
}

/// The episodes met so far, each with its place in the list.
#[derive(Default)]
struct Episodes {
    list: Vec<Holding>,
    index: HashMap<Vec<u8>, u32>,
}

impl Episodes {
    fn place(&mut self, episode: &[u8]) -> u32 {
        let next = self.list.len() as u32;
        *self.index.entry(episode.to_vec()).or_insert_with(|| {
            self.list.push(Holding {
                episode: String::from_utf8_lossy(episode).into_owned(),
                ..Holding::default()
            });
            next
        })
    }
}

/// The episode whose call a stored invocation id names: only the coordinator's ids
/// (`mcp:<episode>:<task>`, `a2a:<episode>:<task>`) name one. An operator's commit is journaled
/// under `rest:<x>:<y>` or `commit:<episode>:<hash>`, whose middle part is no agent's episode
/// (a `rest:demo:x` is not a call of `demo`), and belongs to no holding.
fn episode_of(id: &[u8]) -> Option<&str> {
    let id = std::str::from_utf8(id).ok()?;
    if !crate::commit::in_coordinator_namespace(id) {
        return None;
    }
    let (_, episode, _) = crate::task::split_invocation_id(id)?;
    Some(episode)
}

/// Every episode's [`Holding`], the largest own bytes first (then held bytes, then name).
pub fn holdings(r: &ReadCtx<'_>) -> Result<Vec<Holding>, StoreError> {
    let mut episodes = Episodes::default();
    let mut grants: Vec<(u64, u32)> = Vec::new();
    access::for_each_grant(r, |episode, seq| {
        grants.push((seq, episodes.place(episode)))
    })?;
    // The invocations since schema 4 in arrival order, and those of older stores by id.
    for row in INVOCATION_ROWS.iter(r)? {
        let (seq, row) = row?;
        let (id, _) = invocation_row::split(row)
            .ok_or_else(|| StoreError::Corrupt(format!("invocation row {seq} is damaged")))?;
        if let Some(episode) = episode_of(id) {
            let i = episodes.place(episode.as_bytes());
            episodes.list[i as usize].calls += 1;
        }
    }
    for row in INVOCATIONS.iter(r)? {
        let (id, _) = row?;
        if let Some(episode) = episode_of(id.as_bytes()) {
            let i = episodes.place(episode.as_bytes());
            episodes.list[i as usize].calls += 1;
        }
    }
    let mut episodes = episodes.list;
    grants.sort_unstable();
    grants.dedup();
    for group in grants.chunk_by(|a, b| a.0 == b.0) {
        let seq = group[0].0;
        let bytes = OBJECTS
            .get(r, &seq)?
            .ok_or_else(|| {
                StoreError::Corrupt(format!("a grant names object row {seq}, which is absent"))
            })?
            .len() as u64;
        let own = group.len() == 1;
        for &(_, i) in group {
            let h = &mut episodes[i as usize];
            h.objects += 1;
            h.bytes += bytes;
            if own {
                h.own_objects += 1;
                h.own_bytes += bytes;
            }
        }
    }
    episodes.sort_by(|a, b| {
        (b.own_bytes, b.bytes, &a.episode).cmp(&(a.own_bytes, a.bytes, &b.episode))
    });
    Ok(episodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{grant_stored, READERS_MERGE_AT};
    use crate::object::{Object, Ref};
    use crate::store::Store;

    fn stored(store: &Store, objects: &[Object]) -> Vec<Ref> {
        let owned = objects.to_vec();
        store
            .write(move |w| owned.iter().try_for_each(|o| w.put_object(o)))
            .unwrap();
        objects.iter().map(|o| o.hash).collect()
    }

    fn granted(store: &Store, episode: &'static str, refs: Vec<Ref>) {
        store
            .write(move |w| grant_stored(w, episode, refs.iter().copied()))
            .unwrap();
    }

    #[test]
    fn an_invocation_id_names_its_episode_between_its_surface_and_its_task() {
        assert_eq!(episode_of(b"mcp:demo:write-1"), Some("demo"));
        assert_eq!(episode_of(b"a2a:ep-2:task:with:colons"), Some("ep-2"));
        assert_eq!(episode_of(b"mcp:demo"), None);
        assert_eq!(episode_of(b"genesis"), None);
        // An operator's commit ids split the same way, and name no episode's call.
        assert_eq!(episode_of(b"rest:demo:x"), None);
        assert_eq!(episode_of(b"commit:ops:0a1b"), None);
    }

    /// Attack (an operator reading `worldd usage` to find who filled the store): operator
    /// commits journaled as `rest:demo:x` (and `commit:ops:<hash>`, without an id) were
    /// counted as calls of episodes `demo` and `ops`, which made none. Only the agent's call
    /// counts.
    #[test]
    fn an_operator_commit_is_no_call_of_the_episode_its_id_seems_to_name() {
        use crate::commit::{self, CommitGrant};
        use crate::task::{self, TaskPhase, TaskState};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let grant = CommitGrant {
            episode: "ops".into(),
            budget: 5,
        };
        let c = commit::tests::commit_on_head(&store, Some("rest:demo:x"), 1);
        commit::rest_commit(&store, c, &grant).unwrap();
        let c = commit::tests::commit_on_head(&store, None, 2);
        commit::rest_commit(&store, c, &grant).unwrap();
        let pending = TaskState {
            invocation_id: "mcp:agent:t1".into(),
            skill_id: "ailang-read".into(),
            input_ref: Ref::of(b"{}"),
            phase: TaskPhase::Pending,
            output_ref: None,
            entry_index: None,
            world_ref: None,
            effect_records: vec![],
        };
        store
            .write(move |w| task::put(w, "agent", "mcp:t1", &pending))
            .unwrap();
        let held = store.read(holdings).unwrap();
        assert_eq!(
            held,
            [Holding {
                episode: "agent".into(),
                calls: 1,
                ..Holding::default()
            }]
        );
    }

    /// Held bytes count every object an episode holds; own bytes only those nobody else
    /// holds; grants merged into `readers` and those still waiting count alike; public objects
    /// count for nobody.
    #[test]
    fn each_episode_holds_its_objects_and_owns_those_nobody_else_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let object = |tag: String, bytes: usize| {
            Object::new(
                "world/test-private/v1",
                "test",
                format!("{tag}{}", "x".repeat(bytes)).into_bytes(),
            )
        };
        // Enough small objects for the filler that its grants are merged out of the tail.
        let small: Vec<Object> = (0..READERS_MERGE_AT as usize + 10)
            .map(|i| object(format!("small-{i}-"), 10))
            .collect();
        let big: Vec<Object> = (0..3)
            .map(|i| object(format!("big-{i}-"), 200_000))
            .collect();
        let shared = object("shared-".into(), 50_000);
        let public = Object::new(
            crate::object::sid::TRANSITION,
            "test",
            b"{\"t\":1}".to_vec(),
        );
        let small_refs = stored(&store, &small);
        let big_refs = stored(&store, &big);
        let shared_ref = stored(&store, std::slice::from_ref(&shared))[0];
        let public_ref = stored(&store, &[public])[0];
        granted(&store, "filler", small_refs);
        granted(&store, "filler", vec![shared_ref, public_ref]);
        granted(&store, "hoarder", big_refs.clone());
        granted(&store, "hoarder", vec![shared_ref, big_refs[0]]);
        granted(&store, "quiet", vec![shared_ref]);
        let held = store.read(holdings).unwrap();
        // A stored row is the object's ref and its envelope.
        let row = |o: &Object| -> u64 {
            store
                .read(|r| {
                    let (_, envelope) = crate::objects::object_row(r, &o.hash)?.unwrap();
                    Ok::<_, StoreError>(32 + envelope.len() as u64)
                })
                .unwrap()
        };
        let shared_bytes = row(&shared);
        let big_bytes: u64 = big.iter().map(row).sum();
        let small_bytes: u64 = small.iter().map(row).sum();
        assert_eq!(
            held,
            [
                Holding {
                    episode: "hoarder".into(),
                    calls: 0,
                    objects: 4,
                    bytes: big_bytes + shared_bytes,
                    own_objects: 3,
                    own_bytes: big_bytes,
                },
                Holding {
                    episode: "filler".into(),
                    calls: 0,
                    objects: small.len() as u64 + 1,
                    bytes: small_bytes + shared_bytes,
                    own_objects: small.len() as u64,
                    own_bytes: small_bytes,
                },
                Holding {
                    episode: "quiet".into(),
                    calls: 0,
                    objects: 1,
                    bytes: shared_bytes,
                    own_objects: 0,
                    own_bytes: 0,
                },
            ]
        );
        assert!(
            big_bytes > 300_000 && shared_bytes > 50_000,
            "{big_bytes} {shared_bytes}"
        );
    }
}
