//! `cat`: each kind of object as the repository holds it — metadata decrypted, a pack's stored
//! bytes, a blob's plaintext — and a folder's tree naming what restic 0.19's `cat tree` names for
//! the same folder; never the master key.

use super::inspect_common::Restic;
use super::support::restic_binary;
use super::{initialised, small_tree, text, Sidecar};
use std::fs;
use std::path::Path;

/// The names of the objects of one kind (`keys`, `index`, `data`…), from the folder.
fn names(repo: &Path, kind: &str) -> Vec<String> {
    super::support::fixtures::repository_objects(&repo.join(kind))
        .into_iter()
        .map(|(path, _)| path.file_name().unwrap().to_str().unwrap().to_owned())
        .collect()
}

fn cat(sidecar: &Sidecar, args: &[&str]) -> Vec<u8> {
    let mut command = sidecar.command();
    let output = command.arg("cat").args(args).output().unwrap();
    assert!(
        output.status.success(),
        "cat {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn cat_json(sidecar: &Sidecar, args: &[&str]) -> serde_json::Value {
    let printed = cat(sidecar, args);
    serde_json::from_slice(&printed)
        .unwrap_or_else(|e| panic!("cat {args:?}: {e}: {}", String::from_utf8_lossy(&printed)))
}

/// The node names of a tree JSON (restic's or the sidecar's).
fn node_names(tree: &serde_json::Value) -> Vec<String> {
    tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn cat_prints_each_kind_of_object_and_never_the_master_key() {
    let test = "cat_prints_each_kind_of_object_and_never_the_master_key";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    sidecar
        .run(&["backup", text(&source), "--tag", "catted"])
        .expect_ok();
    let snapshot = &sidecar.snapshots()[0];
    let snapshot_id = snapshot["id"].as_str().unwrap();

    let config = cat_json(&sidecar, &["config"]);
    assert_eq!(config["id"].as_str().unwrap().len(), 64, "{config}");
    assert!(config["packTargetBytes"].as_u64().unwrap() > 0, "{config}");

    let stored = cat_json(&sidecar, &["snapshot", &snapshot_id[..8]]);
    assert_eq!(stored["tree"], snapshot["tree"]);
    assert_eq!(stored["tags"], serde_json::json!(["catted"]));
    assert_eq!(cat_json(&sidecar, &["snapshot", "latest"]), stored);

    // The tree of the source folder names what restic's names for the same folder, and the
    // blob of a.txt is its bytes.
    let folder = format!("latest:{}", text(&source));
    let tree = cat_json(&sidecar, &["tree", &folder]);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    let their_id: Vec<serde_json::Value> =
        serde_json::from_str(&restic.run(&["snapshots", "--json"])).unwrap();
    let their_folder = format!("{}:{}", their_id[0]["id"].as_str().unwrap(), text(&source));
    let theirs: serde_json::Value =
        serde_json::from_str(&restic.run(&["cat", "tree", &their_folder])).unwrap();
    assert_eq!(node_names(&tree), node_names(&theirs));
    let a_txt = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["name"] == "a.txt")
        .unwrap();
    let blob = a_txt["content"][0].as_str().unwrap();
    assert_eq!(cat(&sidecar, &["blob", blob]), b"first file\n");

    // Index objects name the packs; a pack is its stored bytes.
    let mut packs = names(&repo, "data");
    let mut listed: Vec<String> = Vec::new();
    for index in names(&repo, "index") {
        let file = cat_json(&sidecar, &["index", &index]);
        for pack in file["packs"].as_array().unwrap() {
            listed.push(pack["id"].as_str().unwrap().to_owned());
        }
    }
    packs.sort();
    listed.sort();
    assert_eq!(listed, packs);
    let pack_file = super::support::fixtures::repository_objects(&repo.join("data"))[0].clone();
    let pack = pack_file.0.file_name().unwrap().to_str().unwrap();
    assert_eq!(cat(&sidecar, &["pack", pack]), pack_file.1);

    // A key object is printed as stored: its master key stays wrapped.
    let key = &names(&repo, "keys")[0];
    let printed = cat(&sidecar, &["key", &key[..10]]);
    let mut expected = fs::read(repo.join("keys").join(key)).unwrap();
    expected.push(b'\n');
    assert_eq!(printed, expected);

    // A lock of another process.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lock = runtime.block_on(super::write_lock(&repo, "other-host", false, "backup"));
    let shown = cat_json(&sidecar, &["lock", &lock.to_hex()]);
    assert_eq!(shown["purpose"], "backup", "{shown}");
    assert_eq!(shown["hostname"], "other-host", "{shown}");
    fs::remove_file(repo.join("locks").join(lock.to_hex())).unwrap();

    // No master key, and clear refusals.
    let refused = sidecar.run(&["cat", "masterkey"]);
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("masterkey"), "{}", refused.stderr);
    let help = sidecar.run(&["cat", "--help"]).expect_ok().stdout;
    assert!(help.contains("master key is never printed"), "{help}");
    let missing = sidecar.run(&["cat", "index", "ffffffff"]).expect_code(1);
    assert!(
        missing.stderr.contains("no index object matches"),
        "{}",
        missing.stderr
    );
    sidecar.run(&["cat", "snapshot"]).expect_code(1);
}
