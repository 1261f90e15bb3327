//! A plugin's code run against `[limits] plugin_start_ms`: its loading (initialisers and
//! manifest) and its constructor each run on a thread of their own, and one that outlasts the
//! limit stops the start, with the process ended in a way the abandoned thread cannot block.

use std::path::Path;
use std::time::Duration;

use super::PluginError;

/// What stops when a plugin's code outlasts `[limits] plugin_start_ms`, said in the error: the
/// daemon's start (`serve`), or the listing (`worldd handlers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stops {
    Serve,
    Handlers,
    /// Stopping quickstart's trial start, after which it serves.
    Trial,
}

impl Stops {
    fn consequence(self) -> &'static str {
        match self {
            Stops::Serve => "the daemon does not start beside a plugin that hangs",
            Stops::Handlers => "worldd handlers stops at a plugin that hangs, and worldd serve would not start beside it; remove it from the plugin directory, or raise the limit if it is only slow",
            Stops::Trial => "quickstart serves on, the handler its trial start built left as it is (its Drop still running)",
        }
    }
}

/// Set once a plugin's code was left running past its deadline (see [`exit`]).
static ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Run `work` (a plugin's code) on a thread of its own, and wait for it until `deadline`.
/// Past it, the plugin is still running `what`: with [`Stops::Serve`] the start is given up
/// (the process exits, through [`exit`], and the thread with it); with [`Stops::Trial`]
/// quickstart goes on and the thread is left running, and the process's end is then an
/// `_exit` all the same (it is marked abandoned).
pub(super) fn within<T: Send + 'static>(
    deadline: Duration,
    path: &Path,
    what: &str,
    stops: Stops,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PluginError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("worldd-plugin-start".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| PluginError::new(path, format!("could not start a thread to load it: {e}")))?;
    let done = rx.recv_timeout(deadline);
    if done.is_ok() {
        crate::process_state::check(|| {
            let part = match what {
                "loading" => "initialisers and manifest",
                "starting" => "constructor (Plugin::new)",
                "stopping" => "handler's drop (after quickstart's trial start)",
                other => other,
            };
            format!(
                "the {part} of the plugin library {}",
                crate::text::one_line(&path.display().to_string())
            )
        });
    }
    done.map_err(|_| {
        ABANDONED.store(true, std::sync::atomic::Ordering::SeqCst);
        PluginError::new(
            path,
            format!(
                "still {what} after {} ms ([limits] plugin_start_ms); {}",
                deadline.as_millis(),
                stops.consequence()
            ),
        )
    })
}

/// End the process with `code`. Normally `std::process::exit`; but once a plugin's code was
/// left running past its deadline ([`within`]), stdout and stderr are flushed and the process
/// ends with `_exit`, running no exit handlers. The abandoned thread may be inside `dlopen`
/// (a library initialiser that hangs), holding the dynamic loader's lock: `exit` runs the
/// loader's destructors (`_dl_fini`), which wait for that lock, and the process would never
/// end. Nothing the daemon keeps needs an exit handler: the store is committed as it goes.
pub fn exit(code: i32) -> ! {
    if ABANDONED.load(std::sync::atomic::Ordering::SeqCst) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: `_exit` has no preconditions; it ends the process without returning and
        // without running the exit handlers another thread might be blocking.
        unsafe { libc::_exit(code) }
    }
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_code_past_the_start_deadline_is_given_up_and_named() {
        let path = Path::new("/plugins/libhang.so");
        let done = within(
            Duration::from_millis(500),
            path,
            "loading",
            Stops::Serve,
            || 7,
        );
        assert_eq!(done.unwrap(), 7);
        let hung = within(
            Duration::from_millis(20),
            path,
            "loading",
            Stops::Serve,
            || std::thread::sleep(Duration::from_secs(5)),
        );
        assert_eq!(
            hung.unwrap_err().to_string(),
            "plugin /plugins/libhang.so: still loading after 20 ms ([limits] plugin_start_ms); the daemon does not start beside a plugin that hangs"
        );
        let listing = within(
            Duration::from_millis(20),
            path,
            "loading",
            Stops::Handlers,
            || std::thread::sleep(Duration::from_secs(5)),
        );
        assert_eq!(
            listing.unwrap_err().to_string(),
            "plugin /plugins/libhang.so: still loading after 20 ms ([limits] plugin_start_ms); worldd handlers stops at a plugin that hangs, and worldd serve would not start beside it; remove it from the plugin directory, or raise the limit if it is only slow"
        );
    }
}
