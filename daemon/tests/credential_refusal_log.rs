//! The WARN line of a request refused for its credential names whose it was (its public
//! credential id and episode) when the daemon found its record, an expired one; never the
//! token, and still at most one line per reason every 10 s.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn an_expired_credentials_refusal_names_its_credential_id_and_episode_not_its_token() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let expired = d.expired_session("late-ep");
    let id = broker_core::session::credential_id(&expired);
    let unknown = "7".repeat(64);
    for _ in 0..3 {
        assert_eq!(
            get(&d.url("/v1/budget"), Some(expired.as_str())).status,
            401
        );
        assert_eq!(
            get(&d.url("/v1/budget"), Some(unknown.as_str())).status,
            401
        );
    }
    let (_, _, log, _) = d.stop_with_log(Duration::from_secs(5));
    let lines = |text: &str| -> Vec<&str> { log.lines().filter(|l| l.contains(text)).collect() };
    let expired_lines = lines("refused a request: session credential has expired");
    assert_eq!(expired_lines.len(), 1, "{log}");
    assert!(
        expired_lines[0].ends_with(&format!(
            " WARN refused a request: session credential has expired credential_id={id} episode=late-ep"
        )),
        "{log}"
    );
    // No record, so nothing to name: the line says the reason alone.
    let unknown_lines = lines("refused a request: unknown session credential");
    assert_eq!(unknown_lines.len(), 1, "{log}");
    assert!(
        unknown_lines[0].ends_with(" WARN refused a request: unknown session credential"),
        "{log}"
    );
    assert!(!log.contains(&expired) && !log.contains(&unknown), "{log}");
}
