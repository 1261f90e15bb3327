//! Who may read what ([`broker_core::access`]) on a real store written by the real pipeline,
//! and what committed refusals and denials cost their caller.

mod common;

use broker_core::access::{self, Reader};
use broker_core::coordinator::CallError;
use broker_core::log;
use broker_core::object::{sid, Ref};
use broker_core::refusal_rate::RefusalRate;
use broker_core::store::{RawTable, StoreError};
use common::*;
use serde_json::{json, Value};

fn refs_of_call(w: &World, out: &broker_core::coordinator::CallOutput) -> Vec<(&'static str, Ref)> {
    let entry = w
        .store
        .read(|r| log::entry(r, out.entry_index))
        .unwrap()
        .unwrap();
    let record = w
        .store
        .read(|r| r.object(&entry.transition_ref))
        .unwrap()
        .unwrap();
    let rec: Value = serde_json::from_slice(&record.payload).unwrap();
    let r = |v: &Value| v.as_str().unwrap().parse::<Ref>().unwrap();
    let mut refs = vec![
        ("record", entry.transition_ref),
        ("input", r(&rec["input"])),
        ("output", r(&rec["output"])),
        ("plan", r(&rec["plan"])),
    ];
    for e in rec["effects"].as_array().unwrap() {
        let effect = w.store.read(|rd| rd.object(&r(e))).unwrap().unwrap();
        let ev: Value = serde_json::from_slice(&effect.payload).unwrap();
        refs.push(("effect record", r(e)));
        refs.push(("request", r(&ev["requestRef"])));
        if ev["resultRef"] != "" {
            refs.push(("result", r(&ev["resultRef"])));
        }
    }
    refs
}

fn readable(w: &World, reader: &Reader, reference: &Ref) -> bool {
    w.store
        .read(|r| access::object(r, reader, reference).map(|o| o.is_some()))
        .unwrap()
}

fn ep(name: &str) -> Reader {
    Reader::Episode(name.into())
}

#[test]
fn another_episode_cannot_read_an_episodes_input_output_or_effect_objects() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Write=worktree:5"]);
    let out = w
        .call(
            &a,
            "ailang-write",
            json!({"path": "secret.txt", "content": "hunter2"}),
        )
        .unwrap();
    let refs = refs_of_call(&w, &out);
    assert_eq!(refs.len(), 7, "{refs:?}");
    for (what, r) in &refs {
        assert!(readable(&w, &ep("ep-a"), r), "ep-a reads its {what}");
        assert!(
            !readable(&w, &ep("ep-b"), r),
            "ep-b must not read ep-a's {what}"
        );
        assert!(
            readable(&w, &Reader::Operator, r),
            "the operator reads {what}"
        );
        assert!(readable(&w, &Reader::Everyone, r), "open reads read {what}");
    }
    // The public ones stay public: the tool's document, the genesis, the interpreter.
    let entry = w
        .store
        .read(|r| log::entry(r, out.entry_index))
        .unwrap()
        .unwrap();
    let genesis = w.store.read(|r| log::entry(r, 0)).unwrap().unwrap();
    for r in [
        entry.header.transition_fn,
        entry.header.interpreter,
        genesis.transition_ref,
    ] {
        assert!(readable(&w, &ep("ep-b"), &r), "{r}");
    }
}

#[test]
fn identical_arguments_from_two_episodes_share_one_input_both_may_read() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Read=worktree:5"]);
    let b = w.mint("ep-b", &["Workspace.Read=worktree:5"]);
    let args = json!({"path": "shared.txt"});
    let out_a = w.call(&a, "ailang-read", args.clone()).unwrap();
    // A second later: the request (it carries the time) and all that follows differ.
    w.clock.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out_b = w.call(&b, "ailang-read", args).unwrap();
    let (refs_a, refs_b) = (refs_of_call(&w, &out_a), refs_of_call(&w, &out_b));
    assert_eq!(refs_a[1], refs_b[1]);
    assert_eq!(refs_a[1].0, "input");
    assert!(readable(&w, &ep("ep-a"), &refs_a[1].1));
    assert!(readable(&w, &ep("ep-b"), &refs_a[1].1));
    // The rest of each call stays its episode's.
    for ((what, ra), (_, rb)) in refs_a.iter().zip(&refs_b) {
        if ra == rb {
            continue;
        }
        assert!(!readable(&w, &ep("ep-b"), ra), "{what}");
        assert!(!readable(&w, &ep("ep-a"), rb), "{what}");
    }
    assert_ne!(out_a.output_ref, out_b.output_ref);
}

