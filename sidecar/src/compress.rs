//! Compression of blob plaintext: zstd when it saves space, raw otherwise.
//!
//! The first byte of every blob's plaintext (inside the seal) names the codec, so a reader never
//! guesses: `0` raw, `1` zstd frame.

use thiserror::Error;

const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;

/// zstd level 3: the default of the zstd tool, a good balance for backup data.
pub const ZSTD_LEVEL: i32 = 3;

/// Bytes sampled to decide quickly that a chunk will not compress (media, archives, ciphertext).
const PROBE_BYTES: usize = 16 * 1024;

#[derive(Debug, Error)]
pub enum CompressError {
    #[error("blob is empty: no codec byte")]
    Empty,
    #[error("unknown codec {0} in blob")]
    UnknownCodec(u8),
    #[error("zstd frame is corrupt: {0}")]
    Zstd(std::io::Error),
    #[error("blob decompresses to {actual} bytes, the index says {expected}")]
    WrongLength { expected: usize, actual: usize },
}

/// Encodes `data` as codec byte + body, compressing only when that makes it smaller.
pub fn encode(data: &[u8], compressor: &mut zstd::bulk::Compressor<'static>) -> Vec<u8> {
    if data.len() > 2 * PROBE_BYTES && !probe_compresses(&data[..PROBE_BYTES], compressor) {
        return raw(data);
    }
    let mut out = vec![0u8; 1 + zstd::zstd_safe::compress_bound(data.len())];
    out[0] = CODEC_ZSTD;
    match compressor.compress_to_buffer(data, &mut out[1..]) {
        Ok(written) if written < data.len() => {
            out.truncate(1 + written);
            out
        }
        _ => raw(data),
    }
}

/// Whether a sample of the data shrinks by at least a few percent.
fn probe_compresses(sample: &[u8], compressor: &mut zstd::bulk::Compressor<'static>) -> bool {
    match compressor.compress(sample) {
        Ok(compressed) => compressed.len() < sample.len() - sample.len() / 32,
        Err(_) => false,
    }
}

fn raw(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(CODEC_RAW);
    out.extend_from_slice(data);
    out
}

/// Decodes what [`encode`] produced; `expected_len` (from the index) guards the allocation.
pub fn decode(encoded: Vec<u8>, expected_len: usize) -> Result<Vec<u8>, CompressError> {
    let (&codec, body) = encoded.split_first().ok_or(CompressError::Empty)?;
    let data = match codec {
        CODEC_RAW => {
            let mut encoded = encoded;
            encoded.remove(0);
            encoded
        }
        CODEC_ZSTD => zstd::bulk::decompress(body, expected_len).map_err(CompressError::Zstd)?,
        other => return Err(CompressError::UnknownCodec(other)),
    };
    if data.len() != expected_len {
        return Err(CompressError::WrongLength {
            expected: expected_len,
            actual: data.len(),
        });
    }
    Ok(data)
}

/// Decodes without knowing the length in advance (metadata objects), bounded by `limit`.
pub fn decode_unsized(encoded: &[u8], limit: usize) -> Result<Vec<u8>, CompressError> {
    let (&codec, body) = encoded.split_first().ok_or(CompressError::Empty)?;
    match codec {
        CODEC_RAW => Ok(body.to_vec()),
        CODEC_ZSTD => {
            let mut decoder = zstd::stream::Decoder::new(body).map_err(CompressError::Zstd)?;
            let mut out = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut decoder, limit as u64 + 1),
                &mut out,
            )
            .map_err(CompressError::Zstd)?;
            if out.len() > limit {
                return Err(CompressError::WrongLength {
                    expected: limit,
                    actual: out.len(),
                });
            }
            Ok(out)
        }
        other => Err(CompressError::UnknownCodec(other)),
    }
}

/// A compressor for one worker thread.
pub fn new_compressor() -> zstd::bulk::Compressor<'static> {
    zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("zstd accepts level 3")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_compressed_and_round_trips() {
        let text = "a line of a log file that repeats\n"
            .repeat(2000)
            .into_bytes();
        let encoded = encode(&text, &mut new_compressor());
        assert_eq!(encoded[0], CODEC_ZSTD);
        assert!(encoded.len() < text.len() / 10);
        assert_eq!(decode(encoded, text.len()).unwrap(), text);
    }

    #[test]
    fn random_data_is_stored_raw() {
        let data: Vec<u8> = (0..100_000).map(|_| rand::random::<u8>()).collect();
        let encoded = encode(&data, &mut new_compressor());
        assert_eq!(encoded[0], CODEC_RAW);
        assert_eq!(encoded.len(), data.len() + 1);
        assert_eq!(decode(encoded, data.len()).unwrap(), data);
    }

    #[test]
    fn a_wrong_length_or_codec_is_an_error() {
        let encoded = encode(b"abc", &mut new_compressor());
        assert!(matches!(
            decode(encoded, 4),
            Err(CompressError::WrongLength { .. })
        ));
        assert!(matches!(
            decode(vec![9, 1, 2], 2),
            Err(CompressError::UnknownCodec(9))
        ));
        assert!(matches!(decode(vec![], 0), Err(CompressError::Empty)));
    }
}
