//! The result names the key object that opened the repository, which the operator passes back
//! as `--key-hint` so that the next run tries it first; a run that opened nothing names none.

use std::fs;

use super::{initialised, read_result, run, small_tree, text};

#[test]
fn the_result_names_the_key_that_opened_the_repository() {
    let (work, repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let result_file = work.path().join("result.json");
    let first_key = fs::read_dir(repo.join("keys"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    sidecar
        .run(&["backup", text(&source), "--result-file", text(&result_file)])
        .expect_ok();
    let result = read_result(&result_file);
    assert_eq!(result.key_id.as_deref(), Some(first_key.as_str()));

    // A second key, of another password: a run with that password names that key, even when
    // hinted at the other one.
    let second_password = work.path().join("second-password");
    fs::write(&second_password, "second password\n").unwrap();
    let added = sidecar
        .run(&[
            "key",
            "add",
            "--new-password-file",
            text(&second_password),
            "--json",
        ])
        .expect_ok();
    let added: serde_json::Value = serde_json::from_str(&added.stdout).unwrap();
    let second_key = added["added"].as_str().unwrap().to_owned();
    let mut command = sidecar.command();
    command
        .env("NEVERWIPED_PASSWORD_FILE", &second_password)
        .args(["check", "--key-hint", &first_key[..8], "--result-file"])
        .arg(&result_file);
    run(command).expect_ok();
    assert_eq!(read_result(&result_file).key_id, Some(second_key));

    // A password no key takes: nothing opened, no key named.
    let wrong_password = work.path().join("wrong-password");
    fs::write(&wrong_password, "not a password of this repository\n").unwrap();
    let mut command = sidecar.command();
    command
        .env("NEVERWIPED_PASSWORD_FILE", &wrong_password)
        .args(["snapshots", "--result-file"])
        .arg(&result_file);
    run(command).expect_code(12);
    assert_eq!(read_result(&result_file).key_id, None);
}
