//! Milliseconds since the Unix epoch to RFC 3339 UTC text with milliseconds
//! (`2026-01-31T12:00:00.123Z`), and back (`parse_ms`, any offset, fraction cut to ms). No
//! time zone data, no clock: pure functions.

const MS_PER_DAY: u64 = 86_400_000;

/// Formats `ms` since 1970-01-01T00:00:00Z. Digits are written by hand: `format!` cost more
/// than the rest of a GET_INSTANCE result on the shard (three instants per result).
pub fn format_ms(ms: u64) -> String {
    let days = ms / MS_PER_DAY;
    let in_day = ms % MS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    let (secs, millis) = (in_day / 1000, in_day % 1000);
    if year > 9999 {
        return format_wide(year, month, day, secs, millis);
    }
    let mut out = String::with_capacity(24);
    let mut digits = |n: u64, width: u32, after: Option<char>| {
        for i in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u64.pow(i) % 10) as u8));
        }
        if let Some(c) = after {
            out.push(c);
        }
    };
    digits(year, 4, Some('-'));
    digits(month, 2, Some('-'));
    digits(day, 2, Some('T'));
    digits(secs / 3600, 2, Some(':'));
    digits(secs / 60 % 60, 2, Some(':'));
    digits(secs % 60, 2, Some('.'));
    digits(millis, 3, Some('Z'));
    out
}

/// `format_ms` for years past 9999 (more than four digits).
fn format_wide(year: u64, month: u64, day: u64, secs: u64, millis: u64) -> String {
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

/// Reads `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (`t`/`z`/space accepted as RFC 3339 allows)
/// as epoch milliseconds; digits beyond milliseconds are cut. None for anything else, or for
/// instants before 1970.
pub fn parse_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits.iter().try_fold(0i64, |acc, d| {
            d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
        })
    };
    let sep = |at: usize, want: &[u8]| b.get(at).is_some_and(|c| want.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, min, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0i64;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 3 {
                millis = millis * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start)..3 {
            millis *= 10;
        }
    }
    let offset_min = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && sep(at + 3, b":") => {
            let (oh, om) = (num(at + 1, 2)?, num(at + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'-' {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_min * 60;
    u64::try_from(secs * 1000 + millis).ok()
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_written_digits_match_format() {
        let mut ms = 0u64;
        while ms < 400_000_000_000_000 {
            let (year, month, day) = civil_from_days(ms / MS_PER_DAY);
            let in_day = ms % MS_PER_DAY;
            let want = format_wide(year, month, day, in_day / 1000, in_day % 1000);
            assert_eq!(format_ms(ms), want, "{ms}");
            ms = ms * 3 + 7_919;
        }
        for d in (0..3_000_000u64).step_by(997) {
            let ms = d * MS_PER_DAY + d * 7_919 % MS_PER_DAY;
            let (year, month, day) = civil_from_days(d);
            let in_day = ms % MS_PER_DAY;
            assert_eq!(
                format_ms(ms),
                format_wide(year, month, day, in_day / 1000, in_day % 1000)
            );
        }
        assert_eq!(format_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(format_ms(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
    }

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
    fn parse_reads_back_what_format_writes() {
        for ms in [0, 951_782_400_000, 1_769_860_800_123, 253_402_300_799_999] {
            assert_eq!(parse_ms(&format_ms(ms)), Some(ms));
        }
    }

    #[test]
    fn parse_applies_offsets_and_cuts_fractions() {
        assert_eq!(parse_ms("2026-01-31T12:00:00Z"), Some(1_769_860_800_000));
        assert_eq!(
            parse_ms("2026-01-31T13:30:00+01:30"),
            Some(1_769_860_800_000)
        );
        assert_eq!(
            parse_ms("2026-01-31T11:00:00-01:00"),
            Some(1_769_860_800_000)
        );
        assert_eq!(
            parse_ms("2026-01-31t12:00:00.1234567z"),
            Some(1_769_860_800_123)
        );
        assert_eq!(parse_ms("2026-01-31T12:00:00.5Z"), Some(1_769_860_800_500));
    }

    #[test]
    fn parse_refuses_what_is_not_a_time() {
        for bad in [
            "",
            "2026-01-31",
            "2026-01-31T12:00:00",
            "2026-02-30T12:00:00Z",
            "2026-13-01T12:00:00Z",
            "2026-01-31T24:00:00Z",
            "2026-01-31T12:00:00.Z",
            "2026-01-31T12:00:00+0100",
            "1969-12-31T23:59:59Z",
            "2026-01-31T12:00:00Zjunk",
        ] {
            assert_eq!(parse_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn largest_input_does_not_overflow() {
        assert!(format_ms(u64::MAX).ends_with('Z'));
    }
}
