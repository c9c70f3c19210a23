//! Words in tool names and descriptions, and what the verbs among them say.
//!
//! Scanners that match substrings flag `get_settings` as a setter and
//! `list_dropbox_files` as a drop. Here a name is split into words at `_`,
//! `-`, `.`, spaces and camelCase humps, and only whole words count. A name
//! says what its tool does through its *first verb*: `get_delete_status`
//! reads (its first verb is `get`; `delete` is what it reads about), while
//! `git_reset` resets (`git` is no verb).
//! Descriptions are read more carefully still: only the verbs that lead the
//! first sentence (`Deletes ...`, `Create or replace ...`) count, and a
//! negated one (`without deleting`) does not.

/// What a verb says a tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// It reads, lists, searches or computes.
    Read,
    /// It writes, creates or changes something.
    Write,
    /// It deletes, overwrites, cancels, sends or pays: more than additive.
    Destructive,
}

/// Verbs that destroy, overwrite or cannot be taken back, with their forms.
const DESTRUCTIVE: &[&[&str]] = &[
    &["delete", "deletes", "deleted", "deleting"],
    &["remove", "removes", "removed", "removing"],
    &["drop", "drops", "dropped", "dropping"],
    &[
        "overwrite",
        "overwrites",
        "overwrote",
        "overwritten",
        "overwriting",
    ],
    &["replace", "replaces", "replaced", "replacing"],
    &["revoke", "revokes", "revoked", "revoking"],
    &[
        "cancel",
        "cancels",
        "cancelled",
        "canceled",
        "cancelling",
        "canceling",
    ],
    &["reset", "resets", "resetting"],
    &["purge", "purges", "purged", "purging"],
    &["kill", "kills", "killed", "killing"],
    &["send", "sends", "sent", "sending"],
    &["pay", "pays", "paid", "paying"],
    &["destroy", "destroys", "destroyed", "destroying"],
    &["erase", "erases", "erased", "erasing"],
    &["wipe", "wipes", "wiped", "wiping"],
    &["truncate", "truncates", "truncated", "truncating"],
    &["unlink", "unlinks", "unlinked", "unlinking"],
    &["rm"],
];

/// Verbs that change something, with their forms.
const WRITE: &[&[&str]] = &[
    &["write", "writes", "wrote", "written", "writing"],
    &["create", "creates", "created", "creating"],
    &["update", "updates", "updated", "updating"],
    &["set", "sets"],
    &["move", "moves", "moved", "moving"],
    &["insert", "inserts", "inserted", "inserting"],
    &["edit", "edits", "edited", "editing"],
    &["modify", "modifies", "modified", "modifying"],
    &["rename", "renames", "renamed", "renaming"],
    &["upload", "uploads", "uploaded", "uploading"],
    &["save", "saves", "saved", "saving"],
    &["append", "appends", "appended", "appending"],
    &["commit", "commits", "committed", "committing"],
    &["push", "pushes", "pushed", "pushing"],
    &["publish", "publishes", "published", "publishing"],
    &["deploy", "deploys", "deployed", "deploying"],
    &["install", "installs", "installed", "installing"],
    &["uninstall", "uninstalls", "uninstalled", "uninstalling"],
    &["assign", "assigns", "assigned", "assigning"],
    &["grant", "grants", "granted", "granting"],
    &["enable", "enables", "enabled", "enabling"],
    &["disable", "disables", "disabled", "disabling"],
    &["toggle", "toggles", "toggled", "toggling"],
];

