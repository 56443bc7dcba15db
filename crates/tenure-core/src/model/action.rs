//! The stamped action (SPEC 5), its borrowed form for planning, and its idempotency key: made in
//! one place ([`ActionStamp::write_key`]) and parsed back ([`ParsedKey`]).

use std::net::IpAddr;

use super::{CaptureDomain, CaptureEpoch, OwnershipEpoch, Verb};

/// The stamped form of a planned provider action (SPEC 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StampedAction {
    /// Pool name.
    pub pool: crate::names::Name,
    /// The address acted on.
    pub address: IpAddr,
    /// The provider verb.
    pub verb: Verb,
    /// Acquire: the desired holder; release: the leaving node.
    pub holder: crate::names::Name,
    /// Provider name.
    pub provider: crate::names::Name,
    /// The holder's NIC.
    pub nic: crate::names::Name,
    /// The epoch line this action belongs to.
    pub capture_domain: CaptureDomain,
    /// The capture epoch at planning time.
    pub capture_epoch: CaptureEpoch,
    /// The ownership epoch at planning time.
    pub ownership_epoch: OwnershipEpoch,
}

// Its five names (the capture domain's too) are one pointer each ([`crate::names::Name`]).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<StampedAction>() <= 80);

/// An action's idempotency key (SPEC 5): written only from its stamp ([`ActionStamp::write_key`],
/// through [`StampedAction::idempotency_key`]), so a key made from a [`StampedAction`] is never a
/// node name, a pool's or any other text. An action does not keep its key (a journal of two
/// million entries held ~100 bytes of text apiece that its fields already say): it is written
/// when asked, and compared without being written ([`StampedAction::key_is`]). Reads as the `str` it is (`Deref`); log events and API requests,
/// which carry keys an operator or another agent wrote, keep plain strings and are parsed
/// ([`ParsedKey`]) or compared where they meet one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A key read back from text (a test's, a tool's): `None` unless it parses as one
    /// ([`ParsedKey::parse`]).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        ParsedKey::parse(text).map(|_| Self(text.to_owned()))
    }

    /// A key [`ActionStamp::write_key`] wrote (not parsed again).
    #[must_use]
    pub(crate) fn written(text: String) -> Self {
        Self(text)
    }

    /// The key's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for IdempotencyKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for IdempotencyKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for IdempotencyKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for IdempotencyKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for IdempotencyKey {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

impl PartialEq<IdempotencyKey> for String {
    fn eq(&self, other: &IdempotencyKey) -> bool {
        *self == other.0
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> Self {
        key.0
    }
}

impl StampedAction {
    /// The action's fields, borrowed.
    #[must_use]
    pub fn stamp(&self) -> ActionStamp<'_> {
        ActionStamp {
            pool: &self.pool,
            address: self.address,
            verb: self.verb,
            holder: &self.holder,
            provider: &self.provider,
            nic: &self.nic,
            capture_domain: &self.capture_domain,
            capture_epoch: self.capture_epoch,
            ownership_epoch: self.ownership_epoch,
        }
    }

    /// `<pool>/<address>/<verb>/<holder>/<provider>/<nic>/owner:<ownershipEpoch>:epoch:<captureEpoch>`,
    /// written from the stamp.
    #[must_use]
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(self.stamp().key())
    }

    /// Whether `key` is this action's idempotency key, compared as it is written (nothing
    /// allocated).
    #[must_use]
    pub fn key_is(&self, key: &str) -> bool {
        self.stamp().key_is(key)
    }

    /// The same stamp with another verb: the predecessor of a verb in an address's sequence has
    /// the same stamp.
    #[must_use]
    pub fn with_verb(&self, verb: Verb) -> Self {
        Self::new(
            &self.pool,
            self.address,
            verb,
            &self.holder,
            &self.provider,
            &self.nic,
            self.capture_domain.clone(),
            self.capture_epoch,
            self.ownership_epoch,
        )
    }

    /// Builds an action (its idempotency key is written from these fields when asked:
    /// [`StampedAction::idempotency_key`]).
    #[allow(clippy::too_many_arguments)]
    #[must_use]
    pub fn new(
        pool: &str,
        address: IpAddr,
        verb: Verb,
        holder: &str,
        provider: &str,
        nic: &str,
        capture_domain: CaptureDomain,
        capture_epoch: CaptureEpoch,
        ownership_epoch: OwnershipEpoch,
    ) -> Self {
        let stamp = ActionStamp {
            pool,
            address,
            verb,
            holder,
            provider,
            nic,
            capture_domain: &capture_domain,
            capture_epoch,
            ownership_epoch,
        };
        stamp.to_action()
    }
}

/// A [`StampedAction`]'s fields borrowed from where they were planned: what a reconcile compares
/// with the journal (by key, written into a reused buffer) before it allocates anything. Most
/// planned actions are journaled already; only a new one becomes a [`StampedAction`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActionStamp<'a> {
    /// Pool name.
    pub pool: &'a str,
    /// The address acted on.
    pub address: IpAddr,
    /// The provider verb.
    pub verb: Verb,
    /// Acquire: the desired holder; release: the leaving node.
    pub holder: &'a str,
    /// Provider name.
    pub provider: &'a str,
    /// The holder's NIC.
    pub nic: &'a str,
    /// The epoch line.
    pub capture_domain: &'a CaptureDomain,
    /// The capture epoch at planning time.
    pub capture_epoch: CaptureEpoch,
    /// The ownership epoch at planning time.
    pub ownership_epoch: OwnershipEpoch,
}

