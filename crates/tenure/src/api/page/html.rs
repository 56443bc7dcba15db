//! The status page's HTML: the one escaping helper every string from the config or the log goes
//! through, the document around the sections, the page's only script and style (served inline:
//! nothing is loaded from anywhere, not even a favicon), and the security headers that hold the
//! browser to that ([`security_headers`]: a `Content-Security-Policy` allowing the inline script
//! and style by their SHA-256 only, no framing, no sniffing, no referrer).

use std::fmt::Write as _;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderName, HeaderValue, header};
use sha2::{Digest as _, Sha256};

/// How often the page reloads itself unless asked otherwise (`?refresh=`), in seconds.
pub const REFRESH_DEFAULT_S: u64 = 10;

/// `text` with `&`, `<`, `>`, `"` and `'` escaped: safe inside an element and inside a quoted
/// attribute value. Every string the page did not write itself goes through here.
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `pairs` as a query string (`?pool=edge&page=2`), each key and value percent-encoded; empty
/// for no pairs. Escape the result with [`escape`] before putting it in an attribute.
#[must_use]
pub fn query_string(pairs: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (i, (key, value)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&percent_encode(key));
        out.push('=');
        out.push_str(&percent_encode(value));
    }
    out
}

/// `text` percent-encoded for a query component (RFC 3986 unreserved characters kept).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The style: system fonts, a table per section, phase and liveness colours.
const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 2em;color:#1b1f24;background:#fafbfc}
h1{font-size:1.3em;margin:.8em 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;margin:.3em 0}
th,td{border:1px solid #d0d7de;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,monospace;font-size:12px}
.ok{color:#1a7f37}.bad{color:#cf222e;font-weight:600}.warn{color:#9a6700}.muted{color:#6e7781}
.phase-held{color:#1a7f37}.phase-acquiring,.phase-releasing,.phase-pending-approval{color:#9a6700;font-weight:600}
.phase-released{color:#6e7781}
form.filters{display:flex;gap:.6em;align-items:end;flex-wrap:wrap;margin:.3em 0}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#57606a}
nav.pager{margin:.3em 0}nav.pager a,nav.pager span{margin-right:.8em}
svg{background:#fff;border:1px solid #d0d7de}
";

/// The page's only script: reload after `data-refresh` seconds (0: never), unless the tab is
/// hidden, in which case it reloads when shown again.
const SCRIPT: &str = "
(function(){var s=Number(document.body.dataset.refresh||0);if(!(s>0))return;
var due=false;setTimeout(function(){due=true;if(!document.hidden)location.reload();},s*1000);
document.addEventListener('visibilitychange',function(){if(due&&!document.hidden)location.reload();});})();
";

/// `'sha256-…'`: a CSP source matching an inline element whose text is `text`.
fn csp_hash(text: &str) -> String {
    format!("'sha256-{}'", STANDARD.encode(Sha256::digest(text.as_bytes())))
}

/// The page's `Content-Security-Policy`: nothing loads from anywhere (`default-src 'none'`); the
/// one inline script and the one inline style run by their hash (no `'unsafe-inline'`); the
/// favicon is a `data:` URL; the filter form submits to the page itself; no page may frame it.
#[must_use]
pub fn content_security_policy() -> String {
    format!(
        "default-src 'none'; script-src {}; style-src {}; img-src data:; form-action 'self'; \
         base-uri 'none'; frame-ancestors 'none'",
        csp_hash(SCRIPT),
        csp_hash(STYLE)
    )
}

/// The policy as a header value, computed once.
static CONTENT_SECURITY_POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    HeaderValue::from_str(&content_security_policy()).expect("the policy is ASCII without control characters")
});

/// The headers every answer of the page carries: the [`content_security_policy`],
/// `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY` (for browsers without
/// `frame-ancestors`), `Referrer-Policy: no-referrer`.
#[must_use]
pub fn security_headers() -> [(HeaderName, HeaderValue); 4] {
    [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY.clone()),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
    ]
}

/// The whole document: `title` (escaped here), `body` (already HTML), reloading every
/// `refresh_s` seconds (0: never).
#[must_use]
pub fn document(title: &str, refresh_s: u64, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2_048);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\"><title>{}</title><style>{STYLE}</style></head>\n\
         <body data-refresh=\"{refresh_s}\">\n{body}\n<script>{SCRIPT}</script>\n</body></html>\n",
        escape(title),
    );
    out
}

/// A duration in stream-time milliseconds as an operator reads it: `850 ms`, `4.2 s`, `3 min 5 s`,
/// `2 h 1 min`.
#[must_use]
pub fn age(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_markup_character_is_escaped() {
        assert_eq!(
            escape(r#"<a href="x" title='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
        assert_eq!(escape("edge-1 10.0.0.10"), "edge-1 10.0.0.10");
    }

    #[test]
    fn a_query_string_encodes_what_is_not_unreserved() {
        assert_eq!(query_string(&[]), "");
        assert_eq!(
            query_string(&[
                ("pool", "a b&c".into()),
                ("address", "10.0.0.0/24".into()),
                ("page", "2".into())
            ]),
            "?pool=a%20b%26c&address=10.0.0.0%2F24&page=2"
        );
        assert_eq!(query_string(&[("address", "fd00::1".into())]), "?address=fd00::1");
    }

    #[test]
    fn ages_read_as_an_operator_says_them() {
        assert_eq!(age(850), "850 ms");
        assert_eq!(age(4_200), "4.2 s");
        assert_eq!(age(185_000), "3 min 5 s");
        assert_eq!(age(7_260_000), "2 h 1 min");
    }

    /// The policy's hashes are of the exact text between the document's `<script>` and `<style>`
    /// tags: a browser runs them, and nothing else inline.
    #[test]
    fn the_policy_allows_the_documents_own_script_and_style_and_nothing_else() {
        let page = document("t", 5, "<p>hi</p>");
        let inner = |open: &str, close: &str| {
            let start = page.find(open).expect("the tag") + open.len();
            page[start..start + page[start..].find(close).expect("its end")].to_owned()
        };
        let policy = content_security_policy();
        assert!(
            policy.contains(&format!("script-src {};", csp_hash(&inner("<script>", "</script>")))),
            "{policy}"
        );
        assert!(
            policy.contains(&format!("style-src {};", csp_hash(&inner("<style>", "</style>")))),
            "{policy}"
        );
        assert!(policy.starts_with("default-src 'none';") && !policy.contains("unsafe"), "{policy}");
        assert_eq!(page.matches("<script").count(), 1, "one script");
        assert_eq!(page.matches("<style").count(), 1, "one style");
        assert!(!page.contains(" style=") && !page.contains(" onclick="), "no inline attributes: {page}");
        // A known digest: SHA-256 of the empty string.
        assert_eq!(csp_hash(""), "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='");
    }

    #[test]
    fn the_document_escapes_its_title_and_loads_nothing_from_elsewhere() {
        let page = document("<agent>", 5, "<p>hi</p>");
        assert!(page.contains("<title>&lt;agent&gt;</title>"), "{page}");
        assert!(page.contains("data-refresh=\"5\""));
        assert!(!page.contains("src=") && !page.contains("http://") && !page.contains("https://"), "{page}");
    }
}
