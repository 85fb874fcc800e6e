//! `--repo` as clap parses it: into a [`RepositoryLocation`], with an error that never repeats
//! the value as written (it may hold a password before the host).

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use neverwiped_contract::location::RepositoryLocation;

/// Parses `--repo` (and `NEVERWIPED_REPOSITORY`) with [`RepositoryLocation::parse`].
///
/// Clap's own message for a refused value quotes it; this one says only the parser's words,
/// which show the location with any user information replaced.
#[derive(Debug, Clone, Copy)]
pub struct RepositoryLocationParser;

impl TypedValueParser for RepositoryLocationParser {
    type Value = RepositoryLocation;

    fn parse_ref(
        &self,
        command: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<RepositoryLocation, clap::Error> {
        let refuse = |kind, message: String| clap::Error::raw(kind, message).with_cmd(command);
        let text = value.to_str().ok_or_else(|| {
            refuse(
                ErrorKind::InvalidUtf8,
                "the repository is not UTF-8: give a folder or rest:http(s)://host[:port]/path/\n"
                    .into(),
            )
        })?;
        RepositoryLocation::parse(text)
            .map_err(|error| refuse(ErrorKind::ValueValidation, format!("{error}\n")))
    }
}
