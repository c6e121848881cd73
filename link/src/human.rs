//! Durations as a person reads them ("20 days", "3 h 12 min", "45 s"), for messages and logs:
//! a count of seconds in the millions says nothing at a glance.

/// `secs` in the largest two units that matter: "45 s", "2 min 5 s", "3 h 12 min",
/// "20 days 4 h" (days past a week alone: "20 days"; a year and more: "2 years 12 days").
pub fn duration(secs: u64) -> String {
    const MIN: u64 = 60;
    const HOUR: u64 = 60 * MIN;
    const DAY: u64 = 24 * HOUR;
    const YEAR: u64 = 365 * DAY;
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let (big, rest) = match secs {
        s if s < MIN => return format!("{s} s"),
        s if s < HOUR => (format!("{} min", s / MIN), (s % MIN, " s", 1)),
        s if s < DAY => (format!("{} h", s / HOUR), (s % HOUR, " min", MIN)),
        s if s < 7 * DAY => (plural(s / DAY, "day", "days"), (s % DAY, " h", HOUR)),
        s if s < YEAR => return plural(s / DAY, "day", "days"),
        s => (plural(s / YEAR, "year", "years"), (s % YEAR, " days", DAY)),
    };
    let (left, unit, per) = rest;
    match left / per {
        0 => big,
        1 if unit == " days" => format!("{big} 1 day"),
        n => format!("{big} {n}{unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn a_duration_is_said_in_the_two_largest_units_that_matter() {
        for (secs, said) in [
            (0, "0 s"),
            (45, "45 s"),
            (60, "1 min"),
            (125, "2 min 5 s"),
            (3 * 3600 + 12 * 60 + 7, "3 h 12 min"),
            (86_400, "1 day"),
            (2 * 86_400 + 4 * 3600, "2 days 4 h"),
            (20 * 86_400 + 5, "20 days"),
            (366 * 86_400, "1 year 1 day"),
            (1_796_166_882, "56 years 348 days"),
        ] {
            assert_eq!(duration(secs), said, "{secs}");
        }
    }
}
