//! A server that cannot start says why: the reason its link ends with
//! names how the process ended and its last lines of standard error,
//! bounded and escaped, for real child processes.

use std::collections::BTreeMap;
use std::sync::Arc;

use hintgate_proxy::event::{Event, UpstreamEvent};
use hintgate_proxy::probe::{self, Options, ProbeError, Target};
use hintgate_proxy::tail::{TAIL_BYTES, TAIL_LINES};
use hintgate_proxy::upstream::{LinkTarget, Process, Spawn};

/// Starts `sh -c SCRIPT` as a server and returns the reason its link ended
/// with (the first event that is not a line).
async fn end_of(script: &str) -> String {
    let (events_tx, mut events) = hintgate_proxy::event::channel(Arc::default());
    let target = LinkTarget {
        server: 0,
        generation: 1,
        max_line: 1 << 20,
        max_depth: 64,
        events: events_tx,
        queue: Arc::default(),
    };
    let args = vec!["-c".to_owned(), script.to_owned()];
    let env = BTreeMap::new();
    let process = Process::spawn(
        &Spawn {
            command: "sh",
            args: &args,
            env: &env,
            name: "failing",
            sandbox: None,
        },
        target,
    )
    .unwrap();
    loop {
        match events.recv().await {
            Some(Event::Upstream {
                event: UpstreamEvent::Closed(reason) | UpstreamEvent::Broken(reason),
                ..
            }) => {
                process.stop().await;
                return reason;
            }
            Some(_) => {}
            None => panic!("the link ended without a reason"),
        }
    }
}

#[tokio::test]
async fn a_server_that_writes_its_reason_and_exits_is_heard() {
    let reason = end_of(
        "echo 'Traceback (most recent call last):' >&2; echo \"ModuleNotFoundError: No module named 'mcp'\" >&2; exit 3",
    )
    .await;
    assert!(reason.starts_with("exited with status 3"), "{reason}");
    assert!(
        reason.contains("ModuleNotFoundError: No module named 'mcp'"),
        "{reason}"
    );
    assert!(reason.contains("Traceback"), "{reason}");
    assert!(!reason.contains("closed its output"), "{reason}");
}

#[tokio::test]
async fn a_server_killed_by_a_signal_says_which() {
    let reason = end_of("echo 'about to die' >&2; kill -9 $$").await;
    assert!(
        reason.starts_with("was killed by signal 9 (SIGKILL)"),
        "{reason}"
    );
    assert!(reason.contains("about to die"), "{reason}");
}

#[tokio::test]
async fn a_server_that_says_nothing_is_told_to_have_said_nothing() {
    let reason = end_of("exit 0").await;
    assert_eq!(
        reason,
        "exited with status 0; it wrote nothing to its standard error"
    );
}

#[tokio::test]
async fn a_server_that_floods_its_standard_error_is_kept_to_the_bounds() {
    // Thousands of lines, then one line of 1 MiB, then the last words.
    let reason = end_of(
        "i=0; while [ $i -lt 3000 ]; do echo \"noise $i\" >&2; i=$((i+1)); done; \
         head -c 1048576 /dev/zero | tr '\\0' 'x' >&2; echo >&2; \
         echo 'the last word' >&2; exit 1",
    )
    .await;
    assert!(reason.starts_with("exited with status 1"), "{reason}");
    assert!(reason.ends_with("the last word"), "{reason}");
    assert!(
        reason.contains("the last lines of its standard error"),
        "{reason}"
    );
    assert!(reason.contains("[line cut]"), "{reason}");
    // Every line kept fits, and so do they all together.
    assert!(reason.len() < TAIL_BYTES + 200, "{}", reason.len());
    let kept = reason.split(" | ").count();
    assert!(kept <= TAIL_LINES, "{kept}");
    assert!(!reason.contains("noise 100 "), "{reason}");
}

#[tokio::test]
async fn escape_sequences_a_server_writes_to_stderr_reach_no_one_raw() {
    let reason = end_of(
        "printf '\\033]0;owned\\007\\033[2J\\033[31mred\\r\\nforged: ok\\n' >&2; printf '\\342\\200\\256reversed\\n' >&2; exit 2",
    )
    .await;
    assert!(reason.starts_with("exited with status 2"), "{reason}");
    for raw in ['\u{1b}', '\u{7}', '\r', '\n', '\u{202e}'] {
        assert!(!reason.contains(raw), "{raw:?} in {reason:?}");
    }
    assert!(reason.contains("\\u{001b}]0;owned"), "{reason}");
    assert!(reason.contains("\\u{202e}reversed"), "{reason}");
}

#[tokio::test]
async fn lint_says_why_a_server_exited_and_what_it_said_before_timing_out() {
    let target = |script: &str| Target::Stdio {
        command: "sh".to_owned(),
        args: vec!["-c".to_owned(), script.to_owned()],
        env: BTreeMap::new(),
        sandbox: None,
    };
    let options = Options {
        timeout: std::time::Duration::from_secs(1),
        call_read_only: false,
    };
    let error = probe::probe(
        &target("echo 'cannot reach the registry' >&2; exit 4"),
        options,
    )
    .await
    .unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, ProbeError::Closed { .. }), "{text}");
    assert!(text.contains("exited with status 4"), "{text}");
    assert!(text.contains("cannot reach the registry"), "{text}");
    // Silent at start: it fails at the deadline, with what it said so far.
    let error = probe::probe(
        &target("echo 'fetching the package' >&2; exec sleep 600"),
        options,
    )
    .await
    .unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, ProbeError::Timeout { .. }), "{text}");
    assert!(text.contains("fetching the package"), "{text}");
}

#[tokio::test]
async fn a_server_that_closes_its_output_and_lives_on_is_said_to() {
    // Its standard output goes nowhere, and it stays: after a moment's
    // grace the link ends, saying so and what it wrote.
    let reason = end_of("echo 'detaching' >&2; exec sleep 600 >/dev/null 2>&1").await;
    assert_eq!(
        reason,
        "closed its output, and did not exit; the lines of its standard error: detaching"
    );
}
