//! Text for a terminal: sizes, ages, and cells cut to their column.

pub use neverwiped::text::bytes;

/// How long ago `then` was, in the largest unit that fits, as kubectl shows ages: `45s`, `12m`,
/// `5h`, `3d`; a time in the future (clocks differ) counts as now.
pub fn age(then: jiff::Timestamp, now: jiff::Timestamp) -> String {
    let secs = now.duration_since(then).as_secs().max(0);
    match secs {
        0..120 => format!("{secs}s"),
        120..7_200 => format!("{}m", secs / 60),
        7_200..172_800 => format!("{}h", secs / 3_600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// `text` cut to `width` characters, the cut marked with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectls() {
        let now: jiff::Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
        let ago = |secs: i64| age(now - jiff::SignedDuration::from_secs(secs), now);
        assert_eq!(ago(5), "5s");
        assert_eq!(ago(600), "10m");
        assert_eq!(ago(5 * 3600), "5h");
        assert_eq!(ago(3 * 86_400 + 5), "3d");
        assert_eq!(ago(-30), "0s");
    }

    #[test]
    fn cells_are_cut_to_their_width_by_characters() {
        assert_eq!(fit("nightly", 10), "nightly");
        assert_eq!(fit("a-very-long-plan-name", 8), "a-very-…");
        assert_eq!(fit("ééééé", 3), "éé…");
    }
}
