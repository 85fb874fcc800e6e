//! Prints the CustomResourceDefinitions generated from the Rust types, or writes them.
//!
//! `crdgen` prints both CRDs as one YAML stream (`crdgen | kubectl apply -f -`);
//! `crdgen DIR` writes one file per CRD into DIR, as committed under `crds/`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let files = match neverwiped_operator::api::crd_files() {
        Ok(files) => files,
        Err(error) => {
            eprintln!("crdgen: cannot serialize the CRDs: {error}");
            return ExitCode::FAILURE;
        }
    };
    match std::env::args().nth(1) {
        None => {
            for (_, yaml) in files {
                print!("{yaml}");
            }
        }
        Some(directory) => {
            for (name, yaml) in files {
                let path = std::path::Path::new(&directory).join(&name);
                if let Err(error) = std::fs::write(&path, yaml) {
                    eprintln!("crdgen: cannot write {}: {error}", path.display());
                    return ExitCode::FAILURE;
                }
                eprintln!("wrote {}", path.display());
            }
        }
    }
    ExitCode::SUCCESS
}
