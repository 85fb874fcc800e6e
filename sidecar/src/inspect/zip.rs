//! A folder of a snapshot as a zip archive, as restic's `dump --archive zip` writes it (through
//! Go's `archive/zip`): the same entries as the tar, named the same way; files deflated, folders
//! (named with a trailing `/`) and symbolic links (whose content is the link's target) stored;
//! Unix mode bits and file type in the external attributes; the modification time as an MS-DOS
//! time of day (in UTC, two-second steps) and as an extended-timestamp field. The archive is
//! streamed: sizes and checksums follow each file in a data descriptor, so standard output
//! need not be seekable. Where a size, an offset or the count of entries does not fit the
//! classic fields, zip64 records are written exactly where Go's writer writes them: a 64-bit data
//! descriptor and a zip64 extra field in the central directory for a file of 4 GiB or more (and
//! the extra field for an entry that starts beyond 4 GiB), and the zip64 end records for 65535
//! entries or more, or a central directory beyond 4 GiB.

use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::ids::BlobId;
use crate::inspect::archive::{damaged, entries_below, write_io, ArchiveCount};
use crate::repository::IndexedRepository;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use std::io::Write;

const STORE: u16 = 0;
const DEFLATE: u16 = 8;
const FLAG_DATA_DESCRIPTOR: u16 = 0x8;
const FLAG_UTF8: u16 = 0x800;
/// Version 2.0, made by Unix (3), as Go writes after `SetMode`.
const VERSION_MADE_BY: u16 = (3 << 8) | 20;
const VERSION_NEEDED: u16 = 20;
/// Version 4.5: the entry uses zip64.
const VERSION_ZIP64: u16 = 45;
/// The classic fields' limits: a value at or above them goes into a zip64 record.
const MAX32: u64 = u32::MAX as u64;
const MAX16: u64 = u16::MAX as u64;

/// Counts what passes through to the archive, for the offsets of the central directory.
struct Counting<'a> {
    out: &'a mut dyn Write,
    written: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// One entry's central-directory record, kept until the end.
struct Central {
    header: Header,
    crc: u32,
    compressed: u64,
    size: u64,
    offset: u64,
}

struct Header {
    name: Vec<u8>,
    flags: u16,
    method: u16,
    dos_time: u16,
    dos_date: u16,
    extra: Vec<u8>,
    external: u32,
}

/// Writes the entries below `folder` (`/a/b`; empty for the snapshot's root) of the tree `root`
/// as a zip archive to `out`, each file's blobs authenticated as they are read.
pub async fn write_zip(
    repo: &IndexedRepository,
    root: &BlobId,
    folder: &[u8],
    out: &mut dyn Write,
) -> Result<ArchiveCount> {
    let entries = entries_below(repo, root, folder).await?;
    let mut out = Counting { out, written: 0 };
    let mut central = Vec::with_capacity(entries.len());
    let mut count = ArchiveCount::default();
    for (path, node) in &entries {
        let header = header(&path[1..], node);
        let offset = out.written;
        write_io(&mut out, &local_header(&header), &header.name)?;
        let (crc, compressed, size) = write_content(repo, path, node, &header, &mut out).await?;
        if header.flags & FLAG_DATA_DESCRIPTOR != 0 {
            write_io(
                &mut out,
                &data_descriptor(crc, compressed, size),
                &header.name,
            )?;
        }
        count.entries += 1;
        if matches!(node.kind, NodeKind::File { .. }) {
            count.content_bytes += size;
        }
        central.push(Central {
            header,
            crc,
            compressed,
            size,
            offset,
        });
    }
    write_central_directory(&mut out, &central)?;
    out.flush().map_err(|source| Error::Io {
        what: "cannot write the archive".into(),
        source,
    })?;
    Ok(count)
}

