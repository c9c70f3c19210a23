//! The rule for tool names the gateway lists and routes (issue 11).
//!
//! A person approves a call by reading its tool's name, and a model calls a
//! tool by its name, so a name must read one way only:
//!
//! - **Plain.** A name is 1 to 128 characters of `A-Z`, `a-z`, `0-9`, `_`,
//!   `-` and `.`, the spec's tool-name rule (SEP-986). That one rule leaves
//!   out every character that controls a terminal or the layout of a line
//!   (control characters, line breaks, tabs), every one that shows as
//!   nothing or as blank space (bidi controls, zero-width and tag
//!   characters, other format characters, white space), and every letter
//!   of another script that looks like a Latin one (a Cyrillic `а` in
//!   `rеad`). Listing "printable" names instead would need the Unicode
//!   tables of what is invisible and what is confusable, and would still
//!   let `read` and `rеad` look the same.
//! - **Unlike the server's others.** Two plain names of one server that
//!   [`look_alike`] (the same but for case, or for `I`, `i`, `l` and `1`,
//!   `O` and `0`, `rn` and `m`, `vv` and `w`) could be taken for each other in a
//!   prompt, so neither is listed or called. The same name listed twice is
//!   the extreme case.
//!
//! A name that breaks the rule is not listed, and a call to it is refused
//! (`invalid-tool-name`, `ambiguous-tool-name`); wherever the gateway's
//! tools show a name the server sent, it is escaped (see
//! [`crate::sanitize::escape_line`]).

/// The most characters a tool name may have (the spec's limit).
pub const MAX_CHARS: usize = 128;

/// Whether a character may appear in a tool name (the spec's set).
pub fn is_plain_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.')
}

/// Why `name` is not a plain tool name, in words that follow "the name",
/// or `None` when it is one.
pub fn problem(name: &str) -> Option<String> {
    let length = name.chars().count();
    if length == 0 {
        return Some("is empty".to_owned());
    }
    if length > MAX_CHARS {
        return Some(format!(
            "is {length} characters long, over the spec's {MAX_CHARS}"
        ));
    }
    characters_problem(
        name,
        |ch| !is_plain_char(ch),
        "holds characters outside the spec's set `A-Z a-z 0-9 _ - .`",
    )
}

/// `what`, followed by the first few distinct characters of `text` that
/// `bad` picks, each escaped to show; `None` when it picks none.
fn characters_problem(text: &str, bad: impl Fn(char) -> bool, what: &str) -> Option<String> {
    let mut found: Vec<char> = text.chars().filter(|ch| bad(*ch)).collect();
    if found.is_empty() {
        return None;
    }
    found.dedup();
    let shown: Vec<String> = found
        .iter()
        .take(5)
        .map(|ch| format!("`{}`", crate::sanitize::escape_line(&ch.to_string())))
        .collect();
    Some(format!("{what}: {}", shown.join(", ")))
}

/// Why a resource URI or URI template a server lists cannot be shown as it
/// is, in words that follow "the URI", or `None` when it can.
///
/// URIs are not renamed or held to the tool-name rule (they are the
/// server's addresses, and may be any scheme), but a person picks a
/// resource by reading its URI, so one that holds a character that breaks
/// a line, controls a terminal, turns text around or shows as nothing
/// ([`crate::sanitize::breaks_or_hides`]) is refused: two URIs that look
/// the same could then be different resources.
pub fn uri_problem(uri: &str) -> Option<String> {
    if uri.is_empty() {
        return Some("is empty".to_owned());
    }
    characters_problem(
        uri,
        crate::sanitize::breaks_or_hides,
        "holds characters that break a line or do not show",
    )
}

/// Why the `arguments` a server lists for a prompt cannot be shown as they
/// are, in words that follow "the prompt", or `None` when they can.
///
/// A host shows a prompt's arguments by name for a person to fill in, and
/// sends the values back under those names, so each must read one way
/// only: a string, not empty, without a character that breaks a line,
/// controls a terminal, turns text around or shows as nothing
/// ([`crate::sanitize::breaks_or_hides`]), and unlike the prompt's other
/// arguments ([`look_alike`], the same name twice included). Arguments
/// that are absent or `null` are none; any other `arguments` that is not a
/// list of objects is refused too.
pub fn arguments_problem(arguments: Option<&serde_json::Value>) -> Option<String> {
    let list = match arguments {
        None | Some(serde_json::Value::Null) => return None,
        Some(serde_json::Value::Array(list)) => list,
        Some(_) => return Some("has `arguments` that are not a list".to_owned()),
    };
    let mut looks: Vec<(String, &str)> = Vec::with_capacity(list.len());
    for argument in list {
        let Some(name) = argument.get("name").and_then(serde_json::Value::as_str) else {
            return Some("has an argument without a string `name`".to_owned());
        };
        let shown = crate::sanitize::escape_line(name);
        if name.is_empty() {
            return Some("has an argument whose name is empty".to_owned());
        }
        if let Some(problem) = characters_problem(
            name,
            crate::sanitize::breaks_or_hides,
            "holds characters that break a line or do not show",
        ) {
            return Some(format!("has an argument `{shown}` whose name {problem}"));
        }
        let look = look_alike(name);
        if let Some((_, other)) = looks.iter().find(|(seen, _)| *seen == look) {
            return Some(if *other == name {
                format!("lists its argument `{shown}` more than once")
            } else {
                format!(
                    "has arguments `{}` and `{shown}` whose names look the same",
                    crate::sanitize::escape_line(other)
                )
            });
        }
        looks.push((look, name));
    }
    None
}

