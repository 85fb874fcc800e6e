//! `cat config|snapshot|index|key|lock|pack|blob|tree`: one object of the repository as restic's
//! `cat` shows it: metadata objects decrypted (their JSON as written), a pack's stored bytes, a
//! blob's plaintext. Never the master key.

use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use neverwiped::backend::ObjectKind;
use neverwiped::format::open_object_json;
use neverwiped::format::tree::NodeKind;
use neverwiped::ids::{BlobId, ObjectId};
use neverwiped::inspect::walk;
use neverwiped::repository::IndexedRepository;
use neverwiped::selection::snapshot_spec;
use neverwiped::text;
use std::io::Write;

/// What `cat` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CatWhat {
    /// The repository's settings (id, chunker sizes, pack size): the sealed part of `config`,
    /// opened. No ID.
    Config,
    /// A snapshot object's JSON; ID: an id prefix or "latest".
    Snapshot,
    /// An index object's JSON.
    Index,
    /// A key object as stored: the master key in it is wrapped under that key's password, and
    /// stays so.
    Key,
    /// A lock object's JSON.
    Lock,
    /// A pack's stored bytes, checked against its id (they are encrypted).
    Pack,
    /// A blob's plaintext: a chunk of a file, or a folder's tree JSON.
    Blob,
    /// The tree JSON of a folder; ID: SNAPSHOT[:PATH] (no PATH: the snapshot's root).
    Tree,
}

#[derive(Debug, Args)]
#[command(
    after_help = "The master key is never printed (restic's `cat masterkey` is not \
offered): it opens every object of the repository, and a copy left on a terminal or in a log \
outlives every password change."
)]
pub struct CatArgs {
    /// The kind of object.
    #[arg(value_enum, value_name = "WHAT")]
    pub what: CatWhat,
    /// The object's id, 64 hex digits or a prefix naming one object of its kind (none for
    /// config; a snapshot also takes "latest"; tree takes SNAPSHOT[:PATH]).
    #[arg(value_name = "ID")]
    pub id: Option<String>,
}

/// Prints the object `args` names to standard output.
pub async fn cat(repo: &IndexedRepository, args: &CatArgs) -> Result<Outcome> {
    let id = match (args.what, &args.id) {
        (CatWhat::Config, None) => String::new(),
        (CatWhat::Config, Some(_)) => bail!("cat config takes no id"),
        (_, Some(id)) => id.clone(),
        (what, None) => bail!("cat {} needs an id", name_of(what)),
    };
    let mut printed = match args.what {
        CatWhat::Config => serde_json::to_vec(repo.params())?,
        CatWhat::Snapshot => {
            let (snapshot_id, _) = repo.find_snapshot(&snapshot_spec(&id)).await?;
            let id = ObjectId::from(snapshot_id);
            metadata(repo, ObjectKind::Snapshots, &id).await?
        }
        CatWhat::Index => {
            metadata(
                repo,
                ObjectKind::Index,
                &find(repo, ObjectKind::Index, &id).await?,
            )
            .await?
        }
        CatWhat::Lock => {
            metadata(
                repo,
                ObjectKind::Locks,
                &find(repo, ObjectKind::Locks, &id).await?,
            )
            .await?
        }
        CatWhat::Key => {
            stored(
                repo,
                ObjectKind::Keys,
                &find(repo, ObjectKind::Keys, &id).await?,
            )
            .await?
        }
        CatWhat::Pack => {
            stored(
                repo,
                ObjectKind::Data,
                &find(repo, ObjectKind::Data, &id).await?,
            )
            .await?
        }
        CatWhat::Blob => {
            let blob: BlobId = id
                .parse()
                .map_err(|_| anyhow::anyhow!("{id:?} is not a blob id (64 hex digits)"))?;
            repo.read_blob(&blob, "the blob asked for").await?
        }
        CatWhat::Tree => tree(repo, &id).await?,
    };
    // JSON objects end with a line feed on a terminal, as restic's; bytes are left as they are.
    if !matches!(args.what, CatWhat::Pack | CatWhat::Blob) {
        printed.push(b'\n');
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&printed)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")?;
    Ok(Outcome {
        bytes_read: printed.len() as u64,
        ..Outcome::default()
    })
}

fn name_of(what: CatWhat) -> String {
    what.to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default()
}

/// The one object of `kind` whose name is or starts with `prefix`.
async fn find(repo: &IndexedRepository, kind: ObjectKind, prefix: &str) -> Result<ObjectId> {
    let prefix = prefix.to_ascii_lowercase();
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{prefix:?} is not an id: give hex digits");
    }
    let matching: Vec<ObjectId> = repo
        .list_ids(kind)
        .await?
        .into_iter()
        .filter(|id| id.to_hex().starts_with(&prefix))
        .collect();
    match matching.as_slice() {
        [id] => Ok(*id),
        [] => bail!("no {} object matches {prefix:?}", kind.dir_name()),
        many => bail!(
            "{prefix:?} matches {} {} objects: give more digits",
            many.len(),
            kind.dir_name()
        ),
    }
}

/// The stored bytes of an object, checked against its name (the SHA-256 of those bytes).
async fn stored(repo: &IndexedRepository, kind: ObjectKind, id: &ObjectId) -> Result<Vec<u8>> {
    let name = id.to_hex();
    let bytes = repo.backend().read(kind, &name).await?;
    if ObjectId::of_bytes(&bytes) != *id {
        bail!(
            "{}/{name} is damaged: its bytes do not hash to its name",
            kind.dir_name()
        );
    }
    Ok(bytes.to_vec())
}

/// A metadata object's JSON as it was written, authenticated and decompressed.
async fn metadata(repo: &IndexedRepository, kind: ObjectKind, id: &ObjectId) -> Result<Vec<u8>> {
    let bytes = stored(repo, kind, id).await?;
    let what = format!("{}/{}", kind.dir_name(), id.to_hex());
    Ok(open_object_json(&repo.keys().sealer, kind, &bytes, &what)?)
}

/// The tree JSON of the folder `SNAPSHOT[:PATH]`.
async fn tree(repo: &IndexedRepository, spec: &str) -> Result<Vec<u8>> {
    let (snapshot, path) = spec.split_once(':').unwrap_or((spec, "/"));
    let (_, snapshot) = repo.find_snapshot(&snapshot_spec(snapshot)).await?;
    // restic takes the path with or without its leading `/`.
    let path = walk::absolute_path(format!("/{path}").as_bytes())?;
    let subtree = match path.is_empty() {
        true => snapshot.tree,
        false => match walk::lookup(repo, &snapshot.tree, &path).await? {
            Some(node) => match node.kind {
                NodeKind::Dir { subtree } => subtree,
                _ => bail!("{} is not a folder", text::quoted(&path)),
            },
            None => bail!("{} is not in the snapshot", text::quoted(&path)),
        },
    };
    Ok(repo.read_blob(&subtree, "the folder asked for").await?)
}
