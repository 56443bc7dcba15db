//! keepalived's `notify_fifo` lines, read for pools with `authority: vrrp` (SPEC 3, 10): what a
//! line says about the VRRP instance a node follows. Pure parsing; the reader that turns a
//! FIFO into `vrrp` events for the agent's node is issue 10's next step (not built yet: until
//! then a pool with `authority: vrrp` never captures, which is fail-closed).
//!
//! keepalived writes one line per transition: `TYPE "NAME" STATE PRIORITY`, where `TYPE` is
//! `INSTANCE` or `GROUP` (and, for its LVS checkers, `VS` or `RS` with another shape), `STATE` is
//! `MASTER`, `BACKUP`, `FAULT`, `STOP` or `DELETED`, and `PRIORITY` is the instance's priority.
//! Only `INSTANCE` lines of the followed instance count; for them every state but `MASTER` means
//! "not master", and a state this parser does not know is read as `FAULT` (fail-closed).

use tenure_core::model::VrrpState;

/// What one FIFO line says about `instance`: `Ok(Some(state))` for a line of that instance,
/// `Ok(None)` for a line about something else (another instance, a group, a checker), `Err`
/// (one line, naming the problem) for a line that is not keepalived's.
pub fn instance_state(line: &str, instance: &str) -> Result<Option<VrrpState>, String> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) =
        line.split_once(' ').ok_or_else(|| format!("not a keepalived notify line: {line:?}"))?;
    if kind != "INSTANCE" {
        return Ok(None);
    }
    let rest = rest
        .strip_prefix('"')
        .ok_or_else(|| format!("keepalived notify line without a quoted instance name: {line:?}"))?;
    let (name, rest) = rest
        .split_once('"')
        .ok_or_else(|| format!("keepalived notify line with an unclosed name: {line:?}"))?;
    if name != instance {
        return Ok(None);
    }
    let state = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| format!("keepalived notify line without a state: {line:?}"))?;
    Ok(Some(match state {
        "MASTER" => VrrpState::Master,
        "BACKUP" => VrrpState::Backup,
        // STOP (keepalived stopping), DELETED (the instance removed by a reload), FAULT, and
        // anything newer: not master.
        _ => VrrpState::Fault,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_the_followed_instance_give_its_state_and_others_nothing() {
        let cases = [
            ("INSTANCE \"VI_1\" MASTER 100\n", Ok(Some(VrrpState::Master))),
            ("INSTANCE \"VI_1\" BACKUP 100", Ok(Some(VrrpState::Backup))),
            ("INSTANCE \"VI_1\" FAULT 0", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" STOP 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" DELETED 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" MASTER_RX_LOWER_PRI 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_10\" MASTER 100", Ok(None)),
            ("GROUP \"VI_1\" MASTER 0", Ok(None)),
            ("VS [10.0.0.1]:tcp:80 UP", Ok(None)),
        ];
        for (line, want) in cases {
            assert_eq!(instance_state(line, "VI_1"), want, "{line:?}");
        }
    }

    #[test]
    fn a_line_that_is_not_keepalived_s_is_named() {
        for line in ["garbage", "INSTANCE VI_1 MASTER 100", "INSTANCE \"VI_1 MASTER 100", "INSTANCE \"VI_1\""]
        {
            let error = instance_state(line, "VI_1").expect_err("must fail");
            assert!(error.contains(&format!("{line:?}")), "{error}");
        }
    }
}
