//! The workbench's "Indeterminate intents" card in a real headless Chromium (through
//! chromedriver), against the real `worldd` binary, the real plugins and the AILANG stand-in's
//! `hang` mode: a call the daemon is still running is marked in flight there. Without Chromium
//! the test skips loudly; with `WORLD_REQUIRE_BROWSER` set it fails instead.

mod common;
mod webdriver;

use common::*;
use serde_json::json;
use webdriver::Browser;

/// The card listed every running call as an effect that "may have run, are never retried",
/// where `/v1/calls` says in-flight. The running call is marked "(in flight)", and the card
/// says what that mark means.
#[test]
fn the_intents_card_marks_a_call_the_daemon_is_still_running_in_flight() {
    let Some(b) = Browser::start_or_skip(
        "the_intents_card_marks_a_call_the_daemon_is_still_running_in_flight",
        1280,
        800,
    ) else {
        return;
    };
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--plugin-config", &bin, "--handler-deadline-ms", "15000"],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    let mut caller = fixtures::start_a_hanging_run(&d, "ep1", &token);

    let base = format!("http://{}", d.addr);
    b.goto(&format!("{base}/workbench#episode"));
    let input = b.wait_for_element("#credential");
    b.type_into(&input, &token);
    b.click(&b.find("#login-submit"));
    let table = b.wait_for_element("#intents table");
    let text = b.text(&table);
    let _ = caller.kill();
    let _ = caller.wait();
    assert!(
        text.contains("mcp:ep1:h1 (in flight)") && text.contains("Ailang.Run@worktree"),
        "{text}"
    );
    let card = b.text(&b.find("#intents"));
    assert!(
        card.contains("One marked in flight is a call the daemon is still running: its outcome may still come."),
        "{card}"
    );
    let title = b.exec(
        "return document.querySelector('#intents td span.muted').title",
        json!([]),
    );
    assert_eq!(
        title,
        "The daemon is still running this call: ask again later, and do not resend it"
    );
}
