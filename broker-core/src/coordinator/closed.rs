//! Calls closed without running an effect (a refused plan, the broker's denial, a request the
//! handler declined), and the `world` block every call's answer carries.

use serde_json::{json, Map, Value};

use crate::broker::{EffectRecord, HandlerIdentity};
use crate::canon;
use crate::object::{sid, Object, Ref};
use crate::plan::PlannedEffect;

use super::outcome::{too_deep, MAX_OUTPUT_DEPTH};
use super::{Busy, CallError, EffectSummary, Finished, Prepared, MAX_IO_BYTES};

/// A request the handler declined before admission, closed: its record (`denied:handler`,
/// naming the plugin) is committed with the handler's answer as the output, and nothing is
/// spent. A tool with a finish phase answers in that phase's shape, with the handler's reason.
#[allow(clippy::too_many_arguments)]
pub(super) fn declined(
    p: Prepared,
    plan_obj: Object,
    request: Object,
    effect: &PlannedEffect,
    budget: u64,
    by: Option<HandlerIdentity>,
    output: Map<String, Value>,
    busy: Busy,
) -> Result<Finished, CallError> {
    let record = EffectRecord::declined(
        &effect.effect,
        &effect.scope,
        effect.cost,
        budget,
        request.hash,
    )
    .ran_by(by);
    let record_obj = Object::new(sid::EFFECT_RECORD, "host/broker", record.canonical()?);
    let body = if p.entry.transition.finish.is_some() {
        let mut body = ended_body(&p, &effect.effect, record.status());
        if let Some(reason) = output.get("refused") {
            body.insert("refused".into(), reason.clone());
        }
        body
    } else {
        output
    };
    let world = [(&record, record_obj.hash)];
    // The answer is the plugin's to shape, not to inflate past what a call may return, nor to
    // make unreadable: a decline whose answer cannot be committed as it is is committed with a
    // short one saying why, and is still a decline (nothing ran, nothing is spent).
    let unfit = if too_deep(&body) {
        Err(format!(
            "its answer is nested more than {MAX_OUTPUT_DEPTH} levels deep; the limit is {MAX_OUTPUT_DEPTH}"
        ))
    } else {
        match output_with_world(&body, &plan_obj.hash, &world) {
            Ok(output) if output.len() > MAX_IO_BYTES => Err(format!(
                "its {}-byte answer is over the {MAX_IO_BYTES}-byte limit",
                output.len()
            )),
            Ok(output) => Ok(output),
            Err(e) => Err(format!("its answer has no canonical form: {e}")),
        }
    };
    let output = match unfit {
        Ok(output) => output,
        Err(why) => {
            let mut body = Map::new();
            body.insert("ok".into(), Value::Bool(false));
            body.insert(
                "refused".into(),
                Value::String(format!(
                    "the {} handler declined the request; {why}",
                    effect.effect
                )),
            );
            output_with_world(&body, &plan_obj.hash, &world)?
        }
    };
    Ok(closed_by_denial(
        p, plan_obj, request, &record, record_obj, output, busy,
    ))
}

/// A call closed by a denial, the broker's or the handler's: its plan, request and record are
/// committed with the output, and nothing ran.
pub(super) fn closed_by_denial(
    p: Prepared,
    plan_obj: Object,
    request: Object,
    record: &EffectRecord,
    record_obj: Object,
    output: Vec<u8>,
    busy: Busy,
) -> Finished {
    Finished {
        call: p,
        plan_ref: plan_obj.hash,
        records: vec![record_obj.hash],
        effects: vec![summary(record, record_obj.hash)],
        objects: vec![plan_obj, request, record_obj],
        output,
        ran: None,
        intent: None,
        busy,
    }
}

