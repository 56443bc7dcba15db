//! The flags of the verbs that change something through a running agent (`drain`, `undrain`,
//! `approve`, `desire`, `undesire`): those of every verb that talks to an agent
//! ([`RemoteArgs`]) and the API token. The read-only verbs (`ownership`, `actions`) take
//! [`RemoteArgs`] alone, so their `--help` does not offer a token they never send.

use std::path::PathBuf;

use clap::Args;

use super::remote::RemoteArgs;

/// `RemoteArgs` plus `--token-file`.
#[derive(Debug, Args)]
pub struct ChangeArgs {
    #[command(flatten)]
    remote: RemoteArgs,
    /// The file holding the agent's API token (its apiTokenFile) [default: $TENURE_TOKEN_FILE].
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

impl ChangeArgs {
    /// The flags as the client reads them.
    pub fn into_remote(self) -> RemoteArgs {
        self.remote.with_token_file(self.token_file)
    }
}
