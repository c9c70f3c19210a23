//! `${VAR}` references in configuration strings.
//!
//! The core checks their syntax and expands them against a [`Vars`] the caller
//! passes in; it never reads the environment itself. The binary passes the
//! process environment, tests pass a map.
//!
//! Syntax: `${NAME}` where `NAME` is `[A-Za-z_][A-Za-z0-9_]*`; `$${` is a
//! literal `${`; any other `$` is itself.

use std::collections::{BTreeMap, HashMap};

/// A source of variables, such as the process environment.
pub trait Vars {
    /// The value of `key`, or `None` when it is not set.
    fn get(&self, key: &str) -> Option<String>;
}

impl Vars for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}

impl Vars for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        BTreeMap::get(self, key).cloned()
    }
}

/// Why a string's `${VAR}` references could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExpandError {
    /// A `${` with no closing `}`.
    #[error("`${{` at byte {0} is not closed with `}}`")]
    Unclosed(usize),
    /// The name between `${` and `}` is not a variable name.
    #[error("`{name}` at byte {at} is not a variable name")]
    BadName {
        /// The text between the braces.
        name: String,
        /// Byte offset of the `${`.
        at: usize,
    },
    /// The variable is not set.
    #[error("variable `{0}` is not set")]
    Unset(String),
}

/// Checks the syntax of every `${VAR}` in `text`, returning the names used.
///
/// # Errors
///
/// [`ExpandError::Unclosed`] or [`ExpandError::BadName`] for the first bad
/// reference, with its byte offset in `text`.
pub fn references(text: &str) -> Result<Vec<String>, ExpandError> {
    let mut names = Vec::new();
    walk(text, |piece| {
        if let Piece::Var(name) = piece {
            names.push(name.to_owned());
        }
        Ok(())
    })?;
    Ok(names)
}

/// Replaces every `${VAR}` in `text` with its value from `vars`.
///
/// # Errors
///
/// A syntax error as for [`references`], or [`ExpandError::Unset`] for the
/// first variable that `vars` does not have (an unset secret must not become
/// an empty string silently).
pub fn expand(text: &str, vars: &dyn Vars) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    walk(text, |piece| {
        match piece {
            Piece::Text(literal) => out.push_str(literal),
            Piece::Var(name) => out.push_str(
                &vars
                    .get(name)
                    .ok_or_else(|| ExpandError::Unset(name.to_owned()))?,
            ),
        }
        Ok(())
    })?;
    Ok(out)
}

enum Piece<'a> {
    Text(&'a str),
    Var(&'a str),
}

fn walk<'a>(
    text: &'a str,
    mut visit: impl FnMut(Piece<'a>) -> Result<(), ExpandError>,
) -> Result<(), ExpandError> {
    let mut rest = text;
    let mut offset = 0;
    while let Some(dollar) = rest.find('$') {
        let (before, from_dollar) = rest.split_at(dollar);
        visit(Piece::Text(before))?;
        let at = offset + dollar;
        if let Some(after) = from_dollar.strip_prefix("$${") {
            visit(Piece::Text("${"))?;
            offset = at + 3;
            rest = after;
        } else if let Some(after) = from_dollar.strip_prefix("${") {
            let close = after.find('}').ok_or(ExpandError::Unclosed(at))?;
            let (name, tail) = after.split_at(close);
            if !is_var_name(name) {
                return Err(ExpandError::BadName {
                    name: name.to_owned(),
                    at,
                });
            }
            visit(Piece::Var(name))?;
            offset = at + 2 + close + 1;
            rest = tail.get(1..).unwrap_or("");
        } else {
            visit(Piece::Text("$"))?;
            offset = at + 1;
            rest = from_dollar.get(1..).unwrap_or("");
        }
    }
    visit(Piece::Text(rest))
}

/// Whether `name` is a valid variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        BTreeMap::from([("TOKEN".to_owned(), "s3cret".to_owned())])
    }

    #[test]
    fn expands_references_and_keeps_other_dollars() {
        assert_eq!(expand("Bearer ${TOKEN}", &vars()).unwrap(), "Bearer s3cret");
        assert_eq!(
            expand("$5 and $${TOKEN}", &vars()).unwrap(),
            "$5 and ${TOKEN}"
        );
        assert_eq!(expand("end$", &vars()).unwrap(), "end$");
    }

    #[test]
    fn unset_and_malformed_references_are_errors() {
        assert_eq!(
            expand("${NOPE}", &vars()),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(references("a ${TOKEN"), Err(ExpandError::Unclosed(2)));
        assert_eq!(
            references("${1X}"),
            Err(ExpandError::BadName {
                name: "1X".into(),
                at: 0
            })
        );
        assert_eq!(references("${A}${B_2}").unwrap(), vec!["A", "B_2"]);
    }
}
