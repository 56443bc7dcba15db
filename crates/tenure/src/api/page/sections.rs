//! The status page's sections as HTML: the agent's health, the nodes, the actions waiting for
//! approval, the recent failures, and the ownership map (filter form, phase counts, pager,
//! table). Every string from the config or the log goes through [`escape`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tenure_core::rows::ActionRow;

use super::html::{age, escape, query_string};
use super::query::{PAGE_ROWS, PHASES, PageQuery};
use crate::agent::listing::address_filter_text;
use crate::agent::request::Health;
use crate::agent::status::{NodeStatus, StatusSnapshot};

/// The heading: which nodes this agent runs, whether it can act, where it is in the log.
pub fn header(out: &mut String, health: &Health) {
    let _ = write!(
        out,
        "<header><h1>tenure agent: {}</h1><p id=\"health\" data-ok=\"{}\">",
        escape(&health.nodes.join(", ")),
        health.ok
    );
    if health.ok {
        out.push_str("<span class=\"ok\">ok</span>");
    } else {
        let reason = health.reason.as_deref().unwrap_or("unhealthy");
        let _ = write!(out, "<span class=\"bad\">not ok: {}</span>", escape(reason));
    }
    let _ = writeln!(
        out,
        " · log index {} of {} · stream time {}</p></header>",
        health.log_index,
        health.log_head,
        super::timeline::clock_text(health.stream_time_ms)
    );
}

/// The nodes of the registry: liveness, drain, health, VRRP, heartbeat age, and how many
/// addresses each owns and holds (`per_node`: of the whole map, not the filtered one).
pub fn nodes(out: &mut String, nodes: &[NodeStatus], per_node: &BTreeMap<String, (usize, usize)>) {
    out.push_str(
        "<section id=\"nodes\"><h2>Nodes</h2><table><thead><tr><th>node</th><th>live</th>\
         <th>last heartbeat</th><th>drained</th><th>health</th><th>VRRP</th><th>owns</th><th>holds</th>\
         <th>provider / placement</th><th>NIC</th></tr></thead><tbody>\n",
    );
    for node in nodes {
        let live = match node.alive {
            Some(true) => "<span class=\"ok\">alive</span>",
            Some(false) => "<span class=\"bad\">expired</span>",
            None => "<span class=\"muted\">in no pool</span>",
        };
        let heartbeat =
            node.heartbeat_age_ms.map_or_else(|| "never".to_owned(), |ms| format!("{} ago", age(ms)));
        let drained = if node.drained { "<span class=\"warn\">drained</span>" } else { "no" };
        let healthy = if node.healthy { "healthy" } else { "<span class=\"bad\">unhealthy</span>" };
        let _ = writeln!(
            out,
            "<tr data-node=\"{name}\" data-alive=\"{alive}\" data-drained=\"{}\"><td>{name}{}</td><td>{live}</td>\
             <td>{heartbeat}</td><td>{drained}</td><td>{healthy}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{} / {}</td><td class=\"mono\">{}</td></tr>",
            node.drained,
            if node.local { " <span class=\"muted\">(this agent)</span>" } else { "" },
            node.vrrp.unwrap_or("—"),
            per_node.get(&node.name).map_or(0, |counts| counts.0),
            per_node.get(&node.name).map_or(0, |counts| counts.1),
            escape(&node.provider),
            escape(&node.placement_group),
            escape(&node.nic),
            name = escape(&node.name),
            alive = node.alive.map_or("unknown", |a| if a { "true" } else { "false" }),
        );
    }
    out.push_str("</tbody></table></section>\n");
}

