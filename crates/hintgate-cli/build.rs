//! How the `hintgate` binary is linked.
//!
//! On Linux with glibc 2.36 or later, its relative relocations are packed
//! (`DT_RELR`, `-z pack-relative-relocs`): the dynamic loader then applies
//! its 23,000 or so from a table of a few kilobytes instead of walking
//! 550 KB of `.rela.dyn` entries at every start (about a tenth of the
//! instructions before the first answer, and pages of the file each
//! gateway kept resident). A binary linked so needs a C library that knows
//! `DT_RELR`, which the linker records as a dependency on
//! `GLIBC_ABI_DT_RELR`; so the option is given only when the build machine
//! is the target and its glibc has it (older glibc would start the binary
//! with its relocations unapplied), and a linker that does not know it
//! warns and ignores it.

use std::process::Command;

#[expect(
    clippy::disallowed_macros,
    reason = "a build script speaks to cargo on its standard output"
)]
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    if var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && native
        && glibc_at_least(2, 36)
    {
        println!("cargo::rustc-link-arg-bin=hintgate=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc (`getconf GNU_LIBC_VERSION`: `glibc 2.36`)
/// is `major.minor` or later; `false` when it cannot be told.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(output) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(found_major), Some(found_minor)) => (found_major, found_minor) >= (major, minor),
        _ => false,
    }
}
