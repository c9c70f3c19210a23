//! Time on the command line and in what it prints: `--since` (an RFC 3339
//! time or a duration back from now) and seconds since the Unix epoch
//! shown in UTC, without a date crate.

/// `--since`: a point in time, or a duration back from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Seconds since the Unix epoch.
    At(i64),
    /// Seconds before now.
    Ago(i64),
}

impl Since {
    /// Seconds since the Unix epoch, given the time now.
    pub(crate) fn resolve(self, now: i64) -> i64 {
        match self {
            Self::At(at) => at,
            Self::Ago(seconds) => now.saturating_sub(seconds),
        }
    }
}

/// Parses `--since`: an RFC 3339 time or a duration such as `10m`.
pub fn parse_since(text: &str) -> Result<Since, String> {
    let text = text.trim();
    if let Some(seconds) = parse_duration(text) {
        return seconds.map(Since::Ago);
    }
    parse_rfc3339(text).map(Since::At).ok_or_else(|| {
        format!(
            "`{text}` is neither an RFC 3339 time (such as `2026-11-29T21:58:38Z`) nor a duration (such as `90s`, `10m`, `2h`, `3d`, `1w`)"
        )
    })
}

/// A duration: digits and one unit of `s`, `m`, `h`, `d` or `w`. `None`
/// when the text does not have that shape; an error when it is too large.
fn parse_duration(text: &str) -> Option<Result<i64, String>> {
    let unit = text.chars().last()?;
    let per_unit: i64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return None,
    };
    let digits = text.get(..text.len() - 1)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .parse::<i64>()
            .ok()
            .and_then(|count| count.checked_mul(per_unit))
            .ok_or_else(|| format!("the duration `{text}` is too long")),
    )
}

/// An RFC 3339 time (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, `T` or a
/// space between date and time, either case) as seconds since the Unix
/// epoch; a fraction of a second is dropped.
fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let separator =
        |idx: usize, allowed: &[u8]| bytes.get(idx).is_some_and(|b| allowed.contains(b));
    if !(separator(4, b"-")
        && separator(7, b"-")
        && separator(10, b"Tt ")
        && separator(13, b":")
        && separator(16, b":"))
    {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let mut rest = text.get(19..)?;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = fraction.get(digits..)?;
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.get(..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.get(3..4)? != ":" {
                return None;
            }
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 3_600 + minutes * 60)
        }
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    // A leap second (`:60`) is taken as the second after.
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(
        hintgate_store::time::days_from_civil(year, month, day) * 86_400
            + hour * 3_600
            + minute * 60
            + second
            - offset,
    )
}

/// Seconds since the Unix epoch, now (0 before it, on a clock set wrong).
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub(crate) fn utc(seconds: i64) -> String {
    let at = hintgate_store::time::civil(seconds);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year, at.month, at.day, at.hour, at.minute, at.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_795_989_518), "2026-11-29T21:58:38Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn since_takes_rfc_3339_times_and_durations() {
        assert_eq!(
            parse_since("2026-11-29T21:58:38Z"),
            Ok(Since::At(1_795_989_518))
        );
        assert_eq!(
            parse_since("2026-11-29T22:58:38.25+01:00"),
            Ok(Since::At(1_795_989_518))
        );
        assert_eq!(
            parse_since("2000-02-29 00:00:00z"),
            Ok(Since::At(951_782_400))
        );
        assert_eq!(parse_since("1969-12-31T23:59:59Z"), Ok(Since::At(-1)));
        assert_eq!(parse_since("90s"), Ok(Since::Ago(90)));
        assert_eq!(parse_since("10m"), Ok(Since::Ago(600)));
        assert_eq!(parse_since("2h"), Ok(Since::Ago(7_200)));
        assert_eq!(parse_since("3d"), Ok(Since::Ago(259_200)));
        assert_eq!(parse_since("1w"), Ok(Since::Ago(604_800)));
        assert_eq!(Since::Ago(600).resolve(1_000), 400);
        for bad in [
            "",
            "yesterday",
            "10",
            "m",
            "-5m",
            "2026-02-30T00:00:00Z",
            "2026-11-29T21:58:38",
            "2026-11-29T24:00:00Z",
            "2026-11-29T21:58:38+1:00",
            "99999999999999999999d",
        ] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}
