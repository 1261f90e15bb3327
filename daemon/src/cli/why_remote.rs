//! `worldd why --addr`: the verifier's reads over a running daemon's REST routes.
//!
//! [`RemoteSource`] answers the questions of [`verify::Source`] with the routes each of its
//! methods names, and the walk of `broker_core::verify` runs on it unchanged: every object is
//! re-hashed against the ref it was asked by, every entry's hash and every world's ref is
//! recomputed, the plan is replayed, and the coordinator's rows of an invocation (its
//! invocation row, its intent's resolution and its journal rows, served as stored bytes by
//! `GET /v1/invocations/{id}/rows`) are decoded and cross-checked here by the same code a
//! store read uses. The daemon is trusted for nothing but availability.
//!
//! What the walk cannot see, the source remembers: a daemon that could not be asked or refused
//! the credential ([`Trouble::Unavailable`]: nothing is verified either way), one that answered
//! `200` with something that is not what the route serves ([`Trouble::Malformed`]: an integrity
//! failure), and the objects it answered as absent (another episode's record reads as absent,
//! so its entry is "not found" to this session, not broken).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use base64::Engine;
use broker_core::canon;
use broker_core::journal::JournalState;
use broker_core::object::Ref;
use broker_core::task::TaskState;
use broker_core::verify::{self, InvocationRows, SourceError, StoredObject};
use serde::Deserialize;
use serde_json::Value;

use super::client::Connection;

/// Why the remote answers cannot be taken as a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// The daemon could not be reached, refused the credential, failed, or does not serve a
    /// route the verifier needs.
    Unavailable(String),
    /// The daemon answered a read with something that is not what the route serves.
    Malformed(String),
}

/// An object as served: its semantic id and payload bytes; `None` when answered as absent.
type ServedObject = Option<(String, Vec<u8>)>;

/// One read's answer.
enum Got {
    Found(Vec<u8>),
    Absent,
}

/// A running daemon, read through its REST routes. Answers are cached for one verification:
/// the walk reads a record twice and an entry once more to check the next one's link.
pub struct RemoteSource {
    conn: Connection,
    entries: RefCell<HashMap<u64, Option<Vec<u8>>>>,
    objects: RefCell<HashMap<Ref, ServedObject>>,
    worlds: RefCell<HashMap<Ref, Option<Vec<u8>>>>,
    rows: RefCell<HashMap<String, Option<InvocationRows>>>,
    withheld: RefCell<HashSet<Ref>>,
    trouble: RefCell<Option<Trouble>>,
}

/// `GET /v1/objects/{ref}?payload=true`, the members the verifier reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectAnswer {
    hash: String,
    interface_hash: String,
    semantic_id: String,
    payload: String,
}

/// `GET /v1/invocations/{id}/rows`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RowsAnswer {
    invocation: Option<String>,
    resolution: Option<String>,
    journal_rows: BTreeMap<u64, String>,
}

fn b64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64: {e}"))
}

impl RemoteSource {
    pub fn new(conn: Connection) -> RemoteSource {
        RemoteSource {
            conn,
            entries: RefCell::default(),
            objects: RefCell::default(),
            worlds: RefCell::default(),
            rows: RefCell::default(),
            withheld: RefCell::default(),
            trouble: RefCell::default(),
        }
    }

    /// The daemon's base URL.
    pub fn base(&self) -> &str {
        self.conn.base()
    }

    /// The first reason the answers are not a verdict, if any (an unavailable daemon wins over
    /// a malformed answer: then nothing was verified at all).
    pub fn trouble(&self) -> Option<Trouble> {
        self.trouble.borrow().clone()
    }

    /// What the daemon says of a call no entry records (`GET /v1/invocations/{id}`): its
    /// `state` and `outcome.reason`, when it knows the call but has not committed it.
    pub fn uncommitted(&self, invocation_id: &str) -> Option<(String, Option<String>)> {
        let path = format!("/v1/invocations/{invocation_id}");
        let (status, body) = self.conn.send("GET", &path, None, &[]).ok()?;
        let v: Value = serde_json::from_slice(&body).ok()?;
        let state = v["state"].as_str()?;
        (status == 200 && state != "committed").then(|| {
            let reason = v["outcome"]["reason"].as_str().map(str::to_owned);
            (state.to_owned(), reason)
        })
    }

    /// Did the daemon answer this object as absent?
    pub fn withheld(&self, reference: &Ref) -> bool {
        self.withheld.borrow().contains(reference)
    }

    fn note(&self, t: Trouble) -> SourceError {
        let message = match &t {
            Trouble::Unavailable(m) | Trouble::Malformed(m) => m.clone(),
        };
        let mut slot = self.trouble.borrow_mut();
        match (&*slot, &t) {
            (None, _) | (Some(Trouble::Malformed(_)), Trouble::Unavailable(_)) => *slot = Some(t),
            _ => {}
        }
        SourceError(message)
    }

