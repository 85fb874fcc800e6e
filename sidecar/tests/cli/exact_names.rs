//! Every name exactly: paths that are not UTF-8 are accepted on the command line (`backup`, `ls
//! SNAPSHOT PATH`, `restore --include`), and the JSON of each command has one shape, published
//! as a JSON Schema in `docs/schema/` and checked here against real output.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine;

use super::{initialised, restored};

/// A name that is not UTF-8 (Latin-1 `café`) and one with a newline.
const LATIN1: &[u8] = b"caf\xe9";
const NEWLINE: &[u8] = b"two\nlines";

const VALIDATE: &str = r#"
import json, pathlib, sys
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
folder, name, lines = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "lines"
schemas = [json.loads(p.read_text()) for p in folder.glob("*.json")]
registry = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in schemas])
schema = json.loads((folder / name).read_text())
Draft202012Validator.check_schema(schema)
validator = Draft202012Validator(schema, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER)
text = sys.stdin.read()
documents = [json.loads(l) for l in text.splitlines() if l.strip()] if lines else [json.loads(text)]
bad = [e.message for d in documents for e in validator.iter_errors(d)]
print("\n".join(bad))
sys.exit(1 if bad or not documents else 0)
"#;

/// Validates `output` (one document, or one per line) against `docs/schema/NAME`; `false`
/// when python3 with jsonschema is missing and the test may skip.
pub(super) fn matches_schema(name: &str, output: &str, lines: bool) -> bool {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema");
    let child = Command::new("python3")
        .args(["-c", VALIDATE])
        .arg(&folder)
        .arg(name)
        .arg(if lines { "lines" } else { "one" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            neverwiped_testkit::missing(
                format_args!("python3 cannot run ({error}) to check the JSON Schemas"),
                "install python3 and the modules of tests/chart/requirements.txt",
            );
            return false;
        }
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(output.as_bytes())
        .unwrap();
    let done = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&done.stderr);
    if said.contains("No module named") {
        neverwiped_testkit::missing(
            format_args!("python3 lacks jsonschema: {said}"),
            "pip install -r tests/chart/requirements.txt (it brings jsonschema)",
        );
        return false;
    }
    assert!(
        done.status.success(),
        "the output does not match docs/schema/{name}: {}{said}\n{output}",
        String::from_utf8_lossy(&done.stdout)
    );
    true
}

fn decoded(base64: &serde_json::Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(base64.as_str().unwrap())
        .unwrap()
}

#[test]
fn names_that_are_not_utf8_are_taken_and_shown_exactly_in_one_json_shape() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join(OsStr::from_bytes(b"source-\xff"));
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join(OsStr::from_bytes(LATIN1)), b"latin-1").unwrap();
    fs::write(source.join(OsStr::from_bytes(NEWLINE)), b"newline").unwrap();
    fs::write(source.join("plain"), b"plain").unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(LATIN1), source.join("link")).unwrap();

    let backup = sidecar
        .run(&[
            OsStr::new("backup"),
            source.as_os_str(),
            OsStr::new("--json"),
        ])
        .expect_ok();
    let checked = matches_schema("backup.json", &backup.stdout, false);

    let snapshots = sidecar.run(&["snapshots", "--json"]).expect_ok().stdout;
    if checked {
        matches_schema("snapshots.json", &snapshots, false);
    }
    let snapshots: Vec<serde_json::Value> = serde_json::from_str(&snapshots).unwrap();
    assert_eq!(
        decoded(&snapshots[0]["pathsRaw"][0]),
        source.as_os_str().as_bytes()
    );

    // `ls` of a path that is not UTF-8, in JSON: every entry, each name exact.
    let listed = sidecar
        .run(&[
            OsStr::new("ls"),
            OsStr::new("latest"),
            source.as_os_str(),
            OsStr::new("--json"),
        ])
        .expect_ok()
        .stdout;
    if checked {
        matches_schema("ls.json", &listed, true);
    }
    let entries: Vec<serde_json::Value> = listed
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(entries.len(), 5, "{listed}");
    let named = |name: &[u8]| {
        entries
            .iter()
            .find(|entry| {
                entry.get("nameRaw").map_or_else(
                    || entry["name"].as_str().unwrap().as_bytes() == name,
                    |raw| decoded(raw) == name,
                )
            })
            .unwrap_or_else(|| panic!("no entry {name:?} in {listed}"))
    };
    let latin1 = named(LATIN1);
    assert_eq!(latin1["name"], "caf\u{fffd}");
    assert_eq!(
        decoded(&latin1["pathRaw"]),
        [source.as_os_str().as_bytes(), b"/", LATIN1].concat()
    );
    assert_eq!(named(NEWLINE)["type"], "file");
    let link = named(b"link");
    assert_eq!(decoded(&link["linkTargetRaw"]), LATIN1);
    assert!(named(b"plain").get("nameRaw").is_none());

    // `restore --include` of that one file: only it comes back, byte for byte.
    let target = work.path().join("target");
    let include = source.join(OsStr::from_bytes(LATIN1));
    let restore = sidecar
        .run(&[
            OsStr::new("restore"),
            OsStr::new("latest"),
            OsStr::new("--target"),
            target.as_os_str(),
            OsStr::new("--include"),
            include.as_os_str(),
            OsStr::new("--json"),
        ])
        .expect_ok();
    if checked {
        matches_schema("restore.json", &restore.stdout, false);
    }
    let back = restored(&target, &source);
    assert_eq!(
        fs::read(back.join(OsStr::from_bytes(LATIN1))).unwrap(),
        b"latin-1"
    );
    let mut names: Vec<OsString> = fs::read_dir(&back)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, [OsString::from_vec(LATIN1.to_vec())]);
}
