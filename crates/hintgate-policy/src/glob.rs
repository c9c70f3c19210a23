//! Globs over server and tool names.
//!
//! Names are flat (no path separators), so the syntax is small: `*` matches any
//! run of characters, `?` one character, `[abc]`, `[a-z]` and `[!a-z]` a class,
//! and `\` escapes the next character. Anything else matches itself.
//!
//! A hand-written matcher instead of `globset`: it keeps the pure core free of
//! a regex engine, compiles in microseconds, and matches without allocating.

use std::fmt;

/// A compiled glob.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
    shape: Shape,
}

/// The common shapes, matched without the general algorithm: rules are
/// mostly a literal name, `prefix*`, `*suffix` or `*`, and redaction
/// patterns `*infix*`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    Any,
    Literal(String),
    Prefix(String),
    Suffix(String),
    Infix(String),
    General,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// Why a glob could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GlobError {
    /// The glob is the empty string.
    #[error("a glob cannot be empty")]
    Empty,
    /// A `[` has no matching `]` (the 1-based character position of the `[`).
    #[error("the `[` at character {0} is never closed")]
    UnclosedClass(usize),
    /// A class such as `[]` or `[!]` matches nothing (1-based position).
    #[error("the character class at character {0} is empty")]
    EmptyClass(usize),
    /// A range such as `[z-a]` runs backwards.
    #[error("range `{0}-{1}` runs backwards")]
    ReversedRange(char, char),
    /// The glob ends with a lone `\`.
    #[error("trailing `\\` escapes nothing")]
    TrailingEscape,
}

// === impl Glob ===

impl Glob {
    /// Compiles a glob.
    ///
    /// # Errors
    ///
    /// [`GlobError`] when the glob is empty, has an unclosed or empty class, a
    /// backwards range, or a trailing escape.
    pub fn new(source: &str) -> Result<Self, GlobError> {
        if source.is_empty() {
            return Err(GlobError::Empty);
        }
        let chars: Vec<char> = source.chars().collect();
        let mut tokens = Vec::new();
        let mut idx = 0;
        while let Some(&ch) = chars.get(idx) {
            match ch {
                '*' => {
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                    idx += 1;
                }
                '?' => {
                    tokens.push(Token::AnyOne);
                    idx += 1;
                }
                '\\' => {
                    let escaped = chars.get(idx + 1).ok_or(GlobError::TrailingEscape)?;
                    tokens.push(Token::Literal(*escaped));
                    idx += 2;
                }
                '[' => {
                    let (token, next) = parse_class(&chars, idx)?;
                    tokens.push(token);
                    idx = next;
                }
                other => {
                    tokens.push(Token::Literal(other));
                    idx += 1;
                }
            }
        }
        let shape = Shape::of(&tokens);
        Ok(Self {
            source: source.to_owned(),
            tokens,
            shape,
        })
    }

