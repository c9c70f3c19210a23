//! Runs the user's decision hook once, as `hintgate explain` does: the
//! question on its input, which is then closed, and the first line it
//! answers, within its `decide_timeout_ms`.
//!
//! The gateway runs a persistent hook for as long as it runs; here every
//! hook gets one question and the end of its input, which a persistent hook
//! must take as its cue to exit (the protocol says so).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hintgate_policy::config::HookConfig;
use hintgate_policy::hook::MAX_ANSWER_BYTES;

/// `hintgate demo-hook` (hidden): a persistent decision hook that allows
/// every call at once, for the overhead benchmark. It reads only the id.
pub fn demo_hook() -> anyhow::Result<crate::exit::Exit> {
    #[derive(serde::Deserialize)]
    struct Question<'a> {
        #[serde(borrow)]
        id: std::borrow::Cow<'a, str>,
    }
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut line = String::new();
    let mut input = stdin.lock();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Ok(crate::exit::Exit::Success);
        }
        let Ok(question) = serde_json::from_str::<Question<'_>>(&line) else {
            continue;
        };
        let answer = serde_json::json!({"id": question.id, "verdict": "allow", "reason": "the benchmark's hook"});
        writeln!(stdout, "{answer}")?;
        stdout.flush()?;
    }
}

/// The hook's first line of output, or why there is none.
pub fn ask_once(config: &HookConfig, question: &str) -> Result<String, String> {
    let (program, args) = config
        .command
        .split_first()
        .ok_or_else(|| "the decision hook names no program".to_owned())?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|err| format!("the decision hook `{program}` could not be started: {err}"))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| "no pipe to the decision hook's input".to_owned())?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "no pipe from the decision hook's output".to_owned())?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader =
            BufReader::new(stdout.take(u64::try_from(MAX_ANSWER_BYTES).unwrap_or(u64::MAX) + 1));
        let mut line = String::new();
        let read = loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => break Err("the decision hook closed its output".to_owned()),
                Ok(_) if line.trim().is_empty() => {}
                Ok(_) => break Ok(line.trim_end_matches(['\n', '\r']).to_owned()),
                Err(err) => break Err(format!("the decision hook's output failed: {err}")),
            }
        };
        let _ = tx.send(read);
    });
    // A hook that does not read its input fills the pipe: the write then
    // fails or waits, and the timeout below still holds.
    let question = question.to_owned();
    std::thread::spawn(move || {
        let _ = stdin.write_all(question.as_bytes());
        let _ = stdin.write_all(b"\n");
    });
    let answer = match rx.recv_timeout(Duration::from_millis(config.timeout_ms)) {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "the decision hook did not answer within {} ms",
            config.timeout_ms
        )),
    };
    let _ = child.kill();
    let _ = child.wait();
    answer
}
