//! The oracles, applied to what a run printed and what the driver did.

use std::collections::HashMap;

use crate::capture::Rev;
use crate::plan::Plan;

/// A guarantee a run broke, in one line.
pub type Broken = String;

/// Every update the driver made (`key`, `rv`) reached exactly one revision's `on-update`.
pub fn each_update_handled_once(lines: &[Rev], made: &[(String, String)]) -> Result<(), Broken> {
    let mut by_update: HashMap<(&str, &str), Vec<&str>> = HashMap::new();
    for l in lines.iter().filter(|l| l.what == "update") {
        by_update
            .entry((l.key.as_str(), l.rv.as_str()))
            .or_default()
            .push(l.revision.as_str());
    }
    for (key, rv) in made {
        match by_update.get(&(key.as_str(), rv.as_str())) {
            Some(revs) if revs.len() == 1 => {}
            Some(revs) => return Err(format!("update {key}@{rv} handled by {revs:?}")),
            None => {
                let seen: Vec<String> = lines
                    .iter()
                    .filter(|l| l.key == *key)
                    .map(|l| format!("{} {} {}", l.revision, l.what, l.rv))
                    .collect();
                return Err(format!(
                    "update {key}@{rv} handled by no revision (its lines: {})",
                    seen.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Once a revision has printed its first line, every earlier revision only finishes the
/// reconciles its workers held: no handler call, and at most `workers` reconciles each.
pub fn old_revisions_only_finish_what_they_held(lines: &[Rev], plan: &Plan) -> Result<(), Broken> {
    let mut order: Vec<&str> = Vec::new();
    for l in lines {
        if !order.contains(&l.revision.as_str()) {
            order.push(&l.revision);
        }
    }
    for (i, rev) in order.iter().enumerate().skip(1) {
        let Some(first) = lines.iter().position(|l| l.revision == *rev) else {
            continue;
        };
        let older = &order[..i];
        let mut held: HashMap<&str, u32> = HashMap::new();
        for l in lines[first..]
            .iter()
            .filter(|l| older.contains(&l.revision.as_str()))
        {
            if l.what != "reconcile" {
                return Err(format!(
                    "{} {} {}@{} after {rev} took over",
                    l.revision, l.what, l.key, l.rv
                ));
            }
            let n = held.entry(&l.revision).or_default();
            *n += 1;
            if *n > plan.workers {
                return Err(format!(
                    "{} reconciled {} keys after {rev} took over; its {} workers held at most {}",
                    l.revision, n, plan.workers, plan.workers
                ));
            }
        }
    }
    Ok(())
}

/// Every object's last version was reconciled, by the revision that handled that update or a
/// later one (an upgrade replays nothing: a key an earlier revision reconciled at its last
/// version need not be reconciled again).
pub fn last_versions_reconciled(lines: &[Rev], made: &[(String, String)]) -> Result<(), Broken> {
    let mut order: Vec<&str> = Vec::new();
    for l in lines {
        if !order.contains(&l.revision.as_str()) {
            order.push(&l.revision);
        }
    }
    let rank = |rev: &str| order.iter().position(|r| *r == rev);
    let last: HashMap<&str, &str> = made
        .iter()
        .map(|(k, rv)| (k.as_str(), rv.as_str()))
        .collect();
    for (key, rv) in last {
        let Some(handled) = lines
            .iter()
            .find(|l| l.what == "update" && l.key == key && l.rv == rv)
            .and_then(|l| rank(&l.revision))
        else {
            return Err(format!("update {key}@{rv} handled by no revision"));
        };
        if !lines.iter().any(|l| {
            l.what == "reconcile"
                && l.key == key
                && l.rv == rv
                && rank(&l.revision).is_some_and(|r| r >= handled)
        }) {
            let seen: Vec<String> = lines
                .iter()
                .filter(|l| l.key == key)
                .map(|l| format!("{} {} {}", l.revision, l.what, l.rv))
                .collect();
            return Err(format!(
                "{key}@{rv} never reconciled by {} or a later revision (its lines: {})",
                order[handled],
                seen.join(", ")
            ));
        }
    }
    Ok(())
}
