//! The invocation coordinator: one tool call, from arguments to a committed log entry.
//!
//! [`Coordinator::invoke`] reads top to bottom like the pipeline it runs, each step a method
//! whose output is the next one's input (`Accepted` → `Planned` → `Admitted` → `Executed` →
//! `Finished`):
//!
//! 0. **open** the call: the session must see the tool (a live grant for its `access`), the
//!    `transitionFn` pin must match, the task id must be unused (or committed with the same
//!    arguments, which returns the committed result without running anything), new work is
//!    refused while the store is past its reserve ([`crate::capacity`]), and every declared
//!    effect needs a loaded handler (and a bound worktree: rule R8). The call then holds its
//!    episode's turn;
//! 1. **plan** with the pure interpreter; a refused plan is closed here and committed as an
//!    entry without an effect;
//! 2. **admit**: the broker decides against the grants, budgets reseeded from the journal; the
//!    handler's preflight may decline the request (under the handler's deadline); then the
//!    intent is journaled with its spend (durable point 1; an effect that only reads runs while
//!    it is on its way to the disk when this coordinator is its store's only spender,
//!    [`CoordinatorConfig::sole_spender`]). A denied effect or a declined
//!    request (`denied:handler`) is closed here and committed as an entry without an effect,
//!    with its record; nothing is spent. Refusals and denials each cost the
//!    credential tokens of its refusal rate, by the bytes they store ([`crate::refusal_rate`]).
//!    A call whose own deadline leaves its handler less than [`MIN_HANDLER_TIME`], before the
//!    preflight or before the intent, is answered [`CallError::NoTimeToStart`] there: nothing
//!    is journaled or spent, and its task id stays free. An intent committed whose sync failed
//!    ([`crate::store::StoreError::NotDurable`]) is not taken for one never written: its
//!    handler is not started, it is closed withdrawn with its units given back, and the caller
//!    is answered [`CallError::IntentNotDurable`];
//! 3. **execute** the handler, then the tool's finish function when it has one (plugin code
//!    too), both under the handler's deadline ([`crate::deadline`]). A handler is never started
//!    with its deadline already due (under a millisecond left, which a plugin would read as no
//!    limit): its intent is then closed withdrawn, its units given back, nothing committed,
//!    and the caller is answered [`CallError::NotStarted`];
//! 4. **finish**: the outcome as the broker records it, and the output (what the finish
//!    function made of it, when the tool has one);
//! 5. **commit** outcome, records, output, invocation record, entry, world and task state in
//!    one transaction (durable point 2): submitted to the store's writer, and answered by the
//!    [`Committing`] it returns once that commit is durable; the episode stays busy until then.
//!    A commit made whose sync failed is answered [`CallError::NotConfirmed`] and nothing
//!    writes it over: a later commit synced makes it durable, and a resend of its task id
//!    replays it then (answered [`CallError::NotConfirmed`] again while that sync fails).
//!
//! [`Coordinator::invoke`] runs every step on the calling thread. An async caller splits them
//! where threads should change: [`Coordinator::begin`] opens and plans on the caller's own
//! thread (store reads and the pure interpreter; a replay is answered and a refused plan's
//! entry submitted there), [`Coordinator::run_effect`] runs steps 2 to 4 on a thread that may
//! block on a handler, and the caller awaits the [`Committing`].
//!
//! If anything after the effect fails, the outcome and record are written alone and the caller
//! gets [`CallError::EffectsUnrecorded`] with the record refs. If the handler overruns its
//! deadline the caller gets [`CallError::HandlerTimedOut`] at once; the intent stays
//! indeterminate until the handler really returns, then its outcome and record are journaled
//! the same way (never committed to the log), and only then is the episode free for its next
//! call.
//!
//! Every transaction that writes a call's objects also lets the call's episode read them
//! ([`crate::access`]).
//!
//! Calls in one episode run one at a time; calls in different episodes proceed in parallel and
//! never conflict at the head, because the writer binds index and link at commit time.
//!
//! This file is the pipeline. What it speaks of lives beside it: `handler` (the handler
//! interface and the loaded set), `call` (calls, their results and errors), `hooks` (the clock
//! and crash points tests inject), `turns` (one call at a time per episode), `outcome` (a
//! handler's run, the record its answer settles into, and outcomes journaled without a
//! commit), `closed` (calls closed without an effect, and the `world` block of every answer),
//! `record` (the invocation record, written directly), `known` (the objects each episode
//! already holds, left out of its later commits) and `committing` (the answer of a submitted
//! commit).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::access;
use crate::broker::{self, Capability, Decision, Denial, EffectRecord, HandlerIdentity};
use crate::canon;
use crate::deadline::{self, Runner, Spawner, Watch};
use crate::journal::{self, Intent, JournalError, OutcomeStatus};
use crate::log::{self, Append, HeadBinding};
use crate::object::{sid, Object, Ref};
use crate::plan::{Plan, PlannedEffect};
use crate::refusal_rate::{RefusalLimiter, RefusalRate};
use crate::registry::{self, Registry, RegistryEntry};
use crate::session::Session;
use crate::store::{Store, Submitted, WriteCtx};
use crate::task::{self, TaskPhase, TaskState};
use crate::transition::Transition;

/// Largest canonical input and output object, in bytes.
pub const MAX_IO_BYTES: usize = 1 << 20;
/// How long a handler may run by default: its request carries the deadline and the execute
/// step enforces it.
pub const HANDLER_DEADLINE: Duration = Duration::from_secs(10);

/// The least time a handler is started with. A call whose own deadline
/// ([`Coordinator::invoke_until`], the daemon's call deadline) leaves its handler less than
/// this (or less than [`CoordinatorConfig::handler_deadline`], when that is shorter) is refused
/// before its intent is journaled: answered [`CallError::NoTimeToStart`], with nothing
/// journaled or spent and its task id left free for a resend.
///
/// Why 1 s: a plugin keeps part of its deadline back to answer a clear failure before the
/// daemon gives up on it (the shipped git plugin 750 ms, the ailang plugin up to 500 ms). Given
/// less than that, a plugin has no time left for its work and fails at once, or (told a
/// deadline it cannot meet) overruns it: either way the call would spend a budget unit on an
/// effect that never ran. 1 s leaves git at least 250 ms for its work, and is a twentieth of
/// the daemon's default call deadline (20 s), so a single call never meets it; the calls that
/// do are the late items of a batch, or of a queue, whose shared deadline is nearly spent.
pub const MIN_HANDLER_TIME: Duration = Duration::from_secs(1);

/// A handler deadline closer than this is due: the handler ABI counts in whole milliseconds,
/// and `0` there means no limit at all.
const DUE: Duration = Duration::from_millis(1);

/// The text of rule R8.
pub const R8_MESSAGE: &str = "transition declares an effect this daemon has no handler for";

mod call;
mod closed;
mod committing;
mod handler;
mod hooks;
mod known;
mod outcome;
mod record;
mod task_view;
mod turns;

pub use call::{
    BudgetLine, Call, CallError, CallOutput, CallState, EffectSummary, Reconciliation, Surface,
};
pub use committing::Committing;
pub use handler::{EffectHandler, EffectRequest, HandlerOutcome, Handlers, HandlersError};
pub use hooks::{Clock, CrashPoint, Hooks, SystemClock};
pub use known::{KNOWN_EPISODES_MAX, KNOWN_MAX};
pub use task_view::TaskView;

use closed::{
    closed_by_denial, declined, ended_body, output_with_world, output_with_world_after, refusal,
    summary,
};
use hooks::NoHooks;
use known::KnownObjects;
use outcome::{
    settle, settle_unrecorded, submit_unrecorded, unrecorded_error, write_unrecorded, FinishJob,
    HandlerJob, LateCall, Ran, Settled, Shaped,
};
use record::InvocationRecord;
use turns::EpisodeTurns;

// ---------------------------------------------------------------------------------------------
// The coordinator.

