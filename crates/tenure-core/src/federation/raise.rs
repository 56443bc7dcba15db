//! `tokens-raised{by}` (a restore's raise): the one place besides [`super::settle`] where tokens
//! move. Tokens are a projection of the log, so a store restored from an older backup would hand
//! out again token values that were already used after the backup was taken (SPEC 1 forbids it).
//! `tenure store restore` therefore appends one `tokens-raised` event whose `by` is above every
//! token issued or seen since; applying it:
//!
//! - adds `by` to every token the federation keeps: each address's `ownershipEpoch` and each of
//!   its capture lines, retired lines and deleted pools' addresses included;
//! - raises the federation-wide token floor by `by`, so that a line created later (a pool applied
//!   after the restore, a new capture domain) starts at the floor and its first holder gets
//!   floor + 1, not 1;
//! - forgets the kept approvals that the raised tokens made stale, as any token move does.
//!
//! It changes no owner, desired holder or confirmation: only the numbers move, so every action
//! stamped before the event is stale at the gate (`stale-epoch`) and fresh ones are planned.
//! Arithmetic is checked before anything changes: an event whose `by` would take a token past
//! `u64::MAX` is rejected ([`EventRejected::TokensOverflow`]) and changes nothing. The check needs
//! no scan: [`Federation::highest_token`] bounds every token.

use super::{EventRejected, Federation};

impl Federation {
    /// Refuses a raise that would take the highest token past `u64::MAX` (every other token and
    /// the floor are at most the highest).
    pub(super) fn check_raise(&self, by: u64) -> Result<(), EventRejected> {
        match self.highest_token.checked_add(by) {
            Some(_) => Ok(()),
            None => Err(EventRejected::TokensOverflow { by, highest: self.highest_token }),
        }
    }

    /// Raises every token line and the floor by `by` (checked by [`Self::check_raise`] first).
    pub(super) fn raise_tokens(&mut self, by: u64) {
        const CHECKED: &str =
            "check_raise: every token is at most highest_token, and highest + by fits a u64";
        for pool in self.pools.values_mut() {
            for state in pool.addresses.values_mut() {
                state.ownership_epoch = state.ownership_epoch.raised_by(by).expect(CHECKED);
                state.line.epoch = state.line.epoch.raised_by(by).expect(CHECKED);
                for (_, line) in &mut state.retired_lines {
                    line.epoch = line.epoch.raised_by(by).expect(CHECKED);
                }
            }
        }
        self.token_floor = self.token_floor.checked_add(by).expect(CHECKED);
        self.highest_token = self.highest_token.checked_add(by).expect(CHECKED);
        self.approvals.forget_all_stale(&self.pools);
    }
}
