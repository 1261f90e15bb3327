//! The effect broker's pure parts: the admission decision, the effect-request encoding and the
//! effect record.
//!
//! The decision checks, in order, the effect name, the scope (exact string equality), liveness
//! (`0 <= now < expiresAt`) and the budget (`cost <= remaining`). With several grants the first
//! that allows wins; otherwise the denial of the grant that got furthest is reported.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::canon::Members;
use crate::object::Ref;

/// A grant as the broker sees it at one call: remaining budget after the episode's spend.
/// It borrows its names from the session's grant: admission builds one per grant on every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability<'a> {
    pub effect: &'a str,
    pub scope: &'a str,
    pub budget: u64,
    pub expires_at: i64,
}

/// The four fixed denial labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Denial {
    EffectName,
    Scope,
    Expired,
    Budget,
}

impl Denial {
    pub fn label(self) -> &'static str {
        match self {
            Denial::EffectName => "denied:effect-name",
            Denial::Scope => "denied:scope",
            Denial::Expired => "denied:expired",
            Denial::Budget => "denied:budget",
        }
    }

    pub fn from_label(label: &str) -> Option<Denial> {
        Some(match label {
            "denied:effect-name" => Denial::EffectName,
            "denied:scope" => Denial::Scope,
            "denied:expired" => Denial::Expired,
            "denied:budget" => Denial::Budget,
            _ => return None,
        })
    }
}

/// The label of a request the effect's handler declined before admission (its preflight, see
/// [`crate::coordinator::EffectHandler::preflight`]): beside the four broker denials, the one
/// denial a handler makes. Like them, nothing ran and nothing was spent; unlike them, the
/// record names the plugin that declined.
pub const DECLINED: &str = "denied:handler";

/// The broker's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by `caps[grant]`, whose remaining budget was `budget_before`.
    Allowed {
        grant: usize,
        budget_before: u64,
    },
    Denied(Denial),
}

/// Decide one request against the capabilities. Pure: the caller supplies `now`.
pub fn decide(caps: &[Capability<'_>], effect: &str, scope: &str, cost: u64, now: i64) -> Decision {
    let mut worst = Denial::EffectName;
    for (i, cap) in caps.iter().enumerate() {
        let verdict = if cap.effect != effect {
            Err(Denial::EffectName)
        } else if cap.scope != scope {
            Err(Denial::Scope)
        } else if !(0 <= now && now < cap.expires_at) {
            Err(Denial::Expired)
        } else if cost > cap.budget {
            Err(Denial::Budget)
        } else {
            Ok(())
        };
        match verdict {
            Ok(()) => {
                return Decision::Allowed {
                    grant: i,
                    budget_before: cap.budget,
                }
            }
            Err(d) => worst = worst.max(d),
        }
    }
    Decision::Denied(worst)
}

/// The broker's length-prefixed request encoding:
/// `<len(effect)>:<effect><len(scope)>:<scope><cost>:<now>:` followed by the payload bytes.
pub fn encode_request(effect: &str, scope: &str, cost: u64, now: i64, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{}:{}{}:{}{}:{}:",
        effect.len(),
        effect,
        scope.len(),
        scope,
        cost,
        now
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The inverse of [`encode_request`]: `(effect, scope, cost, now, payload)`, or `None` when the
/// bytes are not one request.
pub fn decode_request(bytes: &[u8]) -> Option<(&str, &str, u64, i64, &[u8])> {
    fn field(rest: &[u8]) -> Option<(&str, &[u8])> {
        let colon = rest.iter().position(|b| *b == b':')?;
        let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        let text = rest.get(colon + 1..colon + 1 + len)?;
        Some((std::str::from_utf8(text).ok()?, &rest[colon + 1 + len..]))
    }
    fn number<T: std::str::FromStr>(rest: &[u8]) -> Option<(T, &[u8])> {
        let colon = rest.iter().position(|b| *b == b':')?;
        let n = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        Some((n, &rest[colon + 1..]))
    }
    let (effect, rest) = field(bytes)?;
    let (scope, rest) = field(rest)?;
    let (cost, rest) = number(rest)?;
    let (now, payload) = number(rest)?;
    Some((effect, scope, cost, now, payload))
}

/// The plugin that ran an effect: its manifest name and version, and the sha256 of the library
/// bytes the daemon actually loaded (for a handler compiled into the executable, the
/// executable's). Named in every succeeded and failed effect record; a denied record ran
/// nothing and names none.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HandlerIdentity {
    pub plugin: String,
    pub version: String,
    pub library: Ref,
}

impl HandlerIdentity {
    /// An identity for a handler linked into the running executable (tests, tools):
    /// `library` is the sha256 of the executable file, read once per process, or, when it
    /// cannot be read, of the text `in-process:<plugin>@<version>`.
    pub fn in_process(plugin: &str, version: &str) -> HandlerIdentity {
        static EXE: std::sync::OnceLock<Option<Ref>> = std::sync::OnceLock::new();
        let exe = EXE.get_or_init(|| {
            let path = std::env::current_exe().ok()?;
            let mut file = std::fs::File::open(path).ok()?;
            let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
            std::io::copy(&mut file, &mut hasher).ok()?;
            Some(Ref::from_bytes(sha2::Digest::finalize(hasher).into()))
        });
        HandlerIdentity {
            plugin: plugin.to_owned(),
            version: version.to_owned(),
            library: exe
                .unwrap_or_else(|| Ref::of(format!("in-process:{plugin}@{version}").as_bytes())),
        }
    }
}

impl std::fmt::Display for HandlerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.plugin, self.version, self.library)
    }
}

