//! Located input errors and the small parsers every input format shares: names, durations and
//! addresses. Parsing is separated from I/O: everything here takes text and returns values.

use std::borrow::Cow;
use std::fmt;

use serde_saphyr::localizer::ExternalMessageSource;
use serde_saphyr::{
    Localizer, Location, MessageFormatter, RenderOptions, SnippetMode, Spanned, UserMessageFormatter,
};

mod address;
pub use address::{canonical_address, check_floating, expand_addresses, not_an_address, parse_one_address};

/// Most addresses one pool may hold (SPEC 12).
pub const POOL_ADDRESSES_MAX: u64 = 65_536;

/// Longest name accepted for a pool, node or provider (a DNS subdomain's limit).
pub const NAME_LENGTH_MAX: usize = 253;

/// A position in an input file, 1-based. `line == 0` means "no position known".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Position {
    /// The position a YAML location names.
    #[must_use]
    pub fn of(location: Location) -> Self {
        Self { line: location.line(), column: location.column() }
    }

    /// The position of a spanned value.
    #[must_use]
    pub fn of_spanned<T>(spanned: &Spanned<T>) -> Self {
        Self::of(spanned.referenced)
    }
}

/// One thing wrong with an input, at a place in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InputError {
    /// Where in the input.
    pub position: Position,
    /// What is wrong, in one line.
    pub message: String,
}

impl InputError {
    /// An error at `position`.
    #[must_use]
    pub fn at(position: Position, message: impl Into<String>) -> Self {
        Self { position, message: message.into() }
    }

    /// The error serde-saphyr reported, reduced to one line without its snippet, where it put it.
    fn from_yaml(error: &serde_saphyr::Error) -> Self {
        let position = error.location().map(Position::of).unwrap_or_default();
        Self { position, message: yaml_message(error) }
    }

    /// The error serde-saphyr reported while parsing `text`, reduced to one line, at the most
    /// useful place: a missing field is reported at the start of the mapping that lacks it (and
    /// names the mapping's key), and a syntax error behind a `[` or `{` that is never closed is
    /// reported at that bracket.
    #[must_use]
    pub fn from_yaml_in(text: &str, error: &serde_saphyr::Error) -> Self {
        let plain = Self::from_yaml(error);
        if plain.position.line == 0 {
            return plain;
        }
        match original_error(error) {
            serde_saphyr::Error::SerdeMissingField { field, .. } => {
                match mapping_start(text, plain.position) {
                    Some((start, Some(parent))) => {
                        Self::at(start, format!("missing field `{field}` in `{parent}`"))
                    }
                    Some((start, None)) => Self::at(start, format!("missing field `{field}`")),
                    None => plain,
                }
            }
            serde_saphyr::Error::ExternalMessage { source, .. }
                if matches!(**source, ExternalMessageSource::Parser(_))
                    && !plain.message.starts_with("unclosed bracket") =>
            {
                match unclosed_bracket(text, plain.position) {
                    Some((bracket, open)) => Self::at(
                        open,
                        format!(
                            "`{bracket}` is never closed (YAML gave up at line {} column {}: {})",
                            plain.position.line, plain.position.column, plain.message
                        ),
                    ),
                    None => plain,
                }
            }
            _ => plain,
        }
    }

    /// `file:line:column: message` (or `file: message` when no position is known), on one line.
    #[must_use]
    pub fn render(&self, file: &str) -> String {
        if self.position.line == 0 {
            format!("{file}: {}", one_line(&self.message))
        } else {
            format!("{file}:{self}")
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.position.line, self.position.column, one_line(&self.message))
    }
}

/// `message` with control characters (a newline inside a quoted name, say) escaped, so that one
/// error is always one line.
fn one_line(message: &str) -> Cow<'_, str> {
    if message.chars().any(char::is_control) {
        Cow::Owned(
            message
                .chars()
                .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
                .collect(),
        )
    } else {
        Cow::Borrowed(message)
    }
}

/// The error under serde-saphyr's snippet and alias wrappers.
fn original_error(mut error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::WithSnippet { error: inner, .. }
    | serde_saphyr::Error::AliasError { error: inner, .. } = error
    {
        error = inner;
    }
    error
}

/// serde-saphyr's user-facing wording, without its `at line N, column M` suffix (the position is
/// rendered separately), and with the type-level messages said in the user's terms.
struct PlainMessages;

impl Localizer for PlainMessages {
    fn attach_location<'a>(&self, base: Cow<'a, str>, _location: Location) -> Cow<'a, str> {
        base
    }
}

impl MessageFormatter for PlainMessages {
    fn localizer(&self) -> &dyn Localizer {
        self
    }

