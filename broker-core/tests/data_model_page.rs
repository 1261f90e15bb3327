//! `docs/data-model.md`, executed: its examples of stored objects are one call's, and every ref
//! the page gives for bytes it shows is checked here against those bytes, every ref one example
//! names in another against that example, and the plans against what the interpreter writes.
//! A reader checking a store by hand against the page gets the same hashes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use broker_core::canon::canonicalize;
use broker_core::log::{genesis_document, interpreter_ref};
use broker_core::plan::interpreter_document;
use broker_core::transition::Transition;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn page() -> String {
    std::fs::read_to_string(repo().join("docs/data-model.md")).unwrap()
}

/// One fenced block: its info string, its bytes (lines joined by `\n`), and the prose on
/// either side of it (up to the neighbouring blocks).
struct Block {
    info: String,
    body: String,
    before: String,
    after: String,
}

fn blocks(text: &str) -> Vec<Block> {
    // Alternating prose and block bodies: prose, (info, body), prose, (info, body), …, prose.
    let mut prose = vec![String::new()];
    let mut bodies: Vec<(String, Vec<&str>)> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        match (open, line.strip_prefix("```")) {
            (false, Some(info)) => {
                bodies.push((info.trim().to_owned(), Vec::new()));
                open = true;
            }
            (true, Some(_)) => {
                prose.push(String::new());
                open = false;
            }
            (true, None) => bodies.last_mut().unwrap().1.push(line),
            (false, None) => {
                let p = prose.last_mut().unwrap();
                p.push_str(line);
                p.push('\n');
            }
        }
    }
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, (info, body))| Block {
            info,
            body: body.join("\n"),
            before: prose[i].clone(),
            after: prose.get(i + 1).cloned().unwrap_or_default(),
        })
        .collect()
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The first `sha256:<64 hex>` in `text`.
fn first_ref(text: &str) -> Option<String> {
    text.match_indices("sha256:").find_map(|(at, _)| {
        let hex = text.get(at + 7..at + 71)?;
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            .then(|| format!("sha256:{hex}"))
    })
}

/// The page's claims "these bytes have this ref", by the block's first line: `ref sha256:…`
/// after a block, `(ref sha256:…):` before one, or "Their ref is" after one with the ref in
/// the next block.
fn claims(blocks: &[Block]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let after = b.after.trim_start();
        let before = b.before.trim_end();
        let claimed = if after.starts_with("ref `sha256:") {
            first_ref(after)
        } else if before.ends_with("`):") && before.contains("(ref\n`sha256:") {
            first_ref(&before[before.rfind("(ref\n").unwrap()..])
        } else if after.trim_end().ends_with("Their ref is") {
            blocks.get(i + 1).and_then(|next| first_ref(&next.body))
        } else {
            None
        };
        if let Some(r) = claimed {
            out.push((b.body.clone(), r));
        }
    }
    out
}

#[test]
fn every_ref_the_page_gives_for_bytes_it_shows_is_their_sha256() {
    let blocks = blocks(&page());
    let claims = claims(&blocks);
    // The input, the success output, the record, the request, the result, the genesis and the
    // interpreter identity.
    assert_eq!(
        claims.len(),
        7,
        "{:?}",
        claims.iter().map(|c| &c.1).collect::<Vec<_>>()
    );
    for (bytes, claimed) in &claims {
        assert_eq!(&sha256(bytes.as_bytes()), claimed, "the bytes:\n{bytes}");
    }
    // The byte counts the page states for the two documents fixed by the code.
    for (document, count) in [(genesis_document(), 83), (interpreter_document(), 89)] {
        let canonical = canonicalize(document.to_string().as_bytes()).unwrap();
        assert_eq!(canonical.len(), count);
        let shown = blocks
            .iter()
            .find(|b| b.body.as_bytes() == canonical.as_slice())
            .unwrap_or_else(|| panic!("the page does not show {document}"));
        assert!(
            shown.after.contains(&format!("exactly the {count} ")),
            "{}",
            shown.after
        );
    }
    let interpreter = interpreter_ref().unwrap().to_string();
    assert!(claims.iter().any(|(_, r)| *r == interpreter));
}

