//! Evaluation: one call's arguments through a parsed [`PlanSpec`], in the documented check
//! order (the arguments object, unknown keys, each declared argument, the cross-argument
//! checks, the effect choice against `declaredEffects`, the payload). Total: any JSON value
//! in, a plan or a refusal text out.

use serde_json::{Map, Value};

use super::effect::EffectSpec;
use super::fields::escape_for_message;
use super::message::Vars;
use super::spec::{Condition, PlanSpec, Test};
use super::{Plan, PlannedEffect, EFFECT_ID};

impl PlanSpec {
    /// Runs the language on one call's arguments. `Err` is a refusal message.
    pub(super) fn evaluate(
        &self,
        tool: &str,
        declared: &[EffectSpec],
        finish: bool,
        args: &Value,
    ) -> Result<Plan, String> {
        let given = match args.as_object() {
            Some(m) => m,
            None => return Err("arguments must be a JSON object".to_string()),
        };

        // 2. unknown keys: name the bytewise-smallest one.
        if let Some(k) = given
            .keys()
            .filter(|k| !self.arguments.iter().any(|a| &a.name == *k))
            .min()
        {
            let k = escape_for_message(k);
            return Err(if self.arguments.is_empty() {
                format!("unknown argument \"{k}\"; {tool} admits no arguments")
            } else {
                let names: Vec<&str> = self.argument_names().collect();
                format!(
                    "unknown argument \"{k}\"; {tool} admits only: {}",
                    names.join(", ")
                )
            });
        }

        // 3. each declared argument in order; collect checked values with defaults applied.
        let mut values = Map::new();
        for arg in &self.arguments {
            match given.get(&arg.name) {
                Some(v) => {
                    arg.check(tool, v)?;
                    values.insert(arg.name.clone(), v.clone());
                }
                None if arg.required => {
                    return Err(format!("missing required argument \"{}\"", arg.name))
                }
                None => {
                    if let Some(d) = &arg.default {
                        values.insert(arg.name.clone(), d.clone());
                    }
                }
            }
        }

        // 4. cross-argument checks.
        for check in &self.checks {
            if all_hold(&check.when, &values) {
                return Err(check.message.render(&Vars {
                    tool,
                    ..Vars::default()
                }));
            }
        }

        // 5. the effect, verified against the declaration.
        let chosen = self
            .effect
            .cases
            .iter()
            .find(|(when, _)| all_hold(when, &values))
            .map(|(_, e)| e)
            .unwrap_or(&self.effect.base);
        if !declared.contains(chosen) {
            return Err(format!(
                "transition \"{tool}\" is faulty: its plan chose effect {} at scope \"{}\" cost {}, which its declaredEffects do not list",
                chosen.effect, chosen.scope, chosen.cost
            ));
        }

        // 6. the payload.
        let payload = self.payload.build(&self.arguments, &values);

        Ok(Plan::Effect {
            effect: PlannedEffect {
                id: EFFECT_ID.to_string(),
                effect: chosen.effect.clone(),
                scope: chosen.scope.clone(),
                cost: chosen.cost,
                payload,
            },
            finish,
        })
    }
}

pub(super) fn all_hold(when: &[Condition], values: &Map<String, Value>) -> bool {
    when.iter().all(|c| {
        let v = values.get(&c.argument);
        match &c.test {
            Test::Equals(x) => v == Some(x),
            Test::Contains(s) => v
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|i| i.as_str() == Some(s))),
            Test::HasKey(k) => v
                .and_then(Value::as_object)
                .is_some_and(|m| m.contains_key(k)),
            Test::Present(b) => v.is_some() == *b,
        }
    })
}
