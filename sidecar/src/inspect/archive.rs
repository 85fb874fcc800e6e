//! A folder of a snapshot as a tar archive, as restic's `dump` writes it: every entry below the
//! folder in restic's order, named by its path from the snapshot's root without the leading
//! `/`; files with their bytes (each hard link too), folders, symbolic links, and FIFOs and
//! devices as empty files; mode bits, numeric owners and times rounded to the second. Headers
//! are POSIX ustar, with a PAX header before an entry whose name, link target, owner, size or
//! time does not fit ustar (as Go's `archive/tar`, which restic uses).

use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::ids::BlobId;
use crate::inspect::walk::{self, Descend};
use crate::repository::IndexedRepository;
use std::io::Write;

const BLOCK: usize = 512;
/// The largest value of an 8-byte octal field (7 digits).
const MAX_OCTAL_8: u64 = 0o7777777;
/// The largest value of a 12-byte octal field (11 digits).
const MAX_OCTAL_12: u64 = 0o77777777777;

/// What an archive held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveCount {
    pub entries: u64,
    /// Bytes of file content written.
    pub content_bytes: u64,
}

/// Writes the entries below `folder` (`/a/b`; empty for the snapshot's root) of the tree `root`
/// as a tar archive to `out`, each file's blobs authenticated as they are read.
pub async fn write_tar(
    repo: &IndexedRepository,
    root: &BlobId,
    folder: &[u8],
    out: &mut dyn Write,
) -> Result<ArchiveCount> {
    let entries = entries_below(repo, root, folder).await?;
    let mut count = ArchiveCount::default();
    for (path, node) in &entries {
        let name = &path[1..];
        write_io(out, &tar_header(name, node), name)?;
        count.entries += 1;
        let NodeKind::File { size, content } = &node.kind else {
            continue;
        };
        let shown = String::from_utf8_lossy(path).into_owned();
        let mut written = 0u64;
        for blob in content {
            let bytes = repo.read_blob(blob, &shown).await?;
            written += bytes.len() as u64;
            if written > *size {
                return Err(damaged(&shown, *size));
            }
            write_io(out, &bytes, name)?;
        }
        if written != *size {
            return Err(damaged(&shown, *size));
        }
        let padding = (BLOCK - (*size as usize % BLOCK)) % BLOCK;
        write_io(out, &vec![0; padding], name)?;
        count.content_bytes += written;
    }
    // The end: two empty blocks, as Go's writer closes an archive.
    write_io(out, &[0; 2 * BLOCK], b"the end of the archive")?;
    out.flush().map_err(|source| Error::Io {
        what: "cannot write the archive".into(),
        source,
    })?;
    Ok(count)
}

/// A file whose blobs hold fewer or more bytes than its entry says (tar and zip alike).
pub(super) fn damaged(path: &str, size: u64) -> Error {
    Error::Corrupt {
        what: format!("the file {path} of the snapshot"),
        reason: format!("its blobs do not hold the {size} bytes its entry says"),
    }
}

/// Writes `bytes` of the entry `name` to the archive, saying which entry a failure hit.
pub(super) fn write_io(out: &mut dyn Write, bytes: &[u8], name: &[u8]) -> Result<()> {
    out.write_all(bytes).map_err(|source| Error::Io {
        what: format!("cannot write {} to the archive", crate::text::quoted(name)),
        source,
    })
}

/// Every entry below `folder`, with its path from the snapshot's root, in restic's order.
pub async fn entries_below(
    repo: &IndexedRepository,
    root: &BlobId,
    folder: &[u8],
) -> Result<Vec<(Vec<u8>, Node)>> {
    let mut entries = Vec::new();
    walk::walk::<Error>(repo, root, |path, node| {
        let below = crate::selection::is_at_or_below(path, folder) && path != folder;
        let on_the_way = folder.starts_with(path) && folder.get(path.len()) == Some(&b'/');
        if below {
            entries.push((path.to_vec(), node.clone()));
        }
        Ok(match below || on_the_way || path == folder {
            true => Descend::Into,
            false => Descend::Past,
        })
    })
    .await?;
    Ok(entries)
}

