//! A restore's stream: the snapshot's `/streams/NAME` written into the FIFO a restore container's
//! command reads, then that command's status.

use super::reader::{how_it_ended, with_stderr};
use super::wait;
use super::StreamSlot;
use crate::format::tree::NodeKind;
use crate::ids::BlobId;
use crate::inspect::walk;
use crate::repository::IndexedRepository;
use neverwiped_contract::streams::SNAPSHOT_FOLDER;
use std::io::Write;
use std::time::Duration;

/// Writes the stream of `slot` from the snapshot tree `root` into its command; the bytes
/// written, or why the restore of the stream failed (in words that follow "stream NAME: ").
pub async fn restore(
    repo: &IndexedRepository,
    root: &BlobId,
    slot: &StreamSlot,
    start_timeout: Duration,
) -> Result<u64, String> {
    slot.touch();
    let content = stored_content(repo, root, &slot.spec.name).await?;
    let fifo_slot = slot.spec.slot.clone();
    let mut fifo = tokio::task::block_in_place(|| {
        wait::launcher_started(&fifo_slot, start_timeout)?;
        wait::fifo_for_writing(&fifo_slot)
    })?;
    let label = format!("stream {}", slot.spec.name);
    let mut broken = None;
    for blob in &content {
        let bytes = repo
            .read_blob(blob, &label)
            .await
            .map_err(|e| e.to_string())?;
        if let Err(error) = tokio::task::block_in_place(|| fifo.write_all(&bytes)) {
            broken = Some(error);
            break;
        }
        slot.add_bytes(bytes.len() as u64);
    }
    // Closed: the command sees the end of its input.
    drop(fifo);
    let status = tokio::task::block_in_place(|| wait::status(&fifo_slot, None));
    let judged = match (&status, broken) {
        (Err(_), _) => Err(wait::killed_message().to_owned()),
        (Ok(status), _) if !status.succeeded() => {
            let how = format!("its command failed: {}", how_it_ended(status));
            Err(with_stderr(&how, &status.stderr))
        }
        (Ok(_), Some(error)) => Err(format!(
            "its command exited 0 before reading all of the stream ({error})"
        )),
        (Ok(_), None) => Ok(slot.bytes()),
    };
    slot.ended(status.ok(), judged.clone().err());
    judged
}

/// The blobs of the snapshot's `/streams/NAME`; an error naming the streams it has otherwise.
async fn stored_content(
    repo: &IndexedRepository,
    root: &BlobId,
    name: &str,
) -> Result<Vec<BlobId>, String> {
    let path = format!("{SNAPSHOT_FOLDER}/{name}");
    let node = walk::lookup(repo, root, path.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    if let Some(NodeKind::File { content, .. }) = node.map(|node| node.kind) {
        return Ok(content);
    }
    let held = stored_names(repo, root).await?;
    Err(match held.is_empty() {
        true => "the snapshot holds no stream".to_owned(),
        false => format!(
            "the snapshot has no such stream; it has {}",
            held.join(", ")
        ),
    })
}

/// The names of the streams a snapshot holds.
async fn stored_names(repo: &IndexedRepository, root: &BlobId) -> Result<Vec<String>, String> {
    let folder = walk::lookup(repo, root, SNAPSHOT_FOLDER.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let Some(NodeKind::Dir { subtree }) = folder.map(|node| node.kind) else {
        return Ok(Vec::new());
    };
    let tree = repo
        .read_tree(&subtree, "the snapshot's streams")
        .await
        .map_err(|e| e.to_string())?;
    Ok(tree
        .nodes
        .iter()
        .map(|node| String::from_utf8_lossy(&node.name).into_owned())
        .collect())
}