/// Writes an entry's content (a file's bytes deflated, a link's target stored, nothing for the
/// rest); returns its CRC-32, compressed and uncompressed sizes.
async fn write_content(
    repo: &IndexedRepository,
    path: &[u8],
    node: &Node,
    header: &Header,
    out: &mut Counting<'_>,
) -> Result<(u32, u64, u64)> {
    let mut crc = flate2::Crc::new();
    let start = out.written;
    match &node.kind {
        NodeKind::File { size, content } => {
            let shown = String::from_utf8_lossy(path).into_owned();
            let mut encoder = DeflateEncoder::new(&mut *out, Compression::default());
            let mut written = 0u64;
            for blob in content {
                let bytes = repo.read_blob(blob, &shown).await?;
                written += bytes.len() as u64;
                if written > *size {
                    return Err(damaged(&shown, *size));
                }
                crc.update(&bytes);
                write_io(&mut encoder, &bytes, &header.name)?;
            }
            if written != *size {
                return Err(damaged(&shown, *size));
            }
            encoder.try_finish().map_err(|source| Error::Io {
                what: format!(
                    "cannot write {} to the archive",
                    crate::text::quoted(&header.name)
                ),
                source,
            })?;
        }
        NodeKind::Symlink { target } => {
            crc.update(target);
            write_io(out, target, &header.name)?;
        }
        _ => {}
    }
    Ok((crc.sum(), out.written - start, u64::from(crc.amount())))
}

/// The data descriptor after a file's data: 64-bit sizes when either needs them, as Go writes.
fn data_descriptor(crc: u32, compressed: u64, size: u64) -> Vec<u8> {
    let mut descriptor = Vec::with_capacity(24);
    put32(&mut descriptor, 0x0807_4b50);
    put32(&mut descriptor, crc);
    if compressed >= MAX32 || size >= MAX32 {
        put64(&mut descriptor, compressed);
        put64(&mut descriptor, size);
    } else {
        put32(&mut descriptor, compressed as u32);
        put32(&mut descriptor, size as u32);
    }
    descriptor
}

/// The header of one entry, as Go's `archive/zip` makes it from restic's `FileHeader`.
fn header(name: &[u8], node: &Node) -> Header {
    let meta = &node.meta;
    let mut name = name.to_vec();
    let (file_type, method) = match &node.kind {
        NodeKind::File { .. } => (0o100000, DEFLATE),
        NodeKind::Dir { .. } => (0o040000, STORE),
        NodeKind::Symlink { .. } => (0o120000, STORE),
        NodeKind::Fifo => (0o010000, STORE),
        NodeKind::CharDevice { .. } => (0o020000, STORE),
        NodeKind::BlockDevice { .. } => (0o060000, STORE),
    };
    let is_dir = matches!(node.kind, NodeKind::Dir { .. });
    let mut flags = FLAG_DATA_DESCRIPTOR;
    if is_dir {
        name.push(b'/');
        flags = 0;
    }
    if !name.is_ascii() && std::str::from_utf8(&name).is_ok() {
        flags |= FLAG_UTF8;
    }
    let mode = meta.mode & 0o7777;
    // The MS-DOS attributes in the low byte: folder, and read-only when the owner cannot write.
    let dos = (u32::from(is_dir) * 0x10) | u32::from(mode & 0o200 == 0);
    let (dos_date, dos_time) = dos_date_time(meta.mtime.secs);
    let mut extra = Vec::with_capacity(9);
    put16(&mut extra, 0x5455);
    put16(&mut extra, 5);
    extra.push(1);
    put32(&mut extra, meta.mtime.secs as u32);
    Header {
        name,
        flags,
        method,
        dos_time,
        dos_date,
        extra,
        external: ((file_type | mode) << 16) | dos,
    }
}

/// The MS-DOS date and time of day (UTC) of `secs` since the epoch, as Go's
/// `timeToMsDosTime`: seconds halved (rounded down).
fn dos_date_time(secs: i64) -> (u16, u16) {
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let date = day + (month << 5) + ((year - 1980) << 9);
    let time = (of_day % 60) / 2 + ((of_day / 60 % 60) << 5) + ((of_day / 3600) << 11);
    (date as u16, time as u16)
}

fn local_header(header: &Header) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(30 + header.name.len() + header.extra.len());
    put32(&mut bytes, 0x0403_4b50);
    put16(&mut bytes, VERSION_NEEDED);
    put16(&mut bytes, header.flags);
    put16(&mut bytes, header.method);
    put16(&mut bytes, header.dos_time);
    put16(&mut bytes, header.dos_date);
    // Checksum and sizes: in the data descriptor, or zero for a folder.
    bytes.extend([0; 12]);
    put16(&mut bytes, header.name.len() as u16);
    put16(&mut bytes, header.extra.len() as u16);
    bytes.extend(&header.name);
    bytes.extend(&header.extra);
    bytes
}

