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
    let mut buffer = Vec::with_capacity(1 + data.len());
    buffer.push(CODEC_RAW);
    buffer.extend_from_slice(data);
    let mut scratch = Vec::new();
    encode_in_place_with(compressor, &mut scratch, &mut buffer, 0);
    buffer
}

/// Encodes blobs with one zstd context and one scratch buffer, both kept from blob to blob (one
/// encoder per thread).
pub struct Encoder {
    compressor: zstd::bulk::Compressor<'static>,
    scratch: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder {
            compressor: new_compressor(),
            scratch: Vec::new(),
        }
    }
}

impl Encoder {
    /// Encodes in place, as [`encode`]: `buffer` holds `front` bytes of room, one byte for the
    /// codec, then the data; afterwards it holds the room, the codec byte and the body. Nothing is
    /// allocated: the body is the data itself, or its compressed form copied over it.
    pub fn encode_in_place(&mut self, buffer: &mut Vec<u8>, front: usize) {
        encode_in_place_with(&mut self.compressor, &mut self.scratch, buffer, front);
    }
}

fn encode_in_place_with(
    compressor: &mut zstd::bulk::Compressor<'static>,
    scratch: &mut Vec<u8>,
    buffer: &mut Vec<u8>,
    front: usize,
) {
    let data = &buffer[front + 1..];
    let compressed = if data.len() > 2 * PROBE_BYTES
        && !probe_compresses(&data[..PROBE_BYTES], compressor, scratch)
    {
        None
    } else {
        // Into the spare capacity of a kept buffer: nothing to zero, nothing to allocate.
        scratch.clear();
        scratch.reserve_exact(zstd::zstd_safe::compress_bound(data.len()));
        match compressor.compress_to_buffer(data, scratch) {
            Ok(written) if written < data.len() => Some(written),
            _ => None,
        }
    };
    match compressed {
        Some(written) => {
            buffer[front] = CODEC_ZSTD;
            buffer.truncate(front + 1);
            buffer.extend_from_slice(&scratch[..written]);
        }
        None => buffer[front] = CODEC_RAW,
    }
}

/// Whether a sample of the data shrinks by at least a few percent.
fn probe_compresses(
    sample: &[u8],
    compressor: &mut zstd::bulk::Compressor<'static>,
    scratch: &mut Vec<u8>,
) -> bool {
    scratch.clear();
    scratch.reserve_exact(zstd::zstd_safe::compress_bound(sample.len()));
    match compressor.compress_to_buffer(sample, scratch) {
        Ok(compressed) => compressed < sample.len() - sample.len() / 32,
        Err(_) => false,
    }
}

/// Decodes blobs with one zstd context and one output buffer, both kept from blob to blob (one
/// decoder per thread).
#[derive(Default)]
pub struct Decoder {
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    buffer: Vec<u8>,
}

/// A decoder's buffer bigger than this is let go after use, so that one huge blob does not keep
/// its memory for the rest of a restore.
const KEEP_BUFFER_BYTES: usize = 8 * 1024 * 1024;

impl Decoder {
    /// Lets go of the output buffer when it holds more than `keep` bytes: a decoder kept per
    /// thread of a large pool would otherwise hold a large blob's worth each.
    pub fn shed(&mut self, keep: usize) {
        if self.buffer.capacity() > keep {
            self.buffer = Vec::new();
        }
    }

    /// Decodes codec byte + body into the plaintext, which must be `expected_len` bytes long: the
    /// body itself when stored raw (no copy), else this decoder's buffer.
    pub fn decode<'a>(
        &'a mut self,
        encoded: &'a [u8],
        expected_len: usize,
    ) -> Result<&'a [u8], CompressError> {
        let (&codec, body) = encoded.split_first().ok_or(CompressError::Empty)?;
        let data: &[u8] = match codec {
            CODEC_RAW => body,
            CODEC_ZSTD => {
                if self.buffer.capacity() > KEEP_BUFFER_BYTES.max(expected_len) {
                    self.buffer = Vec::new();
                }
                self.buffer.clear();
                self.buffer.reserve_exact(expected_len);
                let decompressor = match &mut self.decompressor {
                    Some(decompressor) => decompressor,
                    empty => {
                        empty.insert(zstd::bulk::Decompressor::new().map_err(CompressError::Zstd)?)
                    }
                };
                decompressor
                    .decompress_to_buffer(body, &mut self.buffer)
                    .map_err(CompressError::Zstd)?;
                &self.buffer
            }
            other => return Err(CompressError::UnknownCodec(other)),
        };
        check_length(data.len(), expected_len)?;
        Ok(data)
    }
}

/// A decoded blob must have the length the index gives it.
fn check_length(actual: usize, expected: usize) -> Result<(), CompressError> {
    if actual == expected {
        Ok(())
    } else {
        Err(CompressError::WrongLength { expected, actual })
    }
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
    check_length(data.len(), expected_len)?;
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
    fn encoding_in_place_matches_encoding_a_copy() {
        let text = "a line of a log file that repeats\n"
            .repeat(2000)
            .into_bytes();
        let noise: Vec<u8> = (0..100_000).map(|_| rand::random::<u8>()).collect();
        let mut encoder = Encoder::default();
        for data in [&text[..], &noise[..], b"abc"] {
            let mut buffer = vec![7u8; 5];
            buffer.extend_from_slice(data);
            encoder.encode_in_place(&mut buffer, 4);
            assert_eq!(&buffer[..4], &[7u8; 4]);
            assert_eq!(buffer[4..], encode(data, &mut new_compressor()));
            assert_eq!(decode(buffer[4..].to_vec(), data.len()).unwrap(), data);
        }
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
