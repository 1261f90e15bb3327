//! Sessions: credentials, episodes, grants and expiry.
//!
//! A credential is 32 random bytes shown once as 64 lowercase hex digits; the store keeps only
//! `credential_id = hex(sha256(hex text))`. A session is valid while `now <= expiresAt`; its
//! grants are live while `now < expiresAt` (so at the expiry second calls are `denied:expired`).
//! Budgets belong to the episode, not the session: a fresh credential does not refill them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::broker::Capability;
use crate::canon;
use crate::grant::Grant;
use crate::schema::SESSIONS;
use crate::storage::{shown_bytes, ReadCtx, Store, StoreError};

/// The longest lifetime a credential may be minted with: ten years of 365 days. Far enough
/// for any deployment, and near enough that its expiry stays a plain date (and well within
/// the integers a record's canonical JSON holds exactly).
pub const MAX_TTL_SECS: i64 = 10 * 365 * 86_400;

/// How many decoded sessions a [`SessionCache`] keeps before it starts over.
pub const CACHED_SESSIONS: usize = 1024;

/// How many bytes of session records a [`SessionCache`] keeps before it starts over; a record
/// larger than this is decoded on every request instead.
pub const CACHED_SESSION_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid episode {0:?}: want ^[a-z0-9][a-z0-9-]{{0,63}}$")]
    InvalidEpisode(String),
    #[error("at least one --grant is required")]
    NoGrants,
    #[error("--ttl must be at least 1 second")]
    InvalidTtl,
    #[error("--ttl {0} is too long: at most {MAX_TTL_SECS} seconds (ten years)")]
    TtlTooLong(i64),
    /// Two grants of one effect and scope: the broker would take the first that allows a call
    /// and budget reports would list both, so the record would misreport what is left.
    #[error("two grants of {effect} at scope {scope} ({first} and {second}): give each effect and scope once")]
    DuplicateGrant {
        effect: String,
        scope: String,
        first: u64,
        second: u64,
    },
    /// A session being made that has no canonical form (an expiry or budget beyond what
    /// canonical JSON holds): nothing was stored.
    #[error("cannot store the session being minted: {0}")]
    Unencodable(String),
    #[error("the system random source failed: {0}")]
    Random(String),
    #[error("session record {0} is damaged")]
    Corrupt(String),
}

/// Why a request's credential was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("session credential is absent")]
    Absent,
    #[error("malformed Authorization header")]
    Malformed,
    #[error("unknown session credential")]
    Unknown,
    #[error("session credential has expired")]
    Expired,
}

/// One minted session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub credential_id: String,
    pub episode: String,
    pub grants: Vec<Grant>,
    pub created_at: i64,
    pub expires_at: i64,
    /// An operator credential reads every episode's objects and is the only kind that may
    /// commit through `POST /v1/commit`. Absent (false) in agents' session records.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator: bool,
}

impl Session {
    /// Valid while `now <= expiresAt`.
    pub fn is_valid(&self, now: i64) -> bool {
        now <= self.expires_at
    }

    /// The session's grants as capabilities, budgets reduced by the episode's spend.
    pub fn capabilities(
        &self,
        spent: &std::collections::BTreeMap<(String, String), u64>,
    ) -> Vec<Capability<'_>> {
        self.grants
            .iter()
            .map(|g| Capability {
                effect: &g.effect,
                scope: &g.scope,
                // A scan, not a keyed lookup: the map's keys are owned pairs, and an episode
                // spends on few effects.
                budget: g.budget.saturating_sub(
                    spent
                        .iter()
                        .find(|((e, s), _)| *e == g.effect && *s == g.scope)
                        .map_or(0, |(_, n)| *n),
                ),
                expires_at: self.expires_at,
            })
            .collect()
    }

    /// True when some grant has this effect and scope: visibility and admission of a
    /// transition's `access`. Budget does not matter for visibility, and liveness is the
    /// broker's to judge (at the expiry second the session is still valid but its grants are
    /// not live, so the call is recorded as `denied:expired`).
    pub fn grants_access(&self, effect: &str, scope: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.effect == effect && g.scope == scope)
    }
}

/// A freshly minted credential: the token is shown once and never stored.
#[derive(Debug, Clone)]
pub struct Minted {
    pub token: String,
    pub session: Session,
}

/// `^[a-z0-9][a-z0-9-]{0,63}$`
pub fn validate_episode(episode: &str) -> Result<(), SessionError> {
    let b = episode.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(SessionError::InvalidEpisode(episode.to_owned()))
    }
}

