//! Jenkins-style hashed cron fields: `H` stands for a value derived from the plan's namespace and
//! name, so a thousand plans written `H H(1-5) * * *` spread over 01:00–05:59 instead of all
//! starting at 01:00, and each plan keeps its own time from one day to the next.
//!
//! Forms, in any of the five fields (also inside a comma list):
//! - `H`: one value of the field's range (day of month: 1–28, so every month has it);
//! - `H(a-b)`: one value from `a` to `b`;
//! - `H/n`, `H(a-b)/n`: every `n`, starting at an offset below `n` (`H/15` may be `7-59/15`).
//!
//! The hash is FNV-1a over the seed and the field's position, finalized as in MurmurHash3: fixed, so the time does not move
//! when the operator is upgraded, and different per field, so minute and hour are unrelated.
//! [`resolve`] turns such an expression into plain cron, which [`crate::schedule`] then reads.

/// The fields' ranges for a bare `H`; a range given with `H(a-b)` may use the full field.
const FIELDS: [Field; 5] = [
    Field::new("minute", 0, 59, 59),
    Field::new("hour", 0, 23, 23),
    // A bare H stays at or below the 28th, which every month has.
    Field::new("day of month", 1, 31, 28),
    Field::new("month", 1, 12, 12),
    Field::new("day of week", 0, 6, 6),
];

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// The highest value a bare `H` may take.
    hashed_max: u32,
}

impl Field {
    const fn new(name: &'static str, min: u32, max: u32, hashed_max: u32) -> Field {
        Field {
            name,
            min,
            max,
            hashed_max,
        }
    }
}

/// Replaces each `H` of `expression` with the value `seed` gives it; an expression without `H`
/// (an `@` macro among them) comes back unchanged. The error says which field is wrong and why.
pub fn resolve(expression: &str, seed: &str) -> Result<String, String> {
    let trimmed = expression.trim();
    if trimmed.starts_with('@') || !trimmed.contains('H') {
        return Ok(expression.to_owned());
    }
    let fields: Vec<&str> = trimmed.split_whitespace().collect();
    if fields.len() != FIELDS.len() {
        // The cron parser reports the field count.
        return Ok(expression.to_owned());
    }
    let resolved: Result<Vec<String>, String> = fields
        .iter()
        .zip(FIELDS.iter())
        .enumerate()
        .map(|(position, (text, field))| {
            let hash = fnv1a(seed, position);
            text.split(',')
                .map(|item| resolve_item(item, field, hash))
                .collect::<Result<Vec<_>, _>>()
                .map(|items| items.join(","))
        })
        .collect();
    Ok(resolved?.join(" "))
}

/// One item of a field's comma list.
fn resolve_item(item: &str, field: &Field, hash: u64) -> Result<String, String> {
    let Some(rest) = item.strip_prefix('H') else {
        return Ok(item.to_owned());
    };
    let (range, step) = match rest.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (rest, None),
    };
    let (low, high) = if range.is_empty() {
        (field.min, field.hashed_max)
    } else {
        parse_range(range, field)?
    };
    let span = u64::from(high - low + 1);
    match step {
        None => Ok((u64::from(low) + hash % span).to_string()),
        Some(step) => {
            let step: u32 =
                step.parse().ok().filter(|step| *step > 0).ok_or_else(|| {
                    format!("{}: {item:?} needs a step above 0 after /", field.name)
                })?;
            let offset = (hash % u64::from(step)).min(span - 1);
            let start = u64::from(low) + offset;
            Ok(format!("{start}-{high}/{step}"))
        }
    }
}

/// `(a-b)` within the field.
fn parse_range(range: &str, field: &Field) -> Result<(u32, u32), String> {
    let error = || {
        format!(
            "{}: write H({}-{}) or a narrower range, low to high, after H",
            field.name, field.min, field.max
        )
    };
    let inner = range
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(error)?;
    let (low, high) = inner.split_once('-').ok_or_else(error)?;
    let low: u32 = low.trim().parse().map_err(|_| error())?;
    let high: u32 = high.trim().parse().map_err(|_| error())?;
    if low < field.min || high > field.max || low > high {
        return Err(error());
    }
    Ok((low, high))
}

/// FNV-1a (64 bit) over `seed`, a zero byte and the field's position, then MurmurHash3's
/// finalizer: FNV alone leaves the low bits, which a remainder keeps, poorly mixed.
fn fnv1a(seed: &str, position: usize) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let position = u8::try_from(position).unwrap_or(u8::MAX);
    let mut hash = seed
        .bytes()
        .chain([0, position])
        .fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        });
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(resolved: &str) -> Vec<u32> {
        resolved
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect()
    }

    #[test]
    fn expressions_without_h_are_unchanged() {
        for expression in ["30 2 * * *", "@daily", "*/15 * * * 1-5", "0 3 * * SUN"] {
            assert_eq!(resolve(expression, "shop/nightly").unwrap(), expression);
        }
    }

    #[test]
    fn a_window_gives_each_plan_its_own_stable_time_inside_it() {
        let mut times = std::collections::BTreeSet::new();
        for plan in 0..200 {
            let seed = format!("team-{}/plan-{plan}", plan % 20);
            let resolved = resolve("H H(1-5) * * *", &seed).unwrap();
            assert_eq!(resolved, resolve("H H(1-5) * * *", &seed).unwrap());
            let [minute, hour] = fields(&resolved.replace(" * * *", ""))[..] else {
                panic!("{resolved}");
            };
            assert!((1..=5).contains(&hour) && minute < 60, "{resolved}");
            times.insert((hour, minute));
        }
        // 200 plans over 300 minutes: spread, not piled up.
        assert!(times.len() > 120, "{} distinct times", times.len());
    }

    #[test]
    fn the_hash_is_fixed_across_releases() {
        // Changing this moves every hashed plan's time: it is part of the API.
        assert_eq!(resolve("H H * * *", "shop/nightly").unwrap(), "16 10 * * *");
        assert_eq!(
            resolve("H H(1-5) * * *", "shop/nightly").unwrap(),
            "16 4 * * *"
        );
    }

    #[test]
    fn steps_ranges_and_lists() {
        let resolved = resolve("H/15 H(0-3),12 H * H(1-5)", "a/b").unwrap();
        let parts: Vec<&str> = resolved.split_whitespace().collect();
        let (start, rest) = parts[0].split_once('-').unwrap();
        assert!(start.parse::<u32>().unwrap() < 15);
        assert_eq!(rest, "59/15");
        let (hour, twelve) = parts[1].split_once(',').unwrap();
        assert!(hour.parse::<u32>().unwrap() <= 3);
        assert_eq!(twelve, "12");
        assert!((1..=28).contains(&parts[2].parse::<u32>().unwrap()));
        assert_eq!(parts[3], "*");
        assert!((1..=5).contains(&parts[4].parse::<u32>().unwrap()));
    }

    #[test]
    fn wrong_forms_name_the_field() {
        for (expression, field) in [
            ("H H(5-1) * * *", "hour"),
            ("H(0-60) * * * *", "minute"),
            ("H H * * H(0-7)", "day of week"),
            ("H/0 * * * *", "minute"),
            ("H H(1) * * *", "hour"),
        ] {
            let error = resolve(expression, "a/b").unwrap_err();
            assert!(error.starts_with(field), "{expression}: {error}");
        }
    }
}
