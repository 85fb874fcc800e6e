use super::*;
use crate::crypto::KdfParams;

fn fast_kdf() -> KdfParams {
    KdfParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    }
}

#[test]
fn secrets_from_files_and_memory_lose_one_trailing_newline_and_the_environment_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, b"pass word\r\n").unwrap();
    let file = SecretSource::File(path).read("the secret").unwrap();
    assert_eq!(file.as_slice(), b"pass word");
    let memory = SecretSource::Memory(Zeroizing::new(b"pw\n\n".to_vec()));
    assert_eq!(memory.read("the secret").unwrap().as_slice(), b"pw\n");
    // The variable's name is this test's own, so that no other test sees or sets it.
    std::env::set_var("NEVERWIPED_OPEN_TESTS_SECRET", "pw\n");
    let env = SecretSource::Env("NEVERWIPED_OPEN_TESTS_SECRET".into());
    assert_eq!(env.read("the secret").unwrap().as_slice(), b"pw\n");
    assert!(!format!("{memory:?}").contains("pw"), "{memory:?}");
}

#[test]
fn a_missing_secret_is_named_with_its_source() {
    let missing = SecretSource::File("/nonexistent/secret".into())
        .read("the gate password")
        .unwrap_err()
        .to_string();
    assert!(missing.starts_with("the gate password: cannot read the file /nonexistent/secret"));
    let unset = SecretSource::Env("NEVERWIPED_OPEN_TESTS_UNSET".into())
        .read("the repository password")
        .unwrap_err()
        .to_string();
    assert_eq!(
        unset,
        "the repository password: NEVERWIPED_OPEN_TESTS_UNSET is not set"
    );
    let binary = SecretSource::Memory(Zeroizing::new(vec![0xff]))
        .read_text("the gate password")
        .unwrap_err()
        .to_string();
    assert_eq!(binary, "the gate password: it is not UTF-8");
}

#[test]
fn a_gate_password_without_a_user_is_refused_before_any_request() {
    let location = RepositoryLocation::parse("rest:http://127.0.0.1:1/repo").unwrap();
    let login = GateLogin {
        username: Some(String::new()),
        password: Some(SecretSource::Memory(Zeroizing::new(b"pw".to_vec()))),
    };
    let error = open_backend(&location, &login, &OpenOptions::default()).unwrap_err();
    assert!(matches!(error, OpenError::PasswordWithoutUser), "{error:?}");
}

#[tokio::test]
async fn a_folder_repository_opens_with_its_password_from_memory_and_refuses_another() {
    let dir = tempfile::tempdir().unwrap();
    let location = RepositoryLocation::parse(dir.path().to_str().unwrap()).unwrap();
    let options = OpenOptions::default();
    let backend = open_backend(&location, &GateLogin::default(), &options).unwrap();
    let created = Repository::init(backend, b"right", fast_kdf())
        .await
        .unwrap();

    let password = SecretSource::Memory(Zeroizing::new(b"right\n".to_vec()));
    let opened = open(&location, &password, &GateLogin::default(), &options)
        .await
        .unwrap();
    assert_eq!(opened.key_id(), created.key_id());

    let wrong = SecretSource::Memory(Zeroizing::new(b"wrong".to_vec()));
    let refused = open(&location, &wrong, &GateLogin::default(), &options)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, OpenError::Repository(crate::Error::WrongPassword)),
        "{refused:?}"
    );
    let empty = SecretSource::Memory(Zeroizing::new(b"\n".to_vec()));
    let refused = open(&location, &empty, &GateLogin::default(), &options)
        .await
        .unwrap_err();
    assert!(matches!(refused, OpenError::EmptyPassword), "{refused:?}");
}