/// `hex(sha256(token text))`, the text in lower case: hex is read without regard to case, and
/// a credential copied in upper case (every shape check takes it) was otherwise another text,
/// "unknown" everywhere, its holder told to mint a new one. Minted credentials are lower case,
/// so their ids are as they were.
pub fn credential_id(token: &str) -> String {
    if token.bytes().any(|b| b.is_ascii_uppercase()) {
        return lower_hex(&Sha256::digest(token.to_ascii_lowercase().as_bytes()));
    }
    lower_hex(&Sha256::digest(token.as_bytes()))
}

/// `bytes` in lowercase hex, as `hex::encode` writes them, into one buffer (`hex::encode`
/// collects characters one at a time: every request's credential id is one).
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    let mut text = vec![0u8; bytes.len() * 2];
    crate::object::hex_into(bytes, &mut text);
    String::from_utf8(text).unwrap_or_default()
}

/// Mint a session for `episode` valid for `ttl_secs` from `now`.
pub fn mint(
    store: &Store,
    episode: &str,
    grants: Vec<Grant>,
    ttl_secs: i64,
    now: i64,
) -> Result<Minted, SessionError> {
    if grants.is_empty() {
        return Err(SessionError::NoGrants);
    }
    mint_as(store, episode, grants, ttl_secs, now, false)
}

/// Mint an operator credential: it reads everything and, with a `World.Commit` grant, may
/// commit. `episode` names the operator's own episode (its spend is counted there); grants
/// may be empty for a read-only operator.
pub fn mint_operator(
    store: &Store,
    episode: &str,
    grants: Vec<Grant>,
    ttl_secs: i64,
    now: i64,
) -> Result<Minted, SessionError> {
    mint_as(store, episode, grants, ttl_secs, now, true)
}

fn mint_as(
    store: &Store,
    episode: &str,
    grants: Vec<Grant>,
    ttl_secs: i64,
    now: i64,
    operator: bool,
) -> Result<Minted, SessionError> {
    validate_episode(episode)?;
    if ttl_secs < 1 {
        return Err(SessionError::InvalidTtl);
    }
    if ttl_secs > MAX_TTL_SECS {
        return Err(SessionError::TtlTooLong(ttl_secs));
    }
    if let Some((a, b)) = duplicate_grant(&grants) {
        return Err(SessionError::DuplicateGrant {
            effect: a.effect.clone(),
            scope: a.scope.clone(),
            first: a.budget,
            second: b.budget,
        });
    }
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| SessionError::Random(e.to_string()))?;
    let token = lower_hex(&raw);
    let session = Session {
        credential_id: credential_id(&token),
        episode: episode.to_owned(),
        grants,
        created_at: now,
        expires_at: now.saturating_add(ttl_secs),
        operator,
    };
    let bytes = encode(&session)?;
    let id = session.credential_id.clone();
    store.write(move |w| -> Result<(), StoreError> { SESSIONS.put(w, &id, &bytes) })?;
    Ok(Minted { token, session })
}

/// The first two grants of one effect and scope, if any. Records minted before this check
/// may hold such a pair; they are still read (the broker takes the first grant that allows).
pub fn duplicate_grant(grants: &[Grant]) -> Option<(&Grant, &Grant)> {
    grants.iter().enumerate().find_map(|(i, a)| {
        grants[i + 1..]
            .iter()
            .find(|b| b.effect == a.effect && b.scope == a.scope)
            .map(|b| (a, b))
    })
}

/// A record being written: failing here is a session that cannot be stored, not damage.
fn encode(s: &Session) -> Result<Vec<u8>, SessionError> {
    let v = serde_json::to_value(s).map_err(|e| SessionError::Unencodable(e.to_string()))?;
    canon::to_vec(&v).map_err(|e| SessionError::Unencodable(e.to_string()))
}

/// The record stored under credential id `id`. One that names another credential than its key
/// (a record copied or restored under the wrong key) is damaged, as one that does not parse:
/// taken at its word, revoking it by the id it names removed another, live credential, and
/// left it in place.
fn decode(id: &str, bytes: &[u8]) -> Result<Session, SessionError> {
    canon::parse(bytes)
        .ok()
        .and_then(|v| serde_json::from_value::<Session>(v).ok())
        .filter(|s| s.credential_id == id)
        .ok_or_else(|| SessionError::Corrupt(id.to_owned()))
}

/// Parse an `Authorization` header value: exactly two space/tab separated fields, the scheme
/// `Bearer` (in any letter case, as RFC 9110 11.1 makes schemes) and 64 hex digits. Returns
/// the token text.
pub fn parse_authorization(header: Option<&str>) -> Result<&str, AuthError> {
    let Some(h) = header else {
        return Err(AuthError::Absent);
    };
    let mut fields = h.split([' ', '\t']).filter(|f| !f.is_empty());
    match (fields.next(), fields.next(), fields.next()) {
        (Some(scheme), Some(token), None)
            if scheme.eq_ignore_ascii_case("Bearer") && is_64_hex(token) =>
        {
            Ok(token)
        }
        _ => Err(AuthError::Malformed),
    }
}