/// The one call's objects, by what the page calls them.
fn objects(blocks: &[Block]) -> BTreeMap<&'static str, String> {
    let json: Vec<&Block> = blocks.iter().filter(|b| b.info == "json").collect();
    let find = |what: &'static str, pick: &dyn Fn(&Value) -> bool| -> (&'static str, String) {
        let found: Vec<&&Block> = json
            .iter()
            .filter(|b| {
                b.body
                    .lines()
                    .next()
                    .and_then(|l| serde_json::from_str::<Value>(l).ok())
                    .is_some_and(|v| pick(&v))
            })
            .collect();
        assert_eq!(found.len(), 1, "{what}: {} blocks", found.len());
        (what, found[0].body.clone())
    };
    BTreeMap::from([
        find("input", &|v| *v == json!({"path": "hello.ail"})),
        find("output", &|v| {
            v["content"].is_string() && v["world"].is_object()
        }),
        find("refusal output", &|v| {
            v["refused"].is_string() && v["world"].is_object()
        }),
        find("plan", &|v| {
            v["plan"] == "world/effect-plan/v1" && v["result"].is_null()
        }),
        find("refusal plan", &|v| {
            v["plan"] == "world/effect-plan/v1" && v["result"].is_object()
        }),
        find("record", &|v| {
            v["invocationId"] == "mcp:ep1:t1" && v["episodeId"].is_string()
        }),
        find("result", &|v| {
            v["content"].is_string() && v.get("world").is_none()
        }),
        find("effect records", &|v| {
            v["allowed"] == true && v["failed"] == false
        }),
    ])
}

#[test]
fn the_refs_each_example_names_are_the_other_examples() {
    let page = page();
    let blocks = blocks(&page);
    let objects = objects(&blocks);
    let value = |what: &str| -> Value {
        let first = objects[what].lines().next().unwrap();
        serde_json::from_str(first).unwrap()
    };
    let hash = |what: &str| sha256(objects[what].lines().next().unwrap().as_bytes());
    let request = blocks
        .iter()
        .find(|b| b.body.starts_with("14:Workspace.Read"))
        .expect("the effect request's bytes");

    let output = value("output");
    assert_eq!(output["world"]["plan"], hash("plan"));
    assert_eq!(
        value("refusal output")["world"]["plan"],
        hash("refusal plan")
    );
    let records = &objects["effect records"];
    let allowed = records.lines().next().unwrap();
    assert_eq!(
        output["world"]["effects"][0]["record"],
        sha256(allowed.as_bytes())
    );

    let record = value("record");
    assert_eq!(record["input"], hash("input"));
    assert_eq!(record["output"], hash("output"));
    assert_eq!(record["plan"], hash("plan"));
    assert_eq!(record["effects"], json!([sha256(allowed.as_bytes())]));
    assert_eq!(
        record["interpreter"],
        interpreter_ref().unwrap().to_string()
    );

    let allowed: Value = serde_json::from_str(allowed).unwrap();
    assert_eq!(allowed["requestRef"], sha256(request.body.as_bytes()));
    assert_eq!(allowed["resultRef"], hash("result"));
    // The output is the handler's result with the world block, and the result its body.
    let mut body = output.clone();
    body.as_object_mut().unwrap().remove("world");
    assert_eq!(body, value("result"));
}

#[test]
fn the_plans_shown_are_what_the_interpreter_writes() {
    let page = page();
    let objects = objects(&blocks(&page));
    let path = repo().join("transitions/se-tools/ailang-read.json");
    let read = Transition::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for (args, shown) in [
        (json!({"path": "hello.ail"}), "plan"),
        (json!({"path": "../x"}), "refusal plan"),
    ] {
        let written = read.plan_call(&args).canonical().unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            objects[shown],
            "{args}"
        );
    }
}
