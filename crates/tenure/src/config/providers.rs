//! The `providers:` list of the agent config (SPEC 7, 10), read in two steps so that every
//! mistake keeps its `line:column`:
//!
//! 1. with the rest of the file (`raw.rs`'s [`RawProvider`]): each entry's `name` and `kind`,
//!    every other key left for step 2 (an unknown kind is serde's error there, at the `kind`);
//! 2. the `providers:` list again ([`validate_providers`]), each entry straight into its kind's
//!    settings struct, chosen by the kind read in step 1 (`exec::registry::read`). Serde's
//!    internally tagged enums would buffer an entry and lose every position, so the tag is read
//!    first and the entry deserialized live. A key the kind does not take is refused by name at
//!    its value, with the keys it does take ([`SettingsOf`]), and reading goes on, so that every
//!    mistake of the file is reported at once.
//!
//! What each kind takes and checks is its module's ([`crate::exec::registry`]); this file holds
//! the two steps, the checks shared by every entry (names, `inventoryInterval`, `garpRefresh`)
//! and [`SettingsCheck`], what a kind's check reports to.

use std::path::{Path, PathBuf};

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IgnoredAny, IntoDeserializer as _, MapAccess, Visitor,
};
use serde_saphyr::Spanned;
use tenure_core::fleet_spec::check_provider_name;
use tenure_core::input::{InputError, Position};
use tenure_core::model::ProviderKind;

use super::paths::resolve;
use super::raw::RawProvider;
use super::{GARP_REFRESH_MAX_MS, GARP_REFRESH_MIN_MS, ProviderConfig, check_url, duration_field};
use crate::exec::registry;

/// Validates every provider entry: `raws` as step 1 read them from `text`, whose `providers:`
/// list step 2 reads again. `action_timeout_ms` bounds an exec provider's `timeout`; relative
/// paths are resolved against `base` (the config file's folder). Mistakes are pushed to
/// `errors`.
///
/// # Errors
///
/// The entry that step 2 cannot read at all (a value of the wrong type, a key given twice): one
/// located error, as a YAML error in step 1 is.
pub(super) fn validate_providers(
    text: &str,
    raws: &[Spanned<RawProvider>],
    base: &Path,
    action_timeout_ms: u64,
    errors: &mut Vec<InputError>,
) -> Result<Vec<ProviderConfig>, InputError> {
    let mut names: Vec<&str> = Vec::new();
    for raw in raws {
        if let Err(e) = check_provider_name(&raw.value.name, &names) {
            errors.push(e);
        }
        names.push(&raw.value.name.value);
    }
    let context = Context { raws, base, action_timeout_ms };
    let mut checked = Vec::with_capacity(raws.len());
    serde_saphyr::with_deserializer_from_str(text, |document| {
        DocumentSeed { context: &context, checked: &mut checked, errors: &mut *errors }.deserialize(document)
    })
    .map_err(|e| InputError::from_yaml_in(text, &e))?;
    Ok(checked)
}

/// What a kind's check ([`registry::Provider::check`]) reads and reports to: the entry it checks,
/// and the mistakes it finds, each at its place.
pub struct SettingsCheck<'a> {
    name: &'a str,
    entry: Position,
    base: &'a Path,
    action_timeout_ms: u64,
    errors: &'a mut Vec<InputError>,
    inventory_interval_ms: Option<u64>,
    garp_refresh_ms: Option<u64>,
}

impl<'a> SettingsCheck<'a> {
    fn new(raw: &'a Spanned<RawProvider>, context: &Context<'a>, errors: &'a mut Vec<InputError>) -> Self {
        Self {
            name: &raw.value.name.value,
            entry: Position::of_spanned(raw),
            base: context.base,
            action_timeout_ms: context.action_timeout_ms,
            errors,
            inventory_interval_ms: None,
            garp_refresh_ms: None,
        }
    }

    /// A check of an entry named `name` at no place, with `actionTimeout` at its default.
    #[cfg(test)]
    pub(crate) fn for_test(name: &'a str, errors: &'a mut Vec<InputError>) -> Self {
        Self {
            name,
            entry: Position::default(),
            base: Path::new(""),
            action_timeout_ms: super::ACTION_TIMEOUT_DEFAULT_MS,
            errors,
            inventory_interval_ms: None,
            garp_refresh_ms: None,
        }
    }

