//! `backup --claim JSON`: what each volume's claim was, checked against the backup's paths
//! before anything is read, and recorded in the snapshot.

use super::scoped_selection::normalized;
use anyhow::{bail, Context, Result};
use neverwiped_contract::record::RecordedClaim;
use neverwiped_contract::text::quoted;
use std::path::{Path, PathBuf};

/// The claims of `--claim`, in the order given. Each names one of `paths` (compared as the
/// backup's walk names them: absolute, `.` and repeated `/` dropped), at most once.
pub fn claims(given: &[String], paths: &[PathBuf]) -> Result<Vec<RecordedClaim>> {
    let backed_up: Vec<PathBuf> = paths
        .iter()
        .map(|path| normalized(path))
        .collect::<Result<_>>()?;
    let mut claims: Vec<RecordedClaim> = Vec::new();
    for json in given {
        let claim: RecordedClaim = serde_json::from_str(json)
            .with_context(|| format!("--claim {}: not a claim record", quoted(json.as_bytes())))?;
        if claim.name.is_empty() || claim.name.chars().any(char::is_control) {
            bail!(
                "--claim for {}: the claim's name must be given, without control characters",
                quoted(claim.path.as_bytes())
            );
        }
        let path = normalized(Path::new(&claim.path))?;
        if !claim.path.starts_with('/') || !backed_up.contains(&path) {
            bail!(
                "--claim names path {}, which is not one of the paths backed up",
                quoted(claim.path.as_bytes())
            );
        }
        if claims.iter().any(|c| Path::new(&c.path) == path) {
            bail!("--claim gives path {} twice", quoted(claim.path.as_bytes()));
        }
        claims.push(RecordedClaim {
            path: path.to_string_lossy().into_owned(),
            ..claim
        });
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Vec<PathBuf> {
        vec!["/data/orders".into(), "/data/./media/".into()]
    }

    #[test]
    fn a_claim_names_a_path_backed_up_once() {
        let given = [
            r#"{"path":"/data/media","name":"media","requestedSize":"5Gi"}"#.to_owned(),
            r#"{"path":"/data//orders","name":"orders"}"#.to_owned(),
        ];
        let claims = claims(&given, &paths()).unwrap();
        assert_eq!(claims[0].requested_size.as_deref(), Some("5Gi"));
        assert_eq!(claims[1].path, "/data/orders");
    }

    #[test]
    fn a_claim_of_another_path_a_repeated_one_or_a_bad_record_is_refused() {
        let refused = |json: &str, again: bool| {
            let mut given = vec![json.to_owned()];
            if again {
                given.push(json.to_owned());
            }
            claims(&given, &paths()).unwrap_err().to_string()
        };
        assert!(refused(r#"{"path":"/data/other","name":"x"}"#, false)
            .contains("not one of the paths backed up"));
        assert!(refused(r#"{"path":"data/orders","name":"x"}"#, false)
            .contains("not one of the paths backed up"));
        assert!(refused(r#"{"path":"/data/orders","name":"x"}"#, true).contains("twice"));
        assert!(refused(r#"{"path":"/data/orders","name":""}"#, false).contains("name"));
        assert!(refused(r#"{"path":"/data/orders","name":"a\nb"}"#, false).contains("name"));
        assert!(refused("{not json", false).contains("not a claim record"));
    }
}
