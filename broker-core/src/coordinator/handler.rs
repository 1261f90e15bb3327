//! Handlers, as the coordinator sees them: the request an effect handler gets, what it
//! answers, and the loaded set by effect name.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::broker::HandlerIdentity;

/// One effect to execute.
#[derive(Debug, Clone)]
pub struct EffectRequest<'a> {
    pub invocation_id: &'a str,
    pub episode: &'a str,
    /// The episode's worktree, bound for scope `worktree` when the daemon has a workspace root.
    pub worktree: Option<&'a Path>,
    pub effect: &'a str,
    pub scope: &'a str,
    pub cost: u64,
    pub payload: &'a Map<String, Value>,
    pub deadline: Duration,
}

/// What a handler reports.
#[derive(Debug, Clone, PartialEq)]
pub enum HandlerOutcome {
    /// The effect ran; this is its output object.
    Ok(Map<String, Value>),
    /// The effect ran or may have partly run, and failed. Budget stays spent.
    Failed(String),
    /// The handler cannot tell whether the effect happened. Fail closed.
    Indeterminate(String),
}

/// An effect handler: in-process for tests, or a plugin behind the ABI in the daemon.
pub trait EffectHandler: Send + Sync {
    /// Which plugin build this is: its name, version and the sha256 of the library bytes that
    /// were loaded. Every succeeded and failed effect record names it. A handler compiled into
    /// the executable (tests, tools) uses [`HandlerIdentity::in_process`].
    fn identity(&self) -> HandlerIdentity;
    /// Run one effect. Must not panic; if it does, the coordinator records a failed effect.
    fn execute(&self, request: &EffectRequest<'_>) -> HandlerOutcome;
    /// A pure, deterministic reshaping of an effect's output, named by a transition's `finish`.
    /// Runs right after a successful `execute`, under the same deadline.
    fn finish(&self, name: &str, input: &Value) -> Result<Map<String, Value>, String> {
        let _ = input;
        Err(format!("no finish function {name:?}"))
    }
    /// Before admission: `Some(output)` declines the request, which is then committed as
    /// declined (`denied:handler`) with `output` as its answer, and nothing is spent. Only
    /// for refusals the handler can foresee without side effects; `execute` still checks
    /// everything. The default proceeds.
    fn preflight(&self, request: &EffectRequest<'_>) -> Option<Map<String, Value>> {
        let _ = request;
        None
    }
}

/// Why a handler could not join a [`Handlers`] set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlersError {
    /// A second handler for an effect that already has one: which one serves it would
    /// depend on load order, so neither is chosen.
    #[error("effect {effect} is claimed by both {first} and {second}")]
    Claimed {
        effect: String,
        /// The handler registered first (boxed, as is `second`: a `Result` of this error
        /// stays small).
        first: Box<HandlerIdentity>,
        /// The handler refused.
        second: Box<HandlerIdentity>,
    },
}

/// The loaded handler set, by effect name, and which of those effects only read.
#[derive(Clone, Default)]
pub struct Handlers {
    by_effect: HashMap<String, Arc<dyn EffectHandler>>,
    read_only: HashSet<String>,
    /// Tools shipped by a plugin found but not running here (left out by the operator, or
    /// declined to start), by tool id, with the plugin's name.
    not_running: HashMap<String, String>,
}

impl Handlers {
    pub fn new() -> Handlers {
        Handlers::default()
    }

    /// Register `handler` for `effect`; two handlers for one effect is an error.
    pub fn insert(
        &mut self,
        effect: &str,
        handler: Arc<dyn EffectHandler>,
    ) -> Result<(), HandlersError> {
        if let Some(prev) = self.by_effect.get(effect) {
            return Err(HandlersError::Claimed {
                effect: effect.to_owned(),
                first: Box::new(prev.identity()),
                second: Box::new(handler.identity()),
            });
        }
        self.by_effect.insert(effect.to_owned(), handler);
        Ok(())
    }

    pub fn get(&self, effect: &str) -> Option<&Arc<dyn EffectHandler>> {
        self.by_effect.get(effect)
    }

    /// Declare that `effect` only reads: it observes and changes nothing (a plugin's class
    /// `read`). Running it twice, or running it and then losing every trace of it in a crash,
    /// changes nothing either, so a coordinator that is its store's only spender may run its
    /// handler while the intent is still on its way to the disk
    /// ([`crate::coordinator::CoordinatorConfig::sole_spender`]).
    pub fn mark_read_only(&mut self, effect: &str) {
        self.read_only.insert(effect.to_owned());
    }

    /// Whether `effect` was declared to only read ([`Handlers::mark_read_only`]).
    pub fn is_read_only(&self, effect: &str) -> bool {
        self.read_only.contains(effect)
    }

    pub fn effects(&self) -> impl Iterator<Item = &str> {
        self.by_effect.keys().map(String::as_str)
    }

    /// Note that tool `id` is shipped by `plugin`, which is not running here: it is refused by
    /// rule R8 whatever serves its effects. Otherwise a plugin the operator left out (or an
    /// older build of one, kept under another name) had its tools run through another
    /// plugin's handler of an effect it also declares.
    pub fn ship_not_running(&mut self, id: &str, plugin: &str) {
        self.not_running.insert(id.to_owned(), plugin.to_owned());
    }

    /// The plugin not running here that ships tool `id` ([`Handlers::ship_not_running`]).
    pub fn not_running(&self, id: &str) -> Option<&str> {
        self.not_running.get(id).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    impl EffectHandler for Named {
        fn identity(&self) -> HandlerIdentity {
            HandlerIdentity::in_process(self.0, "0.1.0")
        }
        fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
            HandlerOutcome::Failed("never run".into())
        }
    }

    /// A second handler for an effect is refused, naming both, and the first keeps serving it.
    #[test]
    fn a_second_handler_for_an_effect_is_refused_naming_both() {
        let mut handlers = Handlers::new();
        handlers
            .insert("Notes.Append", Arc::new(Named("first")))
            .unwrap();
        handlers
            .insert("Notes.Read", Arc::new(Named("second")))
            .unwrap();
        let err = handlers
            .insert("Notes.Append", Arc::new(Named("second")))
            .unwrap_err();
        let first = HandlerIdentity::in_process("first", "0.1.0");
        let second = HandlerIdentity::in_process("second", "0.1.0");
        assert_eq!(
            err.to_string(),
            format!("effect Notes.Append is claimed by both {first} and {second}")
        );
        assert_eq!(
            err,
            HandlersError::Claimed {
                effect: "Notes.Append".into(),
                first: Box::new(first.clone()),
                second: Box::new(second),
            }
        );
        let serving = handlers.get("Notes.Append").map(|h| h.identity());
        assert_eq!(serving, Some(first));
    }
}
