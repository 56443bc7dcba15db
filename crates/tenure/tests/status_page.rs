//! The status page (`GET /`) in a real browser: Debian's headless Chromium driven through
//! chromedriver (WebDriver, the `fantoccini` client), against three `tenure agent` processes
//! sharing one log on a real 3-member etcd (`scripts/install-deps` installs etcd, chromium and
//! chromium-driver; nothing here skips: a missing browser fails the test).
//!
//! The page loads with no console error; it shows the nodes and the ownership map; after a
//! `kill -9` of the holder, the timeline shows the hand-over with the new epochs; the filters
//! narrow the map. A screenshot is kept at `target/tmp/status-page.png` (CI keeps it).

mod process;

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_cluster::Cluster;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use process::{Agent, TempDir, free_port, http, wait_for};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const NODES: [&str; 3] = ["a", "b", "c"];
/// Most time the browser may take for one condition.
const BROWSER_WAIT_MAX: Duration = Duration::from_secs(20);

/// `POST /session/{id}/se/log {"type": "browser"}`: chromedriver's console log (console
/// messages, uncaught exceptions, failed loads), each entry read once.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({"type": "browser"}).to_string()))
    }
}

/// The console entries at level SEVERE (errors) logged since the last call.
async fn console_errors(client: &Client) -> Vec<String> {
    let entries = client.issue_cmd(BrowserLog).await.expect("chromedriver returns the browser log");
    entries
        .as_array()
        .expect("a list of log entries")
        .iter()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Self {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: install Debian's {package} (scripts/install-deps does)"
            );
        }
        let port = free_port().port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().expect("literal");
        // chromedriver keeps connections open: a connect is the readiness check.
        wait_for("chromedriver listens", || std::net::TcpStream::connect(address).is_ok());
        Self { child, url: format!("http://127.0.0.1:{port}") }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session (no sandbox: CI runs as root).
async fn browser(driver: &Driver) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1600"],
        }),
    );
    capabilities.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a Chromium session through chromedriver")
}

/// Waits (bounded) until `condition` holds in the browser.
async fn browser_wait<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + BROWSER_WAIT_MAX;
    while !condition().await {
        assert!(Instant::now() < deadline, "not within {BROWSER_WAIT_MAX:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many elements `css` finds.
async fn count(client: &Client, css: &str) -> usize {
    client.find_all(Locator::Css(css)).await.map_or(0, |found| found.len())
}

/// Three agents, one node each, on `cluster`; pools `edge` (one address) and `core` (two), all
/// three nodes members, `a` preferred (priority 10), heartbeat TTL 1 s.
fn write_fleet(dir: &TempDir, cluster: &Cluster, listen: &[SocketAddr]) -> Vec<PathBuf> {
    let pool = |name: &str, addresses: &str| {
        format!(
            "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: {name}}}\nspec:\n  addresses: [{addresses}]\n  \
             provider: sim1\n  placementGroup: g1\n  members: [a, b, c]\n  heartbeatTTL: 1s\n  promotionHold: 0s\n  \
             deprovisionHoldDuration: 0s\n"
        )
    };
    dir.write("edge.yaml", &pool("edge", "10.0.0.10"));
    dir.write("core.yaml", &pool("core", "10.0.1.10, 10.0.1.11"));
    let spec = |n: &str| {
        let priority = if n == "a" { 10 } else { 0 };
        format!("{{name: {n}, provider: sim1, placementGroup: g1, nic: eni-{n}, priority: {priority}}}")
    };
    let endpoints = cluster.endpoints.join(", ");
    NODES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let peers: Vec<String> = NODES.iter().filter(|n| *n != name).map(|n| format!("  - {}", spec(n))).collect();
            dir.write(
                &format!("{name}.yaml"),
                &format!(
                    "node: {}\npeers:\n{}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: /page-test, path: ./data-{name}}}\n\
                     providers:\n  - {{name: sim1, kind: sim-cloud}}\npools: [edge.yaml, core.yaml]\n\
                     listen: {}\nheartbeatInterval: 100ms\nrequeueInterval: 500ms\nactionTimeout: 800ms\n",
                    spec(name),
                    peers.join("\n"),
                    listen[i],
                ),
            )
        })
        .collect()
}