/// A repeated call leaves out of its commit the objects its episode already holds
/// (`coordinator/known.rs`). What is left out must still be stored and readable, and another
/// episode making the same objects must still be granted them.
#[test]
fn a_repeated_call_leaves_out_what_its_episode_holds_and_another_episode_still_gets_its_grants() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Read=worktree:10"]);
    let b = w.mint("ep-b", &["Workspace.Read=worktree:10"]);
    let args = json!({"path": "again.txt"});
    // In one second: input, plan, request and result repeat.
    let first = w.call(&a, "ailang-read", args.clone()).unwrap();
    assert!(w.coordinator.objects_known("ep-a") >= 4);
    let second = w.call(&a, "ailang-read", args.clone()).unwrap();
    let third = w.call(&b, "ailang-read", args).unwrap();
    let (r1, r2, r3) = (
        refs_of_call(&w, &first),
        refs_of_call(&w, &second),
        refs_of_call(&w, &third),
    );
    let repeated: Vec<_> = r1.iter().filter(|x| r2.contains(x)).collect();
    let kinds: Vec<&str> = repeated.iter().map(|(what, _)| *what).collect();
    assert_eq!(
        kinds,
        ["input", "plan", "request", "result"],
        "{r1:?} {r2:?}"
    );
    for (what, r) in &repeated {
        assert!(r3.contains(&(what, *r)), "ep-b makes the same {what}");
        assert!(readable(&w, &ep("ep-b"), r), "ep-b is granted the {what}");
    }
    for (what, r) in r1.iter().chain(&r2) {
        assert!(readable(&w, &ep("ep-a"), r), "ep-a reads its {what}");
    }
    // ep-b's first call has ep-a's first budget, so its effect record and output are ep-a's
    // first ones too; its invocation record is its own.
    let own: Vec<_> = r3
        .iter()
        .filter(|x| !r1.contains(x) && !r2.contains(x))
        .collect();
    assert_eq!(
        own.iter().map(|(what, _)| *what).collect::<Vec<_>>(),
        ["record"]
    );
    for (what, r) in own {
        assert!(
            !readable(&w, &ep("ep-a"), r),
            "ep-a must not read ep-b's {what}"
        );
    }
    for out in [&first, &second, &third] {
        let report = broker_core::verify::verify_entry(&w.store, out.entry_index).unwrap();
        assert!(report.all_ok(), "{report:?}");
    }
}

