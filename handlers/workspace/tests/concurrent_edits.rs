//! An edit reads the file, replaces in memory and renames a new file over the name. Nothing
//! checked that the name still held the file it read, so a change made in between by anything
//! else (an operator's editor saving, another episode sharing the tree) was overwritten by the
//! edit built on the older content, and the edit answered `replacements:1`. The edit is now
//! installed only over the file it read; otherwise it is refused, nothing changed.

mod common;

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use handler_kit::serde_json::json;
use handler_kit::Outcome;

/// The file: a counter line the outside writer bumps, and a large body (a wide window between
/// an edit's read and its rename).
fn content(count: u64) -> String {
    format!("COUNT {count:08}\nAGENT\n{}", "x".repeat(4 << 20))
}

fn count_in(text: &str) -> u64 {
    text[6..14].parse().unwrap()
}

#[test]
fn an_edit_never_overwrites_a_change_made_to_the_file_after_it_was_read() {
    let f = Fixture::new();
    let path = f.path("shared.txt");
    std::fs::write(&path, content(0)).unwrap();
    // The writer saves as editors do (a new file renamed over the name). It alone changes the
    // counter, so before each save the file must show the count it saved last: anything else
    // is an edit's stale content installed over its save.
    let lost = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let saves = Arc::new(AtomicU64::new(0));
    let writer = {
        let (lost, stop, path, saves) = (lost.clone(), stop.clone(), path.clone(), saves.clone());
        let scratch = f.tmp.path().join("editor-save");
        std::thread::spawn(move || {
            let count = || {
                let mut head = [0u8; 14];
                std::fs::File::open(&path)
                    .and_then(|mut file| file.read_exact(&mut head))
                    .unwrap();
                count_in(std::str::from_utf8(&head).unwrap())
            };
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut now = count();
                if now != last {
                    // An edit that found this save at the name after exchanging its file in
                    // shows its content there for an instant, then exchanges the save back:
                    // seen again a moment later, a lost save stays lost.
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    now = count();
                }
                if now != last {
                    lost.lock()
                        .unwrap()
                        .push(format!("the file says {now}, the writer saved {last}"));
                }
                last += 1;
                std::fs::write(&scratch, content(last)).unwrap();
                std::fs::rename(&scratch, &path).unwrap();
                saves.store(last, Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let refusal = "edit shared.txt: the file changed while it was being edited (something else wrote, replaced or removed it after it was read); nothing was changed: read it again and retry";
    let kept_changing = "edit shared.txt: the path kept changing while it was being opened; nothing was done, try again";
    let (mut edited, mut refused) = (0, 0);
    // Edits while the writer saves: at least 40, and on until it saved 300 times.
    let mut round = 0;
    while round < 40 || (saves.load(Ordering::Relaxed) < 300 && round < 2000) {
        round += 1;
        // A no-op edit: whatever it installs, the counter in it is the one it read.
        let out = match f.run(
            "Workspace.Write",
            json!({"op": "edit", "path": "shared.txt", "old_text": "AGENT", "new_text": "AGENT"}),
        ) {
            Outcome::Ok { output } => output,
            other => panic!("round {round}: {other:?}"),
        };
        if out["ok"] == json!(true) {
            assert_eq!(out["replacements"], json!(1), "{out:?}");
            edited += 1;
        } else {
            // A file changed while it was read is read again, up to three times: then the
            // path "kept changing", also with nothing changed.
            assert!(
                out["refused"] == json!(refusal) || out["refused"] == json!(kept_changing),
                "round {round}: {out:?}"
            );
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let lost = lost.lock().unwrap();
    assert!(
        lost.is_empty(),
        "the writer's changes were overwritten: {lost:?} ({edited} edits answered ok, {refused} refused, {} saves)",
        saves.load(Ordering::Relaxed)
    );
}
