//! What a client verb adds to a credential the daemon refused: keyed on the class the daemon
//! answered (an expired one needs a new one; an unknown one was revoked or minted for another
//! store), and the same on every verb, `why` included.

mod common;

use common::why::session_file;
use common::*;

#[test]
fn an_expired_credential_is_said_as_expired_on_every_verb_why_included() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let expired = session_file(d.dir.path(), "expired.session", &d.expired_session("ep1"));
    let base = d.url("");
    let hint = format!(" (the daemon at {base}, from --addr, says this credential has expired: mint a new one with worldd session mint)\n");
    let with = |verb: &[&str]| {
        worldd(
            &[verb, &["--addr", &base, "--session", path_str(&expired)]].concat(),
            None,
        )
    };
    let (code, out, err) = with(&["why", "head"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("worldd: why: the daemon at {base} refused the session credential: GET /v1/head returned HTTP 401 SessionExpired: session credential has expired{hint}")
    );
    for (verb, said) in [
        (
            &["head"][..],
            "worldd: /v1/head returned HTTP 401 SessionExpired: session credential has expired",
        ),
        (
            &["budget"],
            "worldd: /v1/budget returned HTTP 401 SessionExpired: session credential has expired",
        ),
        (
            &["tools", "list"],
            "worldd: /mcp/ returned HTTP 401: session credential has expired",
        ),
    ] {
        let (code, _, err) = with(verb);
        assert_eq!((code, err), (1, format!("{said}{hint}")), "{verb:?}");
    }

    // Not known there: revoked, or minted for another store; `why` says it as the rest do.
    let unknown = session_file(d.dir.path(), "unknown.session", &"ab".repeat(32));
    let (code, _, err) = worldd(
        &[
            "why",
            "head",
            "--addr",
            &base,
            "--session",
            path_str(&unknown),
        ],
        None,
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("worldd: why: the daemon at {base} refused the session credential: GET /v1/head returned HTTP 401 SessionUnknown: unknown session credential (the daemon at {base}, from --addr, does not know this credential: revoked, or minted for another store; if your daemon listens elsewhere, give its address with --addr or $WORLD_ADDR; else mint a new one with worldd session mint)\n")
    );
}