#[test]
fn by_semantic_id_lists_only_what_the_reader_may_read() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Read=worktree:5"]);
    let b = w.mint("ep-b", &["Workspace.Read=worktree:5"]);
    for i in 0..3 {
        w.call(&a, "ailang-read", json!({"path": format!("a{i}")}))
            .unwrap();
    }
    w.call(&b, "ailang-read", json!({"path": "b"})).unwrap();
    let page = |reader: &Reader, id: &str, after: Option<Ref>, limit: usize| {
        w.store
            .read(|r| -> Result<_, StoreError> {
                Ok(access::by_semantic_id(r, reader, id, after, limit)?
                    .map(|page| page.items.iter().map(|o| o.hash).collect::<Vec<_>>()))
            })
            .unwrap()
    };
    let list = |reader: &Reader, id: &str, after: Option<Ref>, limit: usize| -> Vec<Ref> {
        page(reader, id, after, limit).unwrap()
    };
    let mine = list(&ep("ep-a"), sid::INVOCATION_INPUT, None, 100);
    let theirs = list(&ep("ep-b"), sid::INVOCATION_INPUT, None, 100);
    let all = list(&Reader::Operator, sid::INVOCATION_INPUT, None, 100);
    assert_eq!((mine.len(), theirs.len(), all.len()), (3, 1, 4));
    assert!(mine.iter().all(|r| !theirs.contains(r)));
    // Arrival order: the calls' order, for the episode as for the operator.
    let inputs: Vec<Ref> = (0..3)
        .map(|i| Ref::of_json(&json!({"path": format!("a{i}")})).unwrap())
        .collect();
    assert_eq!(mine, inputs);
    assert_eq!(all[..3], inputs[..]);
    assert_eq!(all[3], theirs[0]);
    // Paging with `after` walks the same order.
    assert_eq!(list(&ep("ep-a"), sid::INVOCATION_INPUT, None, 2), mine[..2]);
    assert_eq!(
        list(&ep("ep-a"), sid::INVOCATION_INPUT, Some(mine[1]), 2),
        mine[2..]
    );
    // Public kinds are listed for everyone.
    assert_eq!(
        list(&ep("ep-b"), sid::TRANSITION, None, 100),
        list(&Reader::Operator, sid::TRANSITION, None, 100)
    );
    assert_eq!(
        list(&ep("ep-b"), sid::TRANSITION, None, 100).len(),
        SE_TOOLS.len()
    );
    // A kind whose name runs into another's prefix finds nothing it should not.
    assert!(list(&ep("ep-b"), "world/invocation-input/v1\0", None, 100).is_empty());
}

/// `after` must not tell an episode whether another episode's object exists: naming one is
/// answered exactly as naming a ref the store never saw.
#[test]
fn paging_after_another_episodes_object_is_answered_as_an_unknown_ref() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Read=worktree:5"]);
    let b = w.mint("ep-b", &["Workspace.Read=worktree:5"]);
    let out_a = w.call(&a, "ailang-read", json!({"path": "a"})).unwrap();
    w.call(&b, "ailang-read", json!({"path": "b"})).unwrap();
    let page = |reader: &Reader, id: &str, after: Ref| {
        w.store
            .read(|r| -> Result<_, StoreError> {
                Ok(access::by_semantic_id(r, reader, id, Some(after), 10)?.map(|p| p.items.len()))
            })
            .unwrap()
    };
    let theirs = out_a.output_ref;
    let unknown = Ref::of(b"never stored");
    for id in [sid::INVOCATION_OUTPUT, sid::INVOCATION_INPUT] {
        assert_eq!(page(&ep("ep-b"), id, theirs), None, "{id}");
        assert_eq!(page(&ep("ep-b"), id, unknown), None, "{id}");
    }
    // Its owner pages after it, in its kind and in any other of its private kinds: an
    // episode's page may stop at the scan bound on an object of any kind (`next`), and the
    // listing goes on after it. No input of ep-a's came after its output.
    assert_eq!(page(&ep("ep-a"), sid::INVOCATION_OUTPUT, theirs), Some(0));
    assert_eq!(page(&ep("ep-a"), sid::INVOCATION_INPUT, theirs), Some(0));
    // The operator pages after any object of the kind, and on to the next episode's.
    assert_eq!(
        page(&Reader::Operator, sid::INVOCATION_OUTPUT, theirs),
        Some(1)
    );
    assert_eq!(
        page(&Reader::Operator, sid::INVOCATION_OUTPUT, unknown),
        None
    );
}

