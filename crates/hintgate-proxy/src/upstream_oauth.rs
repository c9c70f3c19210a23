//! The bearer token of a URL server behind OAuth (`[servers.NAME.oauth]`):
//! the login `hintgate auth login` kept in the store, sent as
//! `Authorization: Bearer`, refreshed before it expires and once after a
//! 401, the refreshed tokens written back (a rotated refresh token
//! replacing the old one). A server with no login, or whose login cannot be
//! refreshed, fails its calls with an error that names `hintgate auth login
//! NAME`; the host is never kept waiting on a person signing in.
//!
//! Logins are per principal: a request a host sends on behalf of a
//! `--listen` principal goes with that principal's own login (`hintgate
//! auth login NAME --principal P`) and no other; what the gateway sends on
//! its own (`initialize`, listings, the event stream) and what a stdio
//! host sends go with the command line's login (the empty principal).
//!
//! No token is logged or put in an error: they are `Secret`s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hintgate_oauth::register::SecretSource;
use hintgate_oauth::stored::{StoredLogin, grant_key, scopes_beyond};
use hintgate_oauth::{AddressGuard, Clock as _, OAuthError, ReqwestClient, Secret, SystemClock};
use hintgate_policy::config::{Instance, OAuthConfig, OAuthGrant};
use hintgate_policy::sanitize::escape_line;
use hintgate_store::{GrantSecret, NewGrant, Seal, Store};

/// A token that expires within this many seconds is refreshed first.
const REFRESH_MARGIN_S: u64 = 60;

/// How long a refresh may take.
const REFRESH_DEADLINE: Duration = Duration::from_secs(30);

/// The bearer token of one URL server (or of its read-only instance).
#[derive(Debug)]
pub struct OAuthBearer {
    name: String,
    /// The server's URL, whose address classes the SSRF guard allows.
    url: String,
    /// The store's key for the login: the URL, or `read-only URL`.
    key: String,
    /// For the read-only instance: the only scopes its token may carry.
    read_only: Option<Vec<String>>,
    secret: Option<SecretSource>,
    /// A service account (`grant = "client_credentials"`): a token without
    /// a refresh token is renewed with the client's secret.
    service_account: bool,
    store: Option<Arc<dyn Store>>,
    /// The logins in hand, by principal (`""`: the command line's).
    logins: tokio::sync::Mutex<HashMap<String, StoredLogin>>,
    /// The scopes of the token sent last for each principal
    /// (space-separated, as granted), for the prompt and the record: which
    /// token a call used.
    scopes: std::sync::Mutex<HashMap<String, String>>,
}

