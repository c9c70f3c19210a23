//! The protocol versions the gateway speaks, in both eras.

/// The modern protocol version the gateway speaks.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The protocol versions of the legacy era the gateway speaks, newest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
