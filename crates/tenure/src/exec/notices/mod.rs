//! Maintenance notices (SPEC 7, "Any cloud provider: `maintenanceNotices`"): what a cloud's
//! instance metadata service says of this instance's end, read for the agent's notice watcher
//! (`agent/notices.rs`), which drains the node and, on Azure, acknowledges the event once the
//! node holds nothing.
//!
//! - `maintenanceNotices: ignore | drain` (default `ignore`): [`check`], one line at the value for
//!   anything else. A cloud kind's settings keep the [`MaintenanceNotices`] and answer
//!   [`super::registry::Runtime::maintenance_notices`] with their [`NoticeSource`] when `drain`.
//!   Wiring another cloud kind is a field `maintenance_notices: Option<Spanned<String>>` in its
//!   `Raw`, one `notices::check` call, and that `Runtime` method.
//! - [`NoticeReader`]: one poll of the metadata service, per cloud (`aws.rs`: IMDSv2 spot
//!   interruption, rebalance recommendation, scheduled events; `azure.rs`: Scheduled Events and
//!   their acknowledgement; `oci.rs`: `timeMaintenanceRebootDue`), over plain HTTP with short
//!   timeouts (`http.rs`).
//!
//! The service's address is `http://169.254.169.254` on every cloud; the environment variable
//! [`METADATA_URL_ENV`] replaces it (a test hook: the tests point it at
//! `scripts/metadata-fake/metadata_fake.py`).

mod aws;
mod azure;
mod http;
mod oci;
mod time;

use std::time::{Duration, SystemTime};

use serde_saphyr::Spanned;
use tenure_core::input::Position;

use crate::config::SettingsCheck;

pub use time::parse_time;

/// The instance metadata service of every cloud here (AWS, Azure and OCI share the link-local
/// address).
pub const METADATA_URL_DEFAULT: &str = "http://169.254.169.254";

/// The environment variable that replaces [`METADATA_URL_DEFAULT`] (a test hook: the fake
/// metadata service's URL).
pub const METADATA_URL_ENV: &str = "TENURE_METADATA_URL";

/// The environment variable that replaces [`POLL_INTERVAL_DEFAULT`], in milliseconds (a test
/// hook).
pub const POLL_INTERVAL_ENV: &str = "TENURE_METADATA_POLL_MS";

/// How often the watcher polls the metadata service by default. AWS gives a spot interruption
/// two minutes' notice and Azure a Preempt 30 s; 5 s leaves most of either for the hand-over.
pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

/// How long one request to the metadata service may take (it is on the host's link: it answers
/// in milliseconds or not at all).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What a cloud provider does when the metadata service announces this instance's end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaintenanceNotices {
    /// Nothing (the default): the heartbeat TTL fails the node over once the host is gone.
    #[default]
    Ignore,
    /// Drain the agent's own node when a notice names this instance (and acknowledge an Azure
    /// event once the node holds nothing).
    Drain,
}

/// Checks `maintenanceNotices` (absent: [`MaintenanceNotices::Ignore`]).
pub fn check(raw: Option<&Spanned<String>>, check: &mut SettingsCheck<'_>) -> MaintenanceNotices {
    let Some(text) = raw else { return MaintenanceNotices::Ignore };
    match text.value.as_str() {
        "ignore" => MaintenanceNotices::Ignore,
        "drain" => MaintenanceNotices::Drain,
        other => {
            check.error(
                Position::of_spanned(text),
                format!("maintenanceNotices `{other}` is neither `ignore` nor `drain`"),
            );
            MaintenanceNotices::Ignore
        }
    }
}

/// Which metadata service announces the end of a provider's instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoticeSource {
    /// AWS IMDSv2.
    Aws,
    /// Azure IMDS Scheduled Events.
    Azure,
    /// OCI IMDS v2.
    Oci,
}

impl NoticeSource {
    /// The cloud's name, as metrics and logs write it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Azure => "azure",
            Self::Oci => "oci",
        }
    }
}

/// One announcement of this instance's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// What kind (`spot-interruption`, `rebalance-recommendation`, `scheduled-event`,
    /// `reboot`, `redeploy`, `preempt`, `terminate`, `maintenance-reboot`): a metric label.
    pub kind: &'static str,
    /// What identifies it at the service (an event id, or the kind when the service has one
    /// notice of that kind at a time): the watcher acts once per id.
    pub id: String,
    /// When the cloud acts, if it says.
    pub deadline: Option<SystemTime>,
    /// What the service said, in one line, for the log.
    pub detail: String,
    /// Whether the service waits for an acknowledgement ([`NoticeReader::acknowledge`]): an
    /// Azure event.
    pub acknowledge: bool,
}