/// Objects of `kind` stored in this order, one per payload, each then granted to the episode
/// named beside it, in chunks of 1,000 (one transaction each), so that some grants have been
/// merged into `readers` and the last still wait in `readers_tail`, as a busy daemon leaves
/// them. Returns the refs in the order given.
fn stored_and_granted(w: &World, objects: &[(&str, &str, String)]) -> Vec<Ref> {
    use broker_core::object::Object;
    let objects: Vec<(String, Object)> = objects
        .iter()
        .map(|(episode, kind, payload)| {
            let o = Object::new(kind, "test", payload.clone().into_bytes());
            ((*episode).to_owned(), o)
        })
        .collect();
    let refs = objects.iter().map(|(_, o)| o.hash).collect();
    let chunks: Vec<Vec<(String, Object)>> = objects.chunks(1_000).map(<[_]>::to_vec).collect();
    let all: Vec<Object> = objects.into_iter().map(|(_, o)| o).collect();
    w.store
        .write(move |wc| all.iter().try_for_each(|o| wc.put_object(o)))
        .unwrap();
    for chunk in chunks {
        w.store
            .write(move |wc| -> Result<(), StoreError> {
                for episode in ["ep-a", "ep-b"] {
                    let refs = chunk
                        .iter()
                        .filter(|(e, _)| e == episode)
                        .map(|(_, o)| o.hash);
                    access::grant_stored(wc, episode, refs)?;
                }
                Ok(())
            })
            .unwrap();
    }
    refs
}

