//! The `store` section (embedded or etcd: endpoints, prefix, TLS, user) and `identityFile`, with
//! its default named after the store's folder and kept outside it.

use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;
use tenure_core::input::{InputError, Position};

use super::paths::{is_inside, path_field};
use super::raw::{self, RawConfig, RawStoreKind};
use super::{
    ETCD_PREFIX_DEFAULT, EtcdTls, IDENTITY_FILE_EXTENSION, SNAPSHOT_EVERY_DEFAULT, StoreConfig, check_url,
};

pub(super) fn validate_store(
    store: &Spanned<raw::RawStore>,
    base: &Path,
    errors: &mut Vec<InputError>,
) -> StoreConfig {
    let s = &store.value;
    let path = path_field(errors, "store.path", &s.path, base);
    let kind = s.kind.as_ref().map_or(RawStoreKind::Embedded, |k| k.value);
    match kind {
        RawStoreKind::Embedded => {
            for (field, position) in [
                ("endpoints", s.endpoints.as_ref().map(Position::of_spanned)),
                ("prefix", s.prefix.as_ref().map(Position::of_spanned)),
                ("snapshotEvery", s.snapshot_every.as_ref().map(Position::of_spanned)),
                ("tls", s.tls.as_ref().map(Position::of_spanned)),
                ("user", s.user.as_ref().map(Position::of_spanned)),
                ("passwordFile", s.password_file.as_ref().map(Position::of_spanned)),
            ] {
                if let Some(position) = position {
                    errors.push(InputError::at(
                        position,
                        format!("store kind `embedded` does not take `{field}` (only `kind: etcd` does)"),
                    ));
                }
            }
            StoreConfig::Embedded { path }
        }
        RawStoreKind::Etcd => {
            let mut endpoints = Vec::new();
            match &s.endpoints {
                None => errors.push(InputError::at(
                    Position::of_spanned(store),
                    "an etcd store needs `endpoints`, like `[http://127.0.0.1:2379]`".to_owned(),
                )),
                Some(list) if list.value.is_empty() => errors.push(InputError::at(
                    Position::of_spanned(list),
                    "store.endpoints must list at least one etcd URL".to_owned(),
                )),
                Some(list) => {
                    for url in &list.value {
                        if let Err(m) = check_url(&url.value) {
                            errors.push(InputError::at(
                                Position::of_spanned(url),
                                format!("store.endpoints: {m}"),
                            ));
                        }
                        endpoints.push(url.value.clone());
                    }
                }
            }
            let prefix = match &s.prefix {
                None => ETCD_PREFIX_DEFAULT.to_owned(),
                Some(prefix) => {
                    if !prefix.value.starts_with('/') {
                        errors.push(InputError::at(
                            Position::of_spanned(prefix),
                            format!("store.prefix `{}` must start with `/`", prefix.value),
                        ));
                    }
                    prefix.value.clone()
                }
            };
            let snapshot_every = match &s.snapshot_every {
                None => SNAPSHOT_EVERY_DEFAULT,
                Some(n) if n.value == 0 => {
                    errors.push(InputError::at(
                        Position::of_spanned(n),
                        "store.snapshotEvery must be at least 1 (events between two snapshots)".to_owned(),
                    ));
                    SNAPSHOT_EVERY_DEFAULT
                }
                Some(n) => n.value,
            };
            let tls = s.tls.as_ref().map(|tls| {
                let t = &tls.value;
                if t.cert.is_some() != t.key.is_some() {
                    errors.push(InputError::at(
                        Position::of_spanned(tls),
                        "store.tls: give both `cert` and `key` (a client certificate), or neither".to_owned(),
                    ));
                }
                EtcdTls {
                    ca: path_field(errors, "store.tls.ca", &t.ca, base),
                    cert: t.cert.as_ref().map(|c| path_field(errors, "store.tls.cert", c, base)),
                    key: t.key.as_ref().map(|k| path_field(errors, "store.tls.key", k, base)),
                }
            });
            for url in &endpoints {
                if url.starts_with("https://") && tls.is_none() {
                    errors.push(InputError::at(
                        Position::of_spanned(store),
                        format!("store.endpoints: `{url}` is https: give `tls: {{ca: FILE}}` (the CA that signed etcd's certificate)"),
                    ));
                    break;
                }
                if url.starts_with("http://") && tls.is_some() {
                    errors.push(InputError::at(
                        Position::of_spanned(store),
                        format!("store.endpoints: `{url}` is plain http, but `tls` is set: use https URLs"),
                    ));
                    break;
                }
            }
            let user = match (&s.user, &s.password_file) {
                (Some(user), Some(file)) => {
                    Some((user.value.clone(), path_field(errors, "store.passwordFile", file, base)))
                }
                (None, None) => None,
                (Some(user), None) => {
                    errors.push(InputError::at(
                        Position::of_spanned(user),
                        "store.user needs `passwordFile` (the file holding its etcd password)".to_owned(),
                    ));
                    None
                }
                (None, Some(file)) => {
                    errors.push(InputError::at(
                        Position::of_spanned(file),
                        "store.passwordFile needs `user` (the etcd user it is the password of)".to_owned(),
                    ));
                    None
                }
            };
            StoreConfig::Etcd { endpoints, prefix, path, snapshot_every, tls, user }
        }
    }
}

/// `identityFile`, or its default beside the config file, named after the store's folder
/// (`<store folder name>.identity`, whatever the config file is called); never inside the
/// store's folder.
pub(super) fn validate_identity_file(
    raw: &RawConfig,
    base: &Path,
    store: &StoreConfig,
    errors: &mut Vec<InputError>,
) -> PathBuf {
    let store_path = store.path();
    let (identity, position) = match &raw.identity_file {
        Some(file) => (path_field(errors, "identityFile", file, base), Position::of_spanned(file)),
        None => {
            let position = Position::of_spanned(&raw.store.value.path);
            match default_identity_file(base, store_path) {
                Some(identity) => (identity, position),
                None => {
                    errors.push(InputError::at(
                        position,
                        format!(
                            "store.path `{}` has no folder name to name the default identity file after \
                             (`<store folder name>.identity` beside this config file): set identityFile",
                            store_path.display()
                        ),
                    ));
                    return PathBuf::new();
                }
            }
        }
    };
    if is_inside(&identity, store_path) {
        let what = if raw.identity_file.is_some() {
            format!("identityFile `{}`", identity.display())
        } else {
            format!("the default identityFile `{}` (beside this config file)", identity.display())
        };
        errors.push(InputError::at(
            position,
            format!(
                "{what} is inside store.path `{}`: a copy of an old store would carry it along; keep it \
                 outside",
                store_path.display()
            ),
        ));
    }
    identity
}

/// The default identity file of a store in folder `store_path`, for a config file in folder
/// `base`: `<store folder name>.identity` in the config's folder — kept apart from the data
/// (a restore of the data disk, a copy of the store's folder do not take it along) and named
/// after the store, never after the config file (a copy of the config under another name finds
/// the same file). `None` when the store path ends in no folder name (`/`, `..`).
fn default_identity_file(base: &Path, store_path: &Path) -> Option<PathBuf> {
    let mut file = store_path.file_name()?.to_os_string();
    file.push(format!(".{IDENTITY_FILE_EXTENSION}"));
    Some(base.join(file))
}
