//! Panics of a plugin's code, caught at the boundary and said once, through the host's log.
//!
//! A panic inside one of the adapters' `catch_unwind`s becomes the call's failure (`handler
//! panicked: …`, in `execute` or a finish function), which the daemon logs as one line naming
//! the plugin; a panic in `preflight` lets the call proceed, and one in `manifest` or `new`
//! keeps the plugin from starting. A cdylib carries its own
//! std, whose default hook would also print the panic to the daemon's stderr: several raw lines
//! (a backtrace when `RUST_BACKTRACE` is set) outside the daemon's log format, with no plugin
//! name. So a hook, installed once, says where such a panic happened through the host's log
//! (one line, tagged with the plugin by the daemon, saying which of those follows) instead; a panic outside these adapters (a
//! thread the plugin spawned) goes to the hook that was there before.

use std::any::TypeId;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Once, OnceLock};

use crate::plugin::Host;
use crate::types::{JsonObject, LogLevel, Outcome, Preflight};

thread_local! {
    /// How many adapter calls on this thread are inside [`caught`].
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// What a panic in the innermost adapter call on this thread leads to, said after it.
    static AFTER: Cell<&'static str> = const { Cell::new(FAILS) };
}

/// What follows a panic in `execute` or a finish function.
const FAILS: &str = "the call fails with this message";
/// What follows a panic in `preflight`.
const PROCEEDS: &str = "the preflight counts as proceed; execute answers for the call";
/// What follows a panic in `manifest` or `new`.
const NOT_STARTED: &str = "the plugin is not started";

/// What a panic inside an adapter whose plugin code returns `R` leads to: the adapters are
/// told apart by what they return (`execute` an [`Outcome`], a finish function a
/// `Result<JsonObject, String>`, `preflight` a [`Preflight`]; `manifest` and `new` anything
/// else).
fn after<R: 'static>() -> &'static str {
    let r = TypeId::of::<R>();
    if r == TypeId::of::<Outcome>() || r == TypeId::of::<Result<JsonObject, String>>() {
        FAILS
    } else if r == TypeId::of::<Preflight>() {
        PROCEEDS
    } else {
        NOT_STARTED
    }
}

/// The host the plugin was given, to which the hook says caught panics.
static HOST: OnceLock<Host> = OnceLock::new();

/// Keep `host` for the hook (the first one given: a process loads a plugin once).
pub(crate) fn remember(host: Host) {
    let _ = HOST.set(host);
}

/// Run `f`, catching a panic; its payload, as [`std::panic::catch_unwind`] gives it.
pub(crate) fn caught<R: 'static>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    install();
    DEPTH.with(|d| d.set(d.get() + 1));
    let outer = AFTER.with(|a| a.replace(after::<R>()));
    let result = catch_unwind(AssertUnwindSafe(f));
    AFTER.with(|a| a.set(outer));
    DEPTH.with(|d| d.set(d.get() - 1));
    result
}

fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DEPTH.with(Cell::get) == 0 {
                return previous(info);
            }
            if let Some(host) = HOST.get() {
                let place = info
                    .location()
                    .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                    .unwrap_or_default();
                let text = crate::plugin::panic_text(info.payload());
                let after = AFTER.with(Cell::get);
                host.log(
                    LogLevel::Warn,
                    &format!("panicked{place}: {text} ({after})"),
                );
            }
        }));
    });
}
