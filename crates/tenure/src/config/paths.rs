//! Paths in the agent config: resolved against the config file's folder, and compared lexically
//! (without asking the file system) to keep the identity file out of the store's folder.

use std::path::{Component, Path, PathBuf};

use serde_saphyr::Spanned;
use tenure_core::input::{InputError, Position};

/// Whether `inner` is `outer` or inside it, compared lexically ([`lexical`]). When one is absolute
/// and the other relative, both are made absolute against the current folder first (the only
/// thing [`super::parse_config`] asks of its environment).
pub(super) fn is_inside(inner: &Path, outer: &Path) -> bool {
    let (inner, outer) = if inner.is_absolute() == outer.is_absolute() {
        (inner.to_path_buf(), outer.to_path_buf())
    } else {
        match (std::path::absolute(inner), std::path::absolute(outer)) {
            (Ok(inner), Ok(outer)) => (inner, outer),
            _ => return false,
        }
    };
    let (inner, outer) = (lexical(&inner), lexical(&outer));
    let mut rest = inner.components();
    // After `lexical`, `..` only leads a path: a rest that climbs out of `outer` is not inside it.
    outer.components().all(|c| rest.next() == Some(c))
        && rest.next().is_none_or(|c| c != Component::ParentDir)
}

/// `path` with `.` removed and `..` applied to the component before it, without asking the file
/// system (symbolic links are not followed).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(out.components().next_back(), Some(Component::Normal(_))) {
                    out.pop();
                } else {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A path value: non-empty, resolved against `base`.
pub(super) fn path_field(
    errors: &mut Vec<InputError>,
    field: &str,
    value: &Spanned<String>,
    base: &Path,
) -> PathBuf {
    if value.value.trim().is_empty() {
        errors.push(InputError::at(Position::of_spanned(value), format!("{field} must not be empty")));
    }
    resolve(base, &value.value)
}

/// `text` as a path: absolute as written, relative against `base`; `.` components, which change
/// nothing, are left out (`./data` beside `etc/agent.yaml` is `etc/data`).
pub(crate) fn resolve(base: &Path, text: &str) -> PathBuf {
    let path = Path::new(text);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let mut resolved = base.to_path_buf();
    resolved.extend(path.components().filter(|c| *c != Component::CurDir));
    if resolved.as_os_str().is_empty() { PathBuf::from(".") } else { resolved }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_is_decided_component_by_component() {
        let inside = |inner: &str, outer: &str| is_inside(Path::new(inner), Path::new(outer));
        assert!(inside("data/a/identity", "data/a"));
        assert!(inside("data/a", "data/a"), "the store's folder itself");
        assert!(inside("data/b/../a/x", "./data/a"));
        assert!(!inside("data/ab", "data/a"), "a sibling whose name starts alike");
        assert!(!inside("data/a.identity", "data/a"));
        assert!(inside("x.identity", ""), "the current folder holds a relative path");
        assert!(inside("x.identity", "."));
        assert!(!inside("../x.identity", "."), "but not one that climbs out");
        assert!(!inside("../../x", ".."));
        assert!(inside("/var/lib/tenure/id", "/var/lib/tenure"));
        assert!(!inside("/var/lib/tenure.identity", "/var/lib/tenure"));
        let here = std::env::current_dir().expect("a current folder");
        assert!(inside(&here.join("data/id").display().to_string(), "data"), "absolute against relative");
        assert!(!inside("/elsewhere/id", "data"));
    }
}
