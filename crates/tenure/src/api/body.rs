//! Reading and checking the request bodies of the mutating routes, strictly: a size limit, a time
//! limit, `application/json` only, one JSON object whose fields are exactly the expected ones,
//! each given once, each a string. Every refusal names the field at fault where there is one.

use std::fmt;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::failure::{ApiFailure, reason};

/// Largest request body accepted, in bytes (64 KiB; a real body is under 200 bytes). Larger gets
/// 413 and is not read further.
pub const API_BODY_BYTES_MAX: usize = 64 * 1024;

/// How long a client may take to send a body; slower gets 408.
pub const API_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a mutating request's body: 415 for a declared content type other than
/// `application/json` (unless the body is declared empty), 413 past [`API_BODY_BYTES_MAX`] (by
/// `Content-Length` before reading, or while reading), 408 past [`API_BODY_READ_TIMEOUT`], and
/// 415 for a non-empty body with no content type. An empty body is returned as empty.
pub async fn read(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiFailure> {
    let declared_empty =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim() == "0");
    let content_type = headers.get(header::CONTENT_TYPE);
    if let Some(value) = content_type
        && !declared_empty
        && !is_json(value)
    {
        return Err(unsupported(&String::from_utf8_lossy(value.as_bytes())));
    }
    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared_length.is_some_and(|n| n > API_BODY_BYTES_MAX as u64) {
        return Err(too_large());
    }
    let collected =
        tokio::time::timeout(API_BODY_READ_TIMEOUT, Limited::new(body, API_BODY_BYTES_MAX).collect())
            .await
            .map_err(|_| {
            ApiFailure::new(
                StatusCode::REQUEST_TIMEOUT,
                reason::BODY_TIMEOUT,
                format!("the body did not arrive within {API_BODY_READ_TIMEOUT:?}"),
            )
        })?;
    let bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
        Err(e) => return Err(ApiFailure::bad_request(format!("the body could not be read: {e}"))),
    };
    if !bytes.is_empty() && content_type.is_none() {
        return Err(unsupported("none"));
    }
    Ok(bytes)
}

fn too_large() -> ApiFailure {
    ApiFailure::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        reason::BODY_TOO_LARGE,
        format!("the body is larger than {API_BODY_BYTES_MAX} bytes"),
    )
}

fn unsupported(given: &str) -> ApiFailure {
    ApiFailure::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        reason::UNSUPPORTED_MEDIA_TYPE,
        format!("the body must be `Content-Type: application/json` (given: {given})"),
    )
}

/// `application/json`, with or without parameters (`; charset=utf-8`), in any letter case.
fn is_json(value: &http::HeaderValue) -> bool {
    let Ok(text) = value.to_str() else { return false };
    let media_type = text.split(';').next().unwrap_or_default().trim();
    media_type.eq_ignore_ascii_case("application/json")
}

/// The string fields of a JSON object body, in the order of `expected`.
///
/// Refuses, in this order: text that is not JSON, JSON that is not an object, a field not in
/// `expected` (named), a field given twice (named), a field that is not a string (named), a field
/// missing (named). An empty body is an object with no fields.
pub fn string_fields(bytes: &[u8], expected: &[&'static str]) -> Result<Vec<String>, ApiFailure> {
    let fields = if bytes.is_empty() { Vec::new() } else { object_fields(bytes)? };
    let wanted = || expected.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
    for (index, (name, _)) in fields.iter().enumerate() {
        if !expected.contains(&name.as_str()) {
            let expected_text = if expected.is_empty() {
                "this route takes no fields".to_owned()
            } else {
                format!("expected {}", wanted())
            };
            return Err(ApiFailure::bad_field(name, format!("unknown field; {expected_text}")));
        }
        if fields[..index].iter().any(|(earlier, _)| earlier == name) {
            return Err(ApiFailure::bad_field(name, "given twice"));
        }
    }
    let mut values = Vec::with_capacity(expected.len());
    for field in expected {
        match fields.iter().find(|(name, _)| name == field) {
            Some((_, Value::String(text))) => values.push(text.clone()),
            Some((_, other)) => {
                return Err(ApiFailure::bad_field(field, format!("must be a string, not {}", kind(other))));
            }
            None => return Err(ApiFailure::bad_field(field, "missing")),
        }
    }
    Ok(values)
}

/// What kind of JSON value `value` is, in words.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Every `(name, value)` pair of a JSON object, duplicates kept, in order.
fn object_fields(bytes: &[u8]) -> Result<Vec<(String, Value)>, ApiFailure> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiFailure::bad_request(format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiFailure::bad_request(format!("the body must be a JSON object, not {}", kind(&value))));
    }
    // Parsed again to keep duplicate keys, which `Value` would merge silently.
    let pairs: Pairs = serde_json::from_slice(bytes)
        .map_err(|e| ApiFailure::bad_request(format!("the body is not valid JSON: {e}")))?;
    Ok(pairs.0)
}

