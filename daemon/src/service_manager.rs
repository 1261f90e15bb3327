//! What the daemon tells a service manager that asked to be told (systemd's `Type=notify`):
//! `READY=1` once it answers requests, `STOPPING=1` when it begins to drain.
//!
//! The manager names a Unix datagram socket in `$NOTIFY_SOCKET` (a path, or an abstract name
//! written with a leading `@`); each notice is one datagram. Without the variable nothing is
//! sent. The variable is taken out of the environment when read, so that the programs plugins
//! start (`ailang`, `git`) cannot speak for the daemon.
//!
//! ```no_run
//! let manager = worldd::service_manager::Notifier::from_env();
//! // … bind, open the store, load the plugins …
//! manager.tell("READY=1");
//! ```

use std::ffi::OsString;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Where notices go; does nothing when no manager asked for them.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    socket: Option<OsString>,
    /// A notice has reached the socket: a manager listens there (shared by the clones).
    heard: Arc<AtomicBool>,
}

impl Notifier {
    /// The manager `$NOTIFY_SOCKET` names, the variable removed. Call it before any other thread
    /// starts: the environment is the process's, and changing it races with readers.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty());
        if socket.is_some() {
            std::env::remove_var("NOTIFY_SOCKET");
        }
        Notifier {
            socket,
            heard: Arc::default(),
        }
    }

    /// Whether a service manager runs the daemon, with no terminal: a notice reached it. The
    /// variable alone does not say so: it leaks into shells started from a notify-type unit
    /// (`systemd-run --pty`), where nothing listens at the socket it names.
    pub fn is_heard(&self) -> bool {
        self.heard.load(Ordering::SeqCst)
    }

    /// Send `state` (`READY=1`, `STOPPING=1`); a failure is logged, never fatal: the daemon
    /// serves whether or not its manager heard.
    pub fn tell(&self, state: &str) {
        let Some(socket) = &self.socket else {
            return;
        };
        match send(socket, state.as_bytes()) {
            Ok(()) => self.heard.store(true, Ordering::SeqCst),
            // Nothing heard yet: no manager runs the daemon, and SIGHUP drains it as from a
            // terminal.
            Err(e) if !self.is_heard() => tracing::warn!(
                "could not tell the service manager {state} through NOTIFY_SOCKET {}: {e}; no service manager runs this daemon as far as it can tell, so SIGHUP stops it (drains) as without one",
                socket.to_string_lossy()
            ),
            Err(e) => tracing::warn!(
                "could not tell the service manager {state} through NOTIFY_SOCKET {}: {e}",
                socket.to_string_lossy()
            ),
        }
    }
}

fn send(socket: &OsString, message: &[u8]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let datagram = UnixDatagram::unbound()?;
    let bytes = socket.as_bytes();
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => send_abstract(&datagram, name, message)?,
        None => datagram.send_to(message, std::path::Path::new(socket))?,
    };
    if sent != message.len() {
        return Err(std::io::Error::other("the notice was cut short"));
    }
    Ok(())
}

/// Abstract socket names are Linux's own.
#[cfg(target_os = "linux")]
fn send_abstract(datagram: &UnixDatagram, name: &[u8], message: &[u8]) -> std::io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    datagram.send_to_addr(message, &address)
}

#[cfg(not(target_os = "linux"))]
fn send_abstract(_: &UnixDatagram, _: &[u8], _: &[u8]) -> std::io::Result<usize> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A notice reaches a socket named by path and one named in the abstract namespace; a
    /// socket nobody listens on is an error for the log, not a panic.
    #[test]
    fn notices_reach_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let by_path = UnixDatagram::bind(&path).unwrap();
        let to_path = Notifier {
            socket: Some(path.clone().into_os_string()),
            ..Notifier::default()
        };
        assert!(!to_path.is_heard());
        to_path.tell("READY=1");
        assert!(to_path.clone().is_heard());
        let mut buf = [0u8; 64];
        let n = by_path.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("worldd-notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_socket = UnixDatagram::bind_addr(&address).unwrap();
        Notifier {
            socket: Some(format!("@{name}").into()),
            ..Notifier::default()
        }
        .tell("STOPPING=1");
        let n = abstract_socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");

        drop(by_path);
        std::fs::remove_file(&path).unwrap();
        assert!(send(&path.clone().into_os_string(), b"READY=1").is_err());
        Notifier::default().tell("READY=1");
        let unheard = Notifier {
            socket: Some(path.into_os_string()),
            ..Notifier::default()
        };
        unheard.tell("READY=1");
        assert!(!unheard.is_heard());
    }
}