/// An agent looping `GET /v1/objects/by-semantic-id/{id}?limit=1` for a private kind its
/// episode holds few of made every page merge the episode's whole `readers` range and read
/// each object it names, objects that lie across most of the store (4.5 ms a page at 12,489
/// objects, 81 ms at 224,145, the store's map released and re-faulted over and over). A page
/// now examines at most `MAX_OBJECT_SCAN` of the episode's objects and, when it stops there
/// before the last, names the last one examined (`next`), from which the listing goes on:
/// still never skipping or repeating an object.
#[test]
fn an_agents_semantic_id_page_examines_at_most_5000_of_its_objects_and_says_where_to_go_on() {
    const FEW: &str = "world/test-few/v1";
    const BULK: &str = "world/test-bulk/v1";
    let max = access::MAX_OBJECT_SCAN;
    assert_eq!(max, 5_000);
    let w = World::new();
    let mut layout: Vec<(&str, &str, String)> = Vec::new();
    let mut put = |episode: &'static str, kind: &'static str, n: usize| {
        for _ in 0..n {
            let i = layout.len();
            layout.push((episode, kind, format!("{episode} {kind} {i}")));
        }
    };
    // ep-a: two of the few before the bulk, one between two runs of it, three after (the
    // second run longer than a page examines), the last one at the end; ep-b's few between.
    put("ep-a", FEW, 1);
    put("ep-b", FEW, 1);
    put("ep-a", FEW, 1);
    put("ep-a", BULK, 10);
    put("ep-a", FEW, 1);
    put("ep-b", FEW, 1);
    put("ep-a", BULK, max / 2);
    put("ep-b", FEW, 1);
    put("ep-a", BULK, max / 2 + 1_000);
    put("ep-a", FEW, 2);
    put("ep-a", BULK, 700);
    put("ep-a", FEW, 1);
    let refs = stored_and_granted(&w, &layout);
    let own: Vec<Ref> = (0..layout.len())
        .filter(|&i| layout[i].0 == "ep-a")
        .map(|i| refs[i])
        .collect();
    let few_of = |episode: &str| -> Vec<Ref> {
        (0..layout.len())
            .filter(|&i| layout[i].0 == episode && layout[i].1 == FEW)
            .map(|i| refs[i])
            .collect()
    };
    let (few_a, few_b) = (few_of("ep-a"), few_of("ep-b"));
    assert_eq!(
        (few_a.len(), few_b.len(), own.len()),
        (6, 3, 6 + max + 1_710)
    );
    // Some grants were merged into `readers`, the last wait in the tail.
    let (merged, waiting) = (
        w.store.raw_rows("readers").unwrap().len(),
        w.store.raw_rows("readers_tail").unwrap().len(),
    );
    assert!(
        merged > 0 && waiting > 0,
        "{merged} merged, {waiting} waiting"
    );

    let page = |reader: &Reader, kind: &str, after: Option<Ref>, limit: usize| {
        w.store
            .read(|r| -> Result<_, StoreError> {
                Ok(
                    access::by_semantic_id(r, reader, kind, after, limit)?.map(|p| {
                        let items = p.items.iter().map(|o| o.hash).collect::<Vec<_>>();
                        (items, p.next)
                    }),
                )
            })
            .unwrap()
    };
    // Where a ref lies among ep-a's objects, in arrival order.
    let at = |r: &Ref| own.iter().position(|o| o == r).unwrap();
    // Walks ep-a's listing of `kind` as a client does: from `next` when a page gives one,
    // else from its last item, until neither is given. Each page examines at most `max` of
    // ep-a's objects: the objects from `after` (exclusive) to where the page stopped.
    let walk = |kind: &str, limit: usize| {
        let (mut listed, mut after) = (Vec::<Ref>::new(), None);
        let (mut pages, mut empty_with_next) = (0usize, 0usize);
        loop {
            pages += 1;
            assert!(pages < 100, "the walk goes on");
            let (items, next) = page(&ep("ep-a"), kind, after, limit).unwrap();
            let from = after.map_or(0, |a| at(&a) + 1);
            let stopped = match (next, items.last()) {
                (Some(n), _) => {
                    assert!(items.len() < limit, "a full page needs no `next`");
                    assert!(items.iter().all(|i| at(i) <= at(&n)));
                    empty_with_next += usize::from(items.is_empty());
                    // Exactly the bound, and never at the end.
                    assert_eq!(at(&n) + 1 - from, max, "limit {limit}");
                    assert!(at(&n) + 1 < own.len());
                    at(&n) + 1
                }
                (None, Some(last)) if items.len() == limit => at(last) + 1,
                (None, _) => own.len(),
            };
            assert!(stopped - from <= max, "limit {limit}: {from}..{stopped}");
            listed.extend(&items);
            after = next.or(items.last().copied());
            if after.is_none() {
                return (listed, pages, empty_with_next);
            }
        }
    };
    for limit in [1, 2, 500] {
        let (listed, pages, empty_with_next) = walk(FEW, limit);
        assert_eq!(listed, few_a, "limit {limit}");
        // One at a time, the page after the third of the few starts a run of the bulk longer
        // than a page examines: it finds nothing, and says where to go on.
        if limit == 1 {
            assert_eq!((pages, empty_with_next), (8, 1));
        }
    }
    // A kind the episode holds none of: pages of nothing, each naming where to go on, until
    // one reaches the end.
    let (listed, pages, empty_with_next) = walk("world/test-none/v1", 1);
    assert_eq!((listed, pages), (vec![], own.len().div_ceil(max)));
    assert_eq!(empty_with_next, pages - 1);
    // A page that examines exactly the bound and reaches the end with it says nothing more.
    let end = own.len();
    assert_eq!(
        page(
            &ep("ep-a"),
            "world/test-none/v1",
            Some(own[end - max - 1]),
            1
        ),
        Some((vec![], None))
    );
    assert_eq!(
        page(
            &ep("ep-a"),
            "world/test-none/v1",
            Some(own[end - max - 2]),
            1
        ),
        Some((vec![], Some(own[end - 2])))
    );
    // The bulk kind itself: a full page, its last item the cursor.
    let (bulk, _, _) = walk(BULK, 500);
    assert_eq!(bulk.len(), max + 1_710);

    // `next` names an object of ep-a's: another episode naming it, or a ref never stored, is
    // refused alike; ep-a naming ep-b's object too.
    let (_, next) = page(&ep("ep-a"), FEW, Some(few_a[2]), 10).unwrap();
    let next = next.unwrap();
    assert_eq!(
        layout[refs.iter().position(|r| *r == next).unwrap()].1,
        BULK
    );
    assert_eq!(page(&ep("ep-b"), FEW, Some(next), 10), None);
    assert_eq!(page(&ep("ep-b"), FEW, Some(few_a[0]), 10), None);
    assert_eq!(page(&ep("ep-b"), FEW, Some(Ref::of(b"never")), 10), None);
    assert_eq!(page(&ep("ep-a"), FEW, Some(few_b[1]), 10), None);
    assert_eq!(
        page(&ep("ep-b"), FEW, Some(few_b[0]), 10),
        Some((few_b[1..].to_vec(), None))
    );
    // Readers that see everything list from the semantic-id index, as before: every
    // episode's, in one page, and `after` must be of the kind.
    let all: Vec<Ref> = (0..layout.len())
        .filter(|&i| layout[i].1 == FEW)
        .map(|i| refs[i])
        .collect();
    assert_eq!(page(&Reader::Operator, FEW, None, 500), Some((all, None)));
    assert_eq!(page(&Reader::Operator, FEW, Some(next), 500), None);
}