/// Resolve a request's `Authorization` header to a valid session.
pub fn authenticate(
    store: &Store,
    header: Option<&str>,
    now: i64,
) -> Result<Session, AuthenticateError> {
    authenticated(header, now, |id| lookup(store, id))
}

/// The checks every authentication makes around `find`, which reads the session of a
/// credential id: the header's shape, an unknown credential, expiry.
fn authenticated<S: std::borrow::Borrow<Session>>(
    header: Option<&str>,
    now: i64,
    find: impl FnOnce(&str) -> Result<Option<S>, SessionError>,
) -> Result<S, AuthenticateError> {
    let token = parse_authorization(header)?;
    let session = find(&credential_id(token))?.ok_or(AuthError::Unknown)?;
    if !session.borrow().is_valid(now) {
        return Err(AuthError::Expired.into());
    }
    Ok(session)
}

/// Sessions already decoded, so that a request whose credential was seen before is not parsed
/// again.
///
/// The store stays the authority: every lookup still reads the session's record, and a cached
/// session is used only while that record's bytes are exactly the ones it was decoded from. A
/// revoked credential (no record) or a record written again is seen on the very next request,
/// as without the cache.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = broker_core::store::Store::create(&dir.path().join("db")).unwrap();
/// use broker_core::session::{self, SessionCache};
///
/// let minted = session::mint(&store, "ep1", vec!["Fs.Read=worktree:5".parse().unwrap()], 60, 0).unwrap();
/// let header = format!("Bearer {}", minted.token);
/// let cache = SessionCache::default();
/// let first = cache.authenticate(&store, Some(&header), 1).unwrap();
/// let again = cache.authenticate(&store, Some(&header), 2).unwrap();
/// assert!(std::sync::Arc::ptr_eq(&first, &again));
///
/// session::revoke(&store, &minted.session.credential_id).unwrap();
/// assert!(cache.authenticate(&store, Some(&header), 3).is_err());
/// ```
#[derive(Debug)]
pub struct SessionCache {
    kept: Mutex<Kept>,
    bound: usize,
    bound_bytes: usize,
}

#[derive(Debug, Default)]
struct Kept {
    decoded: HashMap<String, Decoded>,
    /// The records' bytes, summed.
    bytes: usize,
}

impl Default for SessionCache {
    fn default() -> Self {
        SessionCache::new(CACHED_SESSIONS, CACHED_SESSION_BYTES)
    }
}

#[derive(Debug)]
struct Decoded {
    record: Box<[u8]>,
    session: Arc<Session>,
}

impl SessionCache {
    /// A cache of at most `bound` sessions whose records hold at most `bound_bytes` bytes.
    pub fn new(bound: usize, bound_bytes: usize) -> SessionCache {
        SessionCache {
            kept: Mutex::new(Kept::default()),
            bound: bound.max(1),
            bound_bytes,
        }
    }

    /// How many decoded sessions are kept now.
    pub fn len(&self) -> usize {
        self.kept().decoded.len()
    }

    /// How many bytes of records the kept sessions were decoded from.
    pub fn bytes(&self) -> usize {
        self.kept().bytes
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A poisoned lock only means a panic elsewhere mid-insert: the map is still sound.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`authenticate`], with the decoded session shared rather than built again.
    pub fn authenticate(
        &self,
        store: &Store,
        header: Option<&str>,
        now: i64,
    ) -> Result<Arc<Session>, AuthenticateError> {
        authenticated(header, now, |id| self.current(store, id))
    }

    /// The session whose credential id is `id` as its record is now, `None` once revoked: for
    /// a request authenticated earlier that waited (a call queued behind its episode's running
    /// call), which must not outlive a revocation made meanwhile.
    pub fn current(&self, store: &Store, id: &str) -> Result<Option<Arc<Session>>, SessionError> {
        store.read(|r: &ReadCtx<'_>| -> Result<_, SessionError> {
            match SESSIONS.get(r, id)? {
                None => Ok(None),
                Some(record) => self.decoded(id, record).map(Some),
            }
        })
    }

    fn decoded(&self, id: &str, record: &[u8]) -> Result<Arc<Session>, SessionError> {
        if let Some(d) = self.kept().decoded.get(id) {
            if *d.record == *record {
                return Ok(d.session.clone());
            }
        }
        // Parsed without the lock, so that other requests' hits do not wait for it.
        let session = Arc::new(decode(id, record)?);
        if record.len() > self.bound_bytes {
            return Ok(session);
        }
        let mut kept = self.kept();
        if let Some(old) = kept.decoded.remove(id) {
            kept.bytes -= old.record.len();
        }
        // Only minted credentials reach here, so the bounds are for a deployment with very
        // many (or very large) live sessions: starting over costs one parse per credential.
        if kept.decoded.len() >= self.bound || kept.bytes + record.len() > self.bound_bytes {
            kept.decoded.clear();
            kept.bytes = 0;
        }
        kept.bytes += record.len();
        kept.decoded.insert(
            id.to_owned(),
            Decoded {
                record: record.into(),
                session: session.clone(),
            },
        );
        Ok(session)
    }
}

