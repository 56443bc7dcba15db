//! tenure-aws: the EC2 calls of tenure's `aws` provider (SPEC 7), kept in a crate of their own
//! because aws-sdk-ec2 takes minutes to build; the `tenure` binary's cargo feature `aws` turns it
//! on, and its executor (`tenure::exec::aws`) maps verbs onto these calls.
//!
//! | call | EC2 API | idempotent as |
//! |---|---|---|
//! | [`Ec2::assign`] | `AssignPrivateIpAddresses` with `AllowReassignment` | assigning an address an ENI holds already is accepted by EC2 |
//! | [`Ec2::addresses`] | `DescribeNetworkInterfaces` for one ENI | a read |
//! | [`Ec2::unassign`] | `UnassignPrivateIpAddresses` on the node's own ENI | an address not there is success (refused by EC2 with `InvalidParameterValue`, checked with one describe) |
//! | [`Ec2::set_source_dest_check`] | `ModifyNetworkInterfaceAttribute` | setting a value twice |
//! | [`Ec2::holders`] | `DescribeNetworkInterfaces` filtered by the nodes' ENIs, then by their VPCs and the addresses | reads |
//!
//! Throttling (`RequestLimitExceeded`, HTTP 429/503) and server errors (5xx) are retried by the
//! SDK's standard retry strategy — exponential backoff with full jitter — up to
//! [`ATTEMPTS_MAX`] attempts; the caller bounds the whole call by its action's deadline.
//! Credential and permission errors are never retried: they come back as
//! [`Ec2Error::Permission`] at once.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use aws_sdk_ec2::types::Filter;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::error::ProvideErrorMetadata as _;

/// The SDK is re-exported for tests that build fixtures (VPCs, subnets, ENIs) with it.
pub use aws_sdk_ec2 as sdk;

/// Most attempts of one call (the first and its retries) on throttling and server errors.
pub const ATTEMPTS_MAX: u32 = 5;

/// Most values one `DescribeNetworkInterfaces` filter carries (EC2 takes up to 200 per filter);
/// an inventory of more addresses is read in chunks of this many.
pub const FILTER_VALUES_MAX: usize = 200;

/// Error codes that mean the caller may not do this: reported once, never retried.
const PERMISSION_CODES: &[&str] = &[
    "UnauthorizedOperation",
    "AuthFailure",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "OptInRequired",
    "Blocked",
    "AccessDenied",
    "ExpiredToken",
];