/// `world/effect-record/v1`. Three shapes only: denied (allowed false, failed false, no
/// result), succeeded (true, false, result) and failed (true, true, no result). Succeeded and
/// failed records name the plugin that ran the effect (`handler`); records written before
/// plugins were named have none. A denial names no plugin, except the one a handler made
/// ([`DECLINED`]), which names the plugin that declined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EffectRecord {
    pub effect: String,
    pub scope: String,
    pub cost: u64,
    pub budget_before: u64,
    pub budget_after: u64,
    pub allowed: bool,
    pub failed: bool,
    /// A denial label, or `""`.
    pub denial: String,
    pub request_ref: Ref,
    /// The result object's ref, or `""` when there is none.
    #[serde(with = "optional_ref")]
    pub result_ref: Option<Ref>,
    /// The plugin that ran the effect; `None` on denied records (and on records of builds that
    /// did not name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<HandlerIdentity>,
}

impl EffectRecord {
    pub fn denied(
        effect: &str,
        scope: &str,
        cost: u64,
        budget: u64,
        denial: Denial,
        request_ref: Ref,
    ) -> Self {
        Self::not_run(effect, scope, cost, budget, denial.label(), request_ref)
    }

    /// A request the handler declined before admission ([`DECLINED`]); name the plugin with
    /// [`EffectRecord::ran_by`].
    pub fn declined(effect: &str, scope: &str, cost: u64, budget: u64, request_ref: Ref) -> Self {
        Self::not_run(effect, scope, cost, budget, DECLINED, request_ref)
    }

    /// The denied shape: nothing ran, nothing spent, `label` says why.
    fn not_run(
        effect: &str,
        scope: &str,
        cost: u64,
        budget: u64,
        label: &str,
        request_ref: Ref,
    ) -> Self {
        EffectRecord {
            effect: effect.into(),
            scope: scope.into(),
            cost,
            budget_before: budget,
            budget_after: budget,
            allowed: false,
            failed: false,
            denial: label.into(),
            request_ref,
            result_ref: None,
            handler: None,
        }
    }

    pub fn succeeded(
        effect: &str,
        scope: &str,
        cost: u64,
        budget_before: u64,
        request_ref: Ref,
        result_ref: Ref,
    ) -> Self {
        EffectRecord {
            effect: effect.into(),
            scope: scope.into(),
            cost,
            budget_before,
            budget_after: budget_before.saturating_sub(cost),
            allowed: true,
            failed: false,
            denial: String::new(),
            request_ref,
            result_ref: Some(result_ref),
            handler: None,
        }
    }

    pub fn failed(
        effect: &str,
        scope: &str,
        cost: u64,
        budget_before: u64,
        request_ref: Ref,
    ) -> Self {
        EffectRecord {
            effect: effect.into(),
            scope: scope.into(),
            cost,
            budget_before,
            budget_after: budget_before.saturating_sub(cost),
            allowed: true,
            failed: true,
            denial: String::new(),
            request_ref,
            result_ref: None,
            handler: None,
        }
    }

    /// The record's canonical JSON, the payload of its object: the bytes of
    /// `canon::to_vec(&self.to_value())`, written without building the value (one per effect
    /// call, so the tree and its frees were a cost of every call).
    pub fn canonical(&self) -> Result<Vec<u8>, crate::canon::CanonError> {
        let mut m = Members::new()
            .boolean("allowed", self.allowed)
            .integer("budgetAfter", self.budget_after)?
            .integer("budgetBefore", self.budget_before)?
            .integer("cost", self.cost)?
            .string("denial", &self.denial)
            .string("effect", &self.effect)
            .boolean("failed", self.failed);
        if let Some(h) = &self.handler {
            m = m.object("handler", |m| {
                Ok(m.plain("library", h.library)
                    .string("plugin", &h.plugin)
                    .string("version", &h.version))
            })?;
        }
        let m = m.plain("requestRef", self.request_ref);
        let m = match &self.result_ref {
            Some(r) => m.plain("resultRef", r),
            None => m.string("resultRef", ""),
        };
        Ok(m.string("scope", &self.scope).finish().into_bytes())
    }