/// Journal entries in a table under `heading` (section `id`), with `total` saying how many
/// there are when more than the rows shown; `empty` when there are none.
pub fn actions(out: &mut String, id: &str, heading: &str, rows: &[ActionRow], total: usize, empty: &str) {
    let _ = writeln!(out, "<section id=\"{id}\"><h2>{heading} ({total})</h2>");
    if rows.is_empty() {
        let _ = writeln!(out, "<p class=\"muted\">{empty}</p></section>");
        return;
    }
    if total > rows.len() {
        let _ = writeln!(
            out,
            "<p class=\"muted\">the first {} of {total} (all: <code>tenure actions</code>)</p>",
            rows.len()
        );
    }
    out.push_str(
        "<table><thead><tr><th>node</th><th>pool</th><th>address</th><th>verb</th><th>holder</th>\
         <th>ownershipEpoch</th><th>captureEpoch</th><th>attempts</th><th>last error</th>\
         <th>idempotency key</th></tr></thead><tbody>\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"reason\">{}</td><td class=\"mono\">{}</td></tr>",
            escape(&row.node),
            escape(&row.pool),
            escape(&row.address),
            escape(&row.verb),
            escape(&row.holder),
            row.ownership_epoch,
            row.capture_epoch,
            row.attempts.unwrap_or(0),
            escape(row.last_error.as_deref().unwrap_or("")),
            escape(&row.idempotency_key),
        );
    }
    out.push_str("</tbody></table></section>\n");
}

/// The ownership map: the filter form, the phase counts of the filtered rows, the pager and the
/// page of the table the loop wrote out.
pub fn ownership(out: &mut String, status: &StatusSnapshot, query: &PageQuery) {
    let map = &status.map;
    out.push_str("<section id=\"ownership\"><h2>Ownership</h2>\n");
    filter_form(out, status, query);
    let _ = write!(
        out,
        "<p id=\"ownership-count\" data-rows=\"{}\" data-total=\"{}\">{} of {} addresses",
        map.matched, map.total, map.matched, map.total
    );
    for phase in PHASES {
        if let Some(count) = map.phases.get(&phase) {
            let _ = write!(out, " · <span class=\"phase-{0}\">{count} {0}</span>", phase.as_str());
        }
    }
    out.push_str("</p>\n");
    pager(out, query, map.page, map.pages);
    out.push_str(
        "<table id=\"ownership-table\"><thead><tr><th>pool</th><th>address</th><th>owner</th><th>phase</th>\
         <th>held by</th><th>NICs</th><th>ownershipEpoch</th><th>captureEpoch</th><th>desired</th></tr></thead><tbody>\n",
    );
    for row in &map.rows {
        let phase = row.phase.as_deref().unwrap_or("—");
        let _ = writeln!(
            out,
            "<tr data-pool=\"{pool}\" data-address=\"{address}\" data-phase=\"{phase}\"><td>{pool}</td>\
             <td class=\"mono\">{address}</td><td>{}</td><td class=\"phase-{phase}\">{phase}</td><td>{}</td>\
             <td class=\"mono\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            row.owner.as_deref().map_or_else(|| "<span class=\"muted\">none</span>".to_owned(), escape),
            escape(&row.held_by.as_deref().unwrap_or_default().join(", ")),
            escape(&row.nics.as_deref().unwrap_or_default().join(", ")),
            row.ownership_epoch,
            row.capture_epoch,
            if row.desired { "yes" } else { "no" },
            pool = escape(&row.pool),
            address = escape(&row.address),
            phase = escape(phase),
        );
    }
    out.push_str("</tbody></table>\n");
    if map.pages > 1 {
        pager(out, query, map.page, map.pages);
    }
    out.push_str("</section>\n");
}

/// The filter form: a GET of this page, so the server filters (and the URL can be shared).
fn filter_form(out: &mut String, status: &StatusSnapshot, query: &PageQuery) {
    let pools: Vec<&str> = status.map.pools.iter().map(String::as_str).collect();
    let nodes: Vec<&str> = status.nodes.iter().map(|node| node.name.as_str()).collect();
    let phases: Vec<&str> = PHASES.iter().map(|p| p.as_str()).collect();
    out.push_str("<form class=\"filters\" id=\"filters\" method=\"get\" action=\"/\">");
    select(out, "pool", &pools, query.filter.list.pool.as_deref());
    select(out, "node", &nodes, query.filter.list.node.as_deref());
    // One field per address asked for, and an empty one to add another (the query repeats
    // `address`; an empty field filters nothing).
    let addresses = query.filter.list.addresses.iter().map(address_filter_text).chain([String::new()]);
    for (i, address) in addresses.enumerate() {
        let (label, id) = if i == 0 {
            ("address or CIDR", "filter-address".to_owned())
        } else {
            ("or", format!("filter-address-{}", i + 1))
        };
        let _ = write!(
            out,
            "<label>{label}<input name=\"address\" id=\"{id}\" size=\"18\" value=\"{}\" \
             placeholder=\"10.0.0.0/24\"></label>",
            escape(&address)
        );
    }
    select(out, "phase", &phases, query.filter.phase.map(|p| p.as_str()));
    let _ = write!(out, "<input type=\"hidden\" name=\"refresh\" value=\"{}\">", query.refresh_s);
    let refresh = if query.refresh_s == 0 {
        let mut pairs = query.filter_pairs();
        pairs.retain(|(key, _)| *key != "refresh");
        format!(
            "<a href=\"/{}\">reload every {} s</a>",
            escape(&query_string(&pairs)),
            super::html::REFRESH_DEFAULT_S
        )
    } else {
        let mut pairs = query.filter_pairs();
        pairs.retain(|(key, _)| *key != "refresh");
        pairs.push(("refresh", "0".to_owned()));
        format!(
            "reloads every {} s (<a href=\"/{}\">stop</a>)",
            query.refresh_s,
            escape(&query_string(&pairs))
        )
    };
    let _ = writeln!(
        out,
        "<button type=\"submit\" id=\"filter-apply\">filter</button> <a href=\"/\">clear</a> \
         <span class=\"muted\">{refresh}</span></form>"
    );
}