/// Why an EC2 call did not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ec2Error {
    /// Credentials or IAM permissions: retrying will not help.
    #[error(
        "{operation}: {code}: {message} (check the credentials and the IAM policy in docs/operations.md)"
    )]
    Permission {
        /// The API operation.
        operation: &'static str,
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// EC2 refused the request (an unknown ENI, an address outside the subnet, …), or kept
    /// throttling after every retry.
    #[error("{operation}: {code}: {message}")]
    Refused {
        /// The API operation.
        operation: &'static str,
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// No answer: the endpoint could not be reached, or the connection failed. The call may or
    /// may not have taken effect.
    #[error("{operation}: no answer from EC2: {message}")]
    NoAnswer {
        /// The API operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },
}

impl Ec2Error {
    fn of<E>(operation: &'static str, error: &aws_sdk_ec2::error::SdkError<E>) -> Self
    where
        E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + 'static,
    {
        use aws_sdk_ec2::error::SdkError;
        match error {
            SdkError::ServiceError(service) => {
                let inner = service.err();
                let code = inner.code().unwrap_or("Unknown").to_owned();
                let message = inner.message().unwrap_or_default().to_owned();
                if PERMISSION_CODES.contains(&code.as_str()) {
                    Self::Permission { operation, code, message }
                } else {
                    Self::Refused { operation, code, message }
                }
            }
            other => Self::NoAnswer { operation, message: tenure_core::report::with_causes(other) },
        }
    }
}

/// What an unassign found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unassigned {
    /// EC2 accepted the unassign: the address is not on the ENI now.
    Accepted,
    /// EC2 refused it because the address was not on the ENI (released already, or moved to
    /// another ENI by a seize).
    NotThere,
}

/// An EC2 client for one region (and, for tests, one endpoint).
#[derive(Clone, Debug)]
pub struct Ec2 {
    client: aws_sdk_ec2::Client,
}

impl Ec2 {
    /// A client for `region`, with credentials from the SDK's standard chain (environment,
    /// profile, web identity, container or instance metadata), against `endpoint_url` when
    /// given (e.g. moto in tests) and EC2's regional endpoint otherwise.
    pub async fn connect(region: &str, endpoint_url: Option<&str>) -> Self {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_owned()))
            .retry_config(RetryConfig::standard().with_max_attempts(ATTEMPTS_MAX));
        if let Some(url) = endpoint_url {
            loader = loader.endpoint_url(url);
        }
        Self { client: aws_sdk_ec2::Client::new(&loader.load().await) }
    }

    /// [`Ec2::connect`] with fixed credentials instead of the standard chain (tests against a
    /// local EC2 endpoint such as moto).
    pub async fn connect_with_credentials(
        region: &str,
        endpoint_url: &str,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> Self {
        let credentials = aws_sdk_ec2::config::Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "tenure-fixed",
        );
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_owned()))
            .retry_config(RetryConfig::standard().with_max_attempts(ATTEMPTS_MAX))
            .endpoint_url(endpoint_url)
            .credentials_provider(credentials)
            .load()
            .await;
        Self { client: aws_sdk_ec2::Client::new(&config) }
    }

    /// The SDK client, for fixtures in tests.
    #[must_use]
    pub fn client(&self) -> &aws_sdk_ec2::Client {
        &self.client
    }

    /// Assigns `address` to `eni` as a secondary private IP, taking it from any other ENI that
    /// holds it (`AllowReassignment`). IPv4 only (EC2 has no reassignment for IPv6 addresses).
    pub async fn assign(&self, eni: &str, address: IpAddr) -> Result<(), Ec2Error> {
        let operation = "AssignPrivateIpAddresses";
        let IpAddr::V4(v4) = address else {
            return Err(Ec2Error::Refused {
                operation,
                code: "Ipv6NotSupported".into(),
                message: format!("{address}: the aws provider moves IPv4 secondary addresses only"),
            });
        };
        self.client
            .assign_private_ip_addresses()
            .network_interface_id(eni)
            .private_ip_addresses(v4.to_string())
            .allow_reassignment(true)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| Ec2Error::of(operation, &e))
    }

    /// Every private IPv4 address of `eni` (primary and secondary).
    pub async fn addresses(&self, eni: &str) -> Result<Vec<IpAddr>, Ec2Error> {
        let operation = "DescribeNetworkInterfaces";
        let answer = self
            .client
            .describe_network_interfaces()
            .network_interface_ids(eni)
            .send()
            .await
            .map_err(|e| Ec2Error::of(operation, &e))?;
        let mut addresses: Vec<IpAddr> = answer
            .network_interfaces()
            .iter()
            .flat_map(|n| n.private_ip_addresses())
            .filter_map(|a| a.private_ip_address())
            .filter_map(|a| a.parse().ok())
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        Ok(addresses)
    }

    /// Removes `address` from `eni` (the caller's own ENI only), in one call. An address not on
    /// it — released already, or taken by a seize — is success: EC2 refuses such an unassign
    /// (`InvalidParameterValue`), and then one `DescribeNetworkInterfaces` tells whether the
    /// address is on the ENI ([`Unassigned::NotThere`] when not); some implementations (moto)
    /// accept it silently, which is [`Unassigned::Accepted`].
    pub async fn unassign(&self, eni: &str, address: IpAddr) -> Result<Unassigned, Ec2Error> {
        let operation = "UnassignPrivateIpAddresses";
        match self
            .client
            .unassign_private_ip_addresses()
            .network_interface_id(eni)
            .private_ip_addresses(address.to_string())
            .send()
            .await
        {
            Ok(_) => Ok(Unassigned::Accepted),
            Err(e) if e.as_service_error().and_then(|s| s.code()) == Some("InvalidParameterValue") => {
                if self.addresses(eni).await?.contains(&address) {
                    Err(Ec2Error::of(operation, &e))
                } else {
                    Ok(Unassigned::NotThere)
                }
            }
            Err(e) => Err(Ec2Error::of(operation, &e)),
        }
    }

    /// Where each of `addresses` is held among the ENIs of the VPCs `enis` are in: for every
    /// address asked, the ids of the ENIs holding it (primary or secondary), sorted; an address
    /// held nowhere there maps to an empty list. The same private address in another VPC is
    /// another address and is not reported. An ENI of `enis` that does not exist is skipped
    /// (filters, not ids: one wrong ENI id in a config does not blind the whole inventory); when
    /// none exists the read fails (`Refused`, code `NoNodeEniFound`) rather than report every
    /// address held nowhere.
    /// One call for the VPCs, then one per [`FILTER_VALUES_MAX`] addresses (and per page).
    pub async fn holders(
        &self,
        enis: &[String],
        addresses: &[Ipv4Addr],
    ) -> Result<BTreeMap<Ipv4Addr, Vec<String>>, Ec2Error> {
        let operation = "DescribeNetworkInterfaces";
        let nowhere = || addresses.iter().map(|a| (*a, Vec::new())).collect();
        if enis.is_empty() || addresses.is_empty() {
            return Ok(nowhere());
        }
        let mut found: BTreeMap<Ipv4Addr, BTreeSet<String>> =
            addresses.iter().map(|a| (*a, BTreeSet::new())).collect();
        let filter =
            |name: &str, values: Vec<String>| Filter::builder().name(name).set_values(Some(values)).build();
        let mut vpcs = BTreeSet::new();
        let mut resolved = 0_usize;
        for chunk in enis.chunks(FILTER_VALUES_MAX) {
            let mut pages = self
                .client
                .describe_network_interfaces()
                .filters(filter("network-interface-id", chunk.to_vec()))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| Ec2Error::of(operation, &e))?;
                resolved += page.network_interfaces().len();
                vpcs.extend(page.network_interfaces().iter().filter_map(|n| n.vpc_id().map(str::to_owned)));
            }
        }
        if vpcs.is_empty() {
            // Not "held nowhere": nothing was looked at. Read as an empty inventory it would
            // contradict every confirmed acquire at once.
            return Err(Ec2Error::Refused {
                operation,
                code: "NoNodeEniFound".into(),
                message: format!(
                    "none of the {} ENIs of the nodes exists in this region ({} found): check the nodes' nic and the provider's region",
                    enis.len(),
                    resolved
                ),
            });
        }
        let vpcs: Vec<String> = vpcs.into_iter().collect();
        for chunk in addresses.chunks(FILTER_VALUES_MAX) {
            let mut pages = self
                .client
                .describe_network_interfaces()
                .filters(filter("vpc-id", vpcs.clone()))
                .filters(filter(
                    "addresses.private-ip-address",
                    chunk.iter().map(ToString::to_string).collect(),
                ))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| Ec2Error::of(operation, &e))?;
                for eni in page.network_interfaces() {
                    let Some(id) = eni.network_interface_id() else { continue };
                    for held in eni.private_ip_addresses().iter().filter_map(|a| a.private_ip_address()) {
                        if let Ok(address) = held.parse::<Ipv4Addr>()
                            && let Some(holders) = found.get_mut(&address)
                        {
                            holders.insert(id.to_owned());
                        }
                    }
                }
            }
        }
        Ok(found.into_iter().map(|(a, holders)| (a, holders.into_iter().collect())).collect())
    }

    /// Turns the ENI's source/destination check on or off (off lets it forward for addresses
    /// that are not its own).
    pub async fn set_source_dest_check(&self, eni: &str, enabled: bool) -> Result<(), Ec2Error> {
        let operation = "ModifyNetworkInterfaceAttribute";
        self.client
            .modify_network_interface_attribute()
            .network_interface_id(eni)
            .source_dest_check(aws_sdk_ec2::types::AttributeBooleanValue::builder().value(enabled).build())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| Ec2Error::of(operation, &e))
    }
}