#[test]
fn log_pages_skip_other_episodes_entries_keep_their_indexes_and_say_where_to_continue() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Read=worktree:9"]);
    let b = w.mint("ep-b", &["Workspace.Read=worktree:9"]);
    // Entries 1..=6: a b a a b a
    for (i, s) in [&a, &b, &a, &a, &b, &a].iter().enumerate() {
        w.call(s, "ailang-read", json!({"path": format!("f{i}")}))
            .unwrap();
    }
    let page = |reader: &Reader, from, limit, scan| {
        let p = w
            .store
            .read(|r| access::log_page(r, reader, from, limit, scan))
            .unwrap();
        (
            p.items
                .iter()
                .map(|e| e.header.entry_index)
                .collect::<Vec<_>>(),
            p.next,
        )
    };
    // The genesis is public; other entries are the episode's own.
    assert_eq!(page(&ep("ep-b"), 0, 100, 100), (vec![0, 2, 5], 7));
    assert_eq!(page(&ep("ep-a"), 0, 100, 100), (vec![0, 1, 3, 4, 6], 7));
    assert_eq!(
        page(&Reader::Operator, 0, 100, 100).0,
        (0..=6).collect::<Vec<_>>()
    );
    // `limit` counts what is returned; `next` follows the last position examined.
    assert_eq!(page(&ep("ep-b"), 1, 1, 100), (vec![2], 3));
    assert_eq!(page(&ep("ep-b"), 3, 1, 100), (vec![5], 6));
    assert_eq!(page(&ep("ep-b"), 6, 1, 100), (vec![], 7));
    // The scan bound: a page may come back empty, and says where to go on.
    assert_eq!(page(&ep("ep-b"), 3, 100, 2), (vec![], 5));
    assert_eq!(page(&ep("ep-b"), 5, 100, 2), (vec![5], 7));
}

/// A log row whose own framing no longer decodes (not only its entry's JSON) is named in the
/// page's `damaged`, at its position, and the page goes on past it: it failed every page that
/// spanned it, as an internal store failure with no index.
#[test]
fn a_log_row_whose_framing_is_damaged_is_named_by_the_page_and_passed() {
    let w = World::new();
    let a = w.mint("ep-a", &["Workspace.Read=worktree:9"]);
    for i in 0..3 {
        w.call(&a, "ailang-read", json!({"path": format!("f{i}")}))
            .unwrap();
    }
    // Too short to hold a row's world ref, lengths and hash.
    w.store
        .raw_overwrite(RawTable::LogRow, 2u64.to_be_bytes().to_vec(), vec![7, 7, 7])
        .unwrap();
    let p = w
        .store
        .read(|r| access::log_page(r, &Reader::Operator, 0, 100, 100))
        .unwrap();
    let listed: Vec<u64> = p.items.iter().map(|e| e.header.entry_index).collect();
    assert_eq!(listed, [0, 1, 3]);
    assert_eq!(p.next, 4);
    assert_eq!(
        p.damaged,
        [access::DamagedRow {
            index: 2,
            cause: "log row 2 is damaged".into()
        }]
    );
    // It counts towards the limit, as an entry does.
    let p = w
        .store
        .read(|r| access::log_page(r, &Reader::Operator, 1, 2, 100))
        .unwrap();
    assert_eq!((p.items.len(), p.damaged.len(), p.next), (1, 1, 3));
}