impl OAuthBearer {
    /// The bearer of the server `name` at `url`, whose login is in `store`.
    #[must_use]
    pub fn new(name: &str, url: &str, oauth: &OAuthConfig, store: Option<Arc<dyn Store>>) -> Self {
        let secret = oauth
            .client_secret_file
            .as_ref()
            .map(|path| SecretSource::File(path.into()))
            .or_else(|| oauth.client_secret_env.clone().map(SecretSource::Env));
        let read_only = oauth.instance == Instance::ReadOnly;
        Self {
            name: name.to_owned(),
            url: url.to_owned(),
            key: grant_key(url, read_only),
            read_only: read_only.then(|| oauth.scopes.clone().unwrap_or_default()),
            secret,
            service_account: oauth.grant == OAuthGrant::ClientCredentials,
            store,
            logins: tokio::sync::Mutex::new(HashMap::new()),
            scopes: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The command that signs in the login of `principal`.
    fn login_command(&self, principal: &str) -> String {
        let mut command = format!("hintgate auth login {}", self.name);
        if self.read_only.is_some() {
            command.push_str(" --read-only");
        }
        if !principal.is_empty() {
            command.push_str(" --principal ");
            command.push_str(&escape_line(principal));
        }
        command
    }

    /// How errors name the server: `` `docs` `` or `` `docs`'s read-only
    /// instance ``.
    fn label(&self) -> String {
        if self.read_only.is_some() {
            format!("the read-only instance of `{}`", self.name)
        } else {
            format!("`{}`", self.name)
        }
    }

    /// What a call of `principal` that needs a login is failed with.
    fn login_required(&self, principal: &str, why: &str) -> String {
        let whose = if principal.is_empty() {
            String::new()
        } else {
            format!(" for principal `{}`", escape_line(principal))
        };
        format!(
            "oauth-login-required: {} needs a login{whose} ({why}): run `{}`",
            self.label(),
            self.login_command(principal)
        )
    }

    /// The scopes of the token the server was sent last for `principal`
    /// (as granted, never the token): `None` before one was sent.
    #[must_use]
    pub fn token_scope(&self, principal: &str) -> Option<String> {
        self.scopes
            .lock()
            .ok()
            .and_then(|scopes| scopes.get(principal).cloned())
    }

    /// What a 403 `insufficient_scope` is failed with: more power is never
    /// granted silently, so the call fails, naming how a person grants it
    /// (the full instance), or saying that the read-only instance's token
    /// is not widened. `asked` is the challenge's `scope`, reduced to the
    /// characters a scope may hold (RFC 6749 §3.3).
    #[must_use]
    pub fn step_up(&self, principal: &str, asked: &[String]) -> String {
        let asked: Vec<String> = asked
            .iter()
            .take(16)
            .map(|scope| {
                scope
                    .chars()
                    .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\' && *c != '`')
                    .take(64)
                    .collect::<String>()
            })
            .filter(|scope| !scope.is_empty())
            .collect();
        let shown = if asked.is_empty() {
            "none named".to_owned()
        } else {
            format!("`{}`", asked.join(" "))
        };
        if self.read_only.is_some() {
            return format!(
                "oauth-step-up-required: {} refused this call for want of scopes (it asks for {shown}); the read-only instance's token keeps the scopes of `[servers.{}.read_only] scopes` and hintgate does not widen it. The call did not run.",
                self.label(),
                escape_line(&self.name)
            );
        }
        let flags: String = asked
            .iter()
            .map(|scope| format!(" --scope {scope}"))
            .collect();
        format!(
            "oauth-step-up-required: `{}` asks for more scopes than its login holds ({shown}); hintgate never grants them silently. The call did not run: a person may grant them with `{}{}`",
            self.name,
            self.login_command(principal),
            if flags.is_empty() {
                " --scope ...".to_owned()
            } else {
                flags
            }
        )
    }

    /// The token of `login` to send, its scopes noted; a read-only
    /// instance's token with scopes beyond its own is not sent.
    fn usable(&self, principal: &str, login: &StoredLogin) -> Result<Secret, String> {
        if let Some(allowed) = &self.read_only {
            let beyond = scopes_beyond(&login.tokens.scopes, allowed);
            if !beyond.is_empty() {
                return Err(format!(
                    "oauth-read-only-scope-widened: the token of {} carries `{}` beyond `[servers.{}.read_only] scopes`: it is not used; run `{}`",
                    self.label(),
                    escape_line(&beyond.join(" ")),
                    escape_line(&self.name),
                    self.login_command(principal)
                ));
            }
        }
        if let Ok(mut scopes) = self.scopes.lock() {
            scopes.insert(principal.to_owned(), login.tokens.scopes.join(" "));
        }
        Ok(login.tokens.access_token.clone())
    }

    /// The login kept in the store, when there is one whose seal holds.
    async fn load(&self, principal: &str) -> Result<StoredLogin, String> {
        let Some(store) = self.store.clone() else {
            return Err(self.login_required(principal, "the gateway has no store"));
        };
        if principal.is_empty() {
            self.note_principals_scopes(&store).await;
        }
        let (key, whose) = (self.key.clone(), principal.to_owned());
        let kept = tokio::task::spawn_blocking(move || store.grant(&key, &whose))
            .await
            .map_err(|_| self.login_required(principal, "the store could not be read"))?
            .map_err(|err| self.login_required(principal, &format!("the store: {err}")))?;
        let Some(kept) = kept else {
            return Err(self.login_required(principal, "none is kept"));
        };
        match (kept.info.seal, kept.secret) {
            (Seal::Valid, Some(secret)) => StoredLogin::from_json(secret.expose())
                .map_err(|err| self.login_required(principal, err.code())),
            _ => Err(self.login_required(principal, "the kept login's seal does not verify")),
        }
    }

    /// Notes the scopes of every principal's kept login of this server
    /// (those whose seal holds), so that the prompt and the record of a
    /// principal's first call name its token before it is first sent. Done
    /// with the gateway's own first load, which the server's `initialize`
    /// waits on: before any call.
    async fn note_principals_scopes(&self, store: &Arc<dyn Store>) {
        let store = Arc::clone(store);
        let Ok(Ok(grants)) = tokio::task::spawn_blocking(move || store.grants()).await else {
            return;
        };
        let Ok(mut scopes) = self.scopes.lock() else {
            return;
        };
        for grant in grants {
            if grant.server == self.key && !grant.principal.is_empty() && grant.seal == Seal::Valid
            {
                scopes.entry(grant.principal).or_insert(grant.scope);
            }
        }
    }

    /// Refreshes `login`, keeps the result, and returns it.
    /// A service account's token without a refresh token is renewed with
    /// the client's secret instead (the client credentials grant again,
    /// for the scopes and resource it was granted).
    async fn refresh(&self, principal: &str, login: &StoredLogin) -> Result<StoredLogin, String> {
        let renew = login.tokens.refresh_token.is_none() && self.service_account;
        if login.tokens.refresh_token.is_none() && !renew {
            return Err(
                self.login_required(principal, "the token expired and there is no refresh token")
            );
        }
        let failed =
            |err: OAuthError| self.login_required(principal, &format!("refresh: {}", err.code()));
        let guard = AddressGuard::for_server(&self.url).await;
        let http = ReqwestClient::guarded(REFRESH_DEADLINE, guard).map_err(failed)?;
        let client = login.client(self.secret.as_ref()).map_err(failed)?;
        let tokens = if renew {
            hintgate_oauth::flow::client_credentials(
                &http,
                &SystemClock,
                &login.server(),
                &client,
                &login.resource,
                &login.tokens.scopes,
            )
            .await
        } else {
            hintgate_oauth::flow::refresh(
                &http,
                &SystemClock,
                &login.server(),
                &client,
                &login.resource,
                &login.tokens,
            )
            .await
        }
        .map_err(failed)?;
        let fresh = StoredLogin {
            tokens,
            ..login.clone()
        };
        self.keep(principal, &fresh).await;
        tracing::info!("refreshed the OAuth token of {}", self.label());
        Ok(fresh)
    }

    /// Writes `login` back to the store (a failure is logged: the token in
    /// hand still serves this run).
    async fn keep(&self, principal: &str, login: &StoredLogin) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let (key, whose) = (self.key.clone(), principal.to_owned());
        let scope = login.tokens.scopes.join(" ");
        let expires_at = login
            .tokens
            .expires_at
            .and_then(|at| i64::try_from(at).ok());
        let secret = GrantSecret::new(login.to_json().expose().to_owned());
        let now = i64::try_from(SystemClock.now()).unwrap_or(i64::MAX);
        let written = tokio::task::spawn_blocking(move || {
            store.put_grant(&NewGrant {
                server: &key,
                principal: &whose,
                scope: &scope,
                expires_at,
                updated_at: now,
                secret: &secret,
            })
        })
        .await;
        if !matches!(written, Ok(Ok(()))) {
            tracing::warn!(
                "the refreshed OAuth token of {} could not be kept in the store",
                self.label()
            );
        }
    }

    /// The access token to send for `principal` (`""`: the gateway's own
    /// requests and a stdio host's): its kept one, refreshed first when it
    /// expires within a minute. Never another principal's.
    ///
    /// # Errors
    ///
    /// A message naming `hintgate auth login NAME` (with `--principal P`)
    /// when there is no login or it cannot be refreshed.
    pub async fn bearer(&self, principal: &str) -> Result<Secret, String> {
        let mut held = self.logins.lock().await;
        let login = match held.remove(principal) {
            Some(login) => login,
            None => self.load(principal).await?,
        };
        let login = if login
            .tokens
            .needs_refresh(SystemClock.now(), REFRESH_MARGIN_S)
        {
            self.refresh(principal, &login).await?
        } else {
            login
        };
        let token = self.usable(principal, &login);
        held.insert(principal.to_owned(), login);
        token
    }

    /// The access token to retry with after the server refused `used` with
    /// a 401: one refreshed once (or one another call refreshed since).
    ///
    /// # Errors
    ///
    /// A message naming `hintgate auth login NAME` when no refresh helps.
    pub async fn after_unauthorized(
        &self,
        principal: &str,
        used: &Secret,
    ) -> Result<Secret, String> {
        let mut held = self.logins.lock().await;
        let login = match held.remove(principal) {
            Some(login) => login,
            None => self.load(principal).await?,
        };
        if &login.tokens.access_token != used {
            let token = self.usable(principal, &login);
            held.insert(principal.to_owned(), login);
            return token;
        }
        let fresh = self.refresh(principal, &login).await;
        match fresh {
            Ok(fresh) => {
                let token = self.usable(principal, &fresh);
                held.insert(principal.to_owned(), fresh);
                token
            }
            Err(err) => {
                held.insert(principal.to_owned(), login);
                Err(err)
            }
        }
    }

    /// What a principal's request is failed with when the server refused
    /// its login on the session the gateway opened with its own (404): a
    /// server that binds a session to who opened it serves principals only
    /// in the 2026-07-28 protocol, which has no sessions.
    #[must_use]
    pub fn session_refused(&self, principal: &str) -> String {
        format!(
            "oauth-principal-session-refused: {} did not take the login of principal `{}` on the session hintgate opened with its own (it serves a session only to who opened it); the call did not run. Per-principal logins need a server that speaks MCP 2026-07-28, which has no sessions.",
            self.label(),
            escape_line(principal)
        )
    }

    /// What a second 401 in a row is failed with.
    #[must_use]
    pub fn refused(&self, principal: &str) -> String {
        self.login_required(principal, "the server refused the refreshed token")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(instance: Instance) -> OAuthBearer {
        let oauth = OAuthConfig {
            scopes: Some(vec!["docs:read".to_owned()]),
            instance,
            ..OAuthConfig::default()
        };
        OAuthBearer::new("docs", "https://docs.example/mcp", &oauth, None)
    }

    #[test]
    fn a_step_up_names_the_login_and_keeps_the_servers_text_to_scope_characters() {
        let full = bearer(Instance::Full);
        let asked = vec!["docs:write".to_owned(), "x`; rm -rf ~\n\"evil\"".to_owned()];
        let message = full.step_up("", &asked);
        assert!(
            message.starts_with("oauth-step-up-required: `docs` asks for more scopes than its login holds (`docs:write x;rm-rf~evil`)"),
            "{message}"
        );
        assert!(
            message.ends_with("`hintgate auth login docs --scope docs:write --scope x;rm-rf~evil`"),
            "{message}"
        );
        assert!(!message.contains('\n'));
        let many: Vec<String> = (0..100)
            .map(|n| format!("s{n}{}", "a".repeat(200)))
            .collect();
        assert!(full.step_up("", &many).len() < 16 * 2 * 80 + 400);
        assert!(full.step_up("", &[]).contains("--scope ..."));
        assert!(
            full.step_up("alice", &asked)
                .contains("`hintgate auth login docs --principal alice --scope docs:write")
        );

        let read_only = bearer(Instance::ReadOnly);
        let message = read_only.step_up("", &asked);
        assert!(
            message.contains("the read-only instance of `docs`")
                && message.contains("hintgate does not widen it")
                && !message.contains("auth login"),
            "{message}"
        );
    }

    #[test]
    fn the_read_only_instance_keeps_its_login_apart_and_names_its_own_command() {
        let read_only = bearer(Instance::ReadOnly);
        assert_eq!(read_only.key, "read-only https://docs.example/mcp");
        assert!(
            read_only
                .login_required("", "none is kept")
                .ends_with("run `hintgate auth login docs --read-only`")
        );
        assert_eq!(
            bearer(Instance::Full).login_required("bob\nx", "none is kept"),
            "oauth-login-required: `docs` needs a login for principal `bob\\nx` (none is kept): run `hintgate auth login docs --principal bob\\nx`"
        );
        assert_eq!(bearer(Instance::Full).key, "https://docs.example/mcp");
        assert_eq!(read_only.token_scope(""), None);
    }
}
