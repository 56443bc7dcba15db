//! The OCI SDK and CLI configuration file (`~/.oci/config`): an INI file of profiles
//! (`[DEFAULT]`, `[NAME]`), each with `user`, `fingerprint`, `key_file`, `tenancy` and `region`;
//! a named profile takes the `DEFAULT` profile's values it does not set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::sign::SigningKey;

/// Why a profile could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The file cannot be read.
    #[error("cannot read the OCI config file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// The reason.
        reason: String,
    },
    /// The file has no such profile.
    #[error("the OCI config file {path} has no profile [{profile}] (it has: {have})")]
    NoProfile {
        /// The file.
        path: String,
        /// The profile asked for.
        profile: String,
        /// The profiles it has, comma-separated.
        have: String,
    },
    /// The profile lacks a key.
    #[error("profile [{profile}] of {path} has no `{key}`")]
    Missing {
        /// The file.
        path: String,
        /// The profile.
        profile: String,
        /// The key missing.
        key: &'static str,
    },
    /// The key file cannot be read or is not a usable key.
    #[error("key_file {path} of profile [{profile}]: {reason}")]
    Key {
        /// The key file.
        path: String,
        /// The profile.
        profile: String,
        /// The reason.
        reason: String,
    },
}

/// An API signing key from a profile: its key id (`<tenancy>/<user>/<fingerprint>`) and key.
#[derive(Clone, Debug)]
pub struct ApiKey {
    /// `<tenancy>/<user>/<fingerprint>`.
    pub key_id: String,
    /// The private key.
    pub key: SigningKey,
}

/// `~` or `~/…` expanded with `$HOME`.
#[must_use]
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

/// The sections of an INI text: name → key → value (`#` and `;` start comments).
fn sections(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut all: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_owned();
            all.entry(name.clone()).or_default();
            current = Some(name);
        } else if let (Some(section), Some((key, value))) = (&current, line.split_once('=')) {
            all.entry(section.clone()).or_default().insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    all
}

/// The values of `profile` in the file at `path` (with `DEFAULT`'s where it sets none).
///
/// # Errors
///
/// [`ProfileError::File`] or [`ProfileError::NoProfile`].
pub fn read_profile(path: &Path, profile: &str) -> Result<BTreeMap<String, String>, ProfileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ProfileError::File { path: shown.clone(), reason: e.to_string() })?;
    let mut all = sections(&text);
    let Some(own) = all.remove(profile) else {
        return Err(ProfileError::NoProfile {
            path: shown,
            profile: profile.to_owned(),
            have: all.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    let mut values = all.remove("DEFAULT").unwrap_or_default();
    values.extend(own);
    Ok(values)
}

/// The API key of `profile` in the file at `path`: its four keys present, its key file read.
///
/// # Errors
///
/// Any [`ProfileError`].
pub fn api_key(path: &Path, profile: &str) -> Result<ApiKey, ProfileError> {
    let values = read_profile(path, profile)?;
    let shown = path.display().to_string();
    let get = |key: &'static str| {
        values.get(key).filter(|v| !v.is_empty()).cloned().ok_or_else(|| ProfileError::Missing {
            path: shown.clone(),
            profile: profile.to_owned(),
            key,
        })
    };
    let (tenancy, user, fingerprint, key_file) =
        (get("tenancy")?, get("user")?, get("fingerprint")?, get("key_file")?);
    let key_path = expand_home(&key_file);
    let key_error = |reason: String| ProfileError::Key {
        path: key_path.display().to_string(),
        profile: profile.to_owned(),
        reason,
    };
    let pem = std::fs::read_to_string(&key_path).map_err(|e| key_error(e.to_string()))?;
    let key = SigningKey::from_pem(&pem).map_err(|e| key_error(e.to_string()))?;
    Ok(ApiKey { key_id: format!("{tenancy}/{user}/{fingerprint}"), key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_profile_takes_the_default_values_it_does_not_set() {
        let all = sections("# c\n[DEFAULT]\nuser = u1\nregion=r\n\n[OTHER]\nuser=u2\n; c\n");
        assert_eq!(all["DEFAULT"]["user"], "u1");
        assert_eq!(all["OTHER"]["user"], "u2");
        let dir = std::env::temp_dir().join(format!("tenure-oci-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("config");
        std::fs::write(&path, "[DEFAULT]\nuser = u1\nregion=r\n[OTHER]\nuser=u2\n").expect("write");
        let other = read_profile(&path, "OTHER").expect("reads");
        assert_eq!((other["user"].as_str(), other["region"].as_str()), ("u2", "r"));
        let missing = read_profile(&path, "NOPE").expect_err("no such profile");
        assert!(missing.to_string().contains("has no profile [NOPE] (it has: DEFAULT, OTHER)"), "{missing}");
        let absent = api_key(&path, "OTHER").expect_err("no tenancy");
        assert!(absent.to_string().contains("has no `tenancy`"), "{absent}");
        assert!(matches!(read_profile(&dir.join("none"), "DEFAULT"), Err(ProfileError::File { .. })));
    }
}