    /// The provider's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.name
    }

    /// Where the entry starts: the place of a mistake about something missing from it.
    #[must_use]
    pub fn entry(&self) -> Position {
        self.entry
    }

    /// The agent's `actionTimeout`, which bounds every provider call.
    #[must_use]
    pub fn action_timeout_ms(&self) -> u64 {
        self.action_timeout_ms
    }

    /// `path` resolved against the config file's folder.
    #[must_use]
    pub fn resolve(&self, path: &str) -> PathBuf {
        resolve(self.base, path)
    }

    /// Reports a mistake at `at`.
    pub fn error(&mut self, at: Position, message: impl Into<String>) {
        self.errors.push(InputError::at(at, message));
    }

    /// A duration setting (Go style: `10s`, `1500ms`), or `default_ms` when absent or wrong;
    /// `positive` refuses `0s`.
    pub fn duration(
        &mut self,
        key: &str,
        value: Option<&Spanned<String>>,
        default_ms: u64,
        positive: bool,
    ) -> u64 {
        duration_field(self.errors, key, value, default_ms, positive)
    }

    /// An `http://` or `https://` URL setting.
    pub fn url(&mut self, key: &str, value: &Spanned<String>) {
        if let Err(m) = check_url(&value.value) {
            self.error(Position::of_spanned(value), format!("{key}: {m}"));
        }
    }

    /// `inventoryInterval`, for a kind whose inventory is read (drift repair's input): every
    /// `default_ms` when absent (`0`: only when asked); `0s` turns the reads off.
    pub fn inventory_interval(&mut self, value: Option<&Spanned<String>>, default_ms: u64) {
        let ms = self.duration("inventoryInterval", value, default_ms, false);
        self.inventory_interval_ms = (ms > 0).then_some(ms);
    }

    /// `garpRefresh`, for an on-prem kind: how often the announcement of every address this agent
    /// holds on the provider is repeated. Absent or `0s`: off (the default); otherwise at least
    /// [`GARP_REFRESH_MIN_MS`] and at most [`GARP_REFRESH_MAX_MS`].
    pub fn garp_refresh(&mut self, value: Option<&Spanned<String>>) {
        let Some(text) = value else { return };
        let ms = self.duration("garpRefresh", Some(text), 0, false);
        if ms > 0 && ms < GARP_REFRESH_MIN_MS {
            self.error(
                Position::of_spanned(text),
                format!(
                    "garpRefresh {} is shorter than {}: use at least that, or 0s to turn the refresh off",
                    text.value.trim(),
                    super::format_ms(GARP_REFRESH_MIN_MS)
                ),
            );
            return;
        }
        if ms > GARP_REFRESH_MAX_MS {
            self.error(
                Position::of_spanned(text),
                format!(
                    "garpRefresh {} is longer than {}: switches forget a MAC in minutes; use at most that",
                    text.value.trim(),
                    super::format_ms(GARP_REFRESH_MAX_MS)
                ),
            );
            return;
        }
        self.garp_refresh_ms = (ms > 0).then_some(ms);
    }

    /// Deserializes `entry` into `T`, the settings as written of `kind`: the keys `T` takes go
    /// to it, `name` and `kind` are skipped (step 1 read them), every other key is refused by
    /// name at its value.
    pub(crate) fn deserialize<'de, T: DeserializeOwned, M: MapAccess<'de>>(
        &mut self,
        kind: ProviderKind,
        entry: M,
    ) -> Result<T, M::Error> {
        let takes = keys_of::<T>();
        T::deserialize(de::value::MapAccessDeserializer::new(SettingsOf { entry, kind, takes, check: self }))
    }
}

/// What every entry's check needs besides the entry.
struct Context<'a> {
    raws: &'a [Spanned<RawProvider>],
    base: &'a Path,
    action_timeout_ms: u64,
}

