//! Exit codes, one enum, documented in `--help` and the README.

use std::process::{ExitCode, Termination};

/// How `hintgate` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: success; `explain` decided allow or ask, `config check` found no error.
    Success,
    /// 1: an error while running (an unreadable file, a broken pipe elsewhere).
    Error,
    /// 2: `explain` decided deny.
    Denied,
    /// 2: `lint` found problems at or above `--fail-on`.
    Findings,
    /// 2: `log verify` found the audit log broken.
    Broken,
    /// 64: bad usage, or a configuration or input file with errors.
    Usage,
}

impl Exit {
    /// The numeric code.
    pub const fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Error => 1,
            Self::Denied | Self::Findings | Self::Broken => 2,
            Self::Usage => 64,
        }
    }
}

impl Termination for Exit {
    fn report(self) -> ExitCode {
        ExitCode::from(self.code())
    }
}

/// The exit code table, for `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0   success (explain: allow or ask; config check: no errors)
  1   error while running
  2   a denial (explain decided deny), or lint findings at or above --fail-on
  64  bad usage, or a config or input file with errors";
