//! The policy corpus: every case file in `tests/corpus`, run through the library.
//!
//! The same cases run through `hintgate explain --json` in the command line's
//! tests (those marked `cli = true`).

use hintgate_policy::reason::ReasonCode;
use hintgate_policy::test_util::Case;

use crate::util::{corpus_files, fixture};

#[test]
fn every_corpus_case_decides_as_expected() {
    let files = corpus_files();
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let outcome = Case::parse(&text)
            .and_then(|case| case.run_library(&fixture).and_then(|got| case.check(&got)));
        if let Err(problem) = outcome {
            failures.push(format!("--- {name}\n{problem}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} corpus case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        files.len() >= 60,
        "the corpus has only {} cases",
        files.len()
    );
}

#[test]
fn corpus_reasons_are_known_codes() {
    for path in corpus_files() {
        let case = Case::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for code in &case.expect.reasons {
            assert!(
                ReasonCode::parse(code).is_some(),
                "{}: unknown reason `{code}`",
                path.display()
            );
        }
    }
}

#[test]
fn the_corpus_covers_every_verdict_and_every_decision_reason() {
    let cases: Vec<Case> = corpus_files()
        .iter()
        .map(|path| Case::parse(&std::fs::read_to_string(path).unwrap()).unwrap())
        .collect();
    for verdict in ["allow", "ask", "deny"] {
        assert!(
            cases.iter().any(|case| case.expect.verdict == verdict),
            "no case decides {verdict}"
        );
    }
    let must_appear = [
        "rule-deny",
        "definition-changed",
        "rule-ask",
        "rule-allow",
        "open-world-after-private-data",
        "read-only",
        "not-read-only",
        "profile-hide-writes",
        "scope-read-only",
        "profile-ask-all",
        "remembered-approval",
        "unattended",
        "untrusted-server",
        "missing-annotations",
        "contradictory-annotations",
        "destructive",
        "open-world",
        "sandbox-confined",
        "invalid-definition",
    ];
    for code in must_appear {
        assert!(
            cases
                .iter()
                .any(|case| case.expect.reasons.iter().any(|r| r == code)),
            "no corpus case expects reason `{code}`"
        );
    }
    assert!(
        cases
            .iter()
            .filter(|case| case.tool_fixture.is_some())
            .count()
            >= 10,
        "too few real definitions"
    );
    assert!(
        cases.iter().filter(|case| case.cli).count() >= 10,
        "too few cases run through the CLI"
    );
}