/// A refused plan, closed: committed with no effect.
pub(super) fn refusal(
    p: Prepared,
    plan_obj: Object,
    message: String,
    busy: Busy,
) -> Result<Finished, CallError> {
    let output = refused_output(&message, plan_obj.hash)?;
    Ok(Finished {
        call: p,
        plan_ref: plan_obj.hash,
        records: Vec::new(),
        objects: vec![plan_obj],
        output,
        effects: Vec::new(),
        ran: None,
        intent: None,
        busy,
    })
}

/// A refused plan's answer, `{"ok":false,"refused":…,"world":{"effects":[],"plan":…}}`, as
/// canonical JSON written directly (a refusal commits nothing else of its own).
fn refused_output(message: &str, plan: Ref) -> Result<Vec<u8>, canon::CanonError> {
    Ok(canon::Members::new()
        .boolean("ok", false)
        .string("refused", message)
        .object("world", |m| {
            Ok(m.plain_array::<&str>("effects", &[]).plain("plan", plan))
        })?
        .finish()
        .into_bytes())
}

/// The body for an effect that did not end ok: `{}`, or for tools with a finish phase the
/// refusal `the <Effect> effect ended <status>`.
pub(super) fn ended_body(p: &Prepared, effect: &str, status: &str) -> Map<String, Value> {
    if p.entry.transition.finish.is_some() {
        let v = json!({
            "ok": false,
            "status": status,
            "refused": format!("the {effect} effect ended {status}"),
        });
        if let Value::Object(m) = v {
            return m;
        }
    }
    Map::new()
}

/// The answer: `body` (what the handler returned, or what the broker says in its place) with
/// the reserved `world` member, `{"effects":[{"id","record","status"}…],"plan"}`, as canonical
/// JSON written directly.
pub(super) fn output_with_world(
    body: &Map<String, Value>,
    plan: &Ref,
    records: &[(&EffectRecord, Ref)],
) -> Result<Vec<u8>, canon::CanonError> {
    canon::object_with_member_to_vec(body, "world", &world_block(plan, records)?)
}