    fn malformed(&self, path: &str, why: impl std::fmt::Display) -> SourceError {
        self.note(Trouble::Malformed(format!("GET {path}: {why}")))
    }

    /// GET a route: its body on 200, `Absent` on the route's own 404.
    fn get(&self, path: &str) -> Result<Got, SourceError> {
        if let Some(Trouble::Unavailable(m)) = &*self.trouble.borrow() {
            // Asking again would only repeat the failure, once per remaining read.
            return Err(SourceError(m.clone()));
        }
        let (status, body) = self
            .conn
            .send("GET", path, None, &[])
            .map_err(|f| self.note(Trouble::Unavailable(f.message)))?;
        let envelope = || {
            serde_json::from_slice::<Value>(&body)
                .ok()
                .map(|v| {
                    (
                        v["error"]["class"].as_str().unwrap_or("Error").to_owned(),
                        v["error"]["message"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .unwrap_or_else(|| ("Error".into(), String::from_utf8_lossy(&body).into_owned()))
        };
        match status {
            200 => Ok(Got::Found(body)),
            404 => {
                let (_, message) = envelope();
                if message.starts_with("no route for ") {
                    return Err(self.note(Trouble::Unavailable(format!(
                        "the daemon at {} does not serve GET {path} (it is older than this worldd); verify its store with --db instead",
                        self.base()
                    ))));
                }
                Ok(Got::Absent)
            }
            401 | 403 => {
                let (class, message) = envelope();
                // What to do about it, as `log tail` and `budget` say it.
                let hint = super::client::credential_hint(self.base(), status, &class);
                Err(self.note(Trouble::Unavailable(format!(
                    "the daemon at {} refused the session credential: GET {path} returned HTTP {status} {class}: {message}{hint}",
                    self.base()
                ))))
            }
            _ => {
                let (class, message) = envelope();
                // A stored object the daemon found damaged and would not serve: a broken link
                // of the walk, as the same damage read from the store is, not a daemon away.
                if status == 500 && class == "Damaged" {
                    return Err(SourceError(format!(
                        "the daemon at {} does not serve it: {message}",
                        self.base()
                    )));
                }
                Err(self.note(Trouble::Unavailable(format!(
                    "GET {path} returned HTTP {status} {class}: {message}"
                ))))
            }
        }
    }

    /// A served world without its `ref` member, as canonical bytes; the `ref` must be the one
    /// asked for.
    fn world_bytes(
        &self,
        path: &str,
        reference: &Ref,
        body: &[u8],
    ) -> Result<Vec<u8>, SourceError> {
        let mut v: Value = serde_json::from_slice(body)
            .map_err(|e| self.malformed(path, format!("not JSON: {e}")))?;
        let served = v
            .as_object_mut()
            .and_then(|o| o.remove("ref"))
            .unwrap_or(Value::Null);
        if served != reference.to_string().as_str() {
            return Err(self.malformed(
                path,
                format!("the answer is the world {served}, not {reference}"),
            ));
        }
        canon::to_vec(&v).map_err(|e| self.malformed(path, e))
    }

    fn rows(&self, invocation_id: &str) -> Result<Option<InvocationRows>, SourceError> {
        if let Some(r) = self.rows.borrow().get(invocation_id) {
            return Ok(r.clone());
        }
        let path = format!(
            "/v1/invocations/{}/rows",
            super::client::segment(invocation_id)
        );
        let rows = match self.get(&path)? {
            Got::Absent => None,
            Got::Found(body) => {
                let a: RowsAnswer = serde_json::from_slice(&body)
                    .map_err(|e| self.malformed(&path, format!("not invocation rows: {e}")))?;
                let decode = |t: &String| b64(t).map_err(|e| self.malformed(&path, e));
                Some(InvocationRows {
                    invocation: a.invocation.as_ref().map(decode).transpose()?,
                    resolution: a.resolution.as_ref().map(decode).transpose()?,
                    journal_rows: a
                        .journal_rows
                        .iter()
                        .map(|(seq, t)| Ok((*seq, decode(t)?)))
                        .collect::<Result<_, SourceError>>()?,
                })
            }
        };
        self.rows
            .borrow_mut()
            .insert(invocation_id.to_owned(), rows.clone());
        Ok(rows)
    }
}

impl verify::Source for RemoteSource {
    fn entry(&self, index: u64) -> Result<Option<Cow<'_, [u8]>>, SourceError> {
        if let Some(e) = self.entries.borrow().get(&index) {
            return Ok(e.clone().map(Cow::Owned));
        }
        let path = format!("/v1/log/{index}");
        let bytes = match self.get(&path)? {
            Got::Absent => None,
            Got::Found(body) => {
                let v: Value = serde_json::from_slice(&body)
                    .map_err(|e| self.malformed(&path, format!("not JSON: {e}")))?;
                // The stored bytes are canonical; the walk parses them strictly and recomputes
                // the entry hash, so a served entry is a claim like any other.
                Some(canon::to_vec(&v).map_err(|e| self.malformed(&path, e))?)
            }
        };
        self.entries.borrow_mut().insert(index, bytes.clone());
        Ok(bytes.map(Cow::Owned))
    }

    fn object(&self, reference: &Ref) -> Result<Option<StoredObject<'_>>, SourceError> {
        let cached = self.objects.borrow().get(reference).cloned();
        let found = match cached {
            Some(o) => o,
            None => {
                let path = format!("/v1/objects/{reference}?payload=true");
                let found = match self.get(&path)? {
                    Got::Absent => {
                        self.withheld.borrow_mut().insert(*reference);
                        None
                    }
                    Got::Found(body) => {
                        let a: ObjectAnswer = serde_json::from_slice(&body)
                            .map_err(|e| self.malformed(&path, format!("not an object: {e}")))?;
                        if a.hash != reference.to_string() {
                            return Err(self.malformed(
                                &path,
                                format!("the answer is the object {}, not {reference}", a.hash),
                            ));
                        }
                        if a.interface_hash != Ref::of(a.semantic_id.as_bytes()).to_string() {
                            return Err(self.malformed(
                                &path,
                                format!(
                                    "interfaceHash {} is not the sha256 of semanticId {}",
                                    a.interface_hash, a.semantic_id
                                ),
                            ));
                        }
                        // The payload's hash is checked by the walk, against the ref it asked.
                        let payload = b64(&a.payload).map_err(|e| self.malformed(&path, e))?;
                        Some((a.semantic_id, payload))
                    }
                };
                self.objects.borrow_mut().insert(*reference, found.clone());
                found
            }
        };
        Ok(found.map(|(semantic_id, payload)| StoredObject {
            semantic_id: Cow::Owned(semantic_id),
            payload: Cow::Owned(payload),
        }))
    }

    fn world(&self, reference: &Ref) -> Result<Option<Cow<'_, [u8]>>, SourceError> {
        if let Some(w) = self.worlds.borrow().get(reference) {
            return Ok(w.clone().map(Cow::Owned));
        }
        let path = format!("/v1/worlds/{reference}");
        let bytes = match self.get(&path)? {
            Got::Absent => None,
            Got::Found(body) => Some(self.world_bytes(&path, reference, &body)?),
        };
        self.worlds.borrow_mut().insert(*reference, bytes.clone());
        Ok(bytes.map(Cow::Owned))
    }

    fn head(&self) -> Result<Option<Ref>, SourceError> {
        let path = "/v1/head";
        match self.get(path)? {
            Got::Absent => Ok(None),
            Got::Found(body) => String::from_utf8_lossy(&body)
                .trim()
                .parse()
                .map(Some)
                .map_err(|e| self.malformed(path, format!("not a world ref: {e}"))),
        }
    }

    fn journal(&self, invocation_id: &str) -> Result<Option<JournalState>, SourceError> {
        match self.rows(invocation_id)? {
            Some(rows) => rows.journal_state(invocation_id),
            None => Ok(None),
        }
    }

    fn task(&self, episode: &str, task: &str) -> Result<Option<TaskState>, SourceError> {
        // The walk asks for `<surface>:<task id>` in the invocation id's episode.
        let Some((surface, task_id)) = task.split_once(':') else {
            return Ok(None);
        };
        let id = format!("{surface}:{episode}:{task_id}");
        match self.rows(&id)? {
            Some(rows) => rows.task_state(&id),
            None => Ok(None),
        }
    }

    fn world_at(&self, index: u64) -> Result<Option<Ref>, SourceError> {
        let path = format!("/v1/log/{index}/world");
        let body = match self.get(&path)? {
            Got::Absent => return Ok(None),
            Got::Found(body) => body,
        };
        let reference: Ref = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["ref"].as_str()?.parse().ok())
            .ok_or_else(|| self.malformed(&path, "no world ref in the answer"))?;
        // The same answer serves the world itself; the walk checks its bytes against the ref.
        let bytes = self.world_bytes(&path, &reference, &body)?;
        self.worlds.borrow_mut().insert(reference, Some(bytes));
        Ok(Some(reference))
    }
}

#[cfg(test)]
mod tests {
    use super::super::client::segment;

    #[test]
    fn an_invocation_id_is_one_path_segment_whatever_it_holds() {
        assert_eq!(segment("a2a:ep1:r-1.x_y~"), "a2a:ep1:r-1.x_y~");
        assert_eq!(segment("mcp:ep1:../../x y"), "mcp:ep1:..%2F..%2Fx%20y");
        assert_eq!(segment("a2a:é"), "a2a:%C3%A9");
    }
}
