//! Panics of a plugin's code, caught at the boundary and said once.
//!
//! A panic inside one of the adapters' `catch_unwind`s becomes the call's failure (`handler
//! panicked: …`, in `execute` or a finish function), which the daemon logs as one line naming
//! the plugin; a panic in `preflight` lets the call proceed, one in `manifest` or `new` keeps
//! the plugin from starting, and one in the handler's `Drop` ends its drop there. A cdylib
//! carries its own std, whose default hook would also print the panic to the daemon's stderr:
//! several raw lines (a backtrace when `RUST_BACKTRACE` is set) outside the daemon's log
//! format, with no plugin name. So a hook, installed once, says where such a panic happened
//! through the host's log (one line, tagged with the plugin by the daemon, saying which of
//! those follows) instead. `manifest` runs before the plugin is given a host: where a panic
//! there happened is kept for the adapter, which puts it in the error that stops the plugin
//! (the line the operator reads). A panic outside these adapters (a thread the plugin spawned)
//! goes to the hook that was there before.

use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Once, OnceLock};

use crate::plugin::Host;
use crate::types::{JsonObject, LogLevel, Manifest, Outcome, Preflight};

thread_local! {
    /// How many adapter calls on this thread are inside [`caught`].
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// What a panic in the innermost adapter call on this thread leads to, said after it.
    /// With whether the host is told of it.
    static AFTER: Cell<(&'static str, bool)> = const { Cell::new((FAILS, true)) };
    /// Where the last panic caught on this thread happened, when no host was told (`manifest`):
    /// ` at FILE:LINE:COLUMN`.
    static PLACE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// What follows a panic in `execute` or a finish function.
const FAILS: &str = "the call fails with this message";
/// What follows a panic in `preflight`.
const PROCEEDS: &str = "the preflight counts as proceed; execute answers for the call";
/// What follows a panic in `manifest` or `new`.
const NOT_STARTED: &str = "the plugin is not started";
/// What follows a panic in the handler's `Drop`.
const DROPPED: &str = "the handler is dropped no further";

/// What a panic inside an adapter whose plugin code returns `R` leads to, and whether the host
/// is told (not for `manifest`, whose adapter says where in its error): the adapters are told
/// apart by what they return (`execute` an [`Outcome`], a finish function a
/// `Result<JsonObject, String>`, `preflight` a [`Preflight`], `manifest` a
/// `Result<Manifest, String>`, a handler's drop `()`; `new` anything else).
fn after<R: 'static>() -> (&'static str, bool) {
    let r = TypeId::of::<R>();
    if r == TypeId::of::<Outcome>() || r == TypeId::of::<Result<JsonObject, String>>() {
        (FAILS, true)
    } else if r == TypeId::of::<Preflight>() {
        (PROCEEDS, true)
    } else if r == TypeId::of::<Result<Manifest, String>>() {
        (NOT_STARTED, false)
    } else if r == TypeId::of::<()>() {
        (DROPPED, true)
    } else {
        (NOT_STARTED, true)
    }
}

/// The host the plugin was given, to which the hook says caught panics.
static HOST: OnceLock<Host> = OnceLock::new();

/// Keep `host` for the hook (the first one given: a process loads a plugin once).
pub(crate) fn remember(host: Host) {
    let _ = HOST.set(host);
}

/// Run `f`, catching a panic; its payload's text ([`crate::plugin::panic_text`]). The payload
/// is dropped here, inside the guard: a payload whose own `Drop` panics (plain safe Rust:
/// `panic_any` of such a value) would otherwise unwind out of the adapter, across the
/// `extern "C"` boundary, and abort the host.
pub(crate) fn caught<R: 'static>(f: impl FnOnce() -> R) -> Result<R, String> {
    install();
    PLACE.with(|p| p.borrow_mut().take());
    DEPTH.with(|d| d.set(d.get() + 1));
    let outer = AFTER.with(|a| a.replace(after::<R>()));
    let result = catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let text = crate::plugin::panic_text(&*payload);
        // Where the first panic happened is what the adapter says, not where its drop did.
        let place = PLACE.with(|p| p.borrow_mut().take());
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            // Its payload may panic in its drop too: it is leaked, never dropped.
            std::mem::forget(again);
        }
        PLACE.with(|p| *p.borrow_mut() = place);
        text
    });
    AFTER.with(|a| a.set(outer));
    DEPTH.with(|d| d.set(d.get() - 1));
    result
}

/// Where the panic [`caught`] last caught on this thread happened (` at FILE:LINE:COLUMN`),
/// when the host was not told: for the adapter to say it.
pub(crate) fn take_place() -> Option<String> {
    PLACE.with(|p| p.borrow_mut().take())
}

fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DEPTH.with(Cell::get) == 0 {
                return previous(info);
            }
            let place = info
                .location()
                .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            let (after, tell) = AFTER.with(Cell::get);
            match HOST.get() {
                Some(host) if tell => {
                    let text = crate::plugin::panic_text(info.payload());
                    host.log(
                        LogLevel::Warn,
                        &format!("panicked{place}: {text} ({after})"),
                    );
                }
                // Said by the adapter, in the error it returns.
                _ => PLACE.with(|p| *p.borrow_mut() = Some(place)),
            }
        }));
    });
}