    /// This record with nothing spent: an effect whose handler was never started (its call
    /// withdrawn at its deadline).
    pub fn not_spent(mut self) -> Self {
        self.budget_after = self.budget_before;
        self
    }

    /// The same record, naming the plugin that ran the effect.
    pub fn ran_by(mut self, handler: Option<HandlerIdentity>) -> Self {
        self.handler = handler;
        self
    }

    /// True when the record is one of the three lawful shapes.
    pub fn is_lawful(&self) -> bool {
        match (self.allowed, self.failed, self.result_ref.is_some()) {
            (false, false, false) if self.denial == DECLINED => self.handler.is_some(),
            (false, false, false) => {
                Denial::from_label(&self.denial).is_some() && self.handler.is_none()
            }
            (true, false, true) | (true, true, false) => self.denial.is_empty(),
            _ => false,
        }
    }

    /// `ok`, `failed` or `denied`: the status shown in a result's world block.
    pub fn status(&self) -> &'static str {
        match (self.allowed, self.failed) {
            (false, _) => "denied",
            (true, true) => "failed",
            (true, false) => "ok",
        }
    }

    pub fn to_value(&self) -> serde_json::Value {
        let mut v = json!({
            "effect": self.effect,
            "scope": self.scope,
            "cost": self.cost,
            "budgetBefore": self.budget_before,
            "budgetAfter": self.budget_after,
            "allowed": self.allowed,
            "failed": self.failed,
            "denial": self.denial,
            "requestRef": self.request_ref,
            "resultRef": self.result_ref.map(|r| r.to_string()).unwrap_or_default(),
        });
        if let Some(h) = &self.handler {
            v["handler"] = json!({"plugin": h.plugin, "version": h.version, "library": h.library});
        }
        v
    }
}

mod optional_ref {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::object::Ref;

