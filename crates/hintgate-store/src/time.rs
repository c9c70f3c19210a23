//! The store's times (seconds since the Unix epoch, as records and rows
//! hold them) as a calendar date and time in UTC, for whoever shows them,
//! without a date crate.

/// A time in UTC, by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year (proleptic Gregorian; may be before 1970).
    pub year: i64,
    /// 1 to 12.
    pub month: i64,
    /// 1 to 31.
    pub day: i64,
    /// 0 to 23.
    pub hour: i64,
    /// 0 to 59.
    pub minute: i64,
    /// 0 to 59.
    pub second: i64,
}

/// Seconds since the Unix epoch as a date and time in UTC, by the
/// civil-from-days algorithm (Howard Hinnant's).
#[must_use]
pub fn civil(seconds: i64) -> Civil {
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    Civil {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day,
        hour: rest / 3_600,
        minute: rest % 3_600 / 60,
        second: rest % 60,
    }
}

/// Days since 1970-01-01 of a date (Howard Hinnant's days-from-civil):
/// [`civil`]'s way back, for a date read from text.
#[must_use]
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_fall_on_their_calendar_days() {
        let at = |year, month, day, hour, minute, second| Civil {
            year,
            month,
            day,
            hour,
            minute,
            second,
        };
        assert_eq!(civil(0), at(1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(-1), at(1969, 12, 31, 23, 59, 59));
        assert_eq!(civil(951_782_400), at(2000, 2, 29, 0, 0, 0));
        assert_eq!(civil(1_795_989_518), at(2026, 11, 29, 21, 58, 38));
        assert_eq!(civil(4_107_542_400), at(2100, 3, 1, 0, 0, 0));
    }

    #[test]
    fn a_date_goes_back_to_the_seconds_it_came_from() {
        // A second every 768,143 (about 8.9 days, so every hour and minute
        // comes round) from 1900 to 2200, then leap days and century turns.
        let mut seconds = -2_208_988_800_i64;
        while seconds < 7_258_118_400 {
            let at = civil(seconds);
            let back = days_from_civil(at.year, at.month, at.day) * 86_400
                + at.hour * 3_600
                + at.minute * 60
                + at.second;
            assert_eq!(back, seconds, "{at:?}");
            seconds += 768_143;
        }
        for (year, month, day) in [(2000, 2, 29), (2100, 2, 28), (2100, 3, 1), (1969, 12, 31)] {
            let at = civil(days_from_civil(year, month, day) * 86_400);
            assert_eq!((at.year, at.month, at.day), (year, month, day));
        }
    }
}
