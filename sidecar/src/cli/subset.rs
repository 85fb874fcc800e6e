//! `check --read-data-subset`: restic's three ways to name the packs a check reads back.

use neverwiped::maintenance::check::ReadData;

/// The most groups `n/t` may split the packs into: the rule looks at one byte of the pack id.
const MAX_GROUPS: u32 = 256;

/// Parses `n/t` (group n of t), `P%` (a share, at random) or `SIZE` (`500M`: random packs up to
/// that many bytes; suffixes K, M, G, T are powers of 1024).
pub fn parse_read_data_subset(text: &str) -> Result<ReadData, String> {
    let trimmed = text.trim();
    if let Some((n, of)) = trimmed.split_once('/') {
        return match (n.trim().parse::<u32>(), of.trim().parse::<u32>()) {
            (Ok(n), Ok(of)) if (1..=MAX_GROUPS).contains(&of) && (1..=of).contains(&n) => {
                Ok(ReadData::Group { n, of })
            }
            _ => Err(format!(
                "{text:?} is not a group n/t with 1 ≤ n ≤ t ≤ {MAX_GROUPS}, such as 1/5"
            )),
        };
    }
    if trimmed.ends_with('%') {
        return parse_percent(text).map(ReadData::Subset);
    }
    match parse_size(trimmed) {
        Some(0) => Err(format!("{text:?} would read no pack: give a size above 0")),
        Some(bytes) => Ok(ReadData::Bytes(bytes)),
        None => Err(format!(
            "{text:?} is not a subset: give a group such as 1/5, a share such as 10%, or a size \
             with its unit such as 500M or 2G"
        )),
    }
}

/// `500M`, `2G`: a number and a unit K, M, G or T (powers of 1024); a bare number is refused, as
/// it could be meant as a share.
fn parse_size(text: &str) -> Option<u64> {
    let (i, unit) = text.char_indices().last()?;
    let factor: u64 = match unit.to_ascii_uppercase() {
        'K' => 1 << 10,
        'M' => 1 << 20,
        'G' => 1 << 30,
        'T' => 1 << 40,
        _ => return None,
    };
    text[..i].trim().parse::<u64>().ok()?.checked_mul(factor)
}

fn parse_percent(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%');
    match number.parse::<f64>() {
        Ok(value) if value > 0.0 && value <= 100.0 => Ok(value),
        Ok(0.0) => Err(format!(
            "{text:?} would read no pack: give a share above 0% (e.g. 10%), or leave --read-data-subset out to check the structure only"
        )),
        _ => Err(format!(
            "{text:?} is not a share of the packs above 0% and at most 100%, such as 10%"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_shares_and_sizes_are_told_apart_and_nonsense_is_refused() {
        assert_eq!(
            parse_read_data_subset("2/5"),
            Ok(ReadData::Group { n: 2, of: 5 })
        );
        assert_eq!(parse_read_data_subset("10%"), Ok(ReadData::Subset(10.0)));
        assert_eq!(
            parse_read_data_subset("500M"),
            Ok(ReadData::Bytes(500 << 20))
        );
        for bad in ["0/5", "6/5", "1/257", "1/0", "0%", "101%", "10", "5X", "0M"] {
            assert!(parse_read_data_subset(bad).is_err(), "{bad}");
        }
    }
}
