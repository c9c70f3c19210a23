//! The `text/event-stream` bodies of Streamable HTTP servers, read into the
//! data of their events under a bound.
//!
//! A server decides how long its lines and events are; the gateway decides
//! how much of them it holds. No line is held beyond [`SseDecoder::new`]'s
//! limit plus [`LINE_SLACK`] (a `data:` line carrying a message of the
//! largest size, with its field name), and no event's data beyond the
//! limit. Each byte is looked at once, however the body is cut into chunks,
//! and the events found do not depend on where it is cut.

/// What a line may hold beyond the largest message: its field name and the
/// space after it, a carriage return, and room to spare.
pub const LINE_SLACK: usize = 64;

/// Why a stream was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event's data is longer than the limit.
    #[error("an event larger than the limit of {limit} bytes")]
    EventTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// One line is longer than the limit (and [`LINE_SLACK`]).
    #[error("a line larger than the limit of {limit} bytes")]
    LineTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Reads an event stream chunk by chunk.
#[derive(Debug)]
pub struct SseDecoder {
    /// The largest event's data, in bytes.
    limit: usize,
    /// Bytes of a line not yet ended.
    pending: Vec<u8>,
    /// The data lines of the event not yet ended, joined by newlines.
    data: String,
}

// === impl SseDecoder ===

impl SseDecoder {
    /// A decoder that holds events of at most `limit` bytes of data.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            pending: Vec::new(),
            data: String::new(),
        }
    }

    /// Reads `chunk`, pushing the data of each event it ends onto `events`.
    ///
    /// # Errors
    ///
    /// [`SseError`] when a line or an event is longer than the limit; the
    /// events ended before it are on `events`, and the stream is to be
    /// given up.
    pub fn feed(&mut self, chunk: &[u8], events: &mut Vec<String>) -> Result<(), SseError> {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|byte| *byte == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = after.get(1..).unwrap_or_default();
            if self.pending.is_empty() {
                self.line(line, events)?;
            } else {
                let mut whole = std::mem::take(&mut self.pending);
                whole.extend_from_slice(line);
                self.line(&whole, events)?;
            }
        }
        if self.pending.len().saturating_add(rest.len()) > self.line_limit() {
            return Err(SseError::LineTooLong { limit: self.limit });
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }

    /// The data of the event the stream ended in, when it did not end it
    /// with a blank line (empty when there is none): its ended lines; a
    /// line the stream cut off is dropped.
    pub fn finish(self) -> String {
        self.data
    }

    /// How many bytes the decoder holds.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn held(&self) -> usize {
        self.pending.len() + self.data.len()
    }

    fn line_limit(&self) -> usize {
        self.limit.saturating_add(LINE_SLACK)
    }

    /// One line, without its `\n`.
    fn line(&mut self, line: &[u8], events: &mut Vec<String>) -> Result<(), SseError> {
        if line.len() > self.line_limit() {
            return Err(SseError::LineTooLong { limit: self.limit });
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(std::mem::take(&mut self.data));
            }
            return Ok(());
        }
        // `id:`, `event:`, `retry:` and comments need no handling here.
        let Some(value) = line.strip_prefix(b"data:") else {
            return Ok(());
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let value = String::from_utf8_lossy(value);
        if !self.data.is_empty() {
            self.data.push('\n');
        }
        self.data.push_str(&value);
        if self.data.len() > self.limit {
            return Err(SseError::EventTooLong { limit: self.limit });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]], limit: usize) -> (Vec<String>, Result<String, SseError>) {
        let mut decoder = SseDecoder::new(limit);
        let mut events = Vec::new();
        for chunk in chunks {
            if let Err(err) = decoder.feed(chunk, &mut events) {
                return (events, Err(err));
            }
        }
        (events, Ok(decoder.finish()))
    }

    #[test]
    fn events_are_their_data_lines_joined() {
        let body: &[u8] = b": a comment\r\nevent: message\ndata: {\"a\":\ndata:1}\n\nid: 7\ndata: {}\r\n\r\ndata: last\ndata: cut";
        let (events, rest) = decode(&[body], 1024);
        assert_eq!(events, ["{\"a\":\n1}", "{}"]);
        assert_eq!(rest.unwrap(), "last");
        let cut: Vec<&[u8]> = body.chunks(3).collect();
        assert_eq!(decode(&cut, 1024), (events, Ok("last".to_owned())));
    }

    #[test]
    fn a_line_that_never_ends_is_not_held_past_the_limit() {
        // A server that sends one endless line (a comment, or data) in
        // small chunks: the gateway gives up once the line is longer than
        // any message could be, instead of holding it all.
        let limit = 1000;
        let mut decoder = SseDecoder::new(limit);
        let mut events = Vec::new();
        let chunk = [b'x'; 100];
        decoder.feed(b": ", &mut events).unwrap();
        let mut fed = 0;
        let err = loop {
            match decoder.feed(&chunk, &mut events) {
                Ok(()) => fed += chunk.len(),
                Err(err) => break err,
            }
            assert!(decoder.held() <= limit + LINE_SLACK);
            assert!(fed < 10 * limit, "still reading after {fed} bytes");
        };
        assert_eq!(err, SseError::LineTooLong { limit });
        assert!(events.is_empty());
    }

    #[test]
    fn a_long_line_is_refused_however_it_is_cut() {
        let mut body = b"data: {}\n\n: ".to_vec();
        body.extend(std::iter::repeat_n(b'x', 2000));
        body.extend_from_slice(b"\n\n");
        let whole = decode(&[&body], 1000);
        assert_eq!(
            whole,
            (
                vec!["{}".to_owned()],
                Err(SseError::LineTooLong { limit: 1000 })
            )
        );
        let cut: Vec<&[u8]> = body.chunks(7).collect();
        assert_eq!(decode(&cut, 1000), whole);
    }

    #[test]
    fn an_event_longer_than_the_limit_is_refused() {
        let (events, rest) = decode(&[b"data: 0123456789\ndata: 0123456789\n\n"], 15);
        assert!(events.is_empty());
        assert_eq!(rest, Err(SseError::EventTooLong { limit: 15 }));
    }
}
