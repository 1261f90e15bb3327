//! The JSON documents that cross the plugin boundary.
//!
//! These are plain Rust types, serialised with serde on each side of the
//! boundary and carried as UTF-8 JSON text (`RStr`/`RString`). They are never
//! passed by layout, so adding an optional field to one of them does not change
//! the ABI. Both sides ignore unknown fields, which is what lets a newer daemon
//! talk to an older plugin and the other way round.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object, the only shape a handler output or a finish output may take.
pub type JsonObject = Map<String, Value>;

/// What a plugin says about itself. Returned by the root module's `manifest`
/// entry and read by the daemon before any handler is constructed.
///
/// Serialised in camelCase: `{"name", "version", "abi", "description",
/// "effects", "transitions", "finish", "configSchema"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The plugin's name, what an operator passes to `--handler NAME` and the
    /// name of the plugin's table in the daemon's TOML config.
    pub name: String,
    /// The plugin's own version (usually `env!("CARGO_PKG_VERSION")`).
    pub version: String,
    /// The handler ABI version the plugin was built against. The export macro
    /// overwrites whatever the author put here with [`crate::ABI_VERSION`], so
    /// it always tells the truth.
    #[serde(default)]
    pub abi: u32,
    /// One sentence for `worldd handlers`.
    #[serde(default)]
    pub description: String,
    /// The effects this plugin executes. Two loaded plugins may not claim the
    /// same effect name.
    pub effects: Vec<EffectDecl>,
    /// Default transition documents (`world/transition/v1`) the daemon
    /// publishes into the registry at start-up.
    #[serde(default)]
    pub transitions: Vec<Value>,
    /// Names of the finish functions [`crate::EffectHandler::finish`] accepts.
    #[serde(default)]
    pub finish: Vec<String>,
    /// JSON Schema of the plugin's config object. The daemon validates the
    /// operator's table against it; the plugin validates again in its
    /// constructor (it must not trust the host to have done so).
    #[serde(default)]
    pub config_schema: Value,
}

/// One effect a plugin executes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectDecl {
    /// The effect name as it appears in grants and plans, e.g. `Workspace.Read`.
    pub name: String,
    /// Whether the effect changes anything. Published to agents as MCP tool
    /// annotations, so it must be truthful.
    pub class: EffectClass,
    /// The values of the payload's `op` key the effect accepts (its op
    /// allowlist). Empty when the effect has no `op` key. The daemon enforces
    /// it before `execute`: a request with another `op` (or with an `op` when
    /// the list is empty) is a failed effect and never reaches the handler.
    #[serde(default)]
    pub ops: Vec<String>,
    /// One sentence for `worldd handlers`.
    #[serde(default)]
    pub description: String,
}

/// How an effect relates to the world outside the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EffectClass {
    /// Observes state, changes nothing (safe to repeat; costs budget only).
    Read,
    /// Changes state (a file, a repository, the registry).
    Write,
    /// Runs code whose effects the handler cannot bound (e.g. a program run).
    Unknown,
}

/// One effect the broker admitted and now asks the handler to execute.
///
/// Serialised in camelCase: `{"invocationId", "episode", "worktree",
/// "effect", "scope", "cost", "payload", "deadlineMs"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// The invocation this effect belongs to (unique per call).
    pub invocation_id: String,
    /// The episode (`^[a-z0-9][a-z0-9-]{0,63}$`) the call runs in.
    pub episode: String,
    /// Absolute path of the episode's worktree. The daemon binds it when the
    /// effect's scope is `worktree` (it exists and is not a symlink escape);
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// The effect name, one of the plugin's [`EffectDecl::name`]s.
    pub effect: String,
    /// The scope the grant admitted, e.g. `worktree`.
    pub scope: String,
    /// Budget units the broker debited for this effect.
    pub cost: u64,
    /// The payload the plan built. Usually an object with an `op` key.
    pub payload: Value,
    /// Milliseconds the handler may spend on this call, counted from the moment
    /// it receives the request. The daemon stops waiting after that and
    /// records the effect as indeterminate, so a handler that can check a
    /// clock should give up (and report `failed`) before then. `0` = no limit.
    #[serde(default)]
    pub deadline_ms: u64,
}

/// How an effect ended.
///
/// `{"status":"ok","output":{…}}`, `{"status":"failed","message":"…"}` or
/// `{"status":"indeterminate","message":"…"}`.
///
/// - **ok**: the effect ran and `output` describes what happened. A refusal by
///   the handler's own policy ("that path escapes the sandbox") is still `ok`,
///   with an output such as `{"ok":false,"refused":"…"}`: the effect ran, and
///   said no.
/// - **failed**: the effect did not complete. It ran, or may have partly run,
///   and the handler knows it did not succeed (a malformed payload, an op
///   outside the allowlist, an operator gate, an I/O error in the middle).
///   The budget stays debited; the result holds no output.
/// - **indeterminate**: the handler cannot tell whether the effect happened
///   (a remote call timed out after sending). The daemon fails closed: it
///   never retries and reports the effect as possibly applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// The effect ran; `output` is the handler's answer (always an object).
    Ok {
        /// The handler output object.
        output: JsonObject,
    },
    /// The effect did not complete.
    Failed {
        /// Why, for the daemon's log (`effect failed: …`, cut at 4096 bytes); no stored
        /// object keeps it, only the status.
        message: String,
    },
    /// Nobody can tell whether the effect happened.
    Indeterminate {
        /// Why, for the daemon's log (`effect indeterminate: …`, cut at 4096 bytes); no
        /// stored object keeps it, only the status.
        message: String,
    },
}