/// Authentication failure: a refusal, or the store failing underneath.
#[derive(Debug, thiserror::Error)]
pub enum AuthenticateError {
    #[error(transparent)]
    Denied(#[from] AuthError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SessionError> for AuthenticateError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Store(s) => AuthenticateError::Store(s),
            // A damaged row is indistinguishable from no session for the caller.
            _ => AuthenticateError::Denied(AuthError::Unknown),
        }
    }
}

/// The session with this credential id.
pub fn lookup(store: &Store, credential_id: &str) -> Result<Option<Session>, SessionError> {
    store.read(|r: &ReadCtx<'_>| -> Result<_, SessionError> {
        match SESSIONS.get(r, credential_id)? {
            None => Ok(None),
            Some(b) => decode(credential_id, b).map(Some),
        }
    })
}

/// Session records as listed: the readable ones, and the credential ids of damaged ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub sessions: Vec<Session>,
    /// Records that do not decode, by credential id (quoted and escaped when the key is not
    /// 64 hex digits). Such a record authenticates nothing; `revoke` by its id removes it.
    pub damaged: Vec<String>,
}

/// Every session record, ordered by credential id. A damaged record does not hide the rest:
/// it is listed by its id in [`Listing::damaged`]. Never cut short: the list is how an operator
/// audits credentials (records stay after they expire, so a store in use for long holds many),
/// and one stopped at 500 hid live ones, operator credentials among them, behind a wrong total.
pub fn list(store: &Store) -> Result<Listing, SessionError> {
    read_all(store, usize::MAX)
}

/// Every record, readable or not, up to `most`.
fn read_all(store: &Store, most: usize) -> Result<Listing, SessionError> {
    store.read(|r: &ReadCtx<'_>| -> Result<_, SessionError> {
        let mut out = Listing::default();
        for item in SESSIONS.raw().iter(r)? {
            if out.sessions.len() + out.damaged.len() >= most {
                break;
            }
            let (id, b) = item?;
            match std::str::from_utf8(id).map(|text| (text, decode(text, b))) {
                Ok((_, Ok(s))) => out.sessions.push(s),
                Ok((text, Err(_))) if is_64_hex(text) => out.damaged.push(text.to_owned()),
                _ => out.damaged.push(shown_bytes(id)),
            }
        }
        Ok(out)
    })
}

/// What [`audit`] found in the session records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionAudit {
    /// Records read.
    pub records: u64,
    /// Records that do not decode (they authenticate nothing), each by its credential id.
    pub damaged: Vec<String>,
    /// Readable records that hold two grants of one effect and scope, minted before such
    /// sessions were refused: they work, but their budgets read oddly. Not inconsistencies.
    pub doubled: Vec<String>,
}