/// What a name looks like to a reader: case folded, and the ASCII
/// characters that are drawn alike in common fonts made one (`I`, `i`, `l`
/// and `1` as `l`; `O` and `0` as `o`; `rn` as `m`; `vv` as `w`). Two names
/// with the same key can be taken for each other.
pub fn look_alike(name: &str) -> String {
    let folded: String = name
        .chars()
        .map(|ch| match ch {
            'I' | 'i' | 'L' | 'l' | '1' => 'l',
            'O' | 'o' | '0' => 'o',
            other => other.to_ascii_lowercase(),
        })
        .collect();
    folded.replace("rn", "m").replace("vv", "w")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_names_follow_the_spec() {
        for name in ["read_file", "a", "fs.read-v2", &"x".repeat(128)] {
            assert_eq!(problem(name), None, "{name}");
        }
        assert_eq!(problem("").as_deref(), Some("is empty"));
        assert!(
            problem(&"x".repeat(129))
                .unwrap()
                .contains("129 characters")
        );
        let shown = problem("read\n\nok\u{202e}").unwrap();
        assert!(shown.ends_with("`\\n`, `\\u{202e}`"), "{shown}");
        for name in ["rеad", "with space", "ｒｅａｄ", "tag\u{e0041}", "a\u{ad}b"] {
            assert!(problem(name).is_some(), "{name}");
        }
    }

    #[test]
    fn uris_that_hide_or_break_a_line_are_refused() {
        for uri in ["file:///a b.txt", "note://x/é", "db://{table}/rows"] {
            assert_eq!(uri_problem(uri), None, "{uri}");
        }
        assert_eq!(uri_problem("").as_deref(), Some("is empty"));
        let shown = uri_problem("file:///a\n\u{202e}txt").unwrap();
        assert!(shown.ends_with("`\\n`, `\\u{202e}`"), "{shown}");
        for uri in [
            "file:///a\u{200b}",
            "x:\u{1b}[2J",
            "x:\ty",
            "x:\u{a0}",
            "x:\u{e0041}",
        ] {
            assert!(uri_problem(uri).is_some(), "{uri:?}");
        }
    }

    #[test]
    fn prompt_arguments_read_one_way_only() {
        use serde_json::json;
        for fine in [
            None,
            Some(json!(null)),
            Some(json!([])),
            Some(json!([{"name": "path"}, {"name": "file name", "description": "a\nb"}])),
        ] {
            assert_eq!(arguments_problem(fine.as_ref()), None, "{fine:?}");
        }
        let refused = [
            (json!({"name": "x"}), "not a list"),
            (json!([{"title": "x"}]), "without a string `name`"),
            (json!([{"name": ""}]), "empty"),
            (json!([{"name": "pa\nth"}]), "`pa\\nth`"),
            (json!([{"name": "path\u{200b}"}]), "do not show"),
            (json!([{"name": "\u{202e}htap"}]), "do not show"),
            (json!([{"name": "path"}, {"name": "Path"}]), "look the same"),
            (
                json!([{"name": "path"}, {"name": "path"}]),
                "more than once",
            ),
        ];
        for (arguments, says) in refused {
            let problem = arguments_problem(Some(&arguments)).unwrap_or_default();
            assert!(problem.contains(says), "{arguments}: {problem:?}");
            assert!(!problem.contains('\n'), "{problem:?}");
        }
    }

    #[test]
    fn names_drawn_alike_share_a_key() {
        let alike = [
            ("notes", "Notes"),
            ("list_items", "Iist_items"),
            ("file1", "filel"),
            ("b0ot", "boot"),
            ("rm_cache", "rrn_cache"),
            ("vvrite", "write"),
        ];
        for (one, other) in alike {
            assert_eq!(look_alike(one), look_alike(other), "{one} {other}");
        }
        for (one, other) in [("read", "reads"), ("read-file", "read_file"), ("a.b", "ab")] {
            assert_ne!(look_alike(one), look_alike(other), "{one} {other}");
        }
    }

    proptest! {
        #[test]
        fn a_plain_name_holds_nothing_that_hides_or_breaks_a_line(name in "\\PC{1,40}|[ -~\\t\\n]{1,40}") {
            if problem(&name).is_none() {
                prop_assert_eq!(crate::sanitize::escape_line(&name), name.clone());
                prop_assert!(name.is_ascii());
            }
        }

        #[test]
        fn names_that_differ_only_in_case_look_alike(name in "[A-Za-z0-9_.-]{1,20}") {
            prop_assert_eq!(look_alike(&name), look_alike(&name.to_ascii_uppercase()));
        }
    }
}
