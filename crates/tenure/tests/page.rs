//! The status page (`GET /`) over HTTP against the test-double agent loop (`support`): HTML with
//! every section, no token needed, filters and pages served by the server, and a bad query
//! answered with one line naming the key, changing nothing. (In a real browser:
//! `tests/status_page.rs`.)

mod support;

use std::time::Duration;

use support::{Mode, Server, start};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

async fn get(server: &Server, path: &str) -> (u16, String, String) {
    let (status, body) = tokio::task::spawn_blocking({
        let address = server.address;
        let path = path.to_owned();
        move || raw_get(address, &path)
    })
    .await
    .expect("the request runs");
    (status, body.0, body.1)
}

/// (status, (content type, body)) of a GET on loopback.
fn raw_get(address: std::net::SocketAddr, path: &str) -> (u16, (String, String)) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let status = text[9..12].parse().expect("a status");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
        .unwrap_or_default();
    assert!(!head.to_ascii_lowercase().contains("chunked"), "a whole body");
    (status, (content_type, body.to_owned()))
}

#[tokio::test]
async fn the_page_has_every_section_and_needs_no_token() {
    let server = start(Mode::Answering, Some(support::TOKEN), ANSWER_TIMEOUT).await;
    let (status, content_type, body) = get(&server, "/").await;
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/html"), "{content_type}");
    for id in
        ["health", "nodes", "waiting", "failures", "timeline", "ownership", "ownership-table", "filters"]
    {
        assert!(body.contains(&format!("id=\"{id}\"")), "section {id} missing: {body}");
    }
    // The double's nodes a and b, and its map's rows.
    assert!(body.contains("<tr data-node=\"a\"") && body.contains("<tr data-node=\"b\""), "{body}");
    let rows = body.matches("<tr data-pool=").count();
    assert!(rows >= 2, "the map's rows: {body}");
    // The gated pool's acquire waits for approval.
    assert!(body.contains("gated/10.0.0.20/assign-secondary-ip/a/"), "{body}");
    // Nothing from elsewhere.
    assert!(!body.contains(" src=") && !body.contains("https://"), "{body}");
}

#[tokio::test]
async fn filters_are_served_by_the_server() {
    let server = start(Mode::Answering, None, ANSWER_TIMEOUT).await;
    let (_, _, all) = get(&server, "/?refresh=0").await;
    let (_, _, gated) = get(&server, "/?pool=gated&refresh=0").await;
    let total = all.matches("<tr data-pool=").count();
    let only = gated.matches("<tr data-pool=").count();
    assert!(only >= 1 && only < total, "{only} of {total}");
    assert_eq!(gated.matches("<tr data-pool=\"gated\"").count(), only, "{gated}");
    assert!(gated.contains("<option value=\"gated\" selected>"), "the form shows the filter: {gated}");
    assert!(gated.contains("data-refresh=\"0\""), "{gated}");
    let (_, _, none) = get(&server, "/?address=192.0.2.0%2F24").await;
    assert_eq!(none.matches("<tr data-pool=").count(), 0);
    assert!(none.contains("data-rows=\"0\""), "{none}");
}