/// [`output_with_world`] of a `body` whose canonical JSON is `canonical` (the effect's result
/// object holds it already). When every member of `body` sorts before `world`, as a
/// handler's usually do, the answer is those bytes with `world` written before the closing
/// brace: a read's file is not written a second time. Otherwise as [`output_with_world`].
/// (Against a name of ASCII letters, UTF-8's order and canonical JSON's UTF-16 order agree.)
pub(super) fn output_with_world_after(
    canonical: &[u8],
    body: &Map<String, Value>,
    plan: &Ref,
    records: &[(&EffectRecord, Ref)],
) -> Result<Vec<u8>, canon::CanonError> {
    let before_world = body.keys().all(|name| name.as_str() < "world");
    let open = canonical
        .strip_prefix(b"{")
        .and_then(|rest| rest.strip_suffix(b"}"));
    let Some(members) = open.filter(|_| before_world) else {
        return output_with_world(body, plan, records);
    };
    let world = world_block(plan, records)?;
    let mut out = Vec::with_capacity(canonical.len() + world.len() + 10);
    out.push(b'{');
    out.extend_from_slice(members);
    if !members.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(br#""world":"#);
    out.extend_from_slice(world.as_bytes());
    out.push(b'}');
    Ok(out)
}

/// `{"effects":[{"id","record","status"}…],"plan"}`, canonical.
fn world_block(plan: &Ref, records: &[(&EffectRecord, Ref)]) -> Result<String, canon::CanonError> {
    let numbered: Vec<(usize, &EffectRecord, Ref)> = (1..)
        .zip(records)
        .map(|(n, (rec, r))| (n, *rec, *r))
        .collect();
    Ok(canon::Members::new()
        .object_array("effects", &numbered, |m, (n, rec, r)| {
            Ok(m.plain("id", format_args!("e{n}"))
                .plain("record", r)
                .plain("status", rec.status()))
        })?
        .plain("plan", plan)
        .finish())
}

pub(super) fn summary(record: &EffectRecord, r: Ref) -> EffectSummary {
    EffectSummary {
        id: "e1".into(),
        effect: record.effect.clone(),
        status: record.status().into(),
        record: r,
        budget_after: record.budget_after,
        denial: (!record.denial.is_empty()).then(|| record.denial.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer as it was written before: `world` inserted into the body as JSON values,
    /// then the whole value written canonically.
    fn as_values(
        mut body: Map<String, Value>,
        plan: &Ref,
        records: &[(&EffectRecord, Ref)],
    ) -> Result<Vec<u8>, canon::CanonError> {
        let effects: Vec<Value> = records
            .iter()
            .enumerate()
            .map(|(i, (rec, r))| {
                json!({"id": format!("e{}", i + 1), "status": rec.status(), "record": r})
            })
            .collect();
        body.insert("world".into(), json!({"effects": effects, "plan": plan}));
        canon::to_vec(&Value::Object(body))
    }

    #[test]
    fn an_answer_written_directly_is_its_value_written_canonically() {
        let plan = Ref::of(b"plan");
        let request = Ref::of(b"request");
        let ok = EffectRecord::succeeded("Workspace.Read", "worktree", 1, 9, request, plan);
        let failed = EffectRecord::failed("Workspace.Write", "worktree", 1, 8, request);
        let denied = EffectRecord::denied("X.Y", "s", 2, 0, crate::broker::Denial::Budget, request);
        let mut deep = json!(1);
        for _ in 0..canon::MAX_DEPTH - 1 {
            deep = json!([deep]);
        }
        let bodies = [
            json!({}),
            json!({"ok": true, "content": "a \"quoted\" \u{2028} line\n", "n": 9_007_199_254_740_991u64}),
            // A member `world` replaces, with nothing after it.
            json!({"a": 1, "world": "the handler's"}),
            // Members before and after `world` in canonical order, and one it replaces.
            json!({"aa": 1, "wor": 2, "world": "the handler's", "worldz": 3, "worlD": 4, "zeta": [1, {"b": 2, "a": 1}]}),
            // Names from U+E000 up, which UTF-8 and UTF-16 order differently.
            json!({"\u{e000}": 1, "\u{1F600}": 2, "x": 3, "\u{ff61}": 4}),
            // At the depth limit, and one past it.
            json!({"deep": deep.clone()}),
            json!({"deeper": [deep]}),
            json!({"big": 9_007_199_254_740_992u64}),
        ];
        let records: [&[(&EffectRecord, Ref)]; 3] = [
            &[],
            &[(&ok, Ref::of(b"r1"))],
            &[(&failed, Ref::of(b"r2")), (&denied, Ref::of(b"r3"))],
        ];
        for body in bodies {
            let Value::Object(map) = body else {
                unreachable!()
            };
            for records in records {
                let direct = output_with_world(&map, &plan, records);
                let values = as_values(map.clone(), &plan, records);
                assert_eq!(
                    format!("{direct:?}"),
                    format!("{values:?}"),
                    "{map:?} {records:?}"
                );
                // Spliced into the body's own canonical bytes, where it has them.
                if let Ok(canonical) = canon::object_to_vec(&map) {
                    let after = output_with_world_after(&canonical, &map, &plan, records);
                    assert_eq!(
                        format!("{after:?}"),
                        format!("{values:?}"),
                        "{map:?} {records:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_refused_answer_written_directly_is_its_value_written_canonically() {
        let plan = Ref::of(b"plan");
        for message in [
            "argument \"path\" must be relative",
            "",
            "quote \" backslash \\ tab \t nul \u{0} \u{7f} \u{e000} \u{1F600}",
        ] {
            let value = json!({
                "ok": false,
                "refused": message,
                "world": {"effects": [], "plan": plan},
            });
            assert_eq!(
                String::from_utf8(refused_output(message, plan).unwrap()).unwrap(),
                String::from_utf8(canon::to_vec(&value).unwrap()).unwrap()
            );
        }
    }
}