/// One central-directory record, as Go's `Writer.Close` writes it: sizes of 4 GiB or more (or
/// an offset at or beyond it) as 0xffffffff with a zip64 extra field holding all three.
fn central_record(entry: &Central) -> Vec<u8> {
    let header = &entry.header;
    let sizes64 = entry.compressed >= MAX32 || entry.size >= MAX32;
    let mut extra = header.extra.clone();
    let (compressed, size) = if sizes64 || entry.offset >= MAX32 {
        put16(&mut extra, 0x0001);
        put16(&mut extra, 24);
        put64(&mut extra, entry.size);
        put64(&mut extra, entry.compressed);
        put64(&mut extra, entry.offset);
        (u32::MAX, u32::MAX)
    } else {
        (entry.compressed as u32, entry.size as u32)
    };
    let mut bytes = Vec::with_capacity(46 + header.name.len() + extra.len());
    put32(&mut bytes, 0x0201_4b50);
    put16(&mut bytes, VERSION_MADE_BY);
    put16(
        &mut bytes,
        if sizes64 {
            VERSION_ZIP64
        } else {
            VERSION_NEEDED
        },
    );
    put16(&mut bytes, header.flags);
    put16(&mut bytes, header.method);
    put16(&mut bytes, header.dos_time);
    put16(&mut bytes, header.dos_date);
    put32(&mut bytes, entry.crc);
    put32(&mut bytes, compressed);
    put32(&mut bytes, size);
    put16(&mut bytes, header.name.len() as u16);
    put16(&mut bytes, extra.len() as u16);
    bytes.extend([0; 6]); // comment length, disk, internal attributes
    put32(&mut bytes, header.external);
    put32(&mut bytes, entry.offset.min(MAX32) as u32);
    bytes.extend(&header.name);
    bytes.extend(&extra);
    bytes
}

/// The end of the archive for `records` entries whose central directory of `size` bytes starts
/// at `start`: the zip64 end record and its locator first when a value needs them, then the
/// classic end record (holding the maximum values in that case), as Go writes it.
fn end_records(records: u64, size: u64, start: u64) -> Vec<u8> {
    let mut end = Vec::with_capacity(56 + 20 + 22);
    let (mut records16, mut size32, mut start32) = (records, size, start);
    if records >= MAX16 || size >= MAX32 || start >= MAX32 {
        let zip64_end = start + size;
        put32(&mut end, 0x0606_4b50);
        put64(&mut end, 56 - 12);
        put16(&mut end, VERSION_ZIP64);
        put16(&mut end, VERSION_ZIP64);
        put32(&mut end, 0); // this disk
        put32(&mut end, 0); // the disk where the directory starts
        put64(&mut end, records);
        put64(&mut end, records);
        put64(&mut end, size);
        put64(&mut end, start);
        put32(&mut end, 0x0706_4b50);
        put32(&mut end, 0); // the disk of the zip64 end record
        put64(&mut end, zip64_end);
        put32(&mut end, 1); // disks
        (records16, size32, start32) = (MAX16, MAX32, MAX32);
    }
    put32(&mut end, 0x0605_4b50);
    put32(&mut end, 0); // disks
    put16(&mut end, records16 as u16);
    put16(&mut end, records16 as u16);
    put32(&mut end, size32 as u32);
    put32(&mut end, start32 as u32);
    put16(&mut end, 0);
    end
}

fn write_central_directory(out: &mut Counting<'_>, central: &[Central]) -> Result<()> {
    let start = out.written;
    for entry in central {
        write_io(out, &central_record(entry), &entry.header.name)?;
    }
    let end = end_records(central.len() as u64, out.written - start, start);
    write_io(out, &end, b"the archive's central directory")
}

fn put64(bytes: &mut Vec<u8>, value: u64) {
    bytes.extend(value.to_le_bytes());
}

fn put16(bytes: &mut Vec<u8>, value: u16) {
    bytes.extend(value.to_le_bytes());
}

