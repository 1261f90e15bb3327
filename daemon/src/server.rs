//! The HTTP server: one axum router with the MCP, A2A and REST surfaces behind the edge
//! ([`crate::edge`]), bound to loopback, with graceful shutdown on SIGINT, SIGTERM or SIGHUP.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::state::AppState;
use crate::{a2a, durable_answers, edge, fallback, log_stream, mcp, memory, rest, workbench};

/// The whole HTTP surface of the daemon, Host and Origin checked first on every route (a
/// browser's preflight answered there, and its answers made readable across origins).
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(mcp::routes())
        .merge(a2a::routes())
        .merge(rest::routes())
        .merge(
            rest::read_routes()
                .merge(log_stream::read_routes())
                .route_layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    edge::turns::take_turn,
                )),
        )
        .merge(log_stream::routes())
        .merge(workbench::routes())
        .method_not_allowed_fallback(fallback::method_not_allowed)
        .fallback(fallback::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.store().clone(),
            durable_answers::hold,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::host::guard,
        ))
        .layer(axum::middleware::map_response(for_browsers))
        .with_state(state)
}

/// What every answer, refusals included, tells a browser. Its content type is the only one: a
/// browser must not guess HTML in an object or an error message an agent wrote. And it is not
/// to be kept (`no-store`, unless the route set its own policy, as the workbench's page does):
/// answers carry an episode's objects and log, which a browser client would otherwise write to
/// its disk cache.
async fn for_browsers(mut response: axum::response::Response) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let headers = response.headers_mut();
    headers
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// What a refused bind address is told: the addresses the daemon binds, and where a person who
/// wants it reached from elsewhere reads how (binding another address is not the way).
pub const LOOPBACK_ONLY: &str = "the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (to reach it from another machine, see operators.md \"Network exposure\")";

/// Refuse anything but a loopback address: `host "IP" is not loopback: …` and the fix; the
/// caller puts the flag or file key the address came from before it.
pub fn check_loopback(addr: &SocketAddr) -> Result<(), String> {
    // An IPv4 loopback mapped into IPv6 (`[::ffff:127.0.0.1]`) is loopback too.
    if addr.ip().to_canonical().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "host \"{}\" is not loopback: {LOOPBACK_ONLY}",
            addr.ip()
        ))
    }
}

/// Serve until a shutdown signal ([`ShutdownSignals`]); in-flight requests drain before this
/// returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    signals: ShutdownSignals,
) -> std::io::Result<()> {
    let config = state.server().clone();
    let metrics = state.metrics().clone();
    let streams = state.log_stream().clone();
    let bodies = state.bodies().clone();
    let shutdown = async move {
        signals.received().await;
        // Open log streams never end by themselves; end them so the drain can finish.
        streams.close();
        // Nor is a body half sent worth waiting for: refused, so its client can resend it.
        bodies.close();
    };
    let trimmer = config
        .memory_trim
        .map(|every| tokio::spawn(memory::trim_after_bursts(every, metrics.clone())));
    let known = {
        let state = state.clone();
        Arc::new(move |credential: &str| state.live_session(credential))
    };
    let served =
        edge::listener::serve(listener, router(state), &config, metrics, known, shutdown).await;
    if let Some(t) = trimmer {
        t.abort();
    }
    served
}

/// SIGINT, SIGTERM and SIGHUP (and SIGUSR1/SIGUSR2, said and ignored), caught from the moment
/// this is made. Make it before the daemon
/// says it is ready: a signal's default action ends the process at once, so one sent just after
/// the ready line would otherwise kill the daemon instead of draining it. SIGHUP is a terminal
/// that closed: its default action, too, would end the daemon mid-call.
pub struct ShutdownSignals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
    /// SIGUSR1 and SIGUSR2, which log-rotation habits send to "reopen the log": their default
    /// action would end the daemon at once, mid-call and without a line.
    rotation: [Option<Signal>; 2],
    manager: crate::service_manager::Notifier,
}