/// Verbs that only look: a name led by one of them reads, whatever nouns follow.
const READ: &[&str] = &[
    "get",
    "gets",
    "list",
    "lists",
    "read",
    "reads",
    "search",
    "searches",
    "find",
    "finds",
    "fetch",
    "fetches",
    "query",
    "queries",
    "show",
    "shows",
    "describe",
    "describes",
    "view",
    "views",
    "inspect",
    "inspects",
    "count",
    "counts",
    "check",
    "checks",
    "lookup",
    "look",
    "is",
    "has",
    "can",
    "validate",
    "validates",
    "verify",
    "verifies",
    "preview",
    "previews",
    "diff",
    "status",
    "browse",
    "explain",
    "explains",
    "analyze",
    "analyse",
    "analyzes",
    "compare",
    "compares",
    "summarize",
    "summarizes",
    "echo",
    "echoes",
    "print",
    "prints",
    "retrieve",
    "retrieves",
    "open",
    "opens",
    "resolve",
    "resolves",
    "convert",
    "converts",
    "compute",
    "computes",
    "calculate",
    "calculates",
    "estimate",
    "parse",
    "parses",
    "render",
    "renders",
    "test",
    "ping",
    "watch",
    "monitor",
    "scan",
    "scans",
    "audit",
    "lint",
    "suggest",
    "recommend",
    "translate",
    "return",
    "returns",
];

/// Ephemeral state that resetting or cancelling destroys nothing of:
/// `reset_view` is not a destructive tool.
const EPHEMERAL: &[&str] = &[
    "view",
    "zoom",
    "filter",
    "filters",
    "selection",
    "cursor",
    "layout",
    "viewport",
    "camera",
    "scroll",
    "focus",
    "highlight",
    "highlights",
    "sort",
    "search",
    "form",
    "preview",
    "timer",
    "stopwatch",
    "session",
];

/// Words that cancel a verb right after them (within three words).
const NEGATIONS: &[&str] = &[
    "not", "no", "never", "without", "nor", "cannot", "can't", "won't", "doesn't", "don't",
    "isn't", "neither",
];

/// Splits a name into lowercase words at `_`, `-`, `.`, `/`, `:`, white
/// space, camelCase humps (`getFileInfo`), the end of an acronym
/// (`HTTPRequest` is `http`, `request`) and letter-digit borders.
pub fn name_words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut words = Vec::new();
    let mut current = String::new();
    for (idx, &ch) in chars.iter().enumerate() {
        if !ch.is_alphanumeric() {
            flush(&mut current, &mut words);
            continue;
        }
        let prev = idx.checked_sub(1).and_then(|i| chars.get(i)).copied();
        let next = chars.get(idx + 1).copied();
        let boundary = match prev {
            Some(prev) if prev.is_alphanumeric() => {
                (prev.is_lowercase() && ch.is_uppercase())
                    || (prev.is_uppercase()
                        && ch.is_uppercase()
                        && next.is_some_and(char::is_lowercase))
                    || (prev.is_ascii_digit() != ch.is_ascii_digit())
            }
            _ => false,
        };
        if boundary {
            flush(&mut current, &mut words);
        }
        current.extend(ch.to_lowercase());
    }
    flush(&mut current, &mut words);
    words
}

fn flush(current: &mut String, words: &mut Vec<String>) {
    if !current.is_empty() {
        words.push(std::mem::take(current));
    }
}

/// The lowercase words of running text (letters, digits and apostrophes).
pub fn text_words(text: &str) -> Vec<String> {
    text.split(|ch: char| !(ch.is_alphanumeric() || ch == '\'' || ch == '\u{2019}'))
        .filter(|word| !word.is_empty())
        .map(|word| word.replace('\u{2019}', "'").to_lowercase())
        .collect()
}

/// The first sentence of a description: up to the first `.`, `!`, `?` or
/// `;` followed by white space, or the first line break.
pub fn first_sentence(text: &str) -> &str {
    let text = text.trim_start();
    let mut end = text.len();
    let mut chars = text.char_indices().peekable();
    while let Some((idx, ch)) = chars.next() {
        let at_end = chars.peek().is_none_or(|(_, next)| next.is_whitespace());
        if ch == '\n' || (matches!(ch, '.' | '!' | '?' | ';') && at_end) {
            end = idx;
            break;
        }
    }
    text.get(..end).unwrap_or(text)
}