    pub fn serialize<S: Serializer>(r: &Option<Ref>, s: S) -> Result<S::Ok, S::Error> {
        match r {
            Some(r) => s.collect_str(r),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Ref>, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap<'a>(effect: &'a str, scope: &'a str, budget: u64, expires_at: i64) -> Capability<'a> {
        Capability {
            effect,
            scope,
            budget,
            expires_at,
        }
    }

    #[test]
    fn decision_order_and_labels() {
        let now = 100;
        let caps = [cap("A", "s", 1, 200)];
        assert_eq!(
            decide(&caps, "B", "s", 1, now),
            Decision::Denied(Denial::EffectName)
        );
        assert_eq!(
            decide(&caps, "A", "t", 1, now),
            Decision::Denied(Denial::Scope)
        );
        assert_eq!(
            decide(&caps, "A", "s", 2, now),
            Decision::Denied(Denial::Budget)
        );
        assert_eq!(
            decide(&caps, "A", "s", 1, 200),
            Decision::Denied(Denial::Expired)
        );
        assert_eq!(
            decide(&caps, "A", "s", 1, -1),
            Decision::Denied(Denial::Expired)
        );
        assert_eq!(
            decide(&caps, "A", "s", 1, 199),
            Decision::Allowed {
                grant: 0,
                budget_before: 1
            }
        );
        assert_eq!(
            decide(&[], "A", "s", 0, now),
            Decision::Denied(Denial::EffectName)
        );
        // An expired grant with budget 0 reports expired: liveness is checked before budget.
        assert_eq!(
            decide(&[cap("A", "s", 0, 50)], "A", "s", 1, now),
            Decision::Denied(Denial::Expired)
        );
    }

    #[test]
    fn first_allowing_grant_wins_else_the_furthest_denial() {
        let caps = [
            cap("A", "x", 5, 200),
            cap("A", "s", 0, 200),
            cap("A", "s", 3, 200),
        ];
        assert_eq!(
            decide(&caps, "A", "s", 1, 0),
            Decision::Allowed {
                grant: 2,
                budget_before: 3
            }
        );
        let caps = [cap("A", "x", 5, 200), cap("A", "s", 0, 200)];
        assert_eq!(
            decide(&caps, "A", "s", 1, 0),
            Decision::Denied(Denial::Budget)
        );
    }

    #[test]
    fn request_encoding_is_length_prefixed() {
        let b = encode_request(
            "Workspace.Read",
            "worktree",
            1,
            1700000000,
            br#"{"op":"read"}"#,
        );
        assert_eq!(
            String::from_utf8(b).unwrap(),
            r#"14:Workspace.Read8:worktree1:1700000000:{"op":"read"}"#
        );
    }

    #[test]
    fn records_have_three_lawful_shapes() {
        let r = Ref::of(b"req");
        let d = EffectRecord::denied("A", "s", 1, 0, Denial::Budget, r);
        assert!(d.is_lawful());
        assert_eq!(d.status(), "denied");
        let s = EffectRecord::succeeded("A", "s", 1, 5, r, Ref::of(b"res"));
        assert!(s.is_lawful());
        assert_eq!((s.budget_before, s.budget_after), (5, 4));
        let f = EffectRecord::failed("A", "s", 1, 5, r);
        assert!(f.is_lawful());
        assert_eq!(f.status(), "failed");
        let mut bad = s.clone();
        bad.failed = true;
        assert!(!bad.is_lawful());
        let v = d.to_value();
        assert_eq!(v["resultRef"], "");
        assert_eq!(v["denial"], "denied:budget");
        let back: EffectRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
        // A denied record that names a plugin is not lawful: nothing ran.
        let id = HandlerIdentity {
            plugin: "p".into(),
            version: "1".into(),
            library: Ref::of(b"lib"),
        };
        assert!(!d.clone().ran_by(Some(id.clone())).is_lawful());
        let named = s.clone().ran_by(Some(id.clone()));
        assert!(named.is_lawful());
        let v = named.to_value();
        assert_eq!(
            v["handler"],
            json!({"plugin": "p", "version": "1", "library": id.library})
        );
        let back: EffectRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, named);
        // Records without the field (older builds) still parse.
        assert_eq!(
            serde_json::from_value::<EffectRecord>(s.to_value()).unwrap(),
            s
        );
        // A request the handler declined names the plugin that declined it, and only then is
        // lawful; nothing was spent.
        let declined = EffectRecord::declined("A", "s", 1, 3, r);
        assert!(!declined.is_lawful());
        let declined = declined.ran_by(Some(id));
        assert!(declined.is_lawful());
        assert_eq!(declined.status(), "denied");
        assert_eq!((declined.budget_before, declined.budget_after), (3, 3));
        let v = declined.to_value();
        assert_eq!(
            (v["denial"].as_str(), v["resultRef"].as_str()),
            (Some("denied:handler"), Some(""))
        );
        assert_eq!(serde_json::from_value::<EffectRecord>(v).unwrap(), declined);
        // A broker label cannot be laundered into a handler's: it names no plugin.
        let mut forged = d.clone();
        forged.denial = "denied:handlers".into();
        assert!(!forged.is_lawful());
    }

    /// The record's bytes written directly are those of its value written canonically, in every
    /// shape: each kind of record, with and without a plugin, names that need escaping, the
    /// largest integer canonical JSON allows, and one past it (refused by both).
    #[test]
    fn a_record_written_directly_is_its_value_written_canonically() {
        let r = Ref::of(b"req");
        let id = HandlerIdentity {
            plugin: "p \"quoted\" \u{1F600}".into(),
            version: "1.0\n".into(),
            library: Ref::of(b"lib"),
        };
        let max = (1u64 << 53) - 1;
        let records = [
            EffectRecord::denied("A", "s", 1, 0, Denial::Budget, r),
            EffectRecord::declined("A", "s", 1, 3, r).ran_by(Some(id.clone())),
            EffectRecord::succeeded("Workspace.Read", "worktree", 1, 5, r, Ref::of(b"res"))
                .ran_by(Some(id.clone())),
            EffectRecord::failed("É\u{e000}\t", "scope/ü", max, max, r),
            EffectRecord::succeeded("A", "s", 0, max, r, Ref::of(b"x")),
        ];
        for record in &records {
            let direct = record.canonical().unwrap();
            assert_eq!(
                String::from_utf8(direct).unwrap(),
                String::from_utf8(crate::canon::to_vec(&record.to_value()).unwrap()).unwrap()
            );
        }
        let over = EffectRecord::succeeded("A", "s", 1, max + 1, r, Ref::of(b"x"));
        assert!(over.canonical().is_err());
        assert!(crate::canon::to_vec(&over.to_value()).is_err());
    }

    #[test]
    fn requests_decode_what_they_encode() {
        let b = encode_request("Workspace.Read", "worktree", 1, -5, br#"{"a":"1:2"}"#);
        assert_eq!(
            decode_request(&b),
            Some(("Workspace.Read", "worktree", 1, -5, &br#"{"a":"1:2"}"#[..]))
        );
        assert_eq!(decode_request(b"99:short"), None);
        assert_eq!(decode_request(b"x:y"), None);
        assert_eq!(decode_request(b""), None);
    }
}