    fn format_message<'a>(&self, error: &'a serde_saphyr::Error) -> Cow<'a, str> {
        match error {
            serde_saphyr::Error::InvalidScalar { ty, .. } => Cow::Owned(match *ty {
                "bool" | "boolean" => "expected `true` or `false`".to_owned(),
                "f32" | "f64" | "floating point" => "expected a number".to_owned(),
                ty if ty.starts_with('u') => format!("expected a whole number, 0 or more ({ty})"),
                ty if ty.starts_with('i') => format!("expected a whole number ({ty})"),
                ty => format!("expected a value of type {ty}"),
            }),
            serde_saphyr::Error::Unexpected { expected, .. } => Cow::Borrowed(match *expected {
                "sequence start" => "expected a list (`[a, b]`, or lines starting with `- `)",
                "mapping start" => "expected a mapping (`key: value` lines, or `{key: value}`)",
                "string scalar" => "expected a single value, not a list or mapping",
                _ => return UserMessageFormatter.format_message(error),
            }),
            _ => UserMessageFormatter.format_message(error),
        }
    }
}

/// The one-line message of a serde-saphyr error.
fn yaml_message(error: &serde_saphyr::Error) -> String {
    let mut options = RenderOptions::new(&PlainMessages);
    options.snippets = SnippetMode::Off;
    let rendered = error.render_with_options(options);
    let first_line = rendered.lines().next().unwrap_or("").trim();
    let message = strip_location_prefix(first_line.trim_start_matches("error: "));
    if message.is_empty() { "invalid YAML".to_owned() } else { message.to_owned() }
}

/// The lines of `text` as YAML counts them: `\r\n`, `\r` and `\n` each end a line.
fn yaml_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(end) = rest.find(['\r', '\n']) {
        lines.push(&rest[..end]);
        let width = if rest[end..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[end + width..];
    }
    lines.push(rest);
    lines
}

/// Where the content of a YAML line starts, after its indentation and any `- ` sequence markers;
/// and whether a marker was seen. `None` for blank and comment-only lines.
fn content_column(line: &str) -> Option<(usize, bool)> {
    let mut column = 0;
    let mut dashed = false;
    let mut rest = line;
    loop {
        let trimmed = rest.trim_start_matches(' ');
        column += rest.len() - trimmed.len();
        rest = trimmed;
        if rest == "-" || rest.starts_with("- ") {
            dashed = true;
            column += 1;
            rest = &rest[1..];
        } else {
            break;
        }
    }
    if rest.is_empty() || rest.starts_with('#') { None } else { Some((column, dashed)) }
}

/// The key of a line's content that starts with a plain `key:`, and what follows the colon.
fn plain_key(content: &str) -> Option<(&str, &str)> {
    let (key, rest) = content.split_once(':')?;
    let is_key =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (is_key && (rest.is_empty() || rest.starts_with(' '))).then_some((key, rest.trim_start()))
}

/// The key of a `key:` line that opens a nested block (nothing after the colon but a comment).
fn opening_key(content: &str) -> Option<&str> {
    plain_key(content).and_then(|(key, rest)| (rest.is_empty() || rest.starts_with('#')).then_some(key))
}

/// serde-saphyr reports a missing field at the last key of the mapping that lacks it. For a block
/// mapping, finds that mapping's first key instead, and the key the mapping is the value of.
fn mapping_start(text: &str, last_key: Position) -> Option<(Position, Option<String>)> {
    let lines = yaml_lines(text);
    let index = usize::try_from(last_key.line).ok()?.checked_sub(1)?;
    let column = usize::try_from(last_key.column).ok()?.checked_sub(1)?;
    let line = lines.get(index)?;
    // Only block mappings, where every key of the mapping starts at one column.
    if !line.is_ascii() || content_column(line)?.0 != column {
        return None;
    }
    plain_key(&line[column..])?;
    let mut first = index;
    let mut parent = None;
    for (i, line) in lines[..index].iter().enumerate().rev() {
        if *line == "---" || line.starts_with("--- ") || *line == "..." {
            break;
        }
        let Some((at, dashed)) = content_column(line) else { continue };
        if at > column {
            continue;
        }
        if at == column {
            first = i;
            if dashed {
                break;
            }
            continue;
        }
        if line.is_ascii() && !dashed {
            parent = opening_key(&line[at..]).map(str::to_owned);
        }
        break;
    }
    let start = Position { line: u64::try_from(first + 1).ok()?, column: last_key.column };
    Some((start, parent))
}

