//! The `providers:` list of the agent config: each provider's kind and the settings that kind
//! takes (SPEC 7, 10). A setting of another kind (`command` under `sim-cloud`) is refused by
//! name, a missing one (`exec` without `command`) at the entry.

use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;
use tenure_core::fleet_spec::check_provider_name;
use tenure_core::input::{InputError, Position};
use tenure_core::model::ProviderKind;

use super::paths::resolve;
use super::raw::RawProvider;
use super::{
    AWS_INVENTORY_INTERVAL_DEFAULT_MS, EXEC_TIMEOUT_DEFAULT_MS, GARP_COUNT_DEFAULT, GARP_COUNT_MAX,
    GARP_INTERVAL_DEFAULT_MS, GARP_REFRESH_MAX_MS, GARP_REFRESH_MIN_MS, ONPREM_INVENTORY_INTERVAL_DEFAULT_MS,
    ProviderConfig, ProviderSettings, check_url, duration_field,
};

/// Longest Linux interface name (`IFNAMSIZ` less its terminating NUL), in bytes.
pub const INTERFACE_NAME_BYTES_MAX: usize = 15;

/// The settings each kind takes; every other one is an error.
fn allowed_settings(kind: ProviderKind) -> &'static [&'static str] {
    match kind {
        ProviderKind::SimCloud => &["inventoryInterval"],
        ProviderKind::SimOnprem => &["inventoryInterval", "garpRefresh"],
        ProviderKind::Oci | ProviderKind::Azure => &[],
        ProviderKind::Exec => &["command", "timeout"],
        ProviderKind::Onprem => {
            &["interface", "garpCount", "garpInterval", "inventoryInterval", "garpRefresh"]
        }
        ProviderKind::Aws => &["region", "endpointUrl", "inventoryInterval"],
    }
}

/// Validates every provider entry. `action_timeout_ms` bounds an exec provider's `timeout`;
/// relative exec programs are resolved against `base` (the config file's folder).
pub(super) fn validate_providers(
    raws: &[Spanned<RawProvider>],
    base: &Path,
    action_timeout_ms: u64,
    errors: &mut Vec<InputError>,
) -> Vec<ProviderConfig> {
    let mut providers: Vec<ProviderConfig> = Vec::new();
    for raw in raws {
        let entry = Position::of_spanned(raw);
        let p = &raw.value;
        let earlier: Vec<&str> = providers.iter().map(|q| q.name.as_str()).collect();
        if let Err(e) = check_provider_name(&p.name, &earlier) {
            errors.push(e);
        }
        let kind = p.kind.value;
        check_settings_of_kind(p, errors);
        let settings = match kind {
            ProviderKind::SimCloud | ProviderKind::SimOnprem => ProviderSettings::Sim,
            ProviderKind::Exec => exec_settings(p, entry, base, action_timeout_ms, errors),
            ProviderKind::Onprem => onprem_settings(p, entry, errors),
            ProviderKind::Aws => aws_settings(p, entry, errors),
            // No settings and no executor in this version: a kind this build lacks, refused by the
            // agent's start checks (exit 3, as `aws` without its feature), not a bad config.
            ProviderKind::Oci | ProviderKind::Azure => ProviderSettings::Sim,
        };
        let inventory_interval_ms = inventory_interval(p, errors);
        let garp_refresh_ms = garp_refresh(p, errors);
        providers.push(ProviderConfig {
            name: p.name.value.clone(),
            kind,
            settings,
            inventory_interval_ms,
            garp_refresh_ms,
        });
    }
    providers
}

/// `inventoryInterval`: `0s` turns the reads off; `aws` reads every
/// [`AWS_INVENTORY_INTERVAL_DEFAULT_MS`] by default, `onprem` every
/// [`ONPREM_INVENTORY_INTERVAL_DEFAULT_MS`], the simulated kinds only when asked (a
/// setting of another kind is refused by [`check_settings_of_kind`]).
fn inventory_interval(p: &RawProvider, errors: &mut Vec<InputError>) -> Option<u64> {
    let default_ms = match p.kind.value {
        ProviderKind::Aws => AWS_INVENTORY_INTERVAL_DEFAULT_MS,
        ProviderKind::Onprem => ONPREM_INVENTORY_INTERVAL_DEFAULT_MS,
        ProviderKind::SimCloud | ProviderKind::SimOnprem if p.inventory_interval.is_some() => 0,
        _ => return None,
    };
    let ms = duration_field(errors, "inventoryInterval", p.inventory_interval.as_ref(), default_ms, false);
    (ms > 0).then_some(ms)
}

