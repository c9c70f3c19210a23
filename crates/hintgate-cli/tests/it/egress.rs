//! `network = ["host:port"]` with a real MCP server, through `hintgate run`,
//! against an API in a network namespace the test makes (see `netns`, shared
//! with the proxy's tests): the reference fetch server, confined, reaches
//! the listed address and port through the gateway's egress proxy, and not
//! another port of the same address or another address; the API sees only
//! the first, and the gateway's log names the attempts with the server.

use serde_json::json;

use crate::host::{Host, is_error, text};
use crate::netns::{ApiNamespace, PORT_A, PORT_B};
use crate::sandbox::kernel_confines;
use crate::util::log_json;

#[test]
fn the_fetch_server_reaches_an_api_in_a_namespace_of_the_tests_and_nothing_else() {
    if !kernel_confines() || !crate::netns::available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = ApiNamespace::make(dir.path());
    let config = format!(
        "[servers.fetch]\ncommand = {:?}\nargs = [\"--allow-private-ips\", \"--ignore-robots-txt\"]\ntrust = \"untrusted\"\n\n\
         [servers.fetch.sandbox]\nnetwork = [\"{}:{PORT_A}\"]\n",
        crate::peers::venv_bin("mcp-server-fetch"),
        ns.api,
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let reached = host.call(
        "fetch__fetch",
        json!({"url": format!("http://{}:{PORT_A}/listed", ns.api), "raw": true}),
    );
    assert!(
        text(&reached).contains(&format!("api {PORT_A} /listed")),
        "{reached}\n{}",
        host.log()
    );
    let refused = host.call(
        "fetch__fetch",
        json!({"url": format!("http://{}:{PORT_B}/other-port", ns.api), "raw": true}),
    );
    assert!(is_error(&refused), "{refused}");
    assert!(!text(&refused).contains("api "), "{refused}");
    // Another address: the gateway's own end of the veth.
    let elsewhere = host.call(
        "fetch__fetch",
        json!({"url": format!("http://{}:{PORT_A}/other-address", ns.gateway), "raw": true}),
    );
    assert!(is_error(&elsewhere), "{elsewhere}");
    host.close();
    assert_eq!(ns.asked(), [format!("{PORT_A} /listed")]);
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    let line_with = |needle: &str| {
        log.lines()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in the log:\n{log}"))
            .to_owned()
    };
    assert!(
        line_with(&format!(
            "egress: connection to {}:{PORT_A} allowed",
            ns.api
        ))
        .contains("fetch")
    );
    assert!(
        line_with(&format!(
            "egress: connection to {}:{PORT_B} refused",
            ns.api
        ))
        .contains("fetch")
    );
    for record in log_json(dir.path(), &[]) {
        assert_eq!(
            record["egress"],
            json!([format!("{}:{PORT_A}", ns.api)]),
            "{record}"
        );
    }
}