/// A JSON object as its list of pairs, duplicates kept.
struct Pairs(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PairsVisitor)
    }
}

struct PairsVisitor;

impl<'de> Visitor<'de> for PairsVisitor {
    type Value = Pairs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
        let mut pairs = Vec::new();
        while let Some(pair) = map.next_entry::<String, Value>()? {
            pairs.push(pair);
        }
        Ok(Pairs(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL_ADDRESS: &[&str] = &["pool", "address"];

    fn field_of(result: Result<Vec<String>, ApiFailure>) -> Option<String> {
        result.expect_err("refused").field
    }

    #[test]
    fn exactly_the_expected_string_fields_are_accepted() {
        let values = string_fields(br#"{"address": "10.0.0.10", "pool": "p"}"#, POOL_ADDRESS).expect("valid");
        assert_eq!(values, ["p", "10.0.0.10"]);
        assert_eq!(string_fields(b"", &[]).expect("no fields"), Vec::<String>::new());
        assert_eq!(string_fields(b"{}", &[]).expect("no fields"), Vec::<String>::new());
    }

    #[test]
    fn each_refusal_names_its_field() {
        let f = |body: &str| field_of(string_fields(body.as_bytes(), POOL_ADDRESS));
        assert_eq!(f(r#"{"pool": "p", "address": "a", "x": 1}"#).as_deref(), Some("x"));
        assert_eq!(f(r#"{"pool": "p", "pool": "q", "address": "a"}"#).as_deref(), Some("pool"));
        assert_eq!(f(r#"{"pool": 1, "address": "a"}"#).as_deref(), Some("pool"));
        assert_eq!(f(r#"{"pool": "p"}"#).as_deref(), Some("address"));
        assert_eq!(f(r#"{"pool": "p", "address": null}"#).as_deref(), Some("address"));
        assert_eq!(f(r#"{"pool": "p""#), None, "malformed JSON names no field");
        assert_eq!(f(r#"["p"]"#), None);
        assert_eq!(f(""), Some("pool".to_owned()), "an empty body misses the first field");
        assert_eq!(field_of(string_fields(br#"{"node": "a"}"#, &[])).as_deref(), Some("node"));
    }

    #[test]
    fn messages_are_one_line() {
        let e = string_fields(b"{\n\"pool\": \n", POOL_ADDRESS).expect_err("malformed");
        assert!(!e.message.contains('\n'), "{}", e.message);
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn only_json_is_a_json_content_type() {
        let v = |s: &str| http::HeaderValue::from_str(s).expect("valid");
        assert!(is_json(&v("application/json")));
        assert!(is_json(&v("Application/JSON; charset=utf-8")));
        assert!(!is_json(&v("text/plain")));
        assert!(!is_json(&v("application/jsonx")));
        assert!(!is_json(&v("application/x-www-form-urlencoded")));
    }
}