/// Every session record (`worldd doctor`).
pub fn audit(r: &ReadCtx<'_>) -> Result<SessionAudit, StoreError> {
    let mut out = SessionAudit::default();
    for item in SESSIONS.raw().iter(r)? {
        let (id, b) = item?;
        out.records += 1;
        let shown = match std::str::from_utf8(id) {
            Ok(text) if is_64_hex(text) => text.to_owned(),
            _ => shown_bytes(id),
        };
        match decode(&shown, b) {
            Err(_) => out.damaged.push(format!(
                "session record {shown} is damaged: it does not decode and authenticates nothing (`worldd session revoke {shown}` removes it)"
            )),
            Ok(s) => {
                if let Some((a, _)) = duplicate_grant(&s.grants) {
                    out.doubled.push(format!(
                        "session {shown} (episode {}) holds two grants of {}@{}, minted before such sessions were refused; revoke it and mint one grant per effect and scope",
                        s.episode, a.effect, a.scope
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// A token or a credential id: 64 hex digits.
pub fn is_64_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Delete one session; false when there was none.
pub fn revoke(store: &Store, credential_id: &str) -> Result<bool, SessionError> {
    let id = credential_id.to_owned();
    Ok(store.write(move |w| -> Result<bool, StoreError> {
        // "No such session" is only true once the store is durable: a revoke sent again after
        // its sync failed finds the record gone and deletes nothing, and must still be told
        // the deletion is not yet durable.
        w.answer_as_written();
        SESSIONS.delete(w, &id)
    })?)
}

/// Delete every session of an episode; returns their credential ids.
pub fn revoke_episode(store: &Store, episode: &str) -> Result<Vec<String>, SessionError> {
    // A damaged record names no episode, and authenticates nothing: it is left to `revoke` by
    // its id, and does not stop revoking the rest.
    let ids: Vec<String> = read_all(store, usize::MAX)?
        .sessions
        .into_iter()
        .filter(|s| s.episode == episode)
        .map(|s| s.credential_id)
        .collect();
    let del = ids.clone();
    store.write(move |w| -> Result<(), StoreError> {
        // Sent again after its sync failed, it finds nothing left to delete: still told that
        // the deletions are not yet durable, as `revoke` is.
        w.answer_as_written();
        for id in &del {
            SESSIONS.delete(w, id)?;
        }
        Ok(())
    })?;
    Ok(ids)
}

/// Delete every session expired at `now` (Unix seconds) and return them, in credential-id
/// order. An expired credential authenticates nothing, but its record stays until it is
/// revoked, and a store that mints a credential per run gathers them for good. Chosen and
/// deleted in one transaction; a damaged record is left to `revoke` by its id.
pub fn revoke_expired(store: &Store, now: i64) -> Result<Vec<Session>, SessionError> {
    store.write(move |w| -> Result<Vec<Session>, SessionError> {
        // As `revoke_episode`: none left to delete, after a failed sync, is not yet durable.
        w.answer_as_written();
        let mut expired = Vec::new();
        for item in SESSIONS.raw().iter(&w.reader())? {
            let (id, b) = item?;
            let Ok(id) = std::str::from_utf8(id) else {
                continue;
            };
            match decode(id, b) {
                Ok(s) if !s.is_valid(now) => expired.push(s),
                _ => {}
            }
        }
        // By the key each was read under (which `decode` holds equal to its credential id).
        for s in &expired {
            SESSIONS.delete(w, &s.credential_id)?;
        }
        Ok(expired)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_written_as_the_hex_crate_writes_it() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        assert_eq!(lower_hex(&bytes), hex::encode(&bytes));
        assert_eq!(lower_hex(&[]), "");
        let token = "ab".repeat(32);
        assert_eq!(
            credential_id(&token),
            hex::encode(Sha256::digest(token.as_bytes()))
        );
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        (dir, store)
    }

    fn grant(text: &str) -> Grant {
        text.parse().unwrap()
    }

    /// A record that decodes but names another credential than the key it is stored under (a
    /// record copied or restored under the wrong key) was taken at its word: `revoke
    /// --expired` deleted the live credential it named and kept itself, saying "revoked" on
    /// every run. It is damaged: listed as such, authenticating nothing, left to `revoke` by
    /// its key.
    #[test]
    fn a_record_naming_another_credential_than_its_key_is_damaged_and_revokes_nothing_else() {
        let (_dir, store) = store();
        let live = mint(&store, "a", vec![grant("Fs.Read=worktree:5")], 3600, 100).unwrap();
        let mut stray = live.session.clone();
        stray.expires_at = 50;
        let key = "e".repeat(64);
        let bytes = encode(&stray).unwrap();
        let k = key.clone();
        store.write(move |w| SESSIONS.put(w, &k, &bytes)).unwrap();
        assert!(matches!(
            lookup(&store, &key),
            Err(SessionError::Corrupt(_))
        ));
        let listed = list(&store).unwrap();
        assert_eq!(listed.damaged, std::slice::from_ref(&key));
        assert_eq!(listed.sessions, std::slice::from_ref(&live.session));
        assert!(revoke_expired(&store, 200).unwrap().is_empty());
        assert_eq!(
            lookup(&store, &live.session.credential_id).unwrap(),
            Some(live.session.clone())
        );
        // Removed by its key, as damaged records are.
        assert!(revoke(&store, &key).unwrap());
        assert_eq!(list(&store).unwrap().damaged, Vec::<String>::new());
    }

    /// A revoke whose sync failed was answered not durable; sent again while syncs still
    /// failed, it found the record gone, deleted nothing and was answered "no such session",
    /// though the deletion could still be taken back. It is answered not durable until a sync
    /// succeeds.
    #[test]
    fn a_revoke_sent_again_while_syncs_fail_is_answered_not_durable() {
        let (_dir, store) = store();
        let m = mint(&store, "ep", vec![grant("Fs.Read=worktree:5")], 3600, 100).unwrap();
        let id = m.session.credential_id.clone();
        let eio = || StoreError::Io("Input/output error (os error 5)".into());
        store.stats().faults.fail_sync(eio());
        let first = revoke(&store, &id);
        assert!(
            matches!(&first, Err(SessionError::Store(e)) if e.committed_not_durable()),
            "{first:?}"
        );
        store.stats().faults.fail_sync(eio());
        let again = revoke(&store, &id);
        assert!(
            matches!(&again, Err(SessionError::Store(e)) if e.committed_not_durable()),
            "{again:?}"
        );
        // Synced at last: the session is gone, durably.
        assert!(!revoke(&store, &id).unwrap());
        assert_eq!(lookup(&store, &id).unwrap(), None);
    }

    /// `revoke_episode` and `revoke_expired` sent again while syncs fail find nothing left to
    /// delete: answered not durable, not an empty list that reads as "nothing was there".
    #[test]
    fn revoking_an_episode_or_the_expired_again_while_syncs_fail_is_answered_not_durable() {
        let (_dir, store) = store();
        mint(&store, "ep", vec![grant("Fs.Read=worktree:5")], 3600, 100).unwrap();
        mint(&store, "old", vec![grant("Fs.Read=worktree:5")], 10, 100).unwrap();
        let eio = || StoreError::Io("Input/output error (os error 5)".into());
        fn not_durable<T>(r: &Result<T, SessionError>) -> bool {
            matches!(r, Err(SessionError::Store(e)) if e.committed_not_durable())
        }
        for _ in 0..2 {
            store.stats().faults.fail_sync(eio());
            let r = revoke_episode(&store, "ep");
            assert!(not_durable(&r), "{r:?}");
            store.stats().faults.fail_sync(eio());
            let r = revoke_expired(&store, 200);
            assert!(not_durable(&r), "{r:?}");
        }
        // Synced at last: both gone, durably, and nothing is left to revoke.
        assert_eq!(revoke_episode(&store, "ep").unwrap(), Vec::<String>::new());
        assert!(revoke_expired(&store, 200).unwrap().is_empty());
        assert!(read_all(&store, usize::MAX).unwrap().sessions.is_empty());
    }

    #[test]
    fn a_cached_session_follows_its_record_revoked_rewritten_damaged_or_expired() {
        let (_dir, store) = store();
        let cache = SessionCache::default();
        let m = mint(&store, "ep1", vec![grant("Fs.Read=worktree:5")], 60, 100).unwrap();
        let header = format!("Bearer {}", m.token);
        let first = cache.authenticate(&store, Some(&header), 100).unwrap();
        assert_eq!(*first, m.session);
        let again = cache.authenticate(&store, Some(&header), 101).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second request is not decoded again"
        );

        // Expiry is judged on every request, cached or not.
        let err = cache.authenticate(&store, Some(&header), 161).unwrap_err();
        assert!(matches!(err, AuthenticateError::Denied(AuthError::Expired)));

        // A record written again (here: other grants) is decoded again.
        let id = m.session.credential_id.clone();
        let changed = Session {
            grants: vec![grant("Fs.Write=worktree:1")],
            ..m.session.clone()
        };
        let bytes = encode(&changed).unwrap();
        let key = id.clone();
        store
            .write(move |w| -> Result<(), StoreError> { SESSIONS.put(w, &key, &bytes) })
            .unwrap();
        let now = cache.authenticate(&store, Some(&header), 102).unwrap();
        assert_eq!(*now, changed);

        // A damaged record authenticates nothing, though a good one was cached.
        let key = id.clone();
        store
            .write(move |w| -> Result<(), StoreError> { SESSIONS.put(w, &key, b"{not json") })
            .unwrap();
        let err = cache.authenticate(&store, Some(&header), 103).unwrap_err();
        assert!(matches!(err, AuthenticateError::Denied(AuthError::Unknown)));

        // Revoked: unknown on the very next request.
        assert!(revoke(&store, &id).unwrap());
        let err = cache.authenticate(&store, Some(&header), 104).unwrap_err();
        assert!(matches!(err, AuthenticateError::Denied(AuthError::Unknown)));
    }

    #[test]
    fn the_session_cache_starts_over_past_its_bound() {
        let (_dir, store) = store();
        let cache = SessionCache::new(2, CACHED_SESSION_BYTES);
        let minted: Vec<Minted> = (0..3)
            .map(|i| {
                mint(
                    &store,
                    &format!("ep{i}"),
                    vec![grant("Fs.Read=worktree:5")],
                    60,
                    0,
                )
                .unwrap()
            })
            .collect();
        for (i, m) in minted.iter().enumerate() {
            let header = format!("Bearer {}", m.token);
            let s = cache.authenticate(&store, Some(&header), 1).unwrap();
            assert_eq!(s.episode, format!("ep{i}"));
            assert!(cache.len() <= 2, "{} sessions kept", cache.len());
        }
        // The third started the map over: it alone is kept, and the first still authenticates.
        assert_eq!(cache.len(), 1);
        let header = format!("Bearer {}", minted[0].token);
        assert_eq!(
            cache
                .authenticate(&store, Some(&header), 1)
                .unwrap()
                .episode,
            "ep0"
        );
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn the_session_cache_starts_over_past_its_bytes_and_keeps_no_record_over_them() {
        let (_dir, store) = store();
        let minted: Vec<Minted> = (0..3)
            .map(|i| {
                let grants = (0..=i)
                    .map(|n| grant(&format!("Fs.Read=worktree-{n}:5")))
                    .collect();
                mint(&store, &format!("ep{i}"), grants, 60, 0).unwrap()
            })
            .collect();
        let size = |m: &Minted| encode(&m.session).unwrap().len();
        let header = |m: &Minted| format!("Bearer {}", m.token);

        // Room for the first two records: the third starts the cache over.
        let cache = SessionCache::new(CACHED_SESSIONS, size(&minted[0]) + size(&minted[1]));
        cache
            .authenticate(&store, Some(&header(&minted[0])), 1)
            .unwrap();
        cache
            .authenticate(&store, Some(&header(&minted[1])), 1)
            .unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.bytes(), size(&minted[0]) + size(&minted[1]));
        let third = cache
            .authenticate(&store, Some(&header(&minted[2])), 1)
            .unwrap();
        assert_eq!(third.grants.len(), 3);
        assert_eq!((cache.len(), cache.bytes()), (1, size(&minted[2])));

        // A record larger than the bound is decoded on every request and never kept.
        let small = SessionCache::new(CACHED_SESSIONS, size(&minted[2]) - 1);
        let a = small
            .authenticate(&store, Some(&header(&minted[2])), 1)
            .unwrap();
        let b = small
            .authenticate(&store, Some(&header(&minted[2])), 1)
            .unwrap();
        assert_eq!(a, b);
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(small.is_empty());
        assert_eq!(small.bytes(), 0);
    }

    #[test]
    fn the_data_model_page_gives_the_cache_bound() {
        let page = include_str!("../../docs/data-model.md");
        let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
        let bound = format!("{},{:03}", CACHED_SESSIONS / 1000, CACHED_SESSIONS % 1000);
        let mib = CACHED_SESSION_BYTES >> 20;
        let said = format!(
            "(up to {bound}, and up to {mib} MiB of their records, \
             `broker_core::session::SessionCache`;"
        );
        assert!(
            page.contains(&said),
            "docs/data-model.md §7 should say {said:?}"
        );
    }

    #[test]
    fn episodes_follow_the_grammar() {
        for ok in ["a", "ep1", "0", "a-b-c", &"a".repeat(64)] {
            validate_episode(ok).unwrap();
        }
        for bad in ["", "-a", "A", "a_b", "a.b", "é", &"a".repeat(65), "a b"] {
            assert!(validate_episode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn authorization_header_shapes() {
        let t = "ab".repeat(32);
        assert_eq!(parse_authorization(None), Err(AuthError::Absent));
        assert_eq!(
            parse_authorization(Some(&format!("Bearer {t}"))),
            Ok(t.as_str())
        );
        assert_eq!(
            parse_authorization(Some(&format!("Bearer\t {t} "))),
            Ok(t.as_str())
        );
        // The scheme's letter case is free (RFC 9110 11.1); `bearer` was refused as malformed.
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            assert_eq!(
                parse_authorization(Some(&format!("{scheme} {t}"))),
                Ok(t.as_str())
            );
        }
        for bad in [
            String::new(),
            format!("bearers {t}"),
            format!("Bearer {t} x"),
            format!("Bearer {}", &t[1..]),
            format!("Bearer {}g", &t[1..]),
            "Bearer".to_string(),
            format!("Basic {t}"),
        ] {
            assert_eq!(
                parse_authorization(Some(&bad)),
                Err(AuthError::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn operator_flag_round_trips_and_is_absent_from_agent_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let agent = mint(
            &store,
            "ep1",
            vec!["Workspace.Read=worktree:1".parse().unwrap()],
            60,
            0,
        )
        .unwrap();
        let op = mint_operator(&store, "ops", Vec::new(), 60, 0).unwrap();
        assert!(
            !lookup(&store, &agent.session.credential_id)
                .unwrap()
                .unwrap()
                .operator
        );
        assert!(
            lookup(&store, &op.session.credential_id)
                .unwrap()
                .unwrap()
                .operator
        );
        // Agent records keep the shape they had before the flag existed.
        assert!(!String::from_utf8(encode(&agent.session).unwrap())
            .unwrap()
            .contains("operator"));
        assert!(matches!(
            mint(&store, "ep1", Vec::new(), 60, 0),
            Err(SessionError::NoGrants)
        ));
    }

    #[test]
    fn two_grants_of_one_effect_and_scope_are_not_minted_but_an_old_record_holding_them_reads() {
        let (_dir, store) = store();
        let dup = vec![
            grant("Workspace.Read=worktree:1"),
            grant("Workspace.Write=worktree:2"),
            grant("Workspace.Read=worktree:4"),
        ];
        for operator in [false, true] {
            let made = if operator {
                mint_operator(&store, "dup", dup.clone(), 60, 0)
            } else {
                mint(&store, "dup", dup.clone(), 60, 0)
            };
            let err = made.unwrap_err();
            assert!(
                matches!(&err, SessionError::DuplicateGrant { effect, scope, first: 1, second: 4 }
                    if effect == "Workspace.Read" && scope == "worktree"),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                "two grants of Workspace.Read at scope worktree (1 and 4): give each effect and scope once"
            );
        }
        assert!(list(&store).unwrap().sessions.is_empty(), "nothing stored");
        // The same effect at another scope is another grant.
        mint(
            &store,
            "two",
            vec![grant("Fs.Read=a:1"), grant("Fs.Read=b:1")],
            60,
            0,
        )
        .unwrap();

        // A record written before the check still authenticates and lists.
        let m = mint(
            &store,
            "old",
            vec![grant("Workspace.Read=worktree:1")],
            60,
            0,
        )
        .unwrap();
        let old = Session {
            grants: dup,
            ..m.session.clone()
        };
        let bytes = encode(&old).unwrap();
        let key = old.credential_id.clone();
        store
            .write(move |w| -> Result<(), StoreError> { SESSIONS.put(w, &key, &bytes) })
            .unwrap();
        assert_eq!(lookup(&store, &old.credential_id).unwrap(), Some(old));
        assert!(list(&store).unwrap().damaged.is_empty());
    }

    #[test]
    fn a_ttl_past_ten_years_is_refused_and_a_session_that_cannot_be_stored_is_not_called_damaged() {
        let (_dir, store) = store();
        let g = || vec![grant("Fs.Read=worktree:5")];
        mint(&store, "ep", g(), MAX_TTL_SECS, 1_700_000_000).unwrap();
        let err = mint(&store, "ep", g(), MAX_TTL_SECS + 1, 1_700_000_000).unwrap_err();
        assert!(matches!(err, SessionError::TtlTooLong(t) if t == MAX_TTL_SECS + 1));
        assert_eq!(
            err.to_string(),
            "--ttl 315360001 is too long: at most 315360000 seconds (ten years)"
        );
        // A budget no parse would give, or a clock past canonical JSON's integers: the
        // session cannot be written, which is said as such.
        let huge = vec![Grant {
            effect: "Fs.Read".into(),
            scope: "worktree".into(),
            budget: canon::MAX_SAFE_INTEGER + 1,
        }];
        for err in [
            mint(&store, "huge", huge, 60, 0).unwrap_err(),
            mint(&store, "late", g(), 60, canon::MAX_SAFE_INTEGER as i64).unwrap_err(),
        ] {
            assert!(matches!(err, SessionError::Unencodable(_)), "{err:?}");
            let said = err.to_string();
            assert!(
                said.starts_with("cannot store the session being minted: number "),
                "{said}"
            );
            assert!(!said.contains("damaged"), "{said}");
        }
        assert_eq!(list(&store).unwrap().sessions.len(), 1, "only the first");
    }

    #[test]
    fn every_record_is_listed_however_many() {
        let (_dir, store) = store();
        for i in 0..520 {
            mint(
                &store,
                &format!("e{i}"),
                vec![grant("Fs.Read=worktree:1")],
                60,
                0,
            )
            .unwrap();
        }
        assert_eq!(list(&store).unwrap().sessions.len(), 520);
    }

    #[test]
    fn credential_id_hashes_the_hex_text_in_lower_case() {
        // Hex in either case is one credential: the shape check takes both.
        let t = "ab".repeat(32);
        assert_eq!(credential_id(&t), credential_id(&t.to_uppercase()));
        assert_eq!(credential_id(&t), lower_hex(&Sha256::digest(t.as_bytes())));
        assert_eq!(credential_id(&t).len(), 64);
    }
}