/// Reads one cloud's metadata service.
#[derive(Debug)]
pub struct NoticeReader {
    source: NoticeSource,
    http: http::Metadata,
    /// The IMDSv2 session token and when to ask for a new one (AWS).
    token: Option<(String, tokio::time::Instant)>,
    /// This VM's name (Azure), read once.
    vm_name: Option<String>,
}

impl NoticeReader {
    /// A reader of `source`'s service at `base_url` (`http://host[:port]`). Makes no request.
    ///
    /// # Errors
    ///
    /// `base_url` is not an `http://` URL, in one line.
    pub fn new(source: NoticeSource, base_url: &str) -> Result<Self, String> {
        Ok(Self { source, http: http::Metadata::new(base_url)?, token: None, vm_name: None })
    }

    /// A reader of `source`'s service at [`METADATA_URL_ENV`] if set, else at
    /// [`METADATA_URL_DEFAULT`].
    ///
    /// # Errors
    ///
    /// The variable is set to something that is not an `http://` URL, in one line naming it.
    pub fn from_env(source: NoticeSource) -> Result<Self, String> {
        match std::env::var(METADATA_URL_ENV) {
            Ok(url) => Self::new(source, &url).map_err(|e| format!("{METADATA_URL_ENV}: {e}")),
            Err(_) => Self::new(source, METADATA_URL_DEFAULT),
        }
    }

    /// The cloud read.
    #[must_use]
    pub fn source(&self) -> NoticeSource {
        self.source
    }

    /// The notices the service announces now for this instance (empty: none).
    ///
    /// # Errors
    ///
    /// The service did not answer, or answered what cannot be read, in one line.
    pub async fn poll(&mut self) -> Result<Vec<Notice>, String> {
        match self.source {
            NoticeSource::Aws => aws::poll(&self.http, &mut self.token).await,
            NoticeSource::Azure => azure::poll(&self.http, &mut self.vm_name).await,
            NoticeSource::Oci => oci::poll(&self.http).await,
        }
    }

    /// Tells the service this instance is ready for `notice` (Azure: a `StartRequests` POST of
    /// its event id). Nothing for a notice that waits for none.
    ///
    /// # Errors
    ///
    /// The service did not take it, in one line.
    pub async fn acknowledge(&self, notice: &Notice) -> Result<(), String> {
        if !notice.acknowledge {
            return Ok(());
        }
        match self.source {
            NoticeSource::Azure => azure::acknowledge(&self.http, &notice.id).await,
            NoticeSource::Aws | NoticeSource::Oci => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ignore_and_drain_are_read() {
        let mut errors = Vec::new();
        let mut settings = SettingsCheck::for_test("p", &mut errors);
        let unknown = serde_saphyr::Location::UNKNOWN;
        let spanned = |v: &str| Spanned::new(v.to_owned(), unknown, unknown);
        assert_eq!(check(None, &mut settings), MaintenanceNotices::Ignore);
        assert_eq!(check(Some(&spanned("drain")), &mut settings), MaintenanceNotices::Drain);
        assert_eq!(check(Some(&spanned("ignore")), &mut settings), MaintenanceNotices::Ignore);
        assert_eq!(check(Some(&spanned("sometimes")), &mut settings), MaintenanceNotices::Ignore);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].message, "maintenanceNotices `sometimes` is neither `ignore` nor `drain`");
    }

    /// Every error of an agent config whose `providers:` line is `providers`, as `(line, column,
    /// message)`.
    fn refused(providers: &str) -> Vec<(u64, u64, String)> {
        let text = format!(
            "node: {{name: a, provider: p, placementGroup: g1, nic: eni-a}}\nstore: {{path: ./d}}\n{providers}"
        );
        crate::config::parse_config(&text, std::path::Path::new("agent.yaml"))
            .expect_err("must be refused")
            .into_iter()
            .map(|e| (e.position.line, e.position.column, e.message))
            .collect()
    }

    fn column(line: &str, needle: &str) -> u64 {
        u64::try_from(line.find(needle).expect("on the line") + 1).expect("small")
    }

    #[test]
    fn a_value_other_than_ignore_or_drain_is_one_line_at_the_value() {
        let line = "providers: [{name: p, kind: aws, region: us-east-1, maintenanceNotices: sometimes}]\n";
        assert_eq!(
            refused(line),
            vec![(
                3,
                column(line, "sometimes"),
                "maintenanceNotices `sometimes` is neither `ignore` nor `drain`".into()
            )]
        );
    }

    #[test]
    fn a_kind_without_notices_refuses_the_key_by_name() {
        for (kind, rest) in [
            ("sim-cloud", ""),
            ("sim-onprem", ""),
            ("exec", ", command: [x]"),
            ("onprem", ", interface: eth0"),
        ] {
            let line = format!("providers: [{{name: p, kind: {kind}{rest}, maintenanceNotices: drain}}]\n");
            let all = refused(&line);
            assert_eq!(all.len(), 1, "{kind}: {all:?}");
            assert_eq!((all[0].0, all[0].1), (3, column(&line, "drain}")), "{kind}: at the value");
            let expected = format!("provider kind `{kind}` does not take `maintenanceNotices`");
            assert!(all[0].2.starts_with(&expected), "{kind}: {all:?}");
        }
    }

