//! The bearer token of a URL server behind OAuth (`[servers.NAME.oauth]`):
//! the login `hintgate auth login` kept in the store, sent as
//! `Authorization: Bearer`, refreshed before it expires and once after a
//! 401, the refreshed tokens written back (a rotated refresh token
//! replacing the old one). A server with no login, or whose login cannot be
//! refreshed, fails its calls with an error that names `hintgate auth login
//! NAME`; the host is never kept waiting on a person signing in.
//!
//! No token is logged or put in an error: they are `Secret`s.

use std::sync::Arc;
use std::time::Duration;

use hintgate_oauth::register::SecretSource;
use hintgate_oauth::stored::{StoredLogin, grant_key, scopes_beyond};
use hintgate_oauth::{AddressGuard, Clock as _, OAuthError, ReqwestClient, Secret, SystemClock};
use hintgate_policy::config::{Instance, OAuthConfig};
use hintgate_policy::sanitize::escape_line;
use hintgate_store::{GrantSecret, NewGrant, Seal, Store};

/// The principal whose login a gateway uses (the command line's logins).
const PRINCIPAL: &str = "";

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
    store: Option<Arc<dyn Store>>,
    login: tokio::sync::Mutex<Option<StoredLogin>>,
    /// The scopes of the token sent last (space-separated, as granted),
    /// for the prompt and the record: which token a call used.
    scope: std::sync::Mutex<Option<String>>,
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
            store,
            login: tokio::sync::Mutex::new(None),
            scope: std::sync::Mutex::new(None),
        }
    }

    /// The command that signs this login in.
    fn login_command(&self) -> String {
        if self.read_only.is_some() {
            format!("hintgate auth login {} --read-only", self.name)
        } else {
            format!("hintgate auth login {}", self.name)
        }
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

    /// What a call that needs a login is failed with.
    fn login_required(&self, why: &str) -> String {
        format!(
            "oauth-login-required: {} needs a login ({why}): run `{}`",
            self.label(),
            self.login_command()
        )
    }

    /// The scopes of the token the server was sent last (as granted, never
    /// the token): `None` before one was sent.
    #[must_use]
    pub fn token_scope(&self) -> Option<String> {
        self.scope.lock().ok().and_then(|scope| scope.clone())
    }

    /// What a 403 `insufficient_scope` is failed with: more power is never
    /// granted silently, so the call fails, naming how a person grants it
    /// (the full instance), or saying that the read-only instance's token
    /// is not widened. `asked` is the challenge's `scope`, reduced to the
    /// characters a scope may hold (RFC 6749 §3.3).
    #[must_use]
    pub fn step_up(&self, asked: &[String]) -> String {
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
            "oauth-step-up-required: `{}` asks for more scopes than its login holds ({shown}); hintgate never grants them silently. The call did not run: a person may grant them with `hintgate auth login {}{}`",
            self.name,
            self.name,
            if flags.is_empty() {
                " --scope ...".to_owned()
            } else {
                flags
            }
        )
    }

    /// The token of `login` to send, its scopes noted; a read-only
    /// instance's token with scopes beyond its own is not sent.
    fn usable(&self, login: &StoredLogin) -> Result<Secret, String> {
        if let Some(allowed) = &self.read_only {
            let beyond = scopes_beyond(&login.tokens.scopes, allowed);
            if !beyond.is_empty() {
                return Err(format!(
                    "oauth-read-only-scope-widened: the token of {} carries `{}` beyond `[servers.{}.read_only] scopes`: it is not used; run `{}`",
                    self.label(),
                    escape_line(&beyond.join(" ")),
                    escape_line(&self.name),
                    self.login_command()
                ));
            }
        }
        if let Ok(mut scope) = self.scope.lock() {
            *scope = Some(login.tokens.scopes.join(" "));
        }
        Ok(login.tokens.access_token.clone())
    }

    /// The login kept in the store, when there is one whose seal holds.
    async fn load(&self) -> Result<StoredLogin, String> {
        let Some(store) = self.store.clone() else {
            return Err(self.login_required("the gateway has no store"));
        };
        let key = self.key.clone();
        let kept = tokio::task::spawn_blocking(move || store.grant(&key, PRINCIPAL))
            .await
            .map_err(|_| self.login_required("the store could not be read"))?
            .map_err(|err| self.login_required(&format!("the store: {err}")))?;
        let Some(kept) = kept else {
            return Err(self.login_required("none is kept"));
        };
        match (kept.info.seal, kept.secret) {
            (Seal::Valid, Some(secret)) => StoredLogin::from_json(secret.expose())
                .map_err(|err| self.login_required(err.code())),
            _ => Err(self.login_required("the kept login's seal does not verify")),
        }
    }

    /// Refreshes `login`, keeps the result, and returns it.
    async fn refresh(&self, login: &StoredLogin) -> Result<StoredLogin, String> {
        if login.tokens.refresh_token.is_none() {
            return Err(self.login_required("the token expired and there is no refresh token"));
        }
        let failed = |err: OAuthError| self.login_required(&format!("refresh: {}", err.code()));
        let guard = AddressGuard::for_server(&self.url).await;
        let http = ReqwestClient::guarded(REFRESH_DEADLINE, guard).map_err(failed)?;
        let client = login.client(self.secret.as_ref()).map_err(failed)?;
        let tokens = hintgate_oauth::flow::refresh(
            &http,
            &SystemClock,
            &login.server(),
            &client,
            &login.resource,
            &login.tokens,
        )
        .await
        .map_err(failed)?;
        let fresh = StoredLogin {
            tokens,
            ..login.clone()
        };
        self.keep(&fresh).await;
        tracing::info!("refreshed the OAuth token of {}", self.label());
        Ok(fresh)
    }

    /// Writes `login` back to the store (a failure is logged: the token in
    /// hand still serves this run).
    async fn keep(&self, login: &StoredLogin) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let key = self.key.clone();
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
                principal: PRINCIPAL,
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

    /// The access token to send: the kept one, refreshed first when it
    /// expires within a minute.
    ///
    /// # Errors
    ///
    /// A message naming `hintgate auth login NAME` when there is no login
    /// or it cannot be refreshed.
    pub async fn bearer(&self) -> Result<Secret, String> {
        let mut held = self.login.lock().await;
        let login = match held.take() {
            Some(login) => login,
            None => self.load().await?,
        };
        let login = if login
            .tokens
            .needs_refresh(SystemClock.now(), REFRESH_MARGIN_S)
        {
            self.refresh(&login).await?
        } else {
            login
        };
        let token = self.usable(&login);
        *held = Some(login);
        token
    }

    /// The access token to retry with after the server refused `used` with
    /// a 401: one refreshed once (or one another call refreshed since).
    ///
    /// # Errors
    ///
    /// A message naming `hintgate auth login NAME` when no refresh helps.
    pub async fn after_unauthorized(&self, used: &Secret) -> Result<Secret, String> {
        let mut held = self.login.lock().await;
        let login = match held.take() {
            Some(login) => login,
            None => self.load().await?,
        };
        if &login.tokens.access_token != used {
            let token = self.usable(&login);
            *held = Some(login);
            return token;
        }
        let fresh = self.refresh(&login).await;
        match fresh {
            Ok(fresh) => {
                let token = self.usable(&fresh);
                *held = Some(fresh);
                token
            }
            Err(err) => {
                *held = Some(login);
                Err(err)
            }
        }
    }

    /// What a second 401 in a row is failed with.
    #[must_use]
    pub fn refused(&self) -> String {
        self.login_required("the server refused the refreshed token")
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
        let message = full.step_up(&asked);
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
        assert!(full.step_up(&many).len() < 16 * 2 * 80 + 400);
        assert!(full.step_up(&[]).contains("--scope ..."));

        let read_only = bearer(Instance::ReadOnly);
        let message = read_only.step_up(&asked);
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
                .login_required("none is kept")
                .ends_with("run `hintgate auth login docs --read-only`")
        );
        assert_eq!(bearer(Instance::Full).key, "https://docs.example/mcp");
        assert_eq!(read_only.token_scope(), None);
    }
}
