//! "Did you mean …?": the known word a given one is most likely a misspelling of.

/// Most bytes of a client's name written between the quotes of a message, escapes counted.
pub const MAX_SENT_BYTES: usize = 256;

/// `given` as a JSON string literal of at most [`MAX_SENT_BYTES`] bytes between its quotes,
/// escapes counted, then `…` when cut (at a character, never inside an escape). The cut is made
/// on what is sent: cut before escaping, 256 control characters became 1.5 KB of `\u0001`.
pub fn quote_sent(given: &str) -> String {
    let mut sent = 0;
    let mut end = given.len();
    for (i, c) in given.char_indices() {
        let width = match c {
            '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
            c if u32::from(c) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if sent + width > MAX_SENT_BYTES {
            end = i;
            break;
        }
        sent += width;
    }
    let mut out = dialect::quote::json_string(&given[..end]);
    if end < given.len() {
        out.insert(out.len() - 1, '…');
    }
    out
}

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
    let chars = given.chars().count();
    known
        .into_iter()
        // Two edits cannot bridge a longer gap in length; the distance of a name of megabytes
        // is never computed.
        .filter(|k| k.chars().count().abs_diff(chars) <= 2)
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
    match nearest(given, known, true) {
        Some(near) => did_you_mean(given, near, noun, listed),
        None => format!(
            "no {noun} of this session is named {}; {listed}",
            quote_sent(given)
        ),
    }
}

/// What an agent is told of a name that is not the one to send but stands for one tool
/// without doubt (a tool's id sent where its MCP name is wanted, or the reverse): that tool,
/// `meant`, in the words of [`unknown_name`]. It comes before any guess by distance, which
/// between names that differ only in an escaped character (`x.y`, `x_y`) names another tool.
pub fn did_you_mean(given: &str, meant: &str, noun: &str, listed: &str) -> String {
    format!(
        "no {noun} of this session is named {}; did you mean {meant}? ({listed})",
        quote_sent(given)
    )
}

/// [`unknown_name`] for a tool: besides a name within two edits, the tool a model most likely
/// meant when it dropped or added part of the name. A host's prefix (`mcp__worldd__ailang-read`,
/// `worldd__ailang-read`) or a suffix (`ailang-readfile`) around a tool's name, or a part of one
/// (`read`, `write`), names that tool. A part that several tools hold names them all: one
/// picked among them was read as the answer. Only the session's own `known` names are offered.
pub fn unknown_tool<'k>(
    given: &str,
    known: impl IntoIterator<Item = &'k str> + Clone,
    listed: &str,
) -> String {
    let q = quote_sent(given);
    let near = match nearest(given, known.clone(), true) {
        Some(near) => vec![near],
        None => around(given, known),
    };
    match near.as_slice() {
        [] => format!("no tool of this session is named {q}; {listed}"),
        [one] => format!("no tool of this session is named {q}; did you mean {one}? ({listed})"),
        several => format!(
            "no tool of this session is named {q}; did you mean one of {}? ({listed})",
            several.join(", ")
        ),
    }
}

/// The names of `known` that `given` holds whole or is a part of (at least three characters),
/// compared case-insensitively, in sort order. Only the best kind: `given` ends with one (a
/// host's prefix), one ends with `given`, one holds `given`, `given` holds one. When `given`
/// holds the name (the first and last kinds) the longest is meant; when the name holds
/// `given`, every such name fits as well as another.
fn around<'k>(given: &str, known: impl IntoIterator<Item = &'k str>) -> Vec<&'k str> {
    let given = given.to_ascii_lowercase();
    let part = given.chars().count() >= 3;
    let ranked: Vec<(u8, &'k str)> = known
        .into_iter()
        .filter_map(|k| {
            let name = k.to_ascii_lowercase();
            let rank = if given.ends_with(&name) {
                0
            } else if part && name.ends_with(&given) {
                1
            } else if part && name.contains(&given) {
                2
            } else if given.contains(&name) {
                3
            } else {
                return None;
            };
            Some((rank, k))
        })
        .collect();
    let Some(best) = ranked.iter().map(|(rank, _)| *rank).min() else {
        return Vec::new();
    };
    let mut fits: Vec<&'k str> = ranked
        .into_iter()
        .filter(|(rank, _)| *rank == best)
        .map(|(_, k)| k)
        .collect();
    if matches!(best, 0 | 3) {
        let longest = fits.iter().map(|k| k.len()).max().unwrap_or(0);
        fits.retain(|k| k.len() == longest);
    }
    fits.sort_unstable();
    fits.dedup();
    fits
}

#[cfg(test)]
mod tests {
    use super::{nearest, unknown_tool};

    #[test]
    fn a_tool_name_with_a_host_prefix_a_suffix_or_only_a_part_of_it_suggests_that_tool() {
        let known = [
            "ailang-check",
            "ailang-edit",
            "ailang-read",
            "ailang-run",
            "ailang-write",
            "git-commit",
        ];
        let hint = |given: &str| {
            let why = unknown_tool(given, known, "tools/list shows this session's tools");
            why.split_once("did you mean ")
                .map(|(_, rest)| rest.split_once('?').unwrap().0.to_owned())
        };
        for (given, meant) in [
            ("mcp__worldd__ailang-read", "ailang-read"),
            ("worldd__ailang-read", "ailang-read"),
            ("MCP__WORLDD__AILANG-WRITE", "ailang-write"),
            ("read", "ailang-read"),
            ("write", "ailang-write"),
            ("edit", "ailang-edit"),
            ("commit", "git-commit"),
            ("ailang-readfile", "ailang-read"),
            ("ailang-writefile", "ailang-write"),
            ("ailang-reed", "ailang-read"),
        ] {
            assert_eq!(hint(given).as_deref(), Some(meant), "{given}");
        }
        // Too short to be a part of a name, or nothing like one.
        for given in ["ai", "-", "registry", "delete-everything"] {
            assert_eq!(hint(given), None, "{given}");
        }
        // A part several names hold names them all, in sort order; never one picked.
        let known = ["examples-search", "builtins-search", "ailang-read"];
        assert_eq!(
            unknown_tool("search", known, "(list)"),
            "no tool of this session is named \"search\"; did you mean one of builtins-search, examples-search? ((list))"
        );
        assert_eq!(
            unknown_tool("zzz", known, "tools/list shows this session's tools"),
            "no tool of this session is named \"zzz\"; tools/list shows this session's tools"
        );
    }

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