#[tokio::test]
async fn a_bad_query_is_one_line_naming_the_key_and_changes_nothing() {
    let server = start(Mode::Answering, None, ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    for (query, field) in [
        ("/?colour=red", "colour"),
        ("/?page=0", "page"),
        ("/?address=10.0.0.999", "address"),
        ("/?phase=gone", "phase"),
        ("/?pool=a&pool=b", "pool"),
    ] {
        let (status, content_type, body) = get(&server, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(content_type.starts_with("application/json"), "{content_type}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["field"], field, "{query}: {body}");
        assert!(!v["error"].as_str().expect("a message").contains('\n'));
    }
    assert_eq!(server.state.log_len(), before, "a read changes nothing");
}

/// The page's map rows (`pool/address`, in order).
fn page_rows(body: &str) -> Vec<String> {
    body.split("<tr data-pool=\"")
        .skip(1)
        .map(|row| {
            let (pool, rest) = row.split_once('"').expect("a pool");
            let address = rest.split("data-address=\"").nth(1).and_then(|a| a.split('"').next());
            format!("{pool}/{}", address.expect("an address"))
        })
        .collect()
}

/// The page reads `pool`, `node` and `address` as `GET /v1/ownership` does (the one rule,
/// `ListFilter::set`): repeated addresses, an empty value before a real one, and the same
/// one-line 400 for a name given twice.
#[tokio::test]
async fn the_page_and_the_ownership_list_agree_on_a_filter() {
    let server = start(Mode::Answering, None, ANSWER_TIMEOUT).await;
    for filter in [
        "address=10.0.0.10&address=10.0.0.20",
        "pool=&pool=edge",
        "pool=edge&pool=",
        "node=&address=&address=10.0.0.0%2F30&address=10.0.0.20",
    ] {
        let (status, _, page) = get(&server, &format!("/?{filter}&refresh=0")).await;
        assert_eq!(status, 200, "{filter}: {page}");
        let (status, _, list) = get(&server, &format!("/v1/ownership?{filter}")).await;
        assert_eq!(status, 200, "{filter}: {list}");
        let list: serde_json::Value = serde_json::from_str(&list).expect("JSON");
        let listed: Vec<String> = list["ownership"]
            .as_array()
            .expect("the rows")
            .iter()
            .map(|row| {
                format!(
                    "{}/{}",
                    row["pool"].as_str().expect("a pool"),
                    row["address"].as_str().expect("an address")
                )
            })
            .collect();
        assert!(!listed.is_empty(), "{filter}: {list}");
        assert_eq!(page_rows(&page), listed, "{filter}");
    }
    let (_, _, two) = get(&server, "/?address=10.0.0.10&address=10.0.0.20&refresh=0").await;
    assert_eq!(page_rows(&two), ["edge/10.0.0.10", "gated/10.0.0.20"]);
    // The form has a field per address and an empty one to add another; the links keep both.
    assert_eq!(two.matches("<input name=\"address\"").count(), 3, "{two}");
    for address in ["10.0.0.10", "10.0.0.20"] {
        assert!(two.contains(&format!("value=\"{address}\"")), "{two}");
    }
    assert!(two.contains("address=10.0.0.10&amp;address=10.0.0.20"), "the links keep both: {two}");
    for filter in ["pool=edge&pool=gated", "node=a&node=b", "address=10.0.0.999"] {
        let (status, _, page) = get(&server, &format!("/?{filter}")).await;
        let (list_status, _, list) = get(&server, &format!("/v1/ownership?{filter}")).await;
        assert_eq!((status, list_status), (400, 400), "{filter}: {page} / {list}");
        let page: serde_json::Value = serde_json::from_str(&page).expect("JSON");
        let list: serde_json::Value = serde_json::from_str(&list).expect("JSON");
        assert_eq!((&page["field"], &page["error"]), (&list["field"], &list["error"]), "{filter}");
    }
}

/// The head of a GET (status line and headers), lower-cased.
fn raw_head(address: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    text.split_once("\r\n\r\n").expect("a head").0.to_ascii_lowercase()
}

/// Every answer of the page (a 400 too) forbids loading, framing, sniffing and referrers; the
/// policy allows the page's inline script and style by hash only.
#[tokio::test]
async fn the_page_sends_its_security_headers() {
    let server = start(Mode::Answering, None, ANSWER_TIMEOUT).await;
    for (path, status) in [("/?refresh=0", "200"), ("/?colour=red", "400")] {
        let head = tokio::task::spawn_blocking({
            let address = server.address;
            move || raw_head(address, path)
        })
        .await
        .expect("the request runs");
        assert!(head.starts_with(&format!("http/1.1 {status}")), "{path}: {head}");
        let header = |name: &str| {
            head.lines()
                .find_map(|line| line.strip_prefix(&format!("{name}: ")).map(str::to_owned))
                .unwrap_or_else(|| panic!("{path}: no {name}: {head}"))
        };
        let policy = header("content-security-policy");
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        assert!(policy.contains("script-src 'sha256-") && policy.contains("style-src 'sha256-"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'") && !policy.contains("unsafe"), "{policy}");
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert_eq!(header("x-frame-options"), "deny");
        assert_eq!(header("referrer-policy"), "no-referrer");
    }
    // The page holds nothing the policy would refuse: no inline handler or style attribute.
    let (_, _, body) = get(&server, "/?refresh=0").await;
    assert!(!body.contains(" style=") && !body.contains(" onload=") && !body.contains(" onclick="), "{body}");
    assert_eq!(body.matches("<script>").count(), 1, "{body}");
}

#[tokio::test]
async fn a_loop_that_does_not_answer_is_503() {
    let server = start(Mode::Silent, None, Duration::from_millis(300)).await;
    let (status, _, body) = get(&server, "/").await;
    assert_eq!(status, 503, "{body}");
}