impl ShutdownSignals {
    /// Catch the signals from now on (inside the runtime). SIGINT and SIGHUP that this process
    /// was started ignoring stay ignored: `nohup` ignores SIGHUP so that the daemon outlives its
    /// terminal, and a shell without job control ignores SIGINT for what it starts in the
    /// background so that Ctrl-C stops the script and not its daemon.
    pub fn listen() -> ShutdownSignals {
        let catch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot catch {name} ({e}); it will end the daemon without a drain");
                None
            }
        };
        let unless_ignored = |number: libc::c_int, kind: SignalKind, name: &str| {
            if ignored(number) {
                tracing::debug!("{name} was ignored when the daemon started; it stays ignored");
                return None;
            }
            catch(kind, name)
        };
        let signals = ShutdownSignals {
            interrupt: unless_ignored(libc::SIGINT, SignalKind::interrupt(), "SIGINT"),
            terminate: catch(SignalKind::terminate(), "SIGTERM"),
            hangup: unless_ignored(libc::SIGHUP, SignalKind::hangup(), "SIGHUP"),
            rotation: [
                unless_ignored(libc::SIGUSR1, SignalKind::user_defined1(), "SIGUSR1"),
                unless_ignored(libc::SIGUSR2, SignalKind::user_defined2(), "SIGUSR2"),
            ],
            manager: Default::default(),
        };
        // Plugin code that resets these would end the daemon without its drain: put back.
        crate::process_state::remember(&[
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ]);
        signals
    }

    /// Tell `manager` `STOPPING=1` when a signal arrives, before the drain. Under a service
    /// manager (one that `READY=1` reached; a `$NOTIFY_SOCKET` nobody listens on is none)
    /// SIGHUP no longer stops the daemon: there is no terminal to lose, and a unit that
    /// restarts only on failure would leave a daemon stopped by a reload habit (`kill -HUP`,
    /// logrotate) stopped for good. It is logged and ignored; SIGTERM stops it.
    pub fn telling(mut self, manager: crate::service_manager::Notifier) -> ShutdownSignals {
        self.manager = manager;
        self
    }

    /// Resolves when any of the signals arrives.
    async fn received(mut self) {
        async fn one(s: Option<&mut Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        async fn hangups(s: Option<&mut Signal>, manager: crate::service_manager::Notifier) {
            let Some(s) = s else {
                return std::future::pending::<()>().await;
            };
            loop {
                s.recv().await;
                if !manager.is_heard() {
                    return;
                }
                tracing::warn!("SIGHUP ignored: a service manager runs this daemon, so there is no terminal to lose; stop it with SIGTERM (systemctl stop)");
            }
        }
        /// Never resolves: each SIGUSR1 or SIGUSR2 is said and served through.
        async fn rotations(usr: &mut [Option<Signal>; 2]) {
            async fn next(s: Option<&mut Signal>) {
                let Some(s) = s else {
                    return std::future::pending::<()>().await;
                };
                if s.recv().await.is_none() {
                    std::future::pending::<()>().await
                }
            }
            let [usr1, usr2] = usr;
            loop {
                let name = tokio::select! {
                    () = next(usr1.as_mut()) => "SIGUSR1",
                    () = next(usr2.as_mut()) => "SIGUSR2",
                };
                tracing::warn!("{name} ignored: worldd does not reopen its log; rotate a log it writes with 2>>FILE by copying and truncating it (logrotate's copytruncate), and stop it with SIGTERM");
            }
        }
        // Read when the signal comes: READY=1 was told (or not) before the daemon served.
        let managed = self.manager.clone();
        tokio::select! {
            () = one(self.interrupt.as_mut()) => {},
            () = one(self.terminate.as_mut()) => {},
            () = hangups(self.hangup.as_mut(), managed) => {},
            () = rotations(&mut self.rotation) => {},
        }
        tracing::info!("shutting down: draining in-flight calls");
        self.manager.tell("STOPPING=1");
    }
}

/// Whether `number`'s action is "ignore" (as inherited from the process that started this one).
fn ignored(number: libc::c_int) -> bool {
    // SAFETY: a query only: a null new action changes nothing, and `old` is a valid place for
    // the current one.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(number, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}