/// Configuration of a [`Coordinator`].
pub struct CoordinatorConfig {
    pub registry: String,
    /// `<root>/<episode>` is the worktree bound to scope `worktree`.
    pub workspace_root: Option<PathBuf>,
    pub clock: Arc<dyn Clock>,
    pub hooks: Arc<dyn Hooks>,
    /// How long a handler may run ([`HANDLER_DEADLINE`] by default); a caller's own earlier
    /// deadline ([`Coordinator::invoke_until`]) shortens it.
    pub handler_deadline: Duration,
    /// Where handlers run for callers of [`Coordinator::invoke_until`] (one thread each by
    /// default); [`Coordinator::invoke_watched`] runs them on the calling thread.
    pub spawn: Spawner,
    /// What committed refusals and denials cost each credential.
    pub refusal_rate: RefusalRate,
    /// Nothing but this coordinator spends its store's budgets (the daemon: one per store,
    /// under the store's lock). An effect that only reads ([`Handlers::mark_read_only`])
    /// then runs while its intent is on its way to the disk, instead of after: the intent's
    /// check of the budget cannot fail between admission and the writer, since only this
    /// coordinator spends and it runs an episode's calls one at a time. The call is still
    /// answered only once its intent and entry are durable. Off by default.
    pub sole_spender: bool,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            registry: registry::DEFAULT_REGISTRY.into(),
            workspace_root: None,
            clock: Arc::new(SystemClock),
            hooks: Arc::new(NoHooks),
            handler_deadline: HANDLER_DEADLINE,
            spawn: deadline::thread_spawner(),
            refusal_rate: RefusalRate::default(),
            sole_spender: false,
        }
    }
}

pub struct Coordinator {
    store: Store,
    handlers: Handlers,
    config: CoordinatorConfig,
    episodes: Arc<EpisodeTurns>,
    /// Invocation ids of the calls running now, each with its tool and input: a resend with
    /// other arguments is told apart from a resend of the same call before either is journaled.
    in_flight: Arc<Mutex<HashMap<String, Attempt>>>,
    /// The registry loaded last, and the snapshot its head was last read in.
    registry_cache: Mutex<(Arc<Registry>, usize)>,
    refusals: RefusalLimiter,
    overruns: Arc<Overruns>,
    /// The objects each episode holds already: a call leaves them out of its commit.
    known: Arc<KnownObjects>,
}

/// Handlers that overran their deadline: how many ever did, how many still run.
#[derive(Debug, Default)]
pub struct Overruns {
    total: AtomicU64,
    /// Signed: a late handler may report back before its overrun is counted.
    running: AtomicI64,
}

impl Overruns {
    /// Handlers that ever overran their deadline.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Handlers past their deadline that have not returned yet.
    pub fn running(&self) -> u64 {
        self.running.load(Ordering::Relaxed).max(0) as u64
    }
}

/// Everything decided before the effect: carried through the pipeline.
struct Prepared {
    call: Call,
    invocation_id: String,
    task: String,
    entry: RegistryEntry,
    input: Object,
    worktree: Option<PathBuf>,
}

impl Prepared {
    fn ids(&self) -> CallIds {
        CallIds {
            invocation_id: self.invocation_id.clone(),
            episode: self.call.session.episode.clone(),
            task: self.task.clone(),
            skill_id: self.call.skill_id.clone(),
            input_ref: self.input.hash,
        }
    }
}

/// How the caller waits for a call: its own deadline, and the watch it waits through when
/// handlers are to run on the pipeline's thread ([`Coordinator::run_effect`]).
#[derive(Clone, Copy)]
struct Wait<'w> {
    until: Option<Instant>,
    watch: Option<&'w Watch>,
}

/// What names one call in the journal and the task table.
struct CallIds {
    invocation_id: String,
    episode: String,
    task: String,
    skill_id: String,
    input_ref: Ref,
}

// The pipeline's steps, each the input of the next (module docs).

/// Step 0's outcome: a new call with its turn in its episode, or the result an earlier
/// attempt with the same task id committed.
enum Opened {
    New(Box<Accepted>),
    /// An earlier attempt's committed result, with the snapshot it was read in.
    Replayed(CallOutput, usize),
}

/// A call that may run: prepared, and holding its episode's turn.
struct Accepted {
    call: Prepared,
    busy: Busy,
}

/// Step 1's output: the plan and its object.
struct Planned {
    call: Prepared,
    plan: Plan,
    plan_obj: Object,
    busy: Busy,
}

/// Step 2's input: a plan that asks for an effect (a refused plan is closed at once).
struct EffectPlanned {
    call: Prepared,
    effect: PlannedEffect,
    finish: bool,
    plan_obj: Object,
    busy: Busy,
}

/// Step 2's outcome: an admitted effect whose intent is durable, or a call closed without one
/// (a denied or declined effect), ready to commit.
enum Admission {
    Admitted(Admitted),
    Closed(Finished),
}

/// Step 2's output: the effect the broker allowed, its request, and the budget before it.
struct Admitted {
    call: Prepared,
    effect: Arc<PlannedEffect>,
    finish: bool,
    plan_obj: Object,
    request: Object,
    budget_before: u64,
    intent: IntentUnderWay,
    busy: Busy,
}

/// Step 3's output: what the handler reported, and who ran it.
struct Executed {
    call: Prepared,
    effect: Arc<PlannedEffect>,
    plan_obj: Object,
    request: Object,
    budget_before: u64,
    ran: Ran,
    /// The finish function's result, when the tool has one and the handler succeeded.
    shaped: Option<Shaped>,
    intent: IntentUnderWay,
    busy: Busy,
}

/// Step 4's output, the input of the commit: the objects, the effect records and the output.
struct Finished {
    call: Prepared,
    plan_ref: Ref,
    records: Vec<Ref>,
    objects: Vec<Object>,
    /// The output object's payload: canonical JSON, written once.
    output: Vec<u8>,
    /// The summaries the caller gets back.
    effects: Vec<EffectSummary>,
    /// The effect that ran, if one did: its journal outcome is committed with the entry.
    ran: Option<RanEffect>,
    /// The intent of the effect that ran, when it was still on its way to the disk as the
    /// effect ran: the answer waits for it too.
    intent: IntentUnderWay,
    /// Held until the commit is done: the episode is busy until then.
    busy: Busy,
}

/// A read's intent submitted but not waited for before its handler ran
/// ([`CoordinatorConfig::sole_spender`]): `Some` until the commit's answer has seen it durable.
type IntentUnderWay = Option<Submitted<bool, CallError>>;

/// Durable point 1: how the intent went.
enum Journaled {
    /// Durable: the effect may run.
    Durable,
    /// Submitted for a read, which runs at once ([`CoordinatorConfig::sole_spender`]).
    UnderWay(Submitted<bool, CallError>),
    /// The budget was spent first, by another writer: the effect is denied.
    Refused,
}

/// An effect that ran: its outcome's status, its record and the objects that record it.
struct RanEffect {
    status: OutcomeStatus,
    record: Ref,
    objects: Vec<Object>,
    /// The effect's request, stored with its intent.
    request: Ref,
}

