//! Paths and file helpers for the integration tests.

use std::path::PathBuf;

/// The crate's `tests/` folder.
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The text of a peers fixture file.
pub fn fixture(file: &str) -> String {
    let path = tests_dir().join("fixtures/peers").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Every corpus case file, sorted by name.
pub fn corpus_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(tests_dir().join("corpus"))
        .expect("the corpus folder exists")
        .map(|entry| entry.expect("a readable corpus entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}
