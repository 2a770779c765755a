//! Milliseconds since the Unix epoch to RFC 3339 UTC text with milliseconds
//! (`2026-01-31T12:00:00.123Z`). No time zone data, no clock: a pure function.

const MS_PER_DAY: u64 = 86_400_000;

/// Formats `ms` since 1970-01-01T00:00:00Z.
pub fn format_ms(ms: u64) -> String {
    let days = ms / MS_PER_DAY;
    let in_day = ms % MS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    let (secs, millis) = (in_day / 1000, in_day % 1000);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01, after Howard
/// Hinnant's `civil_from_days`. Days are non-negative here, so the arithmetic is unsigned.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_formats_as_1970() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn known_instants_format_exactly() {
        assert_eq!(format_ms(1_769_860_800_123), "2026-01-31T12:00:00.123Z");
        assert_eq!(format_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_ms(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(format_ms(4_102_444_800_000), "2100-01-01T00:00:00.000Z");
        assert_eq!(format_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn consecutive_days_advance_one_calendar_day() {
        // Walk 1970..2400 and check the calendar against a simple day counter.
        let (mut y, mut m, mut d) = (1970u64, 1u64, 1u64);
        for days in 0..(430 * 366) {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            d += 1;
            if d > len[(m - 1) as usize] {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn largest_input_does_not_overflow() {
        assert!(format_ms(u64::MAX).ends_with('Z'));
    }
}