/// `garpRefresh`: how often an on-prem provider repeats the announcement of every address this
/// agent holds on it. Absent or `0s`: off (the default); otherwise at least
/// [`GARP_REFRESH_MIN_MS`] and at most [`GARP_REFRESH_MAX_MS`]. Another kind's is refused by [`check_settings_of_kind`].
fn garp_refresh(p: &RawProvider, errors: &mut Vec<InputError>) -> Option<u64> {
    let text = p.garp_refresh.as_ref()?;
    let ms = duration_field(errors, "garpRefresh", Some(text), 0, false);
    if ms > 0 && ms < GARP_REFRESH_MIN_MS {
        errors.push(InputError::at(
            Position::of_spanned(text),
            format!(
                "garpRefresh {} is shorter than {}: use at least that, or 0s to turn the refresh off",
                text.value.trim(),
                super::format_ms(GARP_REFRESH_MIN_MS)
            ),
        ));
        return None;
    }
    if ms > GARP_REFRESH_MAX_MS {
        errors.push(InputError::at(
            Position::of_spanned(text),
            format!(
                "garpRefresh {} is longer than {}: switches forget a MAC in minutes; use at most that",
                text.value.trim(),
                super::format_ms(GARP_REFRESH_MAX_MS)
            ),
        ));
        return None;
    }
    (ms > 0).then_some(ms)
}

/// Refuses every setting the provider's kind does not take, at the setting.
fn check_settings_of_kind(p: &RawProvider, errors: &mut Vec<InputError>) {
    let present: [(&str, Option<Position>); 9] = [
        ("command", p.command.as_ref().map(Position::of_spanned)),
        ("timeout", p.timeout.as_ref().map(Position::of_spanned)),
        ("interface", p.interface.as_ref().map(Position::of_spanned)),
        ("garpCount", p.garp_count.as_ref().map(Position::of_spanned)),
        ("garpInterval", p.garp_interval.as_ref().map(Position::of_spanned)),
        ("region", p.region.as_ref().map(Position::of_spanned)),
        ("endpointUrl", p.endpoint_url.as_ref().map(Position::of_spanned)),
        ("inventoryInterval", p.inventory_interval.as_ref().map(Position::of_spanned)),
        ("garpRefresh", p.garp_refresh.as_ref().map(Position::of_spanned)),
    ];
    let kind = p.kind.value;
    let allowed = allowed_settings(kind);
    for (field, position) in present {
        if let Some(position) = position
            && !allowed.contains(&field)
        {
            let takes = if allowed.is_empty() {
                "no settings".to_owned()
            } else {
                allowed.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", ")
            };
            errors.push(InputError::at(
                position,
                format!("provider kind `{}` does not take `{field}` (it takes {takes})", kind.as_str()),
            ));
        }
    }
}

fn exec_settings(
    p: &RawProvider,
    entry: Position,
    base: &Path,
    action_timeout_ms: u64,
    errors: &mut Vec<InputError>,
) -> ProviderSettings {
    let name = &p.name.value;
    let mut command = Vec::new();
    match &p.command {
        None => errors.push(InputError::at(
            entry,
            format!("exec provider `{name}` needs `command`: the program and its arguments, as a list"),
        )),
        Some(list) if list.value.is_empty() => errors.push(InputError::at(
            Position::of_spanned(list),
            format!("exec provider `{name}`: `command` must name at least the program"),
        )),
        Some(list) => {
            for (index, argument) in list.value.iter().enumerate() {
                if argument.value.contains('\0') {
                    errors.push(InputError::at(
                        Position::of_spanned(argument),
                        "a command argument must not contain a NUL character".to_owned(),
                    ));
                } else if index == 0 {
                    match program_path(&argument.value, base) {
                        Some(program) => command.push(program),
                        None => errors.push(InputError::at(
                            Position::of_spanned(argument),
                            format!("exec provider `{name}`: the program must not be empty"),
                        )),
                    }
                } else {
                    command.push(argument.value.clone());
                }
            }
        }
    }
    let explicit = p.timeout.is_some();
    let default_ms = EXEC_TIMEOUT_DEFAULT_MS.min(action_timeout_ms);
    let timeout_ms = duration_field(errors, "timeout", p.timeout.as_ref(), default_ms, true);
    if explicit
        && timeout_ms > action_timeout_ms
        && let Some(timeout) = &p.timeout
    {
        errors.push(InputError::at(
            Position::of_spanned(timeout),
            format!(
                "exec provider `{name}`: timeout {} is longer than actionTimeout {}, which bounds every \
                 provider call; lower timeout or raise actionTimeout",
                timeout.value.trim(),
                super::format_ms(action_timeout_ms)
            ),
        ));
    }
    ProviderSettings::Exec { command, timeout_ms }
}