impl ActionStamp<'_> {
    /// Writes the idempotency key into `out`.
    pub fn write_key(&self, out: &mut String) {
        // Writing into a String cannot fail.
        let _ = self.write_key_into(out);
    }

    /// The idempotency key written into `buffer` (emptied first): a loop over many keys reuses
    /// one buffer instead of allocating each.
    pub fn key_in<'b>(&self, buffer: &'b mut String) -> &'b str {
        buffer.clear();
        self.write_key(buffer);
        buffer
    }

    /// The idempotency key.
    #[must_use]
    pub fn key(&self) -> String {
        let mut key = String::with_capacity(96);
        self.write_key(&mut key);
        key
    }

    /// The owned action.
    #[must_use]
    pub fn to_action(&self) -> StampedAction {
        StampedAction {
            pool: crate::names::shared(self.pool),
            address: self.address,
            verb: self.verb,
            holder: crate::names::shared(self.holder),
            provider: crate::names::shared(self.provider),
            nic: crate::names::shared(self.nic),
            capture_domain: self.capture_domain.clone(),
            capture_epoch: self.capture_epoch,
            ownership_epoch: self.ownership_epoch,
        }
    }

    /// Whether `key` is this stamp's idempotency key, compared piece by piece as it is written
    /// (nothing allocated; the writing stops at the first piece that differs).
    #[must_use]
    pub fn key_is(&self, key: &str) -> bool {
        let mut rest = CompareWriter(key);
        self.write_key_into(&mut rest).is_ok() && rest.0.is_empty()
    }

    /// Writes the idempotency key to any sink (the one place its format is made):
    /// `<pool>/<address>/<verb>/<holder>/<provider>/<nic>/owner:<ownershipEpoch>:epoch:<captureEpoch>`.
    /// Written piece by piece (no `write!`: a node's pass writes a key per planned action, and
    /// `fmt`'s machinery was a tenth of it); the property test `a_key_is_written_in_its_format`
    /// holds it to the format above.
    fn write_key_into(&self, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        let Self { pool, address, verb, holder, provider, nic, capture_epoch, ownership_epoch, .. } = self;
        let mut number = itoa::Buffer::new();
        out.write_str(pool)?;
        out.write_char('/')?;
        write_address(out, *address, &mut number)?;
        for piece in [verb.as_str(), holder, provider, nic] {
            out.write_char('/')?;
            out.write_str(piece)?;
        }
        out.write_str("/owner:")?;
        out.write_str(number.format(ownership_epoch.get()))?;
        out.write_str(":epoch:")?;
        out.write_str(number.format(capture_epoch.get()))
    }
}

/// `address` as `Display` writes it: an IPv4 address by its octets, an IPv6 one by `Display`.
fn write_address(
    out: &mut impl std::fmt::Write,
    address: IpAddr,
    number: &mut itoa::Buffer,
) -> std::fmt::Result {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            out.write_str(number.format(a))?;
            for octet in [b, c, d] {
                out.write_char('.')?;
                out.write_str(number.format(octet))?;
            }
            Ok(())
        }
        IpAddr::V6(v6) => write!(out, "{v6}"),
    }
}

/// The text a key written into it has yet to match: a piece that does not match it is an error,
/// which ends the writing.
struct CompareWriter<'a>(&'a str);

impl std::fmt::Write for CompareWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 = self.0.strip_prefix(s).ok_or(std::fmt::Error)?;
        Ok(())
    }
}

/// The parts of an idempotency key, parsed back (for `action-result` events, which carry only
/// the key). Names never contain `/` and the epochs' tail has none, so the key splits
/// unambiguously even when the NIC does (an Azure NIC is an ARM resource id: everything between
/// the provider and the tail is the NIC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedKey {
    /// Pool name.
    pub pool: String,
    /// Address.
    pub address: IpAddr,
    /// Verb.
    pub verb: Verb,
    /// Holder node.
    pub holder: String,
    /// Provider name.
    pub provider: String,
    /// NIC.
    pub nic: String,
    /// Stamped ownershipEpoch.
    pub ownership_epoch: OwnershipEpoch,
    /// Stamped captureEpoch.
    pub capture_epoch: CaptureEpoch,
}

impl ParsedKey {
    /// Parses `<pool>/<address>/<verb>/<holder>/<provider>/<nic>/owner:<o>:epoch:<c>`.
    #[must_use]
    pub fn parse(key: &str) -> Option<Self> {
        let mut parts = key.splitn(6, '/');
        let (pool, address, verb, holder, provider) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let (nic, tail) = parts.next()?.rsplit_once('/')?;
        if nic.is_empty() {
            return None;
        }
        let tail = tail.strip_prefix("owner:")?;
        let (ownership, capture) = tail.split_once(":epoch:")?;
        Some(Self {
            pool: pool.to_owned(),
            address: address.parse().ok()?,
            verb: verb.parse().ok()?,
            holder: holder.to_owned(),
            provider: provider.to_owned(),
            nic: nic.to_owned(),
            ownership_epoch: OwnershipEpoch(ownership.parse().ok()?),
            capture_epoch: CaptureEpoch(capture.parse().ok()?),
        })
    }
}