/// The innermost flow bracket (`[` or `{`) opened on a line before `error` and still open there,
/// with its position. Quotes and comments are skipped.
fn unclosed_bracket(text: &str, error: Position) -> Option<(char, Position)> {
    let mut open: Vec<(char, Position)> = Vec::new();
    for (index, line) in yaml_lines(text).into_iter().enumerate() {
        let line_number = u64::try_from(index + 1).ok()?;
        if line_number > error.line {
            break;
        }
        let mut quote: Option<char> = None;
        let mut previous = ' ';
        let mut escaped = false;
        for (offset, c) in line.chars().enumerate() {
            let column = u64::try_from(offset + 1).ok()?;
            if line_number == error.line && column >= error.column {
                break;
            }
            match quote {
                Some('"') if escaped => escaped = false,
                Some('"') if c == '\\' => escaped = true,
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => {
                    let starts_token = previous.is_whitespace() || matches!(previous, '[' | '{' | ',');
                    match c {
                        '#' if previous.is_whitespace() => break,
                        '"' | '\'' if starts_token => quote = Some(c),
                        '[' | '{' if starts_token || previous == ':' => {
                            open.push((c, Position { line: line_number, column }));
                        }
                        ']' | '}' => {
                            open.pop();
                        }
                        _ => {}
                    }
                }
            }
            previous = c;
        }
    }
    open.pop().filter(|(_, at)| at.line < error.line)
}

/// Decodes a file's bytes as UTF-8, or names the first byte that is not.
pub fn utf8_text(bytes: &[u8]) -> Result<&str, InputError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let valid = String::from_utf8_lossy(&bytes[..e.valid_up_to()]);
        let line = valid.matches('\n').count() + 1;
        let column = valid.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        InputError::at(
            Position {
                line: u64::try_from(line).unwrap_or(u64::MAX),
                column: u64::try_from(column).unwrap_or(u64::MAX),
            },
            format!("not UTF-8 text: byte 0x{:02x} is not valid here", bytes[e.valid_up_to()]),
        )
    })
}

/// Removes a leading `line N column M: ` that serde-saphyr puts before its messages.
fn strip_location_prefix(message: &str) -> &str {
    let Some(rest) = message.strip_prefix("line ") else {
        return message;
    };
    match rest.find(": ") {
        Some(index) if rest[..index].contains(" column ") => &rest[index + 2..],
        _ => message,
    }
}

/// Checks a pool, node or provider name: 1 to 253 characters of `[A-Za-z0-9._-]`. Names end up
/// inside idempotency keys separated by `/`, so nothing else is allowed.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if name.len() > NAME_LENGTH_MAX {
        return Err(format!("{what} `{name}` is longer than {NAME_LENGTH_MAX} characters"));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!(
            "{what} `{name}` contains `{}`; use letters, digits, `.`, `_` and `-`",
            bad.escape_default()
        ));
    }
    Ok(())
}

/// Parses a Go-style duration (`500ms`, `3s`, `1m30s`, `1.5s`) into whole milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a duration; write it like `500ms`, `3s` or `1m30s`");
    if text.is_empty() {
        return Err(bad());
    }
    if text == "0" {
        return Ok(0);
    }
    let mut total_ns: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if number_len == 0 {
            return Err(bad());
        }
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        total_ns = total_ns.checked_add(scaled(number, unit_ns).ok_or_else(bad)?).ok_or_else(bad)?;
        rest = tail;
    }
    if !total_ns.is_multiple_of(1_000_000) {
        return Err(format!("`{text}` is not a whole number of milliseconds"));
    }
    u64::try_from(total_ns / 1_000_000).map_err(|_| bad())
}