/// The program to run: a relative path with a `/` in it (`hooks/x.sh`, `./x.sh`) is relative to
/// the config file's folder; a bare name (`logger`) is looked up in `PATH` when run. `None` when
/// empty.
fn program_path(program: &str, base: &Path) -> Option<String> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') && Path::new(program).is_relative() {
        let resolved: PathBuf = resolve(base, program);
        let resolved = resolved.to_string_lossy().into_owned();
        // A program in the working folder (a config named without a folder) keeps its `./`:
        // without a slash it would be looked up in PATH, another program or none.
        return Some(if resolved.contains('/') { resolved } else { format!("./{resolved}") });
    }
    Some(program.to_owned())
}

fn onprem_settings(p: &RawProvider, entry: Position, errors: &mut Vec<InputError>) -> ProviderSettings {
    let interface = match &p.interface {
        None => {
            errors.push(InputError::at(
                entry,
                format!(
                    "onprem provider `{}` needs `interface`: the Linux interface it answers on",
                    p.name.value
                ),
            ));
            String::new()
        }
        Some(text) => {
            if let Err(m) = check_interface_name(&text.value) {
                errors.push(InputError::at(Position::of_spanned(text), m));
            }
            text.value.clone()
        }
    };
    let garp_count = p.garp_count.as_ref().map_or(GARP_COUNT_DEFAULT, |count| {
        if count.value > GARP_COUNT_MAX {
            errors.push(InputError::at(
                Position::of_spanned(count),
                format!("garpCount {} is more than {GARP_COUNT_MAX}", count.value),
            ));
        }
        count.value
    });
    let garp_interval_ms =
        duration_field(errors, "garpInterval", p.garp_interval.as_ref(), GARP_INTERVAL_DEFAULT_MS, false);
    ProviderSettings::Onprem { interface, garp_count, garp_interval_ms }
}

/// Linux's rule for an interface name (`dev_valid_name`): 1 to 15 bytes, not `.` or `..`, no
/// `/`, `:` or whitespace.
pub fn check_interface_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > INTERFACE_NAME_BYTES_MAX {
        return Err(format!(
            "interface `{name}` must be 1 to {INTERFACE_NAME_BYTES_MAX} bytes long (a Linux interface name)"
        ));
    }
    if name == "." || name == ".." || name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        return Err(format!("`{name}` is not a Linux interface name (no `/`, `:` or spaces)"));
    }
    Ok(())
}

fn aws_settings(p: &RawProvider, entry: Position, errors: &mut Vec<InputError>) -> ProviderSettings {
    let region = match &p.region {
        None => {
            errors.push(InputError::at(
                entry,
                format!("aws provider `{}` needs `region` (for instance `us-east-1`)", p.name.value),
            ));
            String::new()
        }
        Some(text) => {
            let valid = !text.value.is_empty()
                && text.value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !valid {
                errors.push(InputError::at(
                    Position::of_spanned(text),
                    format!("`{}` is not an AWS region name (like `us-east-1`)", text.value),
                ));
            }
            text.value.clone()
        }
    };
    let endpoint_url = p.endpoint_url.as_ref().map(|url| {
        if let Err(m) = check_url(&url.value) {
            errors.push(InputError::at(Position::of_spanned(url), format!("endpointUrl: {m}")));
        }
        url.value.clone()
    });
    ProviderSettings::Aws { region, endpoint_url }
}

#[cfg(test)]
mod program_tests {
    use super::*;

    #[test]
    fn a_relative_program_stays_a_path_whatever_the_config_folder() {
        assert_eq!(program_path("./hook.sh", Path::new("")).as_deref(), Some("./hook.sh"));
        assert_eq!(program_path("./hook.sh", Path::new("ex")).as_deref(), Some("ex/hook.sh"));
        assert_eq!(
            program_path("bin/hook", Path::new("/etc/tenure")).as_deref(),
            Some("/etc/tenure/bin/hook")
        );
        assert_eq!(program_path("true", Path::new("")).as_deref(), Some("true"), "a bare name is PATH's");
    }
}
