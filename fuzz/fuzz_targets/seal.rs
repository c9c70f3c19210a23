//! The sealed `requestState` of 2026-07-28 questions.
//!
//! Checked: arbitrary text never opens (nor peeks); a state sealed for a
//! call opens for that call once, and not for another tool, other
//! arguments or another pin; a state with one byte changed never opens.
#![no_main]

use arbitrary::Arbitrary;
use hintgate_proxy::seal::{SealError, Sealer, is_ours};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

#[derive(Debug, Arbitrary)]
struct Input {
    /// Text a host sent back as the state.
    forged: String,
    tool: String,
    argument: String,
    pin: String,
    /// Which byte of a real state to change, and how (xor, never 0).
    flip_at: usize,
    flip_with: u8,
}

fuzz_target!(|input: Input| {
    let Ok(mut sealer) = Sealer::new() else {
        return;
    };
    let arguments = json!({"path": input.argument});
    let pin = input.pin.as_str();

    assert!(
        sealer.peek(&input.forged).is_err(),
        "{:?} peeked",
        input.forged
    );
    assert!(
        sealer
            .open(&input.forged, &input.tool, &arguments, pin)
            .is_err(),
        "{:?} opened",
        input.forged
    );

    let Ok(state) = sealer.seal(&input.tool, &arguments, pin, 600, None) else {
        return;
    };
    assert!(is_ours(&state));

    // One byte changed, when the result is still text.
    let mut bytes = state.clone().into_bytes();
    let at = input.flip_at % bytes.len();
    if let Some(byte) = bytes.get_mut(at) {
        *byte ^= input.flip_with.max(1);
    }
    if let Ok(flipped) = String::from_utf8(bytes) {
        assert!(
            sealer.open(&flipped, &input.tool, &arguments, pin).is_err(),
            "{state:?} with byte {at} changed opened: {flipped:?}"
        );
    }

    // Another call: another tool, other arguments, another pin.
    let other_arguments = json!({"path": format!("{}/..", input.argument)});
    assert_eq!(
        sealer.open(&state, &format!("{}x", input.tool), &arguments, pin),
        Err(SealError::Mismatch)
    );
    assert_eq!(
        sealer.open(&state, &input.tool, &other_arguments, pin),
        Err(SealError::Mismatch)
    );
    assert_eq!(
        sealer.open(&state, &input.tool, &arguments, &format!("{pin}x")),
        Err(SealError::Mismatch)
    );

    // The call it was sealed for: once.
    assert_eq!(sealer.open(&state, &input.tool, &arguments, pin), Ok(()));
    assert_eq!(
        sealer.open(&state, &input.tool, &arguments, pin),
        Err(SealError::Replayed)
    );
});
