//! Which files of a volume a drill restores: every file, or a share chosen by the hash of its
//! path, so that successive drills with `--sample-round 0, 1, 2, …` cover every file (see
//! [`neverwiped_contract::drill::in_sample`]).

use crate::filter::{Decision, PathChoice, PathFilter};
use neverwiped_contract::drill::{in_sample, DrillSample};
use sha2::{Digest, Sha256};

/// The sample bucket (0 to 99) of the entry at `path` in the snapshot (absolute, as `/data/a`):
/// the first 8 bytes of the SHA-256 of the path's bytes, read as a big-endian `u64`, modulo
/// 100. The one rule of the sample: a path keeps its bucket from one drill to the next, whatever
/// else changed in the snapshot.
pub fn bucket(path: &[u8]) -> u8 {
    let digest = Sha256::digest(path);
    let first: [u8; 8] = digest[..8].try_into().expect("a SHA-256 has 32 bytes");
    (u64::from_be_bytes(first) % 100) as u8
}

/// Whether the entry at `path` is in the drill's `sample`.
pub fn sampled(sample: DrillSample, path: &[u8]) -> bool {
    in_sample(sample, bucket(path))
}

/// The filter of a drill of the volume at `volume` (a snapshot path such as `/data/orders`): its
/// directories, and those of its files and other entries that are in `sample`; the folders above
/// it only on the way.
pub fn volume_filter(volume: &str, sample: DrillSample) -> PathFilter {
    let volume = volume.trim_end_matches('/').as_bytes().to_vec();
    PathFilter::Chosen(PathChoice::new(move |path, is_dir| {
        let path = match path {
            [rest @ .., b'/'] if !rest.is_empty() => rest,
            path => path,
        };
        let inside = path == volume.as_slice()
            || (path.starts_with(&volume) && path.get(volume.len()) == Some(&b'/'));
        if inside {
            let selected = is_dir || sampled(sample, path);
            return Decision {
                selected,
                descend: is_dir,
            };
        }
        let above =
            path == b"/" || (volume.starts_with(path) && volume.get(path.len()) == Some(&b'/'));
        Decision {
            selected: false,
            descend: above && is_dir,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_is_the_first_eight_bytes_of_the_paths_sha256_modulo_100() {
        // SHA-256("/data/a") starts with these 8 bytes.
        let digest = Sha256::digest(b"/data/a");
        let expected = u64::from_be_bytes(digest[..8].try_into().unwrap()) % 100;
        assert_eq!(u64::from(bucket(b"/data/a")), expected);
        assert_eq!(bucket(b"/data/a"), bucket(b"/data/a"));
    }

    #[test]
    fn rounds_of_a_quarter_take_every_file_once() {
        let paths: Vec<String> = (0..400).map(|i| format!("/v/f{i}")).collect();
        let mut taken = vec![0; paths.len()];
        for round in 0..4 {
            let sample = DrillSample::Percent { percent: 25, round };
            let filter = volume_filter("/v", sample);
            let chosen = paths
                .iter()
                .enumerate()
                .filter(|(_, p)| filter.decide(p.as_bytes(), false).selected);
            let mut count = 0;
            for (i, _) in chosen {
                taken[i] += 1;
                count += 1;
            }
            assert!((60..=140).contains(&count), "round {round}: {count}");
        }
        assert!(taken.iter().all(|&n| n == 1));
    }

    #[test]
    fn only_the_volume_is_walked_and_its_folders_are_all_restored() {
        let filter = volume_filter("/data/orders/", DrillSample::All);
        let decide = |path: &str, dir| filter.decide(path.as_bytes(), dir);
        assert_eq!(
            decide("/data", true),
            Decision {
                selected: false,
                descend: true
            }
        );
        assert!(decide("/data/orders", true).selected);
        assert!(decide("/data/orders/x/y", true).descend);
        assert!(decide("/data/orders/x/y.txt", false).selected);
        assert!(!decide("/data/ordersx", true).descend);
        assert!(!decide("/data/ordersx/a", false).selected);
        assert!(!decide("/databases", true).descend);
    }
}