    /// The glob that matches every name.
    pub fn any() -> Self {
        Self {
            source: "*".to_owned(),
            tokens: vec![Token::AnyRun],
            shape: Shape::Any,
        }
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The glob matches every name.
    pub fn matches_everything(&self) -> bool {
        self.tokens == [Token::AnyRun]
    }

    /// The glob has no wildcard: it matches exactly one name.
    pub fn literal(&self) -> Option<String> {
        self.tokens
            .iter()
            .map(|token| match token {
                Token::Literal(ch) => Some(*ch),
                _ => None,
            })
            .collect()
    }

    /// Whether `name` matches the whole glob.
    ///
    /// The classic two-pointer algorithm: on a mismatch, backtrack to the last
    /// `*` and let it swallow one more character. Linear in practice, no
    /// allocation, no recursion.
    pub fn matches(&self, name: &str) -> bool {
        match &self.shape {
            Shape::Any => true,
            Shape::Literal(literal) => name == literal,
            Shape::Prefix(prefix) => name.starts_with(prefix.as_str()),
            Shape::Suffix(suffix) => name.ends_with(suffix.as_str()),
            Shape::Infix(infix) => name.contains(infix.as_str()),
            Shape::General => self.matches_tokens(name),
        }
    }

    fn matches_tokens(&self, name: &str) -> bool {
        let mut text = name.chars();
        let mut token_idx = 0;
        // Where to resume after the last `*`: the token after it and the text
        // position it has swallowed up to.
        let mut star: Option<(usize, std::str::Chars<'_>)> = None;
        loop {
            let before = text.clone();
            let ch = text.next();
            let token = self.tokens.get(token_idx);
            match (token, ch) {
                (None, None) => return true,
                (Some(Token::AnyRun), _) => {
                    star = Some((token_idx + 1, before.clone()));
                    token_idx += 1;
                    text = before;
                }
                (Some(token), Some(ch)) if token.matches_char(ch) => token_idx += 1,
                _ => match star.take() {
                    Some((resume_idx, mut swallowed)) => {
                        if swallowed.next().is_none() {
                            return false;
                        }
                        token_idx = resume_idx;
                        text = swallowed.clone();
                        star = Some((resume_idx, swallowed));
                    }
                    None => return false,
                },
            }
        }
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.source)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

// === impl Shape ===

impl Shape {
    fn of(tokens: &[Token]) -> Self {
        let literal = |tokens: &[Token]| -> Option<String> {
            tokens
                .iter()
                .map(|token| match token {
                    Token::Literal(ch) => Some(*ch),
                    _ => None,
                })
                .collect()
        };
        match tokens {
            [Token::AnyRun] => Self::Any,
            [Token::AnyRun, middle @ .., Token::AnyRun] => {
                literal(middle).map_or(Self::General, Self::Infix)
            }
            [Token::AnyRun, rest @ ..] => literal(rest).map_or(Self::General, Self::Suffix),
            [rest @ .., Token::AnyRun] => literal(rest).map_or(Self::General, Self::Prefix),
            all => literal(all).map_or(Self::General, Self::Literal),
        }
    }
}

// === impl Token ===

impl Token {
    fn matches_char(&self, ch: char) -> bool {
        match self {
            Self::Literal(expected) => *expected == ch,
            Self::AnyOne => true,
            Self::AnyRun => false,
            Self::Class { negated, ranges } => {
                ranges
                    .iter()
                    .any(|(low, high)| (*low..=*high).contains(&ch))
                    != *negated
            }
        }
    }
}

fn parse_class(chars: &[char], open: usize) -> Result<(Token, usize), GlobError> {
    let mut idx = open + 1;
    let negated = matches!(chars.get(idx), Some('!' | '^'));
    if negated {
        idx += 1;
    }
    let mut ranges = Vec::new();
    loop {
        let ch = *chars.get(idx).ok_or(GlobError::UnclosedClass(open + 1))?;
        match ch {
            ']' => break,
            '\\' => {
                let escaped = *chars
                    .get(idx + 1)
                    .ok_or(GlobError::UnclosedClass(open + 1))?;
                ranges.push((escaped, escaped));
                idx += 2;
            }
            low => {
                if chars.get(idx + 1) == Some(&'-') && chars.get(idx + 2).is_some_and(|c| *c != ']')
                {
                    let high = *chars
                        .get(idx + 2)
                        .ok_or(GlobError::UnclosedClass(open + 1))?;
                    if high < low {
                        return Err(GlobError::ReversedRange(low, high));
                    }
                    ranges.push((low, high));
                    idx += 3;
                } else {
                    ranges.push((low, low));
                    idx += 1;
                }
            }
        }
    }
    if ranges.is_empty() {
        return Err(GlobError::EmptyClass(open + 1));
    }
    Ok((Token::Class { negated, ranges }, idx + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(glob: &str, name: &str) -> bool {
        Glob::new(glob).unwrap().matches(name)
    }

    #[test]
    fn wildcards_and_classes() {
        assert!(m("delete_*", "delete_file"));
        assert!(m("delete_*", "delete_"));
        assert!(!m("delete_*", "undelete_file"));
        assert!(m("*_file", "read_file"));
        assert!(m("*e*e*", "delete"));
        assert!(!m("*e*e*x", "delete"));
        assert!(m("git_?ush", "git_push"));
        assert!(m("[rw]rite", "write"));
        assert!(!m("[!rw]rite", "write"));
        assert!(m("v[0-9]", "v7"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("*", ""));
        assert!(!m("a", ""));
    }

    #[test]
    fn bad_globs_are_errors() {
        assert_eq!(Glob::new(""), Err(GlobError::Empty));
        assert_eq!(Glob::new("a[bc"), Err(GlobError::UnclosedClass(2)));
        assert_eq!(Glob::new("[]"), Err(GlobError::EmptyClass(1)));
        assert_eq!(Glob::new("[z-a]"), Err(GlobError::ReversedRange('z', 'a')));
        assert_eq!(Glob::new("abc\\"), Err(GlobError::TrailingEscape));
    }

    #[test]
    fn literal_globs_know_their_name() {
        assert_eq!(Glob::new("fs").unwrap().literal().as_deref(), Some("fs"));
        assert_eq!(Glob::new("f*").unwrap().literal(), None);
        assert!(Glob::new("**").unwrap().matches_everything());
    }

    /// A reference matcher: the obvious exponential recursion.
    fn reference(glob: &[char], name: &[char]) -> bool {
        match (glob.first(), name.first()) {
            (None, None) => true,
            (Some('*'), _) => {
                reference(&glob[1..], name) || (!name.is_empty() && reference(glob, &name[1..]))
            }
            (Some('?'), Some(_)) => reference(&glob[1..], &name[1..]),
            (Some(g), Some(n)) if g == n => reference(&glob[1..], &name[1..]),
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_reference_matcher(glob in "[ab*?]{0,8}", name in "[ab]{0,10}") {
            prop_assume!(!glob.is_empty());
            let g: Vec<char> = glob.chars().collect();
            let n: Vec<char> = name.chars().collect();
            let compiled = Glob::new(&glob).unwrap();
            prop_assert_eq!(compiled.matches(&name), reference(&g, &n));
            // The fast paths and the general algorithm agree.
            prop_assert_eq!(compiled.matches_tokens(&name), reference(&g, &n));
        }

        #[test]
        fn never_panics(glob in "\\PC{0,12}", name in "\\PC{0,12}") {
            if let Ok(compiled) = Glob::new(&glob) {
                let _ = compiled.matches(&name);
            }
        }
    }
}