/// The owner and ownershipEpoch of `pool`'s first address as the agent at `listen` sees it.
fn owner(listen: SocketAddr, pool: &str) -> Option<(String, u64)> {
    let (200, body) = http(listen, "GET", &format!("/v1/ownership?pool={pool}"), None, None).ok()? else {
        return None;
    };
    let v: Value = serde_json::from_str(&body).ok()?;
    let row = &v["ownership"][0];
    Some((row["owner"].as_str()?.to_owned(), row["ownershipEpoch"].as_u64()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_a_failover_in_a_real_browser() {
    let cluster = Cluster::start("status-page", 27100);
    let dir = TempDir::new("status-page");
    let listen: Vec<SocketAddr> = NODES.iter().map(|_| free_port()).collect();
    let configs = write_fleet(&dir, &cluster, &listen);
    let mut agents: Vec<Option<Agent>> =
        configs.iter().zip(&listen).map(|(config, at)| Some(Agent::start(&dir, config, *at))).collect();
    wait_for("a owns edge, held (its acquire confirmed), on every agent", || {
        listen.iter().all(|at| owner(*at, "edge").is_some_and(|(o, _)| o == "a"))
            && http(listen[1], "GET", "/v1/ownership?pool=edge", None, None)
                .is_ok_and(|(_, body)| body.contains("\"phase\":\"held\""))
    });
    let (_, epoch_before) = owner(listen[1], "edge").expect("an owner");

    let driver = Driver::start();
    let client = browser(&driver).await;
    // The page of b, which lives through the kill; no reloading while the test looks.
    let page = format!("http://{}/?refresh=0", listen[1]);
    client.goto(&page).await.expect("the page loads");
    assert_eq!(client.title().await.expect("a title"), "tenure: b");
    assert_eq!(count(&client, "#nodes tr[data-node]").await, 3, "a row per node");
    assert_eq!(count(&client, "#ownership-table tbody tr").await, 3, "a row per address");
    assert_eq!(count(&client, "#health[data-ok=\"true\"]").await, 1, "healthy");
    assert_eq!(count(&client, "#nodes tr[data-node=\"a\"][data-alive=\"true\"]").await, 1, "a is alive");
    let errors = console_errors(&client).await;
    assert!(errors.is_empty(), "console errors on load: {errors:?}");

    // kill -9 the holder; b or c takes edge over within the TTL.
    agents[0].take().expect("a runs").kill9();
    let mut new_owner = (String::new(), 0);
    wait_for("a survivor owns edge", || match owner(listen[1], "edge") {
        Some((o, epoch)) if o != "a" => {
            new_owner = (o, epoch);
            true
        }
        _ => false,
    });
    let (to, epoch_after) = new_owner;
    assert!(epoch_after > epoch_before, "the ownershipEpoch moved: {epoch_before} -> {epoch_after}");

    client.goto(&page).await.expect("the page loads again");
    let handover = format!(
        "#timeline-svg g.lane[data-pool=\"edge\"] path.handover[data-from=\"a\"][data-to=\"{to}\"][data-ownership-epoch=\"{epoch_after}\"]"
    );
    let band = format!(
        "#timeline-svg g.lane[data-pool=\"edge\"] rect.hold[data-holder=\"{to}\"][data-ownership-epoch=\"{epoch_after}\"]"
    );
    let source = client.source().await.expect("the page's source");
    let drawn = source.split_once("<section id=\"timeline\">").map_or("", |(_, rest)| rest);
    assert_eq!(
        count(&client, &handover).await,
        1,
        "the hand-over a → {to} with ownershipEpoch {epoch_after}: {drawn}"
    );
    assert!(count(&client, &band).await >= 1, "{to}'s band with ownershipEpoch {epoch_after}");
    assert!(
        count(&client, &format!("#timeline-svg g.lane[data-pool=\"edge\"] rect.hold[data-holder=\"a\"][data-ownership-epoch=\"{epoch_before}\"]")).await
            >= 1,
        "a's band before it"
    );
    assert!(count(&client, "#timeline-svg g.mark.fault").await >= 1, "the expiry is marked as a fault");
    // Expired in every pool it is a member of: `core` has a longer TTL than `edge`, whose
    // hand-over was just seen, so the page (refresh=0) is loaded again until it says so.
    browser_wait("a is shown expired", || async {
        client.goto(&page).await.is_ok()
            && count(&client, "#nodes tr[data-node=\"a\"][data-alive=\"false\"]").await == 1
    })
    .await;

    // The filters: pool `edge` narrows the map to its one address, a CIDR to core's two.
    client
        .find(Locator::Css("#filter-pool option[value=\"edge\"]"))
        .await
        .expect("edge is a choice")
        .click()
        .await
        .expect("choose edge");
    client.find(Locator::Css("#filter-apply")).await.expect("the button").click().await.expect("filter");
    browser_wait("the map shows edge only", || async {
        client.current_url().await.is_ok_and(|u| u.query().is_some_and(|q| q.contains("pool=edge")))
            && count(&client, "#ownership-table tbody tr").await == 1
            && count(&client, "#ownership-table tbody tr[data-pool=\"edge\"]").await == 1
    })
    .await;
    assert_eq!(count(&client, "#ownership-count[data-rows=\"1\"][data-total=\"3\"]").await, 1);
    assert_eq!(count(&client, "#timeline-svg g.lane").await, 1, "the timeline follows the filter");
    client.goto(&format!("{page}&address=10.0.1.0%2F24")).await.expect("the page loads");
    assert_eq!(count(&client, "#ownership-table tbody tr[data-pool=\"core\"]").await, 2);
    assert_eq!(count(&client, "#ownership-table tbody tr").await, 2);
    client.goto(&page).await.expect("the page loads");
    let errors = console_errors(&client).await;
    assert!(errors.is_empty(), "console errors: {errors:?}");

    let screenshot = client.screenshot().await.expect("a screenshot");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    std::fs::write(&path, &screenshot).expect("write the screenshot");
    eprintln!("screenshot: {}", path.display());
    client.close().await.expect("the session closes");
    drop(agents);
}
