//! The variable references hosts expand in their MCP configs before they
//! start a server, so `hintgate scan` starts it as the host would.
//!
//! - `${VAR}` and `${env:VAR}` (Claude Code, Cursor, VS Code, Gemini CLI):
//!   from the environment; `${VAR:-default}` (Claude Code) falls back.
//! - `${workspaceFolder}` and `${userHome}` (VS Code): the project and home
//!   directories.
//! - `${input:ID}` (VS Code) is asked of the person by the host: it cannot be
//!   expanded here, and the server is reported as not checked.
//!
//! A reference to an unset variable is an error that names it, never an
//! empty string: a server started with a hole in its command line would
//! fail for a reason that is not its own.

use std::path::Path;

/// Expands the host references in `text`; `lookup` reads the environment.
///
/// # Errors
///
/// A sentence that names the reference that cannot be expanded here.
pub fn expand(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    project: &Path,
    home: &Path,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(rest.get(..start).unwrap_or_default());
        let after = rest.get(start + 2..).unwrap_or_default();
        let Some(end) = after.find('}') else {
            // Not a reference: kept as written.
            out.push_str(rest.get(start..).unwrap_or_default());
            return Ok(out);
        };
        let inner = after.get(..end).unwrap_or_default();
        out.push_str(&resolve(inner, lookup, project, home)?);
        rest = after.get(end + 1..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

fn resolve(
    inner: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    project: &Path,
    home: &Path,
) -> Result<String, String> {
    match inner {
        "workspaceFolder" => return Ok(project.display().to_string()),
        "userHome" => return Ok(home.display().to_string()),
        _ => {}
    }
    if let Some(id) = inner.strip_prefix("input:") {
        return Err(format!(
            "`${{input:{id}}}` is asked of the person by the host"
        ));
    }
    let reference = inner.strip_prefix("env:").unwrap_or(inner);
    let (name, default) = match reference.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (reference, None),
    };
    match (lookup(name).filter(|value| !value.is_empty()), default) {
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_owned()),
        (None, None) => Err(format!("variable `{name}` is not set here")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn run(text: &str) -> Result<String, String> {
        expand(text, &env, Path::new("/work/app"), Path::new("/home/me"))
    }

    #[test]
    fn references_expand_as_the_hosts_do() {
        assert_eq!(run("Bearer ${TOKEN}").unwrap(), "Bearer s3cret");
        assert_eq!(run("${env:TOKEN}").unwrap(), "s3cret");
        assert_eq!(run("${MISSING:-fallback}/x").unwrap(), "fallback/x");
        assert_eq!(run("${EMPTY:-fallback}").unwrap(), "fallback");
        assert_eq!(
            run("${workspaceFolder}/db ${userHome}").unwrap(),
            "/work/app/db /home/me"
        );
        assert_eq!(
            run("no references, $HOME stays").unwrap(),
            "no references, $HOME stays"
        );
        assert_eq!(run("an open ${ brace").unwrap(), "an open ${ brace");
    }

    #[test]
    fn what_cannot_be_expanded_is_named() {
        assert_eq!(
            run("${MISSING}").unwrap_err(),
            "variable `MISSING` is not set here"
        );
        assert!(
            run("${input:api-key}")
                .unwrap_err()
                .contains("asked of the person")
        );
    }
}
