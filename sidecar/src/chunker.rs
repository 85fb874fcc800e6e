//! Content-defined chunking: FastCDC (the 2020 algorithm) with the repository's secret seed.
//!
//! The cut points depend only on the content, the parameters and the seed, so an insertion in the
//! middle of a file changes only the chunks around it. They are part of the repository format:
//! the `fastcdc` crate is pinned and golden tests guard them.

use fastcdc::v2020::{cut_gear, get_gear_with_seed, select_masks, Normalization};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::{ErrorKind, Read};

/// Chunk size bounds, powers of two, recorded in the repository's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChunkerParams {
    pub min_bytes: u32,
    pub avg_bytes: u32,
    pub max_bytes: u32,
}

impl Default for ChunkerParams {
    /// 256 KiB / 1 MiB / 4 MiB: few enough chunks to keep the index small, small enough that a
    /// change costs about a megabyte.
    fn default() -> ChunkerParams {
        ChunkerParams {
            min_bytes: 256 * 1024,
            avg_bytes: 1024 * 1024,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

impl ChunkerParams {
    /// Checks the bounds FastCDC v2020 accepts and that each is a power of two.
    pub fn validate(&self) -> Result<(), String> {
        let ChunkerParams {
            min_bytes,
            avg_bytes,
            max_bytes,
        } = *self;
        for (name, value) in [("min", min_bytes), ("avg", avg_bytes), ("max", max_bytes)] {
            if !value.is_power_of_two() {
                return Err(format!("chunker {name} size {value} is not a power of two"));
            }
        }
        let in_range = (fastcdc::v2020::MINIMUM_MIN..=fastcdc::v2020::MINIMUM_MAX)
            .contains(&(min_bytes as usize))
            && (fastcdc::v2020::AVERAGE_MIN..=fastcdc::v2020::AVERAGE_MAX)
                .contains(&(avg_bytes as usize))
            && (fastcdc::v2020::MAXIMUM_MIN..=fastcdc::v2020::MAXIMUM_MAX)
                .contains(&(max_bytes as usize));
        if !in_range || min_bytes >= avg_bytes || avg_bytes >= max_bytes {
            return Err(format!(
                "chunker sizes {min_bytes}/{avg_bytes}/{max_bytes} are out of range"
            ));
        }
        Ok(())
    }
}

/// The cutting rules of one repository: parameters, masks and seeded gear tables.
#[derive(Debug, Clone)]
pub struct Chunker {
    params: ChunkerParams,
    mask_s: u64,
    mask_l: u64,
    gear: Cow<'static, [u64]>,
    gear_ls: Cow<'static, [u64]>,
}

impl Chunker {
    pub fn new(params: ChunkerParams, seed: u64) -> Chunker {
        let (mask_s, mask_l) = select_masks(params.avg_bytes as usize, Normalization::Level1);
        let (gear, gear_ls) = get_gear_with_seed(seed);
        Chunker {
            params,
            mask_s,
            mask_l,
            gear,
            gear_ls,
        }
    }

    pub fn params(&self) -> ChunkerParams {
        self.params
    }

    /// The length of the first chunk of `data`; `data` holds at least `max_bytes` or is the end of
    /// the stream.
    pub fn cut(&self, data: &[u8]) -> usize {
        let (_hash, length) = cut_gear(
            data,
            self.params.min_bytes as usize,
            self.params.avg_bytes as usize,
            self.params.max_bytes as usize,
            self.mask_s,
            self.mask_l,
            self.mask_s << 1,
            self.mask_l << 1,
            &self.gear,
            &self.gear_ls,
        );
        length
    }

    /// Splits a stream into chunks, calling `each_chunk` with every one in order.
    pub fn chunk_stream<R: Read, E: From<std::io::Error>>(
        &self,
        source: R,
        each_chunk: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        self.chunk_stream_with(&mut Vec::new(), source, each_chunk)
    }

    /// [`Chunker::chunk_stream`] with a buffer the caller keeps from stream to stream: a backup of
    /// many small files then allocates (and zeroes) its 8 MiB buffer once, not once per file.
    pub fn chunk_stream_with<R: Read, E: From<std::io::Error>>(
        &self,
        buffer: &mut Vec<u8>,
        source: R,
        each_chunk: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let capacity = 2 * self.params.max_bytes as usize;
        if buffer.len() != capacity {
            buffer.resize(capacity, 0);
        }
        ChunkStream {
            chunker: self,
            source,
            buffer,
            start: 0,
            end: 0,
            eof: false,
        }
        .for_each(each_chunk)
    }
}

/// A stream being cut: a buffer twice the maximum chunk so that moving the unread tail to the
/// front happens at most once per maximum chunk of input.
struct ChunkStream<'a, R> {
    chunker: &'a Chunker,
    source: R,
    buffer: &'a mut Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl<'a, R: Read> ChunkStream<'a, R> {
    fn fill(&mut self) -> std::io::Result<()> {
        let max = self.chunker.params.max_bytes as usize;
        if self.eof || self.end - self.start >= max {
            return Ok(());
        }
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while !self.eof && self.end < self.buffer.len() {
            match self.source.read(&mut self.buffer[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(read) => self.end += read,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn for_each<E: From<std::io::Error>>(
        mut self,
        mut each_chunk: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut total = 0u64;
        loop {
            self.fill()?;
            if self.start == self.end {
                return Ok(total);
            }
            let length = self.chunker.cut(&self.buffer[self.start..self.end]);
            each_chunk(&self.buffer[self.start..self.start + length])?;
            self.start += length;
            total += length as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random byte stream (xorshift), the same on every machine.
    fn pseudo_random(len: usize, mut state: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    fn cut_lengths(chunker: &Chunker, data: &[u8]) -> Vec<usize> {
        let mut lengths = Vec::new();
        chunker
            .chunk_stream::<_, std::io::Error>(data, |chunk| {
                lengths.push(chunk.len());
                Ok(())
            })
            .unwrap();
        lengths
    }

    #[test]
    fn golden_cut_points_for_a_fixed_input_and_seed() {
        // If this fails, the chunker changed: every existing repository would stop deduplicating.
        let data = pseudo_random(12 * 1024 * 1024, 0x5eed);
        let chunker = Chunker::new(ChunkerParams::default(), 0x0123_4567_89ab_cdef);
        let lengths = cut_lengths(&chunker, &data);
        assert_eq!(lengths.iter().sum::<usize>(), data.len());
        assert_eq!(
            lengths,
            [1455032, 1099793, 2228284, 1108789, 1886737, 401263, 1354194, 2227111, 821709],
            "golden cut points"
        );
    }

    #[test]
    fn the_seed_changes_the_cut_points() {
        let data = pseudo_random(8 * 1024 * 1024, 42);
        let a = cut_lengths(&Chunker::new(ChunkerParams::default(), 1), &data);
        let b = cut_lengths(&Chunker::new(ChunkerParams::default(), 2), &data);
        assert_ne!(a, b);
    }

    #[test]
    fn an_insertion_changes_only_nearby_chunks() {
        let data = pseudo_random(16 * 1024 * 1024, 7);
        let chunker = Chunker::new(ChunkerParams::default(), 99);
        let mut changed = data.clone();
        changed.splice(
            8 * 1024 * 1024..8 * 1024 * 1024,
            b"inserted bytes".iter().copied(),
        );
        let collect = |input: &[u8]| {
            let mut chunks = std::collections::HashSet::new();
            chunker
                .chunk_stream::<_, std::io::Error>(input, |c| {
                    chunks.insert(blake3::hash(c));
                    Ok(())
                })
                .unwrap();
            chunks
        };
        let before = collect(&data);
        let after = collect(&changed);
        let new_chunks = after.difference(&before).count();
        assert!(new_chunks <= 2, "{new_chunks} new chunks for one insertion");
    }

    #[test]
    fn chunk_sizes_stay_within_bounds_and_small_inputs_are_one_chunk() {
        let params = ChunkerParams::default();
        let data = pseudo_random(20 * 1024 * 1024, 3);
        let lengths = cut_lengths(&Chunker::new(params, 5), &data);
        let (last, rest) = lengths.split_last().unwrap();
        assert!(*last <= params.max_bytes as usize);
        for length in rest {
            assert!((params.min_bytes as usize..=params.max_bytes as usize).contains(length));
        }
        assert_eq!(cut_lengths(&Chunker::new(params, 5), b"tiny"), vec![4]);
        assert!(cut_lengths(&Chunker::new(params, 5), b"").is_empty());
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        assert!(ChunkerParams::default().validate().is_ok());
        let odd = ChunkerParams {
            min_bytes: 300_000,
            ..ChunkerParams::default()
        };
        assert!(odd.validate().unwrap_err().contains("power of two"));
        let inverted = ChunkerParams {
            min_bytes: 1 << 20,
            avg_bytes: 1 << 19,
            max_bytes: 1 << 22,
        };
        assert!(inverted.validate().is_err());
    }
}