/// A `<select>` of `options` named `name`, with "any" first and `chosen` selected.
fn select(out: &mut String, name: &str, options: &[&str], chosen: Option<&str>) {
    let _ = write!(
        out,
        "<label>{name}<select name=\"{name}\" id=\"filter-{name}\"><option value=\"\">any</option>"
    );
    for option in options {
        let selected = if chosen == Some(*option) { " selected" } else { "" };
        let _ = write!(out, "<option value=\"{0}\"{selected}>{0}</option>", escape(option));
    }
    // A filter naming something not in the map (a pool deleted meanwhile) stays visible.
    if let Some(chosen) = chosen.filter(|c| !options.contains(c)) {
        let _ = write!(out, "<option value=\"{0}\" selected>{0}</option>", escape(chosen));
    }
    out.push_str("</select></label>");
}

/// "page 2 of 9" with links to the first, previous, next and last pages, keeping the filters.
fn pager(out: &mut String, query: &PageQuery, shown: usize, pages: usize) {
    let link = |page: usize, text: &str| {
        let mut pairs = query.filter_pairs();
        if page > 1 {
            pairs.push(("page", page.to_string()));
        }
        format!("<a href=\"/{}\" data-page=\"{page}\">{text}</a>", escape(&query_string(&pairs)))
    };
    out.push_str("<nav class=\"pager\">");
    if shown > 1 {
        let _ = write!(out, "{}{}", link(1, "« first"), link(shown - 1, "‹ previous"));
    }
    let _ = write!(out, "<span class=\"page-of\">page {shown} of {pages} ({PAGE_ROWS} a page)</span>");
    if shown < pages {
        let _ = write!(out, "{}{}", link(shown + 1, "next ›"), link(pages, "last »"));
    }
    out.push_str("</nav>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed action says why on the page, as `tenure actions -o wide` does, escaped.
    #[test]
    fn a_failed_action_shows_its_attempts_and_last_error_escaped() {
        let row = ActionRow {
            node: "a".into(),
            idempotency_key: "edge/10.0.0.1/acquire/a/hook/eth0/owner:1:epoch:1".into(),
            verb: "acquire".into(),
            pool: "edge".into(),
            address: "10.0.0.1".into(),
            holder: "a".into(),
            provider: "hook".into(),
            nic: "eth0".into(),
            capture_domain: "hook/g1".into(),
            ownership_epoch: 1,
            capture_epoch: 1,
            state: "failed".into(),
            reason: None,
            attempts: Some(3),
            last_attempt_ms: Some(10),
            last_attempt_wall_ms: Some(10),
            last_error: Some("no route to <10.0.0.1>".into()),
            next_attempt_ms: Some(20),
            seq: 1,
        };
        let mut out = String::new();
        actions(&mut out, "failures", "Recent failures", &[row], 1, "none");
        assert!(out.contains("<th>attempts</th><th>last error</th>"), "{out}");
        assert!(
            out.contains("<td class=\"num\">3</td><td class=\"reason\">no route to &lt;10.0.0.1&gt;</td>"),
            "{out}"
        );
    }
}
