//! "Did you mean …?": the known word a given one is most likely a misspelling of.

/// The word of `known` at most two edits from `given` (the nearest; the first in sort order
/// among equals), comparing case-insensitively when `fold_case`. Callers leave out a `given`
/// that is itself known.
pub fn nearest<'k>(
    given: &str,
    known: impl IntoIterator<Item = &'k str>,
    fold_case: bool,
) -> Option<&'k str> {
    let fold = |w: &str| {
        if fold_case {
            w.to_ascii_lowercase()
        } else {
            w.to_owned()
        }
    };
    let given = fold(given);
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(&given, &fold(k)), k))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, k)| k)
}

/// What an agent is told of a name none of its session's `known` names is: `no <noun> of this
/// session is named "<given>"`, then the nearest of `known` if one is within two edits, and
/// `listed`, where it finds them. Only the session's own names are offered, never another's.
pub fn unknown_name<'k>(
    given: &str,
    known: impl IntoIterator<Item = &'k str>,
    noun: &str,
    listed: &str,
) -> String {
    let q = dialect::quote::quote(given);
    match nearest(given, known, true) {
        Some(near) => {
            format!("no {noun} of this session is named {q}; did you mean {near}? ({listed})")
        }
        None => format!("no {noun} of this session is named {q}; {listed}"),
    }
}

#[cfg(test)]
mod tests {
    use super::nearest;

    #[test]
    fn the_nearest_word_within_two_edits_case_folded_on_request() {
        let known = ["workspace", "ailang", "git"];
        assert_eq!(nearest("workspce", known, false), Some("workspace"));
        assert_eq!(nearest("registry", known, false), None);
        assert_eq!(nearest("WORKSPACE", known, false), None);
        assert_eq!(nearest("WORKSPACE", known, true), Some("workspace"));
        // Equals: the first in sort order.
        assert_eq!(nearest("gat", ["gut", "get"], false), Some("get"));
    }
}