/// Step 2 over the whole document: every key but `providers` skipped.
struct DocumentSeed<'c, 'a> {
    context: &'c Context<'a>,
    checked: &'c mut Vec<ProviderConfig>,
    errors: &'c mut Vec<InputError>,
}

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the agent config")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "providers" {
                map.next_value_seed(ProvidersSeed {
                    context: self.context,
                    checked: &mut *self.checked,
                    errors: &mut *self.errors,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Step 2 over `providers:`: entry `i` is of the kind step 1 read for entry `i`.
struct ProvidersSeed<'c, 'a> {
    context: &'c Context<'a>,
    checked: &'c mut Vec<ProviderConfig>,
    errors: &'c mut Vec<InputError>,
}

impl<'de> DeserializeSeed<'de> for ProvidersSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ProvidersSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of providers")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for raw in self.context.raws {
            let entry = EntrySeed { raw, context: self.context, errors: &mut *self.errors };
            match seq.next_element_seed(entry)? {
                Some(provider) => self.checked.push(provider),
                None => return Err(de::Error::custom("the providers list changed between two reads")),
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// One entry, read into its kind's settings and checked.
struct EntrySeed<'c, 'a> {
    raw: &'a Spanned<RawProvider>,
    context: &'c Context<'a>,
    errors: &'c mut Vec<InputError>,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_, '_> {
    type Value = ProviderConfig;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<ProviderConfig, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_, '_> {
    type Value = ProviderConfig;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a provider entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, entry: A) -> Result<ProviderConfig, A::Error> {
        let kind = self.raw.value.kind.value;
        let mut check = SettingsCheck::new(self.raw, self.context, self.errors);
        let settings = registry::read(kind, entry, &mut check)?;
        debug_assert_eq!(settings.kind(), kind, "the registry reads a kind into its own variant");
        Ok(ProviderConfig {
            name: self.raw.value.name.value.clone(),
            kind,
            settings,
            inventory_interval_ms: check.inventory_interval_ms,
            garp_refresh_ms: check.garp_refresh_ms,
        })
    }
}

/// An entry as the map of one kind's settings: the keys it takes (`takes`) pass, `name` and
/// `kind` are skipped, any other key is refused by name at its value (and skipped), so that a
/// setting of another kind (`command` under `sim-cloud`) is one located line among the file's
/// other mistakes, not serde's generic "unknown field" that stops the reading.
struct SettingsOf<'c, 'a, M> {
    entry: M,
    kind: ProviderKind,
    takes: &'static [&'static str],
    check: &'c mut SettingsCheck<'a>,
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for SettingsOf<'_, '_, M> {
    type Error = M::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, M::Error> {
        while let Some(key) = self.entry.next_key::<String>()? {
            if self.takes.contains(&key.as_str()) {
                return seed.deserialize(key.into_deserializer()).map(Some);
            }
            let value = self.entry.next_value::<Spanned<IgnoredAny>>()?;
            if key != "name" && key != "kind" {
                let takes = if self.takes.is_empty() {
                    "no settings".to_owned()
                } else {
                    self.takes.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                };
                self.check.error(
                    Position::of_spanned(&value),
                    format!(
                        "provider kind `{}` does not take `{key}` (it takes {takes})",
                        self.kind.as_str()
                    ),
                );
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, M::Error> {
        self.entry.next_value_seed(seed)
    }
}

/// The keys a settings struct takes: the field names serde's derive hands to
/// `deserialize_struct` (after `rename_all`), so that the struct is the one place they are
/// written.
///
/// # Panics
///
/// When `T` is not a braced struct (a kind's `Raw` must be: see [`registry::Provider::Raw`]).
fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(KeysProbe) {
        Err(Probed::Keys(keys)) => keys,
        _ => panic!("{} is not a struct of settings", std::any::type_name::<T>()),
    }
}

/// A deserializer that only answers what [`keys_of`] asks.
struct KeysProbe;

/// [`KeysProbe`]'s answer, as an error: the keys, or that `T` is no struct.
#[derive(Debug)]
enum Probed {
    Keys(&'static [&'static str]),
    NotAStruct,
}

impl std::fmt::Display for Probed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a probe of a struct's keys")
    }
}

impl std::error::Error for Probed {}

impl de::Error for Probed {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Self::NotAStruct
    }
}

impl<'de> de::Deserializer<'de> for KeysProbe {
    type Error = Probed;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed::NotAStruct)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        Err(Probed::Keys(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::config::parse_config;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[expect(dead_code, reason = "only its keys are read")]
    struct Two {
        first_key: Option<u32>,
        second: Option<String>,
    }

    #[test]
    fn the_keys_of_a_settings_struct_are_its_fields_as_written() {
        assert_eq!(keys_of::<Two>(), &["firstKey", "second"]);
    }

    const HEAD: &str = "node: {name: a, provider: p, placementGroup: g1, nic: eni-a}\nstore: {path: ./d}\n";

    /// Every error of `providers` (after [`HEAD`]) as `(line, column, message)`.
    fn errors(providers: &str) -> Vec<(u64, u64, String)> {
        let text = format!("{HEAD}{providers}");
        parse_config(&text, Path::new("agent.yaml"))
            .expect_err("must be refused")
            .into_iter()
            .map(|e| (e.position.line, e.position.column, e.message))
            .collect()
    }

    /// The 1-based column of `needle` in line `line` (1-based) of `providers`, after [`HEAD`].
    fn column(providers: &str, line: usize, needle: &str) -> u64 {
        let text = providers.lines().nth(line - 3).expect("the line");
        u64::try_from(text.find(needle).expect("on the line") + 1).expect("small")
    }

    #[test]
    fn a_key_of_another_kind_is_refused_at_its_value_whatever_the_order_of_the_keys() {
        // Settings before `kind`, and a block mapping: the kind is read first all the same.
        let block = "providers:\n  - timeout: 1s\n    garpRefresh: 30s\n    kind: sim-cloud\n    name: p\n";
        assert_eq!(
            errors(block),
            vec![
                (
                    4,
                    column(block, 4, "1s"),
                    "provider kind `sim-cloud` does not take `timeout` (it takes `inventoryInterval`)".into()
                ),
                (
                    5,
                    column(block, 5, "30s"),
                    "provider kind `sim-cloud` does not take `garpRefresh` (it takes `inventoryInterval`)"
                        .into()
                ),
            ]
        );
    }

    #[test]
    fn a_typo_is_refused_by_name_with_the_keys_the_kind_takes_among_the_files_other_mistakes() {
        let flow = "providers: [{name: p, kind: exec, comand: [x.sh]}]\nlisten: nowhere\n";
        let all = errors(flow);
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!((all[0].0, all[0].1), (3, column(flow, 3, "{name")), "the entry lacks `command`");
        assert!(all[0].2.contains("exec provider `p` needs `command`"), "{all:?}");
        assert_eq!(
            all[1],
            (
                3,
                column(flow, 3, "[x.sh]"),
                "provider kind `exec` does not take `comand` (it takes `command`, `timeout`)".into()
            )
        );
        assert_eq!(all[2].0, 4, "and the reading went on: {all:?}");
        let none = "providers: [{name: p, kind: sim-cloud, interface: eth0}]\n";
        assert_eq!(
            errors(none),
            vec![(
                3,
                column(none, 3, "eth0"),
                "provider kind `sim-cloud` does not take `interface` (it takes `inventoryInterval`)".into()
            )]
        );
    }

    #[test]
    fn settings_read_in_the_second_step_keep_their_places() {
        // A value checked by its kind: at the value, in a block mapping written after `kind`.
        let block = "providers:\n  - name: p\n    kind: onprem\n    interface: eth0\n    garpCount: 1000\n";
        assert_eq!(
            errors(block),
            vec![(7, column(block, 7, "1000"), "garpCount 1000 is more than 100".into())]
        );
        // A command argument, inside the list.
        let nul = "providers: [{name: p, kind: exec, command: [x.sh, \"a\\0b\"]}]\n";
        assert_eq!(
            errors(nul),
            vec![(3, column(nul, 3, "\"a"), "a command argument must not contain a NUL character".into())]
        );
        // A value of the wrong type stops the reading, as anywhere in the file: one located line.
        let wrong = "providers:\n  - {name: p, kind: onprem, interface: eth0, garpCount: many}\n";
        let all = errors(wrong);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!((all[0].0, all[0].1), (4, column(wrong, 4, "many")), "{all:?}");
        // A key twice in an entry: serde's error, located.
        let twice = "providers:\n  - {name: p, kind: exec, command: [x], timeout: 1s, timeout: 2s}\n";
        let all = errors(twice);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].0, 4, "{all:?}");
        assert!(all[0].2.contains("duplicate"), "{all:?}");
    }
}