/// The write or destructive verb `word` is the plain form of (`write`,
/// `delete`; not `deleted`, which is as often a state as an act).
pub fn plain_write_verb(word: &str) -> Option<Verb> {
    if DESTRUCTIVE.iter().any(|forms| forms.first() == Some(&word)) {
        Some(Verb::Destructive)
    } else if WRITE.iter().any(|forms| forms.first() == Some(&word)) {
        Some(Verb::Write)
    } else {
        None
    }
}

/// What `word` says, if it is a verb this module knows.
pub fn classify(word: &str) -> Option<Verb> {
    if DESTRUCTIVE.iter().any(|forms| forms.contains(&word)) {
        Some(Verb::Destructive)
    } else if WRITE.iter().any(|forms| forms.contains(&word)) {
        Some(Verb::Write)
    } else if READ.contains(&word) {
        Some(Verb::Read)
    } else {
        None
    }
}

/// The first verb of a name's words, and its position; `None` when the name
/// has no verb this module knows.
pub fn first_verb(words: &[String]) -> Option<(usize, Verb)> {
    words
        .iter()
        .enumerate()
        .find_map(|(idx, word)| classify(word).map(|verb| (idx, verb)))
}

/// The destructive verb a name leads with, if any (`delete_file`,
/// `git_reset`), unless the name's other words are all ephemeral state
/// (`reset_view`).
pub fn destructive_name_verb(name: &str) -> Option<String> {
    let words = name_words(name);
    let (idx, verb) = first_verb(&words)?;
    if verb != Verb::Destructive {
        return None;
    }
    let word = words.get(idx)?;
    let objects: Vec<&String> = words.iter().skip(idx + 1).collect();
    if !objects.is_empty() && objects.iter().all(|object| is_ephemeral(object)) {
        return None;
    }
    Some(word.clone())
}

/// The write or destructive verb a name leads with, if any.
pub fn write_name_verb(name: &str) -> Option<String> {
    let words = name_words(name);
    let (idx, verb) = first_verb(&words)?;
    match verb {
        Verb::Write | Verb::Destructive => words.get(idx).cloned(),
        Verb::Read => None,
    }
}

/// The destructive verb that leads a description's first sentence, if any:
/// its first word (`Deletes the file`), a word after `or`, `and` or `then`
/// (`Create or replace a file`), or one after a leading adverb
/// (`Permanently deletes`); never a negated one, never one whose object is
/// ephemeral state (`Resets the view`).
pub fn destructive_description_verb(description: &str) -> Option<String> {
    let words = text_words(first_sentence(description));
    for (idx, word) in words.iter().enumerate() {
        if classify(word) != Some(Verb::Destructive) {
            continue;
        }
        let prev = idx.checked_sub(1).and_then(|i| words.get(i));
        let leads = idx == 0
            || prev.is_some_and(|prev| matches!(prev.as_str(), "or" | "and" | "then"))
            || (idx == 1 && prev.is_some_and(|prev| prev.ends_with("ly")));
        if !leads || negated(&words, idx) {
            continue;
        }
        let object = words
            .iter()
            .skip(idx + 1)
            .find(|w| !matches!(w.as_str(), "the" | "a" | "an" | "current" | "all" | "any"));
        if object.is_some_and(|object| is_ephemeral(object)) {
            continue;
        }
        return Some(word.clone());
    }
    None
}

fn negated(words: &[String], idx: usize) -> bool {
    words
        .iter()
        .take(idx)
        .rev()
        .take(3)
        .any(|word| NEGATIONS.contains(&word.as_str()))
}

