//! Capability grants: `EFFECT=SCOPE:BUDGET`.
//!
//! The effect is everything before the first `=`, the budget everything after the last `:`,
//! the scope what lies between. Effect and scope are non-empty; the budget is a non-negative
//! integer counted in calls, at most [`MAX_BUDGET`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::canon::MAX_SAFE_INTEGER;

/// The largest budget a grant may hold: 2^53−1. A session record is canonical JSON, whose
/// integers stop there, so a larger budget could be parsed but never stored.
pub const MAX_BUDGET: u64 = MAX_SAFE_INTEGER;

/// One grant of a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub effect: String,
    pub scope: String,
    pub budget: u64,
}

/// A grant text that is not `EFFECT=SCOPE:BUDGET`, or whose budget is beyond [`MAX_BUDGET`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantParseError {
    #[error("invalid --grant {text:?}: want EFFECT=SCOPE:BUDGET")]
    Shape { text: String },
    #[error("invalid --grant {text:?}: the budget is at most {MAX_BUDGET} (2^53−1, the largest integer a session record stores exactly)")]
    BudgetTooLarge { text: String },
}

impl FromStr for Grant {
    type Err = GrantParseError;

    fn from_str(text: &str) -> Result<Grant, GrantParseError> {
        let err = || GrantParseError::Shape {
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
        // All digits: the only way left to fail is size, beyond u64 or beyond what is stored.
        let too_large = || GrantParseError::BudgetTooLarge {
            text: text.to_owned(),
        };
        let budget = budget.parse::<u64>().map_err(|_| too_large())?;
        if budget > MAX_BUDGET {
            return Err(too_large());
        }
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
            "", "X", "X=s", "=s:1", "X=:1", "X=s:", "X=s:-1", "X=s:+1", "X=s:1.5", "X=s:abc",
            "X=s: 1",
        ] {
            let e = bad.parse::<Grant>().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid --grant \"{bad}\": want EFFECT=SCOPE:BUDGET")
            );
        }
    }

    #[test]
    fn a_budget_beyond_what_a_session_record_stores_is_refused_when_parsed() {
        let g: Grant = "X=s:9007199254740991".parse().unwrap();
        assert_eq!(g.budget, MAX_BUDGET);
        for bad in [
            "X=s:9007199254740992",
            "X=s:18446744073709551615",
            "X=s:99999999999999999999999",
        ] {
            let e = bad.parse::<Grant>().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid --grant \"{bad}\": the budget is at most 9007199254740991 (2^53−1, the largest integer a session record stores exactly)")
            );
        }
    }
}