#[test]
fn the_objects_of_a_call_whose_effect_ran_but_did_not_commit_are_its_episodes() {
    let w = World::new();
    let a = w.mint("ep-a", &["Ailang.Check=worktree:5"]);
    *w.handler.finish_fails.lock().unwrap() = true;
    let err = w
        .call(&a, "ailang-check", json!({"path": "x.ail"}))
        .unwrap_err();
    let CallError::EffectsUnrecorded { records } = err else {
        panic!("{err}");
    };
    // The record is what the agent is told to resolve: it must be able to.
    assert!(readable(&w, &ep("ep-a"), &records[0]));
    assert!(!readable(&w, &ep("ep-b"), &records[0]));
}

#[test]
fn a_denial_flood_is_cut_off_by_the_refusal_rate_and_commits_nothing_more() {
    // No refill within the test: exactly the burst is committed.
    let w = World::with_refusal_rate(RefusalRate::new(0.0001, 4).unwrap());
    let flood = w.mint("ep-a", &["Workspace.Read=worktree:0"]);
    let other = w.mint("ep-b", &["Workspace.Read=worktree:5"]);
    let head = || w.store.read(log::head).unwrap().unwrap().world.revision;
    let before = head();
    let mut outcomes = Vec::new();
    for i in 0..10 {
        outcomes.push(
            match w.call(&flood, "ailang-read", json!({"path": format!("f{i}")})) {
                Ok(out) => out.effects[0].denial.clone().unwrap(),
                Err(e) => e.to_string(),
            },
        );
    }
    assert_eq!(outcomes[..4], vec!["denied:budget".to_string(); 4]);
    assert_eq!(
        outcomes[4..],
        vec!["host callback capacity exceeded".to_string(); 6]
    );
    assert_eq!(head(), before + 4);
    // Plan refusals draw on the same bucket.
    let refused = w
        .call(&flood, "ailang-read", json!({"path": "a", "limit": 1}))
        .unwrap_err();
    assert!(matches!(refused, CallError::RefusalRate), "{refused}");
    assert_eq!(head(), before + 4);
    // Another credential, even of the same episode, has its own bucket; and other episodes'
    // calls go on.
    let again = w.mint("ep-a", &["Workspace.Read=worktree:0"]);
    assert!(w.call(&again, "ailang-read", json!({"path": "g"})).is_ok());
    let ok = w.call(&other, "ailang-read", json!({"path": "h"})).unwrap();
    assert_eq!(ok.effects[0].status, "ok");
    assert_eq!(head(), before + 6);
}

/// Bytes this process has passed to write(2) and friends so far (`/proc/self/io`).
fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// What the readers index costs the writer: LMDB writes each dirty page with pwrite(2), so
/// the bytes written per call over the page size are the pages one call dirties (both its
/// commits). Run with `--ignored --nocapture`; compare against a build without the index.
#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn pages_written_per_call() {
    let w = World::with_refusal_rate(RefusalRate::new(0.0, 1).unwrap());
    let page = 4096.0;
    let sessions: Vec<_> = (0..20)
        .map(|i| w.mint(&format!("ep{i}"), &["Workspace.Write=worktree:1000000"]))
        .collect();
    let write = |i: usize| {
        w.clock.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        w.call(
            &sessions[i % sessions.len()],
            "ailang-write",
            json!({"path": format!("f{i}.txt"), "content": format!("line {i}\n")}),
        )
        .unwrap();
    };
    for i in 0..2_000 {
        write(i);
    }
    let n = 500;
    let before = bytes_written();
    for i in 2_000..2_000 + n {
        write(i);
    }
    let effectful = (bytes_written() - before) as f64 / page / n as f64;
    let before = bytes_written();
    for i in 0..n {
        w.call(
            &sessions[i % sessions.len()],
            "ailang-write",
            json!({"path": format!("f{i}"), "nope": 1}),
        )
        .unwrap();
    }
    let refusal = (bytes_written() - before) as f64 / page / n as f64;
    println!(
        "pages written per call after 2000 calls in 20 episodes: {effectful:.1} per effectful call (2 commits), {refusal:.1} per plan refusal (1 commit)"
    );
}