/// The header block(s) of one entry: a PAX extended header first when a value does not fit
/// ustar, then the ustar header. `name` is the path without its leading `/`.
pub fn tar_header(name: &[u8], node: &Node) -> Vec<u8> {
    let meta = &node.meta;
    let mut name = name.to_vec();
    let (typeflag, size, link): (u8, u64, &[u8]) = match &node.kind {
        NodeKind::File { size, .. } => (b'0', *size, b""),
        NodeKind::Dir { .. } => {
            name.push(b'/');
            (b'5', 0, b"")
        }
        NodeKind::Symlink { target } => (b'2', 0, target),
        // restic gives these no type of their own: an empty regular file.
        NodeKind::Fifo | NodeKind::CharDevice { .. } | NodeKind::BlockDevice { .. } => {
            (b'0', 0, b"")
        }
    };
    // Go rounds to the nearest second when it writes ustar times.
    let mtime = meta.mtime.secs + i64::from(meta.mtime.nanos >= 500_000_000);
    let mut pax: Vec<(&str, Vec<u8>)> = Vec::new();
    if name.len() > 100 || !name.is_ascii() {
        pax.push(("path", name.clone()));
    }
    if link.len() > 100 || !link.is_ascii() {
        pax.push(("linkpath", link.to_vec()));
    }
    for (key, value) in [("uid", meta.uid), ("gid", meta.gid)] {
        if u64::from(value) > MAX_OCTAL_8 {
            pax.push((key, value.to_string().into_bytes()));
        }
    }
    if size > MAX_OCTAL_12 {
        pax.push(("size", size.to_string().into_bytes()));
    }
    if mtime < 0 || mtime as u64 > MAX_OCTAL_12 {
        pax.push(("mtime", mtime.to_string().into_bytes()));
    }
    let mut blocks = Vec::new();
    if !pax.is_empty() {
        let records = pax_records(&pax);
        let fields = UstarFields {
            name: b"PaxHeaders.0",
            mode: 0o644,
            uid: 0,
            gid: 0,
            size: records.len() as u64,
            mtime: 0,
            typeflag: b'x',
            link: b"",
        };
        blocks.extend(ustar_block(&fields));
        blocks.extend(&records);
        blocks.resize(blocks.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    let fields = UstarFields {
        name: &name,
        mode: meta.mode & 0o7777,
        uid: meta.uid,
        gid: meta.gid,
        size,
        mtime,
        typeflag,
        link,
    };
    blocks.extend(ustar_block(&fields));
    blocks
}

/// PAX records, `LENGTH key=value\n`, the length counting itself.
fn pax_records(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut records = Vec::new();
    for (key, value) in pairs {
        let rest = key.len() + value.len() + 3; // ' ', '=' and '\n'
        let mut length = rest + 1;
        while length != rest + length.to_string().len() {
            length = rest + length.to_string().len();
        }
        records.extend(format!("{length} {key}=").into_bytes());
        records.extend(value);
        records.push(b'\n');
    }
    records
}

struct UstarFields<'a> {
    name: &'a [u8],
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: i64,
    typeflag: u8,
    link: &'a [u8],
}

/// One ustar header block; a value that does not fit was given in the PAX header before, and
/// its field holds what fits (zero, or the name's first 100 bytes).
fn ustar_block(fields: &UstarFields) -> [u8; BLOCK] {
    let mut block = [0u8; BLOCK];
    let clipped = |bytes: &[u8], width: usize| bytes[..bytes.len().min(width)].to_vec();
    block[..fields.name.len().min(100)].copy_from_slice(&clipped(fields.name, 100));
    octal(&mut block[100..108], u64::from(fields.mode), MAX_OCTAL_8);
    octal(&mut block[108..116], u64::from(fields.uid), MAX_OCTAL_8);
    octal(&mut block[116..124], u64::from(fields.gid), MAX_OCTAL_8);
    octal(&mut block[124..136], fields.size, MAX_OCTAL_12);
    octal(
        &mut block[136..148],
        u64::try_from(fields.mtime).unwrap_or(0),
        MAX_OCTAL_12,
    );
    block[156] = fields.typeflag;
    block[157..157 + fields.link.len().min(100)].copy_from_slice(&clipped(fields.link, 100));
    block[257..263].copy_from_slice(b"ustar\0");
    block[263..265].copy_from_slice(b"00");
    octal(&mut block[329..337], 0, MAX_OCTAL_8);
    octal(&mut block[337..345], 0, MAX_OCTAL_8);
    // The checksum counts its own field as spaces.
    block[148..156].copy_from_slice(b"        ");
    let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
    let digits = format!("{sum:06o}\0 ");
    block[148..156].copy_from_slice(digits.as_bytes());
    block
}

/// `value` as zero-padded octal digits and a NUL filling `field`; 0 when above `max`.
fn octal(field: &mut [u8], value: u64, max: u64) {
    let value = if value > max { 0 } else { value };
    let digits = format!("{value:0width$o}\0", width = field.len() - 1);
    field.copy_from_slice(digits.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tree::{Metadata, Timestamp};

    fn node(kind: NodeKind, mode: u32, uid: u32) -> Node {
        Node {
            name: b"x".to_vec(),
            kind,
            meta: Metadata {
                mode,
                uid,
                gid: 5678,
                mtime: Timestamp {
                    secs: 1_700_000_000,
                    nanos: 500_000_000,
                },
                ctime: Timestamp { secs: 0, nanos: 0 },
                inode: 1,
                device: 1,
                links: 1,
            },
        }
    }

    #[test]
    fn a_short_ascii_entry_is_one_ustar_block_with_a_valid_checksum() {
        let file = node(
            NodeKind::File {
                size: 6,
                content: Vec::new(),
            },
            0o4755,
            1234,
        );
        let block = tar_header(b"data/a.txt", &file);
        assert_eq!(block.len(), BLOCK);
        assert_eq!(&block[..11], b"data/a.txt\0");
        assert_eq!(&block[100..108], b"0004755\0");
        assert_eq!(&block[108..116], b"0002322\0");
        assert_eq!(&block[124..136], b"00000000006\0");
        // Rounded up from half a second.
        assert_eq!(
            &block[136..148],
            format!("{:011o}\0", 1_700_000_001).as_bytes()
        );
        assert_eq!(block[156], b'0');
        let mut spaced = block.clone();
        spaced[148..156].copy_from_slice(b"        ");
        let sum: u32 = spaced.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(&block[148..156], format!("{sum:06o}\0 ").as_bytes());
    }

    #[test]
    fn long_or_non_ascii_names_and_large_owners_go_into_a_pax_header() {
        let link = node(
            NodeKind::Symlink {
                target: "ünï".as_bytes().to_vec(),
            },
            0o777,
            9_000_000,
        );
        let name = vec![b'n'; 150];
        let blocks = tar_header(&name, &link);
        assert_eq!(blocks.len(), 3 * BLOCK);
        assert_eq!(blocks[156], b'x');
        let records = &blocks[BLOCK..2 * BLOCK];
        let text = String::from_utf8_lossy(records);
        assert!(
            text.starts_with(&format!("160 path={}\n", "n".repeat(150))),
            "{text}"
        );
        assert!(text.contains("18 linkpath=ünï\n"), "{text}");
        assert!(text.contains("15 uid=9000000\n"), "{text}");
        assert_eq!(blocks[2 * BLOCK + 156], b'2');
    }

    #[test]
    fn a_folder_ends_in_a_slash_and_a_fifo_is_an_empty_file() {
        let dir = node(
            NodeKind::Dir {
                subtree: BlobId::from_bytes([1; 32]),
            },
            0o1777,
            0,
        );
        let block = tar_header(b"tmp", &dir);
        assert_eq!(&block[..5], b"tmp/\0");
        assert_eq!(block[156], b'5');
        let fifo = tar_header(b"fifo", &node(NodeKind::Fifo, 0o640, 0));
        assert_eq!(fifo[156], b'0');
        assert_eq!(&fifo[124..136], b"00000000000\0");
    }
}