impl Outcome {
    /// `Outcome::Ok` with the given output object.
    pub fn ok(output: JsonObject) -> Self {
        Outcome::Ok { output }
    }

    /// `Outcome::Failed` with the given message.
    pub fn failed(message: impl Into<String>) -> Self {
        Outcome::Failed {
            message: message.into(),
        }
    }

    /// `Outcome::Indeterminate` with the given message.
    pub fn indeterminate(message: impl Into<String>) -> Self {
        Outcome::Indeterminate {
            message: message.into(),
        }
    }

    /// The status word: `ok`, `failed` or `indeterminate`.
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Ok { .. } => "ok",
            Outcome::Failed { .. } => "failed",
            Outcome::Indeterminate { .. } => "indeterminate",
        }
    }
}

// Read field by field, in any order, each straight into its type. The derived reading of an
// internally tagged enum first copies the whole answer into serde's buffer, then copies it
// again into the output object: twice the allocations of every answer the host reads.
impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OutcomeVisitor)
    }
}

const STATUSES: &[&str] = &["ok", "failed", "indeterminate"];

/// A member name of an outcome, or a status word: read without a copy.
enum Word {
    Status,
    Output,
    Message,
    Ok,
    Failed,
    Indeterminate,
    Other(String),
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WordVisitor;
        impl serde::de::Visitor<'_> for WordVisitor {
            type Value = Word;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Word, E> {
                Ok(match v {
                    "status" => Word::Status,
                    "output" => Word::Output,
                    "message" => Word::Message,
                    "ok" => Word::Ok,
                    "failed" => Word::Failed,
                    "indeterminate" => Word::Indeterminate,
                    // Only an unknown status word is ever shown (in its error).
                    other => Word::Other(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_str(WordVisitor)
    }
}

impl Word {
    fn text(&self) -> &str {
        match self {
            Word::Status => "status",
            Word::Output => "output",
            Word::Message => "message",
            Word::Ok => "ok",
            Word::Failed => "failed",
            Word::Indeterminate => "indeterminate",
            Word::Other(other) => other,
        }
    }
}

struct OutcomeVisitor;

impl<'de> serde::de::Visitor<'de> for OutcomeVisitor {
    type Value = Outcome;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an outcome object with a `status`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Outcome, A::Error> {
        use serde::de::Error;
        let mut status: Option<Word> = None;
        let mut output: Option<JsonObject> = None;
        let mut message: Option<String> = None;
        while let Some(key) = map.next_key::<Word>()? {
            match key {
                Word::Status if status.is_some() => {
                    return Err(A::Error::duplicate_field("status"))
                }
                Word::Status => status = Some(map.next_value()?),
                Word::Output if output.is_some() => {
                    return Err(A::Error::duplicate_field("output"))
                }
                // Read to any depth: the broker, not the parser, refuses one too deep.
                Word::Output => output = Some(map.next_value_seed(crate::answer::AnswerObject)?),
                Word::Message if message.is_some() => {
                    return Err(A::Error::duplicate_field("message"))
                }
                Word::Message => message = Some(map.next_value()?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let missing = |field| A::Error::missing_field(field);
        match status.ok_or_else(|| missing("status"))? {
            Word::Ok => Ok(Outcome::Ok {
                output: output.ok_or_else(|| missing("output"))?,
            }),
            Word::Failed => Ok(Outcome::Failed {
                message: message.ok_or_else(|| missing("message"))?,
            }),
            Word::Indeterminate => Ok(Outcome::Indeterminate {
                message: message.ok_or_else(|| missing("message"))?,
            }),
            other => Err(A::Error::unknown_variant(other.text(), STATUSES)),
        }
    }
}

/// What a handler's [`crate::EffectHandler::preflight`] says about a request before the broker
/// spends budget on it.
///
/// Preflight is advisory and one-way: it can spare the agent a unit of budget for a request
/// the handler would refuse anyway (a file whose result would exceed the read limit), never
/// let through what `execute` would refuse. `execute` still checks everything, because the
/// world may change between the two calls.
#[derive(Debug, Clone, PartialEq)]
pub enum Preflight {
    /// Go on: admission, the budget debit, then `execute`.
    Proceed,
    /// Do not run it. The object is the call's answer, shaped like a refusal from `execute`
    /// (`{"ok":false,"refused":"…",…}`); the broker commits the call as declined
    /// (`denied:handler`) and spends nothing.
    Decline(JsonObject),
}

/// The input of a finish function: `{"args": {…}, "output": {…}}`, the call's
/// arguments and the handler output of its (single) effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishInput {
    /// The arguments the tool was called with.
    #[serde(default)]
    pub args: Value,
    /// The handler output object of the effect.
    pub output: JsonObject,
}

/// Severity of a message a plugin logs through [`crate::Host::log`].
/// Crosses the boundary as a `u8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LogLevel {
    /// Something failed and an operator should look.
    Error = 1,
    /// Something is off but the plugin carries on.
    Warn = 2,
    /// Normal operational messages.
    Info = 3,
    /// Details useful when diagnosing.
    Debug = 4,
    /// Very verbose details.
    Trace = 5,
}

impl LogLevel {
    /// The level for a wire value; unknown values (from a newer plugin) map to
    /// `Info` so that nothing is dropped.
    pub fn from_u8(v: u8) -> LogLevel {
        match v {
            1 => LogLevel::Error,
            2 => LogLevel::Warn,
            4 => LogLevel::Debug,
            5 => LogLevel::Trace,
            _ => LogLevel::Info,
        }
    }

    /// Lowercase name: `error`, `warn`, `info`, `debug`, `trace`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}
