//! The 64 hex digits of a 32-byte id, without allocating: every tree and index object holds
//! thousands of ids, and reading them had been a tenth of a quiet night's CPU time.

/// What each byte stands for as a hex digit (either case); `INVALID` for any other byte.
const DIGIT_VALUES: [u8; 256] = {
    let mut values = [INVALID; 256];
    let mut digit = 0;
    while digit < 10 {
        values[b'0' as usize + digit] = digit as u8;
        digit += 1;
    }
    let mut letter = 0;
    while letter < 6 {
        values[b'a' as usize + letter] = 10 + letter as u8;
        values[b'A' as usize + letter] = 10 + letter as u8;
        letter += 1;
    }
    values
};

const INVALID: u8 = 0xff;

const LOWER_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The 32 bytes that `text` spells in 64 hex digits (either case), or `None`.
pub fn decode(text: &[u8]) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    let mut invalid = 0u8;
    for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (
            DIGIT_VALUES[pair[0] as usize],
            DIGIT_VALUES[pair[1] as usize],
        );
        // Only INVALID has its high bits set: one test after the loop checks every digit.
        invalid |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    (invalid & 0xf0 == 0).then_some(bytes)
}

/// `bytes` in 64 lowercase hex digits.
pub fn encode(bytes: &[u8; 32]) -> [u8; 64] {
    let mut text = [0u8; 64];
    for (pair, byte) in text.chunks_exact_mut(2).zip(bytes) {
        pair[0] = LOWER_DIGITS[(byte >> 4) as usize];
        pair[1] = LOWER_DIGITS[(byte & 0x0f) as usize];
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_hex_crate_on_every_byte_value() {
        let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37 + 11) as u8);
        let text = encode(&bytes);
        assert_eq!(text.as_slice(), hex::encode(bytes).as_bytes());
        assert_eq!(decode(&text), Some(bytes));
        assert_eq!(decode(hex::encode_upper(bytes).as_bytes()), Some(bytes));
        for byte in 0..=255u8 {
            let mut text = [b'0'; 64];
            text[17] = byte;
            let ours = decode(&text);
            let theirs = hex::decode(text).ok();
            assert_eq!(ours.map(|b| b.to_vec()), theirs, "digit {byte:#04x}");
        }
    }

    #[test]
    fn refuses_other_lengths() {
        assert_eq!(decode(b""), None);
        assert_eq!(decode(&[b'a'; 63]), None);
        assert_eq!(decode(&[b'a'; 65]), None);
        assert_eq!(decode(&[b'a'; 66]), None);
        assert_eq!(decode(&[b'a'; 62]), None);
    }
}
