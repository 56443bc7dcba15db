//! The `exec` provider's settings ([`ExecSettings`]: `command`, `timeout`), their check, and
//! `build()`: an [`ExecHook`] per provider, registered in [`crate::exec::registry`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::input::Position;
use tenure_core::model::ProviderKind;

use super::ExecHook;
use crate::config::SettingsCheck;
use crate::exec::Executor;
use crate::exec::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};

/// Default `timeout` of an exec provider (SPEC 7), unless `actionTimeout` is shorter.
pub const EXEC_TIMEOUT_DEFAULT_MS: u64 = 10_000;

/// Extra time an exec hook's call gets past the hook's own timeout, so that the hook's timeout
/// (which kills its process group) fires first and names itself.
pub const HOOK_DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// `kind: exec` settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecSettings {
    /// The program and its arguments (no shell). A relative program path with a `/` in it is
    /// resolved against the config file's folder; a bare name is looked up in `PATH`.
    pub command: Vec<String>,
    /// How long one run may take before its process group is killed.
    pub timeout_ms: u64,
}

/// `kind: exec` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecRaw {
    command: Option<Spanned<Vec<Spanned<String>>>>,
    timeout: Option<Spanned<String>>,
}

impl Provider for ExecSettings {
    const KIND: ProviderKind = ProviderKind::Exec;
    type Raw = ExecRaw;

    /// `command` must name a program; a `timeout` longer than `actionTimeout` is refused, an
    /// omitted one is [`EXEC_TIMEOUT_DEFAULT_MS`] or `actionTimeout`, whichever is shorter.
    fn check(raw: ExecRaw, check: &mut SettingsCheck<'_>) -> Self {
        let name = check.name().to_owned();
        let mut command = Vec::new();
        match &raw.command {
            None => check.error(
                check.entry(),
                format!("exec provider `{name}` needs `command`: the program and its arguments, as a list"),
            ),
            Some(list) if list.value.is_empty() => check.error(
                Position::of_spanned(list),
                format!("exec provider `{name}`: `command` must name at least the program"),
            ),
            Some(list) => {
                for (index, argument) in list.value.iter().enumerate() {
                    if argument.value.contains('\0') {
                        check.error(
                            Position::of_spanned(argument),
                            "a command argument must not contain a NUL character",
                        );
                    } else if index == 0 {
                        match program_path(&argument.value, |path| check.resolve(path)) {
                            Some(program) => command.push(program),
                            None => check.error(
                                Position::of_spanned(argument),
                                format!("exec provider `{name}`: the program must not be empty"),
                            ),
                        }
                    } else {
                        command.push(argument.value.clone());
                    }
                }
            }
        }
        let action_timeout_ms = check.action_timeout_ms();
        let default_ms = EXEC_TIMEOUT_DEFAULT_MS.min(action_timeout_ms);
        let timeout_ms = check.duration("timeout", raw.timeout.as_ref(), default_ms, true);
        if let Some(timeout) = &raw.timeout
            && timeout_ms > action_timeout_ms
        {
            check.error(
                Position::of_spanned(timeout),
                format!(
                    "exec provider `{name}`: timeout {} is longer than actionTimeout {}, which bounds every \
                     provider call; lower timeout or raise actionTimeout",
                    timeout.value.trim(),
                    crate::config::format_ms(action_timeout_ms)
                ),
            );
        }
        Self { command, timeout_ms }
    }
}

/// The program to run: a relative path with a `/` in it (`hooks/x.sh`, `./x.sh`) is relative to
/// the config file's folder (`resolve`); a bare name (`logger`) is looked up in `PATH` when run.
/// `None` when empty.
fn program_path(program: &str, resolve: impl FnOnce(&str) -> std::path::PathBuf) -> Option<String> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') && Path::new(program).is_relative() {
        let resolved = resolve(program).to_string_lossy().into_owned();
        // A program in the working folder (a config named without a folder) keeps its `./`:
        // without a slash it would be looked up in PATH, another program or none.
        return Some(if resolved.contains('/') { resolved } else { format!("./{resolved}") });
    }
    Some(program.to_owned())
}

impl From<ExecSettings> for ProviderSettings {
    fn from(settings: ExecSettings) -> Self {
        Self::Exec(settings)
    }
}

impl Runtime for ExecSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    /// An [`ExecHook`] whose processes carry the context's owner mark, recorded in its hook
    /// groups when it has them.
    fn build(&self, context: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        let mut hook = ExecHook::new(self.command.clone(), Duration::from_millis(self.timeout_ms))
            .owned_by(context.owner);
        if let Some(groups) = context.groups {
            hook = hook.recorded_in(groups.clone());
        }
        Ok(Arc::new(hook))
    }

    /// The hook's own `timeout` and [`HOOK_DEADLINE_GRACE`], so that its kill names itself.
    fn call_timeout(&self, _action_timeout: Duration) -> Duration {
        Duration::from_millis(self.timeout_ms) + HOOK_DEADLINE_GRACE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_program_stays_a_path_whatever_the_config_folder() {
        let against = |base: &'static str| move |path: &str| crate::config::resolve(Path::new(base), path);
        assert_eq!(program_path("./hook.sh", against("")).as_deref(), Some("./hook.sh"));
        assert_eq!(program_path("./hook.sh", against("ex")).as_deref(), Some("ex/hook.sh"));
        assert_eq!(program_path("bin/hook", against("/etc/tenure")).as_deref(), Some("/etc/tenure/bin/hook"));
        assert_eq!(program_path("true", against("")).as_deref(), Some("true"), "a bare name is PATH's");
    }
}
