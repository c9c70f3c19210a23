//! The event streams of Streamable HTTP servers.
//!
//! A body is cut into chunks where the fuzzer says and read under a small
//! limit. Checked: nothing panics; the decoder never holds more than the
//! limit for an event and the limit and slack for a line; the events it finds and the
//! error it stops on do not depend on where the body is cut; no event's
//! data is longer than the limit.
#![no_main]

use arbitrary::Arbitrary;
use hintgate_proxy::fuzzing::{LINE_SLACK, SseDecoder, SseError};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    limit: u8,
    /// Lengths of the chunks, in turn (the rest of the body is the last).
    cuts: Vec<u8>,
    body: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let limit = usize::from(input.limit) + 1;
    let whole = decode(&input.body, &[], limit);
    let cut = decode(&input.body, &input.cuts, limit);
    assert_eq!(whole, cut, "{input:?}");
    for event in &whole.0 {
        assert!(event.len() <= limit, "{event:?} is longer than {limit}");
    }
});

fn decode(body: &[u8], cuts: &[u8], limit: usize) -> (Vec<String>, Result<String, SseError>) {
    let mut decoder = SseDecoder::new(limit);
    let mut events = Vec::new();
    let mut rest = body;
    let mut cuts = cuts.iter();
    while !rest.is_empty() {
        let len = cuts
            .next()
            .map_or(rest.len(), |len| usize::from(*len).min(rest.len()));
        let (chunk, after) = rest.split_at(len);
        rest = after;
        if let Err(err) = decoder.feed(chunk, &mut events) {
            return (events, Err(err));
        }
        assert!(
            decoder.held() <= 2 * limit + LINE_SLACK,
            "{} bytes held",
            decoder.held()
        );
    }
    (events, Ok(decoder.finish()))
}