fn put32(bytes: &mut Vec<u8>, value: u32) {
    bytes.extend(value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dos_times_are_utc_calendar_fields_in_two_second_steps() {
        // 2023-11-14 22:13:21 UTC.
        let (date, time) = dos_date_time(1_700_000_001);
        assert_eq!(date, 14 | (11 << 5) | ((2023 - 1980) << 9));
        assert_eq!(time, 10 | (13 << 5) | (22 << 11));
        // 2000-02-29 00:00:00 UTC.
        assert_eq!(dos_date_time(951_782_400), (29 | (2 << 5) | (20 << 9), 0));
    }

    fn entry(compressed: u64, size: u64, offset: u64) -> Central {
        Central {
            header: header(b"big", &file_node()),
            crc: 0x1234_5678,
            compressed,
            size,
            offset,
        }
    }

    fn file_node() -> Node {
        use crate::format::tree::{Metadata, Timestamp};
        Node {
            name: b"big".to_vec(),
            kind: NodeKind::File {
                size: 0,
                content: Vec::new(),
            },
            meta: Metadata {
                mode: 0o644,
                uid: 0,
                gid: 0,
                mtime: Timestamp {
                    secs: 1_700_000_001,
                    nanos: 0,
                },
                ctime: Timestamp::default(),
                inode: 1,
                device: 1,
                links: 1,
            },
        }
    }

    fn u16_at(bytes: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap())
    }

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn a_file_of_4_gib_or_more_gets_zip64_sizes_in_its_descriptor_and_central_record() {
        let (size, compressed, offset) = (5 << 30, (4 << 30) + 7, 3 << 30);
        // Classic sizes below the limit, 64-bit ones from it on.
        assert_eq!(data_descriptor(1, 10, 20).len(), 16);
        let descriptor = data_descriptor(1, compressed, size);
        assert_eq!(descriptor.len(), 24);
        assert_eq!(
            (u64_at(&descriptor, 8), u64_at(&descriptor, 16)),
            (compressed, size)
        );
        assert_eq!(data_descriptor(1, 5, MAX32).len(), 24);

        let record = central_record(&entry(compressed, size, offset));
        assert_eq!(u16_at(&record, 6), VERSION_ZIP64);
        assert_eq!(
            (u32_at(&record, 20), u32_at(&record, 24)),
            (u32::MAX, u32::MAX)
        );
        assert_eq!(u32_at(&record, 42), offset as u32);
        let extra_len = u16_at(&record, 30) as usize;
        let extra = &record[46 + 3..46 + 3 + extra_len];
        // The extended timestamp first, then the zip64 field: size, compressed, offset.
        assert_eq!((u16_at(extra, 9), u16_at(extra, 11)), (0x0001, 24));
        assert_eq!(
            (u64_at(extra, 13), u64_at(extra, 21), u64_at(extra, 29)),
            (size, compressed, offset)
        );

        // A small file starting beyond 4 GiB: the extra field, but version 2.0.
        let record = central_record(&entry(10, 20, 6 << 30));
        assert_eq!(u16_at(&record, 6), VERSION_NEEDED);
        assert_eq!(u32_at(&record, 42), u32::MAX);
        let small = central_record(&entry(10, 20, 30));
        assert_eq!(u16_at(&small, 30), 9, "no zip64 field for a small entry");
    }

    #[test]
    fn the_zip64_end_records_come_from_65535_entries_or_a_directory_beyond_4_gib() {
        assert_eq!(end_records(65_534, 100, 200).len(), 22);
        for (records, size, start) in [(65_535, 100, 200), (3, 100, 5 << 30)] {
            let end = end_records(records, size, start);
            assert_eq!(end.len(), 56 + 20 + 22);
            assert_eq!(u32_at(&end, 0), 0x0606_4b50);
            assert_eq!((u64_at(&end, 32), u64_at(&end, 40)), (records, size));
            assert_eq!(u64_at(&end, 48), start);
            assert_eq!(u32_at(&end, 56), 0x0706_4b50);
            assert_eq!(u64_at(&end, 64), start + size);
            let classic = &end[76..];
            assert_eq!(u16_at(classic, 8), u16::MAX);
            assert_eq!(
                (u32_at(classic, 12), u32_at(classic, 16)),
                (u32::MAX, u32::MAX)
            );
        }
    }
}
