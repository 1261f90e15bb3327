//! Capability grants: `EFFECT=SCOPE:BUDGET`.
//!
//! The effect is everything before the first `=`, the budget everything after the last `:`,
//! the scope what lies between. Effect and scope are non-empty; the budget is a non-negative
//! integer counted in calls.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One grant of a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub effect: String,
    pub scope: String,
    pub budget: u64,
}

/// A grant text that is not `EFFECT=SCOPE:BUDGET`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --grant {text:?}: want EFFECT=SCOPE:BUDGET")]
pub struct GrantParseError {
    pub text: String,
}

impl FromStr for Grant {
    type Err = GrantParseError;

    fn from_str(text: &str) -> Result<Grant, GrantParseError> {
        let err = || GrantParseError {
            text: text.to_owned(),
        };
        let (effect, rest) = text.split_once('=').ok_or_else(err)?;
        let (scope, budget) = rest.rsplit_once(':').ok_or_else(err)?;
        if effect.is_empty() || scope.is_empty() || budget.is_empty() {
            return Err(err());
        }
        if !budget.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let budget = budget.parse::<u64>().map_err(|_| err())?;
        Ok(Grant {
            effect: effect.to_owned(),
            scope: scope.to_owned(),
            budget,
        })
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}:{}", self.effect, self.scope, self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_first_equals_and_last_colon() {
        let g: Grant = "Workspace.Read=worktree:50".parse().unwrap();
        assert_eq!(g.effect, "Workspace.Read");
        assert_eq!(g.scope, "worktree");
        assert_eq!(g.budget, 50);
        assert_eq!(g.to_string(), "Workspace.Read=worktree:50");
        let g: Grant = "FS.Read=/a=b:c:7".parse().unwrap();
        assert_eq!(
            (g.effect.as_str(), g.scope.as_str(), g.budget),
            ("FS.Read", "/a=b:c", 7)
        );
        let g: Grant = "X=s:0".parse().unwrap();
        assert_eq!(g.budget, 0);
    }

    #[test]
    fn rejects_malformed_grants_with_the_contract_text() {
        for bad in [
            "",
            "X",
            "X=s",
            "=s:1",
            "X=:1",
            "X=s:",
            "X=s:-1",
            "X=s:+1",
            "X=s:1.5",
            "X=s:abc",
            "X=s: 1",
            "X=s:99999999999999999999999",
        ] {
            let e = bad.parse::<Grant>().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid --grant \"{bad}\": want EFFECT=SCOPE:BUDGET")
            );
        }
    }
}