fn is_ephemeral(word: &str) -> bool {
    EPHEMERAL.contains(&word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words(name: &str) -> Vec<String> {
        name_words(name)
    }

    #[test]
    fn names_split_at_every_convention() {
        assert_eq!(words("read_text_file"), ["read", "text", "file"]);
        assert_eq!(words("get-env"), ["get", "env"]);
        assert_eq!(words("getFileInfo"), ["get", "file", "info"]);
        assert_eq!(words("HTTPRequest"), ["http", "request"]);
        assert_eq!(words("fs.deleteFile"), ["fs", "delete", "file"]);
        assert_eq!(words("s3Upload2"), ["s", "3", "upload", "2"]);
        assert_eq!(words("__"), Vec::<String>::new());
    }

    #[test]
    fn whole_words_only() {
        assert_eq!(write_name_verb("get_settings"), None);
        assert_eq!(write_name_verb("settings"), None);
        assert_eq!(destructive_name_verb("list_dropbox_files"), None);
        assert_eq!(destructive_name_verb("sender_info"), None);
        assert_eq!(destructive_name_verb("payload_size"), None);
        assert_eq!(write_name_verb("set_level").as_deref(), Some("set"));
        assert_eq!(write_name_verb("setLevel").as_deref(), Some("set"));
    }

    #[test]
    fn the_first_verb_decides() {
        assert_eq!(destructive_name_verb("get_delete_status"), None);
        assert_eq!(write_name_verb("list_write_permissions"), None);
        assert_eq!(destructive_name_verb("git_reset").as_deref(), Some("reset"));
        assert_eq!(
            destructive_name_verb("delete_entities").as_deref(),
            Some("delete")
        );
        assert_eq!(
            write_name_verb("git_create_branch").as_deref(),
            Some("create")
        );
        assert_eq!(write_name_verb("git_status"), None);
        assert_eq!(write_name_verb("move_file").as_deref(), Some("move"));
        assert_eq!(write_name_verb("sendEmail").as_deref(), Some("send"));
    }

    #[test]
    fn resetting_a_view_destroys_nothing() {
        assert_eq!(destructive_name_verb("reset_view"), None);
        assert_eq!(destructive_name_verb("resetZoom"), None);
        assert_eq!(
            destructive_name_verb("reset_database").as_deref(),
            Some("reset")
        );
        assert_eq!(
            destructive_description_verb("Resets the view to its defaults."),
            None
        );
        assert_eq!(
            destructive_description_verb("Resets the database to an empty state.").as_deref(),
            Some("resets")
        );
    }

    #[test]
    fn only_leading_verbs_of_the_first_sentence_count() {
        assert_eq!(
            destructive_description_verb("Delete multiple entities from the graph").as_deref(),
            Some("delete")
        );
        assert_eq!(
            destructive_description_verb("Create or replace a file.").as_deref(),
            Some("replace")
        );
        assert_eq!(
            destructive_description_verb("Permanently deletes a message").as_deref(),
            Some("deletes")
        );
        // A later sentence, an adjective and a noun are not what the tool does.
        assert_eq!(
            destructive_description_verb(
                "Simulates a research query. If the client supports it, sends an elicitation request."
            ),
            None
        );
        assert_eq!(
            destructive_description_verb("Lists recently deleted files"),
            None
        );
        assert_eq!(
            destructive_description_verb("Shows the deletion history"),
            None
        );
    }

    #[test]
    fn negated_verbs_do_not_count() {
        assert_eq!(destructive_description_verb("Never deletes anything"), None);
        assert_eq!(
            destructive_description_verb("Copies files and does not remove the source"),
            None
        );
    }

    #[test]
    fn first_sentence_ends_at_a_full_stop_followed_by_space() {
        assert_eq!(
            first_sentence("Reads v1.2 files. Then more."),
            "Reads v1.2 files"
        );
        assert_eq!(first_sentence("one line\nsecond"), "one line");
        assert_eq!(first_sentence("no end"), "no end");
    }

    proptest! {
        #[test]
        fn word_functions_never_panic(text in "\\PC{0,64}") {
            let _ = name_words(&text);
            let _ = destructive_name_verb(&text);
            let _ = write_name_verb(&text);
            let _ = destructive_description_verb(&text);
        }

        #[test]
        fn name_words_are_lowercase_alphanumeric(text in "[A-Za-z0-9_.-]{0,40}") {
            for word in name_words(&text) {
                prop_assert!(!word.is_empty());
                prop_assert!(word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
            }
        }
    }
}
