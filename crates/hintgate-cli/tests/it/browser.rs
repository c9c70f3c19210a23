//! A real browser for the console's tests: Debian's headless Chromium,
//! driven through chromedriver over WebDriver (JSON over HTTP on loopback).
//!
//! `./scripts/test` installs `chromium` and `chromium-driver` when they are
//! missing and sets `HINTGATE_REQUIRE_BROWSER`; without that variable a
//! machine without them skips the browser tests with a line on stderr.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// How long any one wait for the browser may take.
const PATIENCE: Duration = Duration::from_secs(30);

/// The W3C name of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Set by `./scripts/test`: a missing browser is then a failure, not a skip.
pub const REQUIRE_BROWSER_VAR: &str = "HINTGATE_REQUIRE_BROWSER";

fn found(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

/// A chromedriver and one headless Chromium session; both end when it is
/// dropped.
pub struct Browser {
    driver: Child,
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile, or
    /// `None` (with a line on stderr) when they are not installed and not
    /// required.
    #[expect(
        clippy::disallowed_macros,
        reason = "a skipped browser test says so on the test's stderr"
    )]
    pub fn start() -> Option<Self> {
        let (Some(chromium), Some(chromedriver)) = (found("chromium"), found("chromedriver"))
        else {
            assert!(
                std::env::var_os(REQUIRE_BROWSER_VAR).is_none(),
                "{REQUIRE_BROWSER_VAR} is set but chromium or chromedriver is missing (Debian: apt-get install chromium chromium-driver)"
            );
            eprintln!(
                "skipped: no chromium and chromedriver (Debian: apt-get install chromium chromium-driver)"
            );
            return None;
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = reqwest::Client::builder()
            .timeout(PATIENCE)
            .no_proxy()
            .build()
            .unwrap();
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Self {
            driver,
            runtime,
            client,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            _profile: profile,
        };
        let start = Instant::now();
        while browser.send("GET", "/status", None).is_none() {
            assert!(start.elapsed() < PATIENCE, "chromedriver never answered");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = browser._profile.path().display().to_string();
        let created = browser
            .send(
                "POST",
                "/session",
                Some(json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium.display().to_string(),
                        "args": [
                            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync",
                            "--disable-dev-shm-usage", "--window-size=1100,900",
                            format!("--user-data-dir={profile}"),
                        ],
                    },
                }}})),
            )
            .expect("chromedriver answers");
        browser.session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Some(browser)
    }

    /// One WebDriver request; `None` when chromedriver cannot be reached.
    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Option<Value> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.client.get(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.post(url),
        };
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(body.to_string()),
            None => request,
        };
        self.runtime.block_on(async {
            let response = request.send().await.ok()?;
            let text = response.text().await.ok()?;
            serde_json::from_str(&text).ok()
        })
    }

    /// A command of this session; panics on a WebDriver error.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let answer = self
            .send(method, &path, body)
            .unwrap_or_else(|| panic!("chromedriver did not answer {path}"));
        if answer["value"].get("error").is_some() {
            panic!("WebDriver {path}: {answer}");
        }
        answer["value"].clone()
    }

    /// Opens a URL.
    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// The address of the page shown.
    pub fn url(&self) -> String {
        self.command("GET", "/url", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The page's title.
    pub fn title(&self) -> String {
        self.command("GET", "/title", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The elements that match a CSS selector now.
    pub fn find_all(&self, css: &str) -> Vec<String> {
        self.command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|element| element[ELEMENT].as_str().unwrap().to_owned())
        .collect()
    }

    /// Waits until an element matches a CSS selector; returns the first.
    pub fn wait_for(&self, css: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(element) = self.find_all(css).into_iter().next() {
                return element;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "nothing matched `{css}` on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the page's title is `title`.
    pub fn wait_for_title(&self, title: &str) {
        let start = Instant::now();
        while self.title() != title {
            assert!(
                start.elapsed() < PATIENCE,
                "the title stayed {:?}, not {title:?}",
                self.title()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An element's text as rendered.
    pub fn text(&self, element: &str) -> String {
        self.command("GET", &format!("/element/{element}/text"), None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Clicks an element.
    pub fn click(&self, element: &str) {
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    /// Runs a script in the page (WebDriver's own, not the page's) and
    /// returns its value.
    pub fn eval(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Writes a screenshot of the page to `path` (a PNG).
    pub fn screenshot(&self, path: &Path) {
        let encoded = self.command("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = self.send("DELETE", &path, None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
