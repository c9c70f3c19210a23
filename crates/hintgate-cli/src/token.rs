//! `hintgate token`: the bearer tokens of hosts that reach `hintgate run
//! --listen` over HTTP, and the check that turns a presented token into the
//! principal and scope the host side gives its session.

use anyhow::{Result, bail};
use hintgate_http::{Authenticate, Principal, Scope};
use hintgate_policy::sanitize::escape_line;
use hintgate_store::{Seal, Store, new_token, token_hash};

use crate::args::{TokenArgs, TokenCommand, TokenScopeArg};
use crate::exit::Exit;
use crate::output;

/// Runs `hintgate token`.
pub fn run(args: &TokenArgs) -> Result<Exit> {
    // Adding seals a row with the audit key, made on first use as a
    // gateway makes it; listing and revoking only read it.
    let usage = match args.command {
        TokenCommand::Add { .. } => crate::state::Use::Gateway,
        _ => crate::state::Use::Rows,
    };
    let store = crate::state::open_store_of(&args.at, args.audit_key.as_deref(), &usage)?.store;
    match &args.command {
        TokenCommand::Add { name, scope } => add(store.as_ref(), name, *scope),
        TokenCommand::List { json } => list(store.as_ref(), *json),
        TokenCommand::Revoke { name } => {
            if store.revoke_token(name)? {
                output::out(&format!("Revoked the token `{}`.\n", escape_line(name)))?;
                Ok(Exit::Success)
            } else {
                output::err(&format!("No token is named `{}`.\n", escape_line(name)))?;
                Ok(Exit::Error)
            }
        }
    }
}

fn add(store: &dyn Store, name: &str, scope: TokenScopeArg) -> Result<Exit> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
    {
        bail!(crate::load::InputError(format!(
            "a token's name is 1 to 64 letters, digits, `_`, `-` or `.`, not `{}`",
            escape_line(name)
        )));
    }
    let token = new_token()?;
    let scope = scope_name(scope);
    store.add_token(name, &token_hash(&token), scope)?;
    output::err(&format!(
        "The token `{name}` ({scope}) is below. It is shown once and not kept: give it to the host as `Authorization: Bearer TOKEN`.\n"
    ))?;
    output::out(&format!("{token}\n"))?;
    Ok(Exit::Success)
}

fn list(store: &dyn Store, json: bool) -> Result<Exit> {
    let tokens = store.tokens()?;
    if json {
        let rows: Vec<serde_json::Value> = tokens
            .iter()
            .map(|row| {
                serde_json::json!({
                    "name": row.name,
                    "scope": row.scope,
                    "created_at": row.created_at,
                    "seal": row.seal.as_str(),
                })
            })
            .collect();
        output::out(&format!("{}\n", serde_json::Value::Array(rows)))?;
        return Ok(Exit::Success);
    }
    if tokens.is_empty() {
        output::out(
            "No token: add one with `hintgate token add NAME --scope read|write|metrics`.\n",
        )?;
        return Ok(Exit::Success);
    }
    let mut text = String::new();
    for row in &tokens {
        let seal = match row.seal {
            Seal::Valid => "",
            Seal::Broken => {
                "  SEAL BROKEN: written or changed without the audit key; it authenticates nobody"
            }
            Seal::Unchecked => "  (seal not checked: no audit key)",
        };
        text.push_str(&format!(
            "{}  {}{seal}\n",
            escape_line(&row.name),
            escape_line(&row.scope)
        ));
    }
    output::out(&text)?;
    Ok(Exit::Success)
}

/// The stored name of a scope.
pub(crate) fn scope_name(scope: TokenScopeArg) -> &'static str {
    match scope {
        TokenScopeArg::Read => "read",
        TokenScopeArg::Write => "write",
        TokenScopeArg::Metrics => METRICS_SCOPE,
    }
}

/// The stored scope of a token that reads `/metrics` and nothing else.
pub(crate) const METRICS_SCOPE: &str = "metrics";

/// Hosts' bearer tokens checked against the store's.
#[derive(Debug)]
pub(crate) struct StoreTokens {
    pub(crate) store: std::sync::Arc<dyn Store>,
}

impl Authenticate for StoreTokens {
    fn authenticate(&self, token: &str) -> Option<Principal> {
        principal_of(self.store.find_token(&token_hash(token)))
    }

    fn authenticate_now(&self, token: &str) -> Option<Option<Principal>> {
        self.store
            .find_token_now(&token_hash(token))
            .map(|row| principal_of(Ok(row)))
    }
}

/// The principal of a host's token as the store found it.
fn principal_of(
    found: Result<Option<hintgate_store::TokenRow>, hintgate_store::StoreError>,
) -> Option<Principal> {
    let row = match found {
        Ok(row) => row?,
        Err(err) => {
            // Fails closed: a store that cannot answer lets nobody in.
            tracing::warn!("a host's token could not be checked: {err}");
            return None;
        }
    };
    let scope = match row.scope.as_str() {
        "write" => Scope::Write,
        "read" => Scope::Read,
        // A `metrics` token (or a scope this build does not know) is
        // no host's: it gives neither read nor write.
        _ => return None,
    };
    Some(Principal {
        name: row.name,
        scope,
    })
}