/// Everything that keeps an episode busy with one call: its turn, the in-flight claim of its
/// invocation id and the caller's hold. Dropped when the episode is free again.
struct Busy(#[allow(dead_code)] Box<dyn Send>);

impl Coordinator {
    pub fn new(store: Store, handlers: Handlers, mut config: CoordinatorConfig) -> Coordinator {
        // Resolved once: worktrees are bound under the root's real path ([`bind_worktree`]).
        // A root that does not exist yet is taken as an absolute path.
        config.workspace_root = config.workspace_root.map(|root| {
            root.canonicalize()
                .or_else(|_| std::path::absolute(&root))
                .unwrap_or(root)
        });
        Coordinator {
            store,
            handlers,
            episodes: Arc::default(),
            in_flight: Arc::default(),
            registry_cache: Mutex::new((Arc::new(Registry::default()), 0)),
            overruns: Arc::default(),
            known: Arc::default(),
            refusals: RefusalLimiter::new(config.refusal_rate),
            config,
        }
    }

    /// How many objects the episode is known to hold ([`KNOWN_MAX`] in all at most): those a
    /// call leaves out of its commit. For tests.
    #[doc(hidden)]
    pub fn objects_known(&self, episode: &str) -> usize {
        self.known.held_by(episode)
    }

    /// The tool and input of the call running now under this surface and task id, if any.
    /// A resend that finds another tool or other arguments here is a reused key, not a wait
    /// for the same call, even before the running call's first row is written.
    pub fn running_attempt(
        &self,
        surface: Surface,
        episode: &str,
        task_id: &str,
    ) -> Option<Attempt> {
        let id = surface.invocation_id(episode, task_id);
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    /// True while a call with this surface and task id runs in the episode (an overrunning
    /// handler included) and its outcome is not yet durable: a resend would be refused
    /// [`CallError::TaskIdReused`]. A late handler's outcome is journaled just before its mark
    /// is released; in between, the store's answer is the one a resend gets (as in `open`).
    pub fn in_flight(&self, surface: Surface, episode: &str, task_id: &str) -> bool {
        let id = surface.invocation_id(episode, task_id);
        let marked = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&id);
        if !marked {
            return false;
        }
        let task = surface.task_key(task_id);
        !matches!(
            self.store.read(|r| task::get(r, episode, &task)),
            Ok(Some(state)) if state.phase != TaskPhase::Pending
        )
    }

    /// Handlers that overran their deadline.
    pub fn overruns(&self) -> &Overruns {
        &self.overruns
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    /// The root that scope `worktree` binds episodes under, when the daemon has one.
    pub fn workspace_root(&self) -> Option<&std::path::Path> {
        self.config.workspace_root.as_deref()
    }

    pub fn now(&self) -> i64 {
        self.config.clock.now()
    }

    /// The current registry, reloaded only when its head moved.
    pub fn registry(&self) -> Result<Arc<Registry>, CallError> {
        let name = &self.config.registry;
        // Nothing committed since the head was last read, here or by another process: it
        // cannot have moved, and no transaction is needed to know it (a call looks its tool up,
        // then prepares, each asking for the registry).
        let last = self.store.last_commit();
        {
            let cache = self.registry_cache()?;
            if cache.1 == last && cache.0.name == *name {
                return Ok(cache.0.clone());
            }
        }
        let (head, snapshot) = self.store.read(|r| {
            Ok::<_, crate::store::StoreError>((registry::head(r, name)?, r.snapshot()))
        })?;
        let mut cache = self.registry_cache()?;
        if cache.0.reference != head || cache.0.name != *name {
            cache.0 = Arc::new(registry::load(&self.store, name)?);
        }
        cache.1 = snapshot;
        Ok(cache.0.clone())
    }

    fn registry_cache(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, (Arc<Registry>, usize)>, CallError> {
        self.registry_cache
            .lock()
            .map_err(|_| CallError::Internal("registry cache poisoned".into()))
    }

    /// The tools this session sees: those whose `access` one of its grants satisfies (seed
    /// 001): the effect and scope match, and the access's cost is within the grant's remaining
    /// budget. An access that costs 0 (every shipped tool's) is within any, so the episode's
    /// spend is read only when a tool's access costs more.
    pub fn visible(&self, session: &Session) -> Result<Vec<RegistryEntry>, CallError> {
        let registry = self.registry()?;
        let mut spent = None;
        let mut seen = Vec::new();
        for e in registry.entries() {
            let access = &e.transition.access;
            if !session.grants_access(&access.effect, &access.scope) {
                continue;
            }
            if access.cost > 0 {
                let spent = match &spent {
                    Some(spent) => spent,
                    None => spent.insert(self.store.read(|r| journal::spent(r, &session.episode))?),
                };
                let used = spent
                    .get(&(access.effect.clone(), access.scope.clone()))
                    .copied()
                    .unwrap_or(0);
                let covered = session.grants.iter().any(|g| {
                    g.effect == access.effect
                        && g.scope == access.scope
                        && g.budget.saturating_sub(used) >= access.cost
                });
                if !covered {
                    continue;
                }
            }
            seen.push(e.clone());
        }
        Ok(seen)
    }

    /// What the journal and the task table know of one call of this session's episode, by
    /// surface and task id (an A2A task id or an MCP idempotency key). `None`: never seen.
    pub fn reconcile(
        &self,
        session: &Session,
        surface: Surface,
        task_id: &str,
    ) -> Result<Option<Reconciliation>, CallError> {
        let episode = &session.episode;
        let key = surface.task_key(task_id);
        let invocation_id = surface.invocation_id(episode, task_id);
        // The task state alone answers: its phase is written in the same transactions as the
        // call's journal records (pending with the intent; committed or unrecorded with the
        // outcome), so one read of it is consistent; the journal's own receipt is what
        // `/v1/receipts` serves.
        let Some(state) = self.store.read(|r| task::get(r, episode, &key))? else {
            return Ok(None);
        };
        let phase = CallState::of(state.phase);
        let effects = self.summaries(&state.effect_records)?;
        Ok(Some(Reconciliation {
            invocation_id,
            skill_id: state.skill_id,
            state: phase,
            entry_index: state.entry_index,
            output_ref: state.output_ref,
            world_ref: state.world_ref,
            effects,
        }))
    }

    /// The episode's budget per grant: granted, spent (from the journal) and remaining.
    pub fn budget(&self, session: &Session) -> Result<Vec<BudgetLine>, CallError> {
        let spent = self.store.read(|r| journal::spent(r, &session.episode))?;
        let now = self.now();
        Ok(session
            .grants
            .iter()
            .map(|g| {
                let used = journal::spent_on(&spent, g);
                BudgetLine {
                    effect: g.effect.clone(),
                    scope: g.scope.clone(),
                    granted: g.budget,
                    spent: used,
                    remaining: g.budget.saturating_sub(used),
                    live: now < session.expires_at,
                }
            })
            .collect())
    }

    /// Run one call to completion under the configured handler deadline. See the module docs
    /// for the pipeline.
    pub fn invoke(&self, call: &Call) -> Result<CallOutput, CallError> {
        self.invoke_until(call, None, ())
    }

    /// Run one call; its handler gets the configured handler deadline, cut short by the
    /// caller's own deadline `until` when that comes first. `hold` is kept as long as the
    /// episode is busy with this call: dropped when the call returns or, when its handler
    /// overran, once the handler really returned and its outcome was journaled.
    ///
    /// The handler runs on a thread from the configured spawner, and this thread returns
    /// [`CallError::HandlerTimedOut`] at its deadline.
    pub fn invoke_until(
        &self,
        call: &Call,
        until: Option<Instant>,
        hold: impl Send + 'static,
    ) -> Result<CallOutput, CallError> {
        self.run(call, Wait { until, watch: None }, hold)
    }

    /// [`Coordinator::invoke_until`] with the handler run on this thread, for a caller that
    /// waits for this thread through `watch`, as with [`Coordinator::run_effect`]; the commit
    /// is waited for here.
    pub fn invoke_watched(
        &self,
        call: &Call,
        until: Option<Instant>,
        hold: impl Send + 'static,
        watch: &Watch,
    ) -> Result<CallOutput, CallError> {
        let wait = Wait {
            until,
            watch: Some(watch),
        };
        self.run(call, wait, hold)
    }

    /// The whole pipeline on this thread.
    fn run(
        &self,
        call: &Call,
        wait: Wait<'_>,
        hold: impl Send + 'static,
    ) -> Result<CallOutput, CallError> {
        match self.begin(call.clone(), hold)? {
            Begun::Replayed(out) => Ok(out),
            Begun::Committing(committing) => committing.wait(),
            Begun::Effect(effect) => self.effect(effect, wait)?.wait(),
        }
    }

    /// Steps 0 and 1 (open, plan) on the caller's thread, which may be an async runtime's:
    /// nothing here waits for a handler or a commit. A replay is answered, a refused plan is
    /// submitted for commit, and an effect comes back to be run by
    /// [`Coordinator::run_effect`] on a thread that may block. `hold` is kept as long as the
    /// episode is busy with this call (as for [`Coordinator::invoke_until`]).
    ///
    /// The one wait here is for the episode's turn, while another call of the episode holds
    /// it: a caller on an async runtime serializes each episode's calls before this (the
    /// daemon's admission holds the episode's queue turn as long as the turn here), so it never
    /// waits.
    pub fn begin(&self, call: Call, hold: impl Send + 'static) -> Result<Begun, CallError> {
        let opened = match self.open(call, hold)? {
            Opened::New(opened) => opened,
            Opened::Replayed(committed, snapshot) => return Ok(self.replayed(committed, snapshot)),
        };
        let Planned {
            call,
            plan,
            plan_obj,
            busy,
        } = self.plan(*opened)?;
        Ok(match plan {
            Plan::Refused { message } => {
                Begun::Committing(self.commit(refusal(call, plan_obj, message, busy)?))
            }
            Plan::Effect { effect, finish } => Begun::Effect(EffectCall(Box::new(EffectPlanned {
                call,
                effect,
                finish,
                plan_obj,
                busy,
            }))),
        })
    }

    /// Steps 2 to 4 of a call [`Coordinator::begin`] planned with an effect, its handler run
    /// on this thread for a caller that waits for this thread through `watch`
    /// ([`crate::deadline`]): that caller gives up at the handler's deadline and answers its
    /// own caller as timed out; this thread then journals the handler's outcome when it
    /// returns, and returns [`CallError::HandlerTimedOut`] too. Step 5, the commit, is
    /// submitted, not waited for. Saves a thread hop per handler call and per commit.
    pub fn run_effect(
        &self,
        call: EffectCall,
        until: Option<Instant>,
        watch: &Watch,
    ) -> Result<Committing, CallError> {
        let wait = Wait {
            until,
            watch: Some(watch),
        };
        self.effect(call, wait)
    }

    /// A watch for [`Coordinator::run_effect`], knowing this coordinator's handler deadline.
    pub fn watch(&self) -> Watch {
        Watch::new(self.config.handler_deadline)
    }

    fn effect(
        &self,
        EffectCall(planned): EffectCall,
        wait: Wait<'_>,
    ) -> Result<Committing, CallError> {
        let admitted = match self.admit(*planned, wait)? {
            Admission::Admitted(admitted) => admitted,
            Admission::Closed(denied) => return Ok(self.commit(denied)),
        };
        let executed = self.execute(admitted, wait)?;
        let finished = self.finish(executed)?;
        Ok(self.commit(finished))
    }

    // -- 0. open ---------------------------------------------------------------------------

    /// The call's turn in its episode, or the committed result of an earlier attempt with the
    /// same task id. New work is refused here, before anything is written, past the store's
    /// reserve or when a declared effect has no handler (R8).
    fn open(&self, call: Call, hold: impl Send + 'static) -> Result<Opened, CallError> {
        let prepared = self.prepare(call)?;
        let attempt = Attempt {
            skill_id: prepared.call.skill_id.clone(),
            input_ref: prepared.input.hash,
        };
        let flight = match self.claim_in_flight(&prepared.invocation_id, attempt) {
            Ok(flight) => flight,
            // The earlier attempt still holds its mark, but its outcome may already be
            // durable (a late handler's is journaled just before the mark is released): what
            // the store says wins once the attempt is resolved.
            Err(CallError::TaskIdReused) => {
                return match self.previous_attempt(&prepared) {
                    Ok(Some((done, snapshot))) => Ok(Opened::Replayed(done, snapshot)),
                    Err(e @ CallError::EffectsUnrecorded { .. }) => Err(e),
                    _ => Err(CallError::TaskIdReused),
                }
            }
            Err(e) => return Err(e),
        };
        let turn = self.episodes.enter(&prepared.call.session.episode);
        let busy = Busy(Box::new((flight, turn, hold)));
        // A call that brings no task id gets a minted one (128 random bits), which no earlier
        // attempt can have: the lookup would cost a store read on every such call.
        if prepared.call.task_id.is_some() {
            if let Some((done, snapshot)) = self.previous_attempt(&prepared)? {
                return Ok(Opened::Replayed(done, snapshot));
            }
        }
        self.store
            .admits_client_work()
            .map_err(CallError::StoreFull)?;
        let call = self.check_handlers(prepared)?;
        Ok(Opened::New(Box::new(Accepted { call, busy })))
    }

    /// Who may make this call, and what names it: the tool the session sees, the pinned
    /// `transitionFn`, the task id and the canonical input.
    fn prepare(&self, call: Call) -> Result<Prepared, CallError> {
        let episode = &call.session.episode;
        let task = match &call.task_id {
            Some(t) if task::valid_task_id(t) => t.clone(),
            Some(_) => return Err(CallError::InvalidTaskId),
            None => random_task_id()?,
        };
        let registry = self.registry()?;
        let entry = registry
            .get(&call.skill_id)
            .cloned()
            .ok_or(CallError::NotAuthorized)?;
        let access = &entry.transition.access;
        if !call.session.grants_access(&access.effect, &access.scope) {
            return Err(CallError::NotAuthorized);
        }
        if let Some(pin) = call.transition_fn {
            if pin != entry.transition_fn {
                return Err(CallError::PinMismatch);
            }
        }
        let input = Object::json(sid::INVOCATION_INPUT, call.surface.written_by(), &call.args)
            .map_err(|e| CallError::InvalidArguments(e.to_string()))?;
        if input.payload.len() > MAX_IO_BYTES {
            return Err(CallError::InvalidArguments(format!(
                "arguments are {} bytes; the limit is {MAX_IO_BYTES}",
                input.payload.len()
            )));
        }
        let invocation_id = call.surface.invocation_id(episode, &task);
        // Task ids are per surface: an A2A task id and an MCP key never collide.
        let task = call.surface.task_key(&task);
        Ok(Prepared {
            call,
            invocation_id,
            task,
            entry,
            input,
            worktree: None,
        })
    }

    fn claim_in_flight(&self, id: &str, attempt: Attempt) -> Result<InFlight, CallError> {
        let mut set = self
            .in_flight
            .lock()
            .map_err(|_| CallError::Internal("in-flight set poisoned".into()))?;
        match set.entry(id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(_) => return Err(CallError::TaskIdReused),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(attempt);
            }
        }
        Ok(InFlight {
            set: self.in_flight.clone(),
            id: id.to_owned(),
        })
    }

    /// A resent task id: the committed result again, or a refusal; never a second run.
    fn previous_attempt(&self, p: &Prepared) -> Result<Option<(CallOutput, usize)>, CallError> {
        let episode = &p.call.session.episode;
        let (state, snapshot) = self
            .store
            .read(|r| Ok::<_, CallError>((task::get(r, episode, &p.task)?, r.snapshot())))?;
        let Some(state) = state else {
            return Ok(None);
        };
        if state.skill_id != p.call.skill_id || state.input_ref != p.input.hash {
            return Err(CallError::TaskIdReused);
        }
        match state.phase {
            TaskPhase::Pending => Err(CallError::KeyPending),
            TaskPhase::Unrecorded => Err(CallError::EffectsUnrecorded {
                records: state.effect_records,
            }),
            // Nothing ran and nothing was spent; the key stays used.
            TaskPhase::Withdrawn => Err(CallError::Withdrawn),
            TaskPhase::Committed => self
                .replay_committed_as(&p.invocation_id, &state)
                .map(|done| Some((done, snapshot))),
        }
    }

    /// A replay of a committed call, answered once the snapshot that found it is durable: its
    /// commit's sync may have failed ([`CallError::NotConfirmed`]), and a replay must not say
    /// committed what a power cut could still take back. Where that wait fails too, the
    /// resend is answered [`CallError::NotConfirmed`] again.
    fn replayed(&self, committed: CallOutput, snapshot: usize) -> Begun {
        let Some(durable) = self.store.until_durable(snapshot) else {
            return Begun::Replayed(committed);
        };
        Begun::Committing(Committing(Box::pin(async move {
            match durable.await {
                Ok(()) => Ok(committed),
                Err(err) => {
                    tracing::error!(invocation = %committed.invocation_id, "a resend found its call committed, but the store could not make it durable: {err}; it is answered not confirmed again");
                    Err(CallError::NotConfirmed)
                }
            }
        })))
    }

    /// `id`'s committed result again. A resend is checked for `id`, the call resent, as
    /// `GET /v1/calls` checks it, not for the id the stored task state names: a row holding
    /// another call's state would otherwise replay that call's result under this key.
    fn replay_committed_as(&self, id: &str, state: &TaskState) -> Result<CallOutput, CallError> {
        let (Some(output_ref), Some(entry_index), Some(world_ref)) =
            (state.output_ref, state.entry_index, state.world_ref)
        else {
            return Err(CallError::Internal(
                "committed task without its refs".into(),
            ));
        };
        // The entry the task state names must still hold this call: a log that lost its end
        // (and perhaps grew again over the same indexes) is not replayed as committed.
        self.store.read(|r| {
            crate::verify::committed_entry_holds(r, id, entry_index).map_err(|e| match e {
                crate::verify::VerifyError::Store(s) => s,
                e => crate::storage::StoreError::Corrupt(format!(
                    "{e}; it is not replayed as committed"
                )),
            })
        })?;
        let output = self
            .store
            .read(|r| r.object(&output_ref))?
            .filter(Object::verify)
            .ok_or_else(|| {
                CallError::Internal(format!(
                    "committed output {output_ref} is missing or damaged"
                ))
            })?;
        let effects = self.summaries(&state.effect_records)?;
        Ok(CallOutput {
            invocation_id: state.invocation_id.clone(),
            output: output.payload,
            output_ref,
            entry_index,
            world_ref,
            replayed: true,
            effects,
        })
    }

    /// Summaries of stored effect records (for replays and reconciliation).
    fn summaries(&self, records: &[Ref]) -> Result<Vec<EffectSummary>, CallError> {
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            let Some(obj) = self.store.read(|rd| rd.object(r))? else {
                continue;
            };
            let rec: EffectRecord = canon::parse(&obj.payload)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
                .ok_or_else(|| CallError::Internal(format!("effect record {r} is unreadable")))?;
            out.push(summary(&rec, *r));
        }
        Ok(out)
    }

    fn check_handlers(&self, mut p: Prepared) -> Result<Prepared, CallError> {
        let t = &p.entry.transition;
        if self.handlers.not_running(&t.id).is_some()
            || t.declared_effects
                .iter()
                .any(|e| self.handlers.get(&e.effect).is_none())
        {
            return Err(CallError::NoHandler);
        }
        if t.declared_effects.iter().any(|e| e.scope == "worktree") {
            if let Some(root) = &self.config.workspace_root {
                p.worktree = Some(worktree_of(root, &p.call.session.episode)?);
            }
        }
        Ok(p)
    }

    // -- 1. plan ---------------------------------------------------------------------------

    /// The pure interpreter's plan for the arguments, and the plan object every outcome of
    /// the call commits.
    fn plan(&self, accepted: Accepted) -> Result<Planned, CallError> {
        let Accepted { call, busy } = accepted;
        let plan = call.entry.transition.plan_call(&call.call.args);
        let plan_obj = Object::new(
            sid::EFFECT_PLAN,
            call.call.surface.written_by(),
            plan.canonical()?,
        );
        Ok(Planned {
            call,
            plan,
            plan_obj,
            busy,
        })
    }

    // -- 2. admit --------------------------------------------------------------------------

    /// The broker's decision against the session's grants, with budgets reseeded from the
    /// journal, then the handler's preflight, then durable point 1: the intent, with its
    /// spend, before anything runs. A denial, a request the handler declined, or a budget
    /// another writer spent first is closed here, to be committed without an effect (a refused
    /// plan never gets here: [`Coordinator::begin`] closes it).
    fn admit(&self, planned: EffectPlanned, wait: Wait<'_>) -> Result<Admission, CallError> {
        let EffectPlanned {
            call: p,
            effect,
            finish,
            plan_obj,
            busy,
        } = planned;
        let t = &p.entry.transition;
        // Plan law: the effect must be exactly one of the declared triples.
        if !t
            .declared_effects
            .iter()
            .any(|d| d.effect == effect.effect && d.scope == effect.scope && d.cost == effect.cost)
        {
            return Err(CallError::Internal(format!(
                "plan of {} requested an undeclared effect {}@{} cost {}",
                t.id, effect.effect, effect.scope, effect.cost
            )));
        }
        let episode = &p.call.session.episode;
        let now = self.now();
        let spent = self.store.read(|r| journal::spent(r, episode))?;
        // The capabilities borrow the session, which `p` moves on with.
        let session = p.call.session.clone();
        let caps = session.capabilities(&spent);
        let payload = canon::object_to_vec(&effect.payload)?;
        let request = Object::new(
            sid::EFFECT_REQUEST,
            "host/broker",
            broker::encode_request(&effect.effect, &effect.scope, effect.cost, now, &payload),
        );
        let (grant, budget_before) =
            match broker::decide(&caps, &effect.effect, &effect.scope, effect.cost, now) {
                Decision::Denied(denial) => {
                    let denied = self.denial(p, plan_obj, request, &effect, &caps, denial, busy)?;
                    return Ok(Admission::Closed(denied));
                }
                Decision::Allowed {
                    grant,
                    budget_before,
                } => (grant, budget_before),
            };
        let total_budget = p
            .call
            .session
            .grants
            .get(grant)
            .map(|g| g.budget)
            .unwrap_or(0);

        // Too little time left to run the handler: refused before anything is written.
        self.time_to_start(&p, &effect.effect, wait.until)?;
        // The handler may decline what it would refuse anyway, before anything is spent.
        let effect = Arc::new(effect);
        let busy = match self.preflight(&p, &effect, busy, wait)? {
            Preflighted::Proceed(busy) => busy,
            Preflighted::Declined { output, by, busy } => {
                let declined = declined(
                    p,
                    plan_obj,
                    request,
                    &effect,
                    budget_before,
                    by,
                    output,
                    busy,
                )?;
                return Ok(Admission::Closed(declined));
            }
        };

        // The preflight took its time: what is left must still be enough to run the handler.
        self.time_to_start(&p, &effect.effect, wait.until)?;
        // Durable point 1. The writer re-checks the spend: another process may have spent the
        // last unit.
        let intent = match self.journal_intent(&p, &request, &effect, total_budget) {
            Ok(Journaled::Durable) => None,
            Ok(Journaled::UnderWay(submitted)) => Some(submitted),
            Ok(Journaled::Refused) => {
                let denied =
                    self.denial(p, plan_obj, request, &effect, &caps, Denial::Budget, busy)?;
                return Ok(Admission::Closed(denied));
            }
            // The intent and its spend were committed, but their sync failed: they are not
            // "nothing written" (the next sync makes them durable), so the handler is not
            // started and the intent is closed withdrawn, its units given back; the
            // withdrawal's own sync makes both durable. Where it could not be written, the
            // intent stays open with its units spent: not confirmed committed, as a resend
            // finds it.
            Err(err) if err.committed_not_durable() => {
                let late = self.late_call(p.ids(), &effect, budget_before, request.hash);
                return Err(if late.not_durable(busy, &err) {
                    CallError::IntentNotDurable
                } else {
                    CallError::NotCommitted
                });
            }
            Err(err) => return Err(err),
        };
        self.config.hooks.reached(CrashPoint::AfterIntent);
        Ok(Admission::Admitted(Admitted {
            call: p,
            effect,
            finish,
            plan_obj,
            request,
            budget_before,
            intent,
            busy,
        }))
    }

    /// A denied effect, closed: its record is committed and nothing is spent.
    #[allow(clippy::too_many_arguments)]
    fn denial(
        &self,
        p: Prepared,
        plan_obj: Object,
        request: Object,
        effect: &PlannedEffect,
        caps: &[Capability],
        denial: Denial,
        busy: Busy,
    ) -> Result<Finished, CallError> {
        let remaining = caps
            .iter()
            .find(|c| c.effect == effect.effect && c.scope == effect.scope)
            .map(|c| c.budget)
            .unwrap_or(0);
        let record = EffectRecord::denied(
            &effect.effect,
            &effect.scope,
            effect.cost,
            remaining,
            denial,
            request.hash,
        );
        let record_obj = Object::new(sid::EFFECT_RECORD, "host/broker", record.canonical()?);
        let body = ended_body(&p, &effect.effect, "denied");
        let output = output_with_world(&body, &plan_obj.hash, &[(&record, record_obj.hash)])?;
        Ok(closed_by_denial(
            p, plan_obj, request, &record, record_obj, output, busy,
        ))
    }

    /// The handler's preflight, under the same deadline as its execute step. Past the deadline
    /// the caller is answered as timed out; nothing was journaled or spent, and the episode
    /// stays busy until the preflight returns.
    fn preflight(
        &self,
        p: &Prepared,
        effect: &Arc<PlannedEffect>,
        busy: Busy,
        wait: Wait<'_>,
    ) -> Result<Preflighted, CallError> {
        let Some(handler) = self.handlers.get(&effect.effect).cloned() else {
            return Ok(Preflighted::Proceed(busy));
        };
        let (job, deadline) = self.handler_job(p, handler.clone(), effect, wait.until, None);
        if is_due(deadline) {
            // Never started with a deadline already due; nothing was journaled or spent.
            return Err(CallError::NoTimeToStart);
        }
        let overruns = self.overruns.clone();
        let late = move |_: Option<Map<String, Value>>, busy: Busy| {
            overruns.running.fetch_sub(1, Ordering::Relaxed);
            drop(busy);
        };
        let on_abandon = self.overrun(&p.invocation_id, &effect.effect,
            "handler preflight overran its deadline; the call is answered as timed out, nothing was journaled or spent");
        match deadline::run_within(
            self.runner(wait),
            deadline,
            busy,
            move || job.preflight(),
            on_abandon,
            late,
        ) {
            Ok((None, busy)) => Ok(Preflighted::Proceed(busy)),
            Ok((Some(output), busy)) => Ok(Preflighted::Declined {
                output,
                by: catch_unwind(AssertUnwindSafe(|| handler.identity())).ok(),
                busy,
            }),
            Err(deadline::Overran) => Err(CallError::PreflightTimedOut),
        }
    }

    /// Whether the caller's deadline `until` still leaves a handler [`MIN_HANDLER_TIME`] (or the
    /// configured handler deadline, when that is shorter). If not, the call is answered
    /// [`CallError::NoTimeToStart`] before its intent: nothing journaled, nothing spent, the
    /// task id free.
    fn time_to_start(
        &self,
        p: &Prepared,
        effect: &str,
        until: Option<Instant>,
    ) -> Result<(), CallError> {
        let Some(until) = until else {
            return Ok(());
        };
        let left = until.saturating_duration_since(Instant::now());
        let least = MIN_HANDLER_TIME.min(self.config.handler_deadline).max(DUE);
        if left >= least {
            return Ok(());
        }
        tracing::warn!(
            invocation = %p.invocation_id,
            %effect,
            "call refused as timed out before its intent: {} ms of its deadline left, under the {} ms a handler is started with; nothing was journaled or spent",
            left.as_millis(),
            least.as_millis()
        );
        Err(CallError::NoTimeToStart)
    }

    /// Where this call's handlers run: on this thread when its caller waits through a watch.
    fn runner<'w>(&'w self, wait: Wait<'w>) -> Runner<'w> {
        match wait.watch {
            Some(watch) => Runner::Inline(watch),
            None => Runner::Spawned(&self.config.spawn),
        }
    }

    /// What happens when the caller gives up on a handler: the overrun is counted (until the
    /// handler returns) and logged.
    fn overrun(&self, invocation: &str, effect: &str, what: &'static str) -> deadline::OnAbandon {
        let overruns = self.overruns.clone();
        let (invocation, effect) = (invocation.to_owned(), effect.to_owned());
        Box::new(move || {
            overruns.total.fetch_add(1, Ordering::Relaxed);
            overruns.running.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(invocation = %invocation, effect = %effect, "{what}");
        })
    }

    /// What closes the call of `ids` whose intent for `effect` was journaled, when its handler
    /// cannot start or does not return in time ([`LateCall`]).
    fn late_call(
        &self,
        ids: CallIds,
        effect: &Arc<PlannedEffect>,
        budget_before: u64,
        request_ref: Ref,
    ) -> LateCall {
        LateCall {
            store: self.store.clone(),
            ids,
            effect: effect.clone(),
            budget_before,
            request_ref,
            overruns: self.overruns.clone(),
        }
    }

    /// One call into `handler` for this effect, and when its caller stops waiting: the
    /// configured handler deadline, or the caller's own `until` if that comes first.
    fn handler_job(
        &self,
        p: &Prepared,
        handler: Arc<dyn EffectHandler>,
        effect: &Arc<PlannedEffect>,
        until: Option<Instant>,
        finish: Option<FinishJob>,
    ) -> (HandlerJob, Instant) {
        let now = Instant::now();
        let own = now + self.config.handler_deadline;
        let deadline = until.map_or(own, |u| u.min(own));
        let job = HandlerJob {
            handler,
            invocation_id: p.invocation_id.clone(),
            episode: p.call.session.episode.clone(),
            worktree: p.worktree.clone(),
            effect: effect.clone(),
            deadline: deadline.saturating_duration_since(now),
            finish,
        };
        (job, deadline)
    }

    /// Journal the intent, and wait until it is durable unless the effect only reads and this
    /// coordinator is its store's only spender ([`CoordinatorConfig::sole_spender`]).
    fn journal_intent(
        &self,
        p: &Prepared,
        request: &Object,
        effect: &PlannedEffect,
        budget: u64,
    ) -> Result<Journaled, CallError> {
        let intent = Intent {
            invocation_id: p.invocation_id.clone(),
            episode: p.call.session.episode.clone(),
            effect: effect.effect.clone(),
            scope: effect.scope.clone(),
            cost: effect.cost,
            request_ref: request.hash,
        };
        let task_state = TaskState {
            invocation_id: p.invocation_id.clone(),
            skill_id: p.call.skill_id.clone(),
            input_ref: p.input.hash,
            phase: TaskPhase::Pending,
            output_ref: None,
            entry_index: None,
            world_ref: None,
            effect_records: Vec::new(),
        };
        // Written into the invocation's row with the intent's journal state, in one write.
        let task_bytes = task::stored_bytes(&task_state)?;
        let episode = p.call.session.episode.clone();
        let mut objects = vec![request.clone(), p.input.clone()];
        self.known.keep_unknown(&episode, &mut objects);
        // Checked here, not on the writer's thread, which sets the store's rate.
        log::check_objects(&objects)?;
        let beside = self.config.sole_spender && self.handlers.is_read_only(&effect.effect);
        // A minted id (the call brought none) is in no row: its intent writes the first.
        let minted = p.call.task_id.is_none();
        let op = move |w: &mut WriteCtx<'_, '_>| {
            match journal::append_intent_with_task(w, &intent, budget, minted, &task_bytes) {
                Ok(_) => {}
                Err(JournalError::BudgetExhausted { .. }) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
            for o in &objects {
                w.put_verified_object(o)?;
            }
            access::grant(w, &episode, &objects)?;
            Ok(true)
        };
        if beside {
            // The entry follows once the handler has run: the two may share a commit.
            return Ok(Journaled::UnderWay(self.store.submit_followed(op)));
        }
        Ok(match self.store.submit(op).wait()? {
            true => Journaled::Durable,
            false => Journaled::Refused,
        })
    }

    // -- 3. execute, under the handler's deadline --------------------------------------------

    /// Run the handler until its deadline: the configured handler deadline, or the caller's
    /// own if that comes first. Past it the caller is answered at once
    /// ([`CallError::HandlerTimedOut`]); the thread running the handler keeps the episode busy
    /// until the handler really returns, then journals the late outcome and record
    /// ([`LateCall::record`]).
    fn execute(&self, admitted: Admitted, wait: Wait<'_>) -> Result<Executed, CallError> {
        let Admitted {
            call: p,
            effect,
            finish,
            plan_obj,
            request,
            budget_before,
            intent,
            busy,
        } = admitted;
        let ((ran, shaped), busy) = match self.handlers.get(&effect.effect).cloned() {
            None => (
                ((HandlerOutcome::Failed(R8_MESSAGE.into()), None), None),
                busy,
            ),
            Some(handler) => {
                // Provenance names the plugin that ran the effect.
                let ran_by = catch_unwind(AssertUnwindSafe(|| handler.identity())).ok();
                let finish_job = match (finish, &p.entry.transition.finish) {
                    (true, Some(name)) => Some(FinishJob {
                        name: name.clone(),
                        args: p.call.args.clone(),
                    }),
                    _ => None,
                };
                let (job, deadline) =
                    self.handler_job(&p, handler, &effect, wait.until, finish_job);
                let late = self.late_call(p.ids(), &effect, budget_before, request.hash);
                if is_due(deadline) {
                    // The deadline passed while the intent was on its way to the disk (a store
                    // slower than the margin `time_to_start` leaves). The handler is never
                    // started with a deadline already due: the intent is closed withdrawn, its
                    // units given back, and the effect did not run.
                    // Where the withdrawal could not be written, the intent stays open with
                    // its units spent: not confirmed committed, as a resend finds it.
                    return Err(if late.not_started(busy) {
                        CallError::NotStarted
                    } else {
                        CallError::NotCommitted
                    });
                }
                let on_abandon = self.overrun(&p.invocation_id, &effect.effect,
                    "handler overran its deadline; the call is answered as timed out and its outcome will be journaled when the handler returns");
                match deadline::run_within(
                    self.runner(wait),
                    deadline,
                    busy,
                    move || {
                        let (outcome, shaped) = job.run();
                        ((outcome, ran_by), shaped)
                    },
                    on_abandon,
                    move |(ran, _shaped), busy| late.record(ran, busy),
                ) {
                    Ok(done) => done,
                    Err(deadline::Overran) => return Err(CallError::HandlerTimedOut),
                }
            }
        };
        self.config.hooks.reached(CrashPoint::AfterHandler);
        Ok(Executed {
            call: p,
            effect,
            plan_obj,
            request,
            budget_before,
            ran,
            shaped,
            intent,
            busy,
        })
    }

    // -- 4. finish -------------------------------------------------------------------------

    /// The handler's outcome as the broker records it, and the call's output: the handler's
    /// output, or what the finish function made of it in step 3, with the reserved `world`
    /// block. From here on the effect has happened: a failure writes its
    /// outcome and record alone ([`CallError::EffectsUnrecorded`]).
    fn finish(&self, executed: Executed) -> Result<Finished, CallError> {
        let Executed {
            call: p,
            effect,
            plan_obj,
            request,
            budget_before,
            ran,
            shaped,
            intent,
            busy,
        } = executed;
        let ran_by = ran.1.clone();
        let settled = settle(&p.invocation_id, &effect, budget_before, request.hash, ran)?;
        let shaping = self.shape_output(&p, &settled, &plan_obj, shaped);
        let (settled, output) = match shaping {
            // An answer past the limit (the handler's, or its finish function's, with the
            // `world` block) is the handler's failure, as if it had reported it: recorded
            // failed and committed, not left unrecorded with its unit spent.
            Err(Unshaped::TooLarge(why)) if settled.result.is_some() => {
                let failed = (HandlerOutcome::Failed(format!("its answer {why}")), ran_by);
                let settled = settle(
                    &p.invocation_id,
                    &effect,
                    budget_before,
                    request.hash,
                    failed,
                )?;
                let output = self.shape_output(&p, &settled, &plan_obj, None);
                (settled, output)
            }
            shaped => (settled, shaped),
        };
        let Settled {
            record,
            record_obj,
            status,
            result,
        } = settled;
        let effect_objects: Vec<Object> = std::iter::once(record_obj.clone())
            .chain(result.map(|(obj, _)| obj))
            .collect();
        let output = match output {
            Ok(o) => o,
            Err(Unshaped::TooLarge(why) | Unshaped::Other(why)) => {
                tracing::error!(invocation = %p.invocation_id, "post-effect failure: {why}");
                return Err(self.record_unrecorded(&p, status, effect_objects, record_obj.hash));
            }
        };
        // The request was stored with the intent; the commit adds the plan and what the effect
        // left.
        let mut objects = vec![plan_obj.clone()];
        objects.extend(effect_objects.iter().cloned());
        Ok(Finished {
            call: p,
            plan_ref: plan_obj.hash,
            records: vec![record_obj.hash],
            objects,
            output,
            effects: vec![summary(&record, record_obj.hash)],
            ran: Some(RanEffect {
                status,
                record: record_obj.hash,
                objects: effect_objects,
                request: request.hash,
            }),
            intent,
            busy,
        })
    }

    /// The result object's payload (without its hash yet): handler output or what the finish
    /// function made of it (run with the handler, under its deadline), plus the reserved
    /// `world` block, as canonical JSON. `result` is the effect's result object and the
    /// handler output it holds, when the handler succeeded.
    fn shape_output(
        &self,
        p: &Prepared,
        settled: &Settled,
        plan_obj: &Object,
        shaped: Option<Shaped>,
    ) -> Result<Vec<u8>, Unshaped> {
        let (record, result) = (&settled.record, &settled.result);
        let world = [(record, settled.record_obj.hash)];
        let bytes = match (result, shaped) {
            (Some(_), Some(shaped)) => {
                output_with_world(&shaped.map_err(Unshaped::Other)?, &plan_obj.hash, &world)
            }
            (Some((result, out)), None) => {
                output_with_world_after(&result.payload, out, &plan_obj.hash, &world)
            }
            (None, _) => output_with_world(
                &ended_body(p, &record.effect, record.status()),
                &plan_obj.hash,
                &world,
            ),
        }
        .map_err(|e| Unshaped::Other(e.to_string()))?;
        if bytes.len() > MAX_IO_BYTES {
            return Err(Unshaped::TooLarge(format!(
                "is {} bytes with its world block; the limit is {MAX_IO_BYTES}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// After a post-effect failure: make the outcome and record durable on their own.
    fn record_unrecorded(
        &self,
        p: &Prepared,
        status: OutcomeStatus,
        objects: Vec<Object>,
        record: Ref,
    ) -> CallError {
        let recorded = write_unrecorded(&self.store, &p.ids(), status, objects, record);
        unrecorded_error(recorded, record)
    }

    // -- 5. commit -------------------------------------------------------------------------

    /// Durable point 2, then the answer: the entry is submitted now and answered when its
    /// group commit is durable; the episode stays busy until then. After an effect, a failed
    /// commit still makes the outcome and record durable on their own
    /// ([`CallError::EffectsUnrecorded`]).
    fn commit(&self, finished: Finished) -> Committing {
        let Finished {
            call: p,
            objects,
            plan_ref,
            records,
            output,
            effects,
            ran,
            intent,
            busy,
        } = finished;
        let outcome = ran.as_ref().map(|r| (r.status, r.record));
        // What a later call of the episode may make again: every object of this call but its
        // invocation record, which names the invocation.
        let mut repeatable: Vec<Ref> = objects.iter().map(|o| o.hash).collect();
        repeatable.push(p.input.hash);
        repeatable.extend(ran.as_ref().map(|r| r.request));
        let entry = self.submit_entry(&p, objects, plan_ref, &records, output, outcome);
        let (hooks, store, ids) = (self.config.hooks.clone(), self.store.clone(), p.ids());
        let known = self.known.clone();
        Committing(Box::pin(async move {
            let committed = match entry {
                Ok((submitted, output_obj)) => submitted.await.map(|c| (c, output_obj)),
                Err(err) => Err(err),
            };
            // A read's intent still under way was queued before its entry, so its answer is in
            // by now. Without it nothing of the call was journaled (the entry's outcome needs
            // the intent, so it failed too) and the read changed nothing: its error is the
            // answer, with nothing to record.
            if let Some(intent) = intent {
                let lost = match intent.await {
                    Ok(true) => None,
                    // Committed, its sync failing: the entry queued after it answers for both
                    // (its own sync, if it succeeds, makes the intent durable too).
                    Err(err) if err.committed_not_durable() => None,
                    Ok(false) => Some(CallError::Internal(
                        "a read's budget was spent by another writer while it ran (sole_spender is set for a store with another spender)".into(),
                    )),
                    Err(err) => Some(err),
                };
                if let Some(err) = lost {
                    tracing::error!(invocation = %ids.invocation_id, "the intent of a read failed: {err}");
                    drop(busy);
                    return Err(err);
                }
            }
            let answer = match committed {
                // The entry was committed (the log holds it, its task says committed), only
                // its sync failed: nothing may write "unrecorded" over it. The next sync that
                // succeeds makes it durable, and a resend of the same task id replays it.
                Err(err) if err.committed_not_durable() => {
                    tracing::error!(invocation = %ids.invocation_id, "the call was committed, but not made durable: {err}; a resend of its task id replays it once a later commit is synced, and is answered not confirmed while syncs fail");
                    Err(CallError::NotConfirmed)
                }
                Ok((committed, output_obj)) => {
                    if ran.is_some() {
                        hooks.reached(CrashPoint::AfterCommit);
                    }
                    // Durable, and its intent too (awaited above): the episode holds them.
                    repeatable.push(output_obj.hash);
                    known.learn(&ids.episode, &repeatable);
                    Ok(CallOutput {
                        invocation_id: ids.invocation_id,
                        output: output_obj.payload,
                        output_ref: output_obj.hash,
                        entry_index: committed.entry.header.entry_index,
                        world_ref: committed.world_ref,
                        replayed: false,
                        effects,
                    })
                }
                Err(err) => match ran {
                    Some(ran) => {
                        tracing::error!(invocation = %ids.invocation_id, "commit after effect failed: {err}");
                        let unrecorded =
                            submit_unrecorded(&store, &ids, ran.status, ran.objects, ran.record);
                        let recorded = settle_unrecorded(&ids, unrecorded.await);
                        Err(unrecorded_error(recorded, ran.record))
                    }
                    None => Err(err),
                },
            };
            drop(busy);
            answer
        }))
    }

    /// Durable point 2, submitted: objects, journal outcome, invocation record, entry, world,
    /// head and task state, in one transaction bound at the head; with the output object.
    fn submit_entry(
        &self,
        p: &Prepared,
        mut objects: Vec<Object>,
        plan_ref: Ref,
        records: &[Ref],
        output: Vec<u8>,
        journal_outcome: Option<(OutcomeStatus, Ref)>,
    ) -> Result<(Submitted<log::Committed, CallError>, Object), CallError> {
        let surface = p.call.surface;
        let output_obj = Object::new(sid::INVOCATION_OUTPUT, surface.written_by(), output);
        let interpreter = log::interpreter_ref()?;
        let record = InvocationRecord {
            invocation_id: &p.invocation_id,
            episode_id: &p.call.session.episode,
            skill_id: &p.call.skill_id,
            transition_fn: p.entry.transition_fn,
            interpreter,
            semantics_epoch: log::SEMANTICS_EPOCH,
            input: p.input.hash,
            output: output_obj.hash,
            plan: plan_ref,
            effects: records,
        };
        let record_obj = Object::new(
            sid::INVOCATION_RECORD,
            surface.written_by(),
            record.canonical()?,
        );
        // After an effect, the intent's transaction already stored the input and granted it to
        // the episode (`journal_intent`); only a call without one stores it here.
        if journal_outcome.is_none() {
            objects.push(p.input.clone());
        }
        objects.push(output_obj.clone());
        self.known
            .keep_unknown(&p.call.session.episode, &mut objects);
        objects.push(record_obj.clone());
        // No effect ran (a plan refusal or a broker denial): the entry costs the caller tokens
        // of its refusal rate by the bytes it stores, and without them nothing is committed.
        if journal_outcome.is_none() {
            let stored = objects.iter().map(|o| o.payload.len()).sum();
            if !self.refusals.take(
                &p.call.session.credential_id,
                std::time::Instant::now(),
                stored,
            ) {
                return Err(CallError::RefusalRate);
            }
        }
        let append = Append {
            objects,
            transition_fn: p.entry.transition_fn,
            interpreter,
            written_by: surface.written_by().into(),
            transition_ref: record_obj.hash,
            state_root: output_obj.hash,
            binding: HeadBinding::AtHead,
        };
        // The record names the invocation: when its task id was minted here (128 random bits),
        // no row can hold it, and the writer stores it without a look for it.
        let append = if p.call.task_id.is_none() {
            append.checked_minted_last()?
        } else {
            append.checked()?
        };
        let mut task_state = TaskState {
            invocation_id: p.invocation_id.clone(),
            skill_id: p.call.skill_id.clone(),
            input_ref: p.input.hash,
            phase: TaskPhase::Committed,
            output_ref: Some(output_obj.hash),
            entry_index: None,
            world_ref: None,
            effect_records: records.to_vec(),
        };
        let (id, episode, task) = (
            p.invocation_id.clone(),
            p.call.session.episode.clone(),
            p.task.clone(),
        );
        let hooks = self.config.hooks.clone();
        // Without an effect this commit writes the invocation's first row; a minted id (the
        // call brought none) is in no row yet.
        let first_of_minted = journal_outcome.is_none() && p.call.task_id.is_none();
        let submitted = self.store.submit(
            move |w: &mut WriteCtx<'_, '_>| -> Result<log::Committed, CallError> {
                let committed = log::append_checked(w, &append)?;
                access::grant(w, &episode, append.objects())?;
                task_state.entry_index = Some(committed.entry.header.entry_index);
                task_state.world_ref = Some(committed.world_ref);
                match journal_outcome {
                    // The outcome and the committed task state resolve the intent together.
                    Some((status, record)) => {
                        let task = task::stored_bytes(&task_state)?;
                        journal::append_outcome_with_task(w, &id, status, Some(record), &task)?;
                    }
                    None if first_of_minted => task::put_minted(w, &episode, &task, &task_state)?,
                    None => task::put(w, &episode, &task, &task_state)?,
                }
                if journal_outcome.is_some() {
                    hooks.reached(CrashPoint::MidCommit);
                }
                Ok(committed)
            },
        );
        Ok((submitted, output_obj))
    }
}

/// The steps of a call [`Coordinator::begin`] opened.
pub enum Begun {
    /// A resent task id whose call was committed: its committed result, run again nowhere.
    Replayed(CallOutput),
    /// A call closed without an effect (a refused plan), its entry submitted.
    Committing(Committing),
    /// A call whose plan asks for an effect: [`Coordinator::run_effect`] runs the rest.
    Effect(EffectCall),
}

/// A planned call with an effect, holding its episode's turn, for
/// [`Coordinator::run_effect`].
pub struct EffectCall(Box<EffectPlanned>);

/// What a running call is: its tool and its input's ref
/// ([`Coordinator::running_attempt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub skill_id: String,
    pub input_ref: Ref,
}

/// Releases an invocation id from the in-flight set.
struct InFlight {
    set: Arc<Mutex<HashMap<String, Attempt>>>,
    id: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut set = match self.set.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        set.remove(&self.id);
    }
}

/// Why a call's answer could not be made ([`Coordinator::shape_output`]).
enum Unshaped {
    /// Over [`MAX_IO_BYTES`] with its `world` block: the handler's failure.
    TooLarge(String),
    /// Anything else (a finish function's error, no canonical form): a post-effect failure.
    Other(String),
}

/// What the handler's preflight decided, with the episode's hold back.
enum Preflighted {
    Proceed(Busy),
    Declined {
        output: Map<String, Value>,
        by: Option<HandlerIdentity>,
        busy: Busy,
    },
}

/// A handler deadline that leaves less than [`DUE`]: no handler is started under it.
fn is_due(deadline: Instant) -> bool {
    deadline.saturating_duration_since(Instant::now()) < DUE
}

fn random_task_id() -> Result<String, CallError> {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw)
        .map_err(|e| CallError::Internal(format!("random source failed: {e}")))?;
    Ok(crate::session::lower_hex(&raw))
}

/// `<root>/<episode>`, when it is a directory that resolves to itself (no symlink escape).
///
/// `root` must be canonical ([`Coordinator::new`] makes the configured root so, once). An
/// episode name is one plain component, so `<root>/<episode>` resolves to itself exactly when
/// that component is a directory and not a symlink: one `lstat` per call, where resolving the
/// whole path again cost a `readlink` per component of the root on every call.
pub fn bind_worktree(root: &Path, episode: &str) -> Option<PathBuf> {
    worktree_of(root, episode).ok()
}

/// [`bind_worktree`], or why the episode has no worktree ([`CallError::NoWorktree`]): a
/// symbolic link, or a file of any other kind, where the worktree should be is named as what it
/// is (it was said not to exist, and the operator saw it there with `ls`, and `session new`
/// refused it as existing).
pub fn worktree_of(root: &Path, episode: &str) -> Result<PathBuf, CallError> {
    let missing = || {
        CallError::NoWorktree(format!(
            "episode {episode}'s worktree does not exist: an operator creates it (the directory {episode} in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither)"
        ))
    };
    crate::session::validate_episode(episode).map_err(|_| missing())?;
    let wanted = root.join(episode);
    match std::fs::symlink_metadata(&wanted) {
        Ok(meta) if meta.is_dir() => Ok(wanted),
        Ok(meta) if meta.file_type().is_symlink() => Err(CallError::NoWorktree(format!(
            "episode {episode}'s worktree is a symbolic link: a worktree must be a directory in the workspace root itself, which no link can redirect (an operator puts the directory {episode} there in place of the link)"
        ))),
        // A file, FIFO, socket or device there is named as what it is, as for a link and as
        // `session new` names it: "does not exist" sent the operator to `ls`, which shows it.
        Ok(_) => Err(CallError::NoWorktree(format!(
            "episode {episode}'s worktree is a file, not a directory: a worktree must be a directory in the workspace root (an operator removes the file {episode} there and puts the directory in its place)"
        ))),
        Err(_) => Err(missing()),
    }
}

/// Convenience for tests and tools: all of a transition's declared effect names.
pub fn declared_effects(t: &Transition) -> Vec<String> {
    t.declared_effects
        .iter()
        .map(|e| e.effect.clone())
        .collect()
}

#[cfg(test)]
mod tests;