/// `number` (decimal, maybe with a fraction) times `unit_ns`, exactly, in nanoseconds.
fn scaled(number: &str, unit_ns: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if fraction.contains('.') || fraction.len() > 18 {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut value = whole.checked_mul(unit_ns)?;
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        let part = digits.checked_mul(unit_ns)?;
        if part % scale != 0 {
            return None;
        }
        value = value.checked_add(part / scale)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_go_style_whole_milliseconds() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("3s"), Ok(3_000));
        assert_eq!(parse_duration_ms("1m30s"), Ok(90_000));
        assert_eq!(parse_duration_ms("1.5s"), Ok(1_500));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("0"), Ok(0));
        assert_eq!(parse_duration_ms("2000us"), Ok(2));
        for bad in ["", "3", "s", "3x", "-1s", "1.2.3s", "500us", "3 s", ".s", "99999999999999999999h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn ranges_expand_to_every_address_including_network_and_broadcast() {
        let v = expand_addresses("10.0.0.16/29").expect("valid");
        assert_eq!(v.len(), 8);
        assert_eq!(v[0].to_string(), "10.0.0.16");
        assert_eq!(v[7].to_string(), "10.0.0.23");
        assert_eq!(expand_addresses("10.0.0.10/32").expect("valid").len(), 1);
        assert_eq!(expand_addresses("10.0.0.10").expect("valid").len(), 1);
        assert_eq!(expand_addresses("2001:DB8::1/128").expect("valid")[0].to_string(), "2001:db8::1");
        assert_eq!(expand_addresses("10.0.0.0/16").expect("valid").len(), 65_536);
        assert!(expand_addresses("10.0.0.0/15").is_err());
        assert!(expand_addresses("10.0.0.17/29").is_err());
        assert!(expand_addresses("10.0.0.300").is_err());
        assert!(expand_addresses("fe80::/64").is_err());
    }

    #[test]
    fn names_are_key_safe() {
        assert!(check_name("node name", "aws-router-a").is_ok());
        assert!(check_name("node name", "").is_err());
        assert!(check_name("node name", "a/b").is_err());
        assert!(check_name("node name", "a b").is_err());
        assert!(check_name("node name", &"x".repeat(254)).is_err());
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        first: Option<String>,
        spec: Inner,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        a: String,
        b: String,
        n: Option<i64>,
        list: Option<Vec<String>>,
    }

    fn yaml_error(text: &str) -> InputError {
        let error = serde_saphyr::from_str::<Outer>(text).expect_err("must be refused");
        InputError::from_yaml_in(text, &error)
    }

    #[test]
    fn a_missing_field_is_reported_where_its_mapping_starts() {
        let e = yaml_error("first: x\nspec:\n  a: 1\n  n: 2\n");
        assert_eq!((e.position.line, e.position.column), (3, 3));
        assert_eq!(e.message, "missing field `b` in `spec`");
        let e = yaml_error("# a comment\nfirst: x\n");
        assert_eq!((e.position.line, e.position.column, e.message.as_str()), (2, 1, "missing field `spec`"));
        let e = yaml_error("first: x\r\nspec:\r\n  a: 1\r\n  n: 2\r\n");
        assert_eq!(
            (e.position.line, e.position.column, e.message.as_str()),
            (3, 3, "missing field `b` in `spec`")
        );
        // A flow mapping keeps serde-saphyr's place.
        let e = yaml_error("spec: {a: 1, n: 2}\n");
        assert_eq!(e.position.line, 1);
        assert_eq!(e.message, "missing field `b`");
    }

    #[test]
    fn an_unclosed_bracket_is_reported_where_it_opens() {
        let e = yaml_error("spec:\n  list: [a, b\n  a: 1\n  b: 2\n");
        assert_eq!((e.position.line, e.position.column), (2, 9), "{e:?}");
        assert!(e.message.starts_with("`[` is never closed (YAML gave up at line 3"), "{}", e.message);
        // Brackets inside quotes and comments do not count.
        let e = yaml_error("first: '[' # {\nspec:\n  list: [\"]\", b\n  a: 1\n");
        assert_eq!(e.position.line, 3, "{e:?}");
    }

    #[test]
    fn yaml_messages_have_no_location_suffix_and_say_what_is_expected() {
        let e = yaml_error("spec: {a: 1, b: 2, n: soon}\n");
        assert_eq!(e.message, "expected a whole number (i64)");
        let e = yaml_error("spec: {a: 1, b: 2, list: x}\n");
        assert!(e.message.starts_with("expected a list"), "{}", e.message);
        let e = yaml_error("spec: {a: 1, b: 2}\nspec: {a: 1, b: 2}\n");
        assert!(!e.message.contains(" at line "), "{}", e.message);
        assert!(e.message.contains("duplicate mapping key"), "{}", e.message);
    }

    #[test]
    fn one_error_renders_as_one_line() {
        let e = InputError::at(Position { line: 2, column: 3 }, "unknown event kind `a\nb\r`");
        assert_eq!(e.render("f"), "f:2:3: unknown event kind `a\\nb\\r`");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_located() {
        assert_eq!(utf8_text(b"ok\n").expect("valid"), "ok\n");
        let e = utf8_text(b"a: 1\nb: \xc3\xa9\xff\n").expect_err("not UTF-8");
        assert_eq!((e.position.line, e.position.column), (2, 5));
        assert!(e.message.contains("0xff"), "{}", e.message);
    }

    #[test]
    fn serde_saphyr_prefix_is_stripped() {
        assert_eq!(strip_location_prefix("line 4 column 3: unknown field"), "unknown field");
        assert_eq!(strip_location_prefix("lines are fine"), "lines are fine");
    }
}
