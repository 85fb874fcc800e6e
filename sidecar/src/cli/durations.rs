//! Durations and times on the command line, as `--retry-lock 1m`, `copy --newer-than 7d` and
//! `restore --before 2026-11-30T02:00:00Z` take them.

/// A duration such as `90s`, `30m`, `2h`, `1h30m` or `7d`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let mut seconds: u64 = 0;
    let mut number = String::new();
    for c in text.trim().chars() {
        match c {
            '0'..='9' => number.push(c),
            'd' | 'h' | 'm' | 's' if !number.is_empty() => {
                let value: u64 = number.parse().map_err(|e| format!("{text:?}: {e}"))?;
                seconds += value
                    * match c {
                        'd' => 86400,
                        'h' => 3600,
                        'm' => 60,
                        _ => 1,
                    };
                number.clear();
            }
            _ => {
                return Err(format!(
                    "{text:?} is not a duration such as 90s, 30m, 1h30m or 7d"
                ))
            }
        }
    }
    if !number.is_empty() || text.trim().is_empty() {
        return Err(format!(
            "{text:?} is not a duration such as 90s, 30m, 1h30m or 7d"
        ));
    }
    Ok(std::time::Duration::from_secs(seconds))
}

/// An RFC 3339 time such as `2026-11-30T02:00:00Z`, in UTC.
pub fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-11-30T02:00:00Z: {e}"))
}