    #[test]
    fn drain_on_aws_polls_imds_and_the_default_polls_nothing() {
        let config = |notices: &str| {
            let text = format!(
                "node: {{name: a, provider: p, placementGroup: g1, nic: eni-a}}\nstore: {{path: ./d}}\n\
                 providers: [{{name: p, kind: aws, region: us-east-1{notices}}}]\n"
            );
            crate::config::parse_config(&text, std::path::Path::new("agent.yaml")).expect("valid")
        };
        let source = |notices: &str| config(notices).providers[0].settings.maintenance_notices();
        assert_eq!(source(", maintenanceNotices: drain"), Some(NoticeSource::Aws));
        assert_eq!(source(", maintenanceNotices: ignore"), None);
        assert_eq!(source(""), None, "off by default");
    }

    /// A notice names the agent's host: two of this agent's nodes on a draining provider would
    /// both be drained by it, so the config is refused at `nodes`, one line.
    #[test]
    fn drain_with_two_nodes_of_this_agent_on_the_provider_is_refused() {
        let text = "nodes:\n  - {name: a, provider: p, placementGroup: g1, nic: eni-a}\n  \
                    - {name: b, provider: p, placementGroup: g1, nic: eni-b}\nstore: {path: ./d}\n\
                    providers: [{name: p, kind: aws, region: us-east-1, maintenanceNotices: drain}]\n";
        let errors =
            crate::config::parse_config(text, std::path::Path::new("agent.yaml")).expect_err("refused");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].position.line, 2, "at `nodes`: {errors:?}");
        assert!(
            errors[0].message.starts_with(
                "nodes `a` and `b` both run here on aws provider `p` with `maintenanceNotices: drain`"
            ),
            "{errors:?}"
        );
        // Two providers that drain, one node each: the same host's notice would drain both.
        let two = "nodes:\n  - {name: a, provider: p, placementGroup: g1, nic: eni-a}\n  \
                   - {name: b, provider: q, placementGroup: g1, nic: eni-b}\nstore: {path: ./d}\n\
                   providers: [{name: p, kind: aws, region: us-east-1, maintenanceNotices: drain}, \
                   {name: q, kind: aws, region: us-east-2, maintenanceNotices: drain}]\n";
        let errors =
            crate::config::parse_config(two, std::path::Path::new("agent.yaml")).expect_err("refused");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].message.starts_with("nodes `a` and `b` both run here on providers `p` and `q`"),
            "{errors:?}"
        );
        let ignoring = text.replace("drain", "ignore");
        assert!(
            crate::config::parse_config(&ignoring, std::path::Path::new("agent.yaml")).is_ok(),
            "ignore: fine"
        );
    }

    #[test]
    fn drain_on_azure_and_oci_polls_their_metadata_services() {
        let azure_nic = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/a";
        let cases = [
            (
                azure_nic,
                "kind: azure, subscriptionId: 00000000-0000-0000-0000-000000000001",
                NoticeSource::Azure,
            ),
            (
                "ocid1.vnic.oc1.iad.aaaa",
                "kind: oci, region: us-ashburn-1, auth: instancePrincipal",
                NoticeSource::Oci,
            ),
        ];
        for (nic, provider, expected) in cases {
            let source = |notices: &str| {
                let text = format!(
                    "node: {{name: a, provider: p, placementGroup: g1, nic: '{nic}'}}\nstore: {{path: ./d}}\n\
                     providers: [{{name: p, {provider}{notices}}}]\n"
                );
                let config = crate::config::parse_config(&text, std::path::Path::new("agent.yaml"))
                    .unwrap_or_else(|errors| panic!("{provider}: {errors:?}"));
                config.providers[0].settings.maintenance_notices()
            };
            assert_eq!(source(", maintenanceNotices: drain"), Some(expected), "{provider}");
            assert_eq!(source(", maintenanceNotices: ignore"), None, "{provider}");
            assert_eq!(source(""), None, "{provider}: off by default");
        }
    }

    #[test]
    fn a_reader_needs_an_http_url() {
        assert!(NoticeReader::new(NoticeSource::Aws, "http://127.0.0.1:8080").is_ok());
        let refused = NoticeReader::new(NoticeSource::Aws, "https://169.254.169.254").expect_err("https");
        assert!(refused.contains("http://"), "{refused}");
        let refused = NoticeReader::new(NoticeSource::Aws, "http://x:99999").expect_err("port");
        assert!(refused.contains("the port is not a number from 1 to 65535"), "{refused}");
    }
}
