//! Prints the CustomResourceDefinitions generated from the Rust types, or writes them.
//!
//! `crdgen` prints both CRDs as one YAML stream (`crdgen | kubectl apply -f -`);
//! `crdgen DIR...` writes one file per CRD into each DIR. The committed copies are the project's
//! `crds/` and the Helm chart's, which must stay identical:
//! `cargo run -p neverwiped-operator --bin crdgen -- crds charts/neverwiped/crds`.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let files = match neverwiped_operator::api::crd_files() {
        Ok(files) => files,
        Err(error) => {
            eprintln!("crdgen: cannot serialize the CRDs: {error}");
            return ExitCode::FAILURE;
        }
    };
    let directories: Vec<String> = std::env::args().skip(1).collect();
    if directories.iter().any(|argument| argument.starts_with('-')) {
        eprintln!(
            "usage: crdgen [DIR...]  (no DIR: print the CRDs; else write them into each DIR)"
        );
        return ExitCode::FAILURE;
    }
    if directories.is_empty() {
        for (_, yaml) in &files {
            print!("{yaml}");
        }
        return ExitCode::SUCCESS;
    }
    for directory in &directories {
        for (name, yaml) in &files {
            let path = Path::new(directory).join(name);
            if let Err(error) = std::fs::write(&path, yaml) {
                eprintln!("crdgen: cannot write {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
            eprintln!("wrote {}", path.display());
        }
    }
    ExitCode::SUCCESS
}
