//! The oracles, applied to what a run printed and what the driver did.

use std::collections::HashMap;

use crate::capture::{Rev, Seen};
use crate::plan::Plan;

/// A guarantee a run broke, in one line.
pub type Broken = String;

/// Which revisions handled each update (`key`, `rv`), in order.
fn revisions_by_update(lines: &[Rev]) -> HashMap<(&str, &str), Vec<&str>> {
    let mut by_update: HashMap<(&str, &str), Vec<&str>> = HashMap::new();
    for l in lines.iter().filter(|l| l.what == "update") {
        by_update
            .entry((l.key.as_str(), l.rv.as_str()))
            .or_default()
            .push(l.revision.as_str());
    }
    by_update
}

/// Every update the driver made (`key`, `rv`) reached exactly one revision's `on-update`.
pub fn each_update_handled_once(lines: &[Rev], made: &[(String, String)]) -> Result<(), Broken> {
    let by_update = revisions_by_update(lines);
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
            if l.what == "done" {
                continue;
            }
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

/// Every object's last version was reconciled, by the revision that handled that update (or
/// listed it) or a later one (an upgrade replays nothing: a key an earlier revision reconciled
/// at its last version need not be reconciled again).
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
        // An update made while no plugin ran reaches the next one as an `add`.
        let Some(handled) = lines
            .iter()
            .find(|l| (l.what == "update" || l.what == "add") && l.key == key && l.rv == rv)
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

/// The plugin's lines of each life of each replica (from one start to the next), in order.
pub fn lives(seen: &[Seen]) -> Vec<Vec<Rev>> {
    let mut lives: Vec<Vec<Rev>> = Vec::new();
    let mut now: HashMap<String, usize> = HashMap::new();
    for s in seen {
        match s {
            Seen::Note(n) => {
                if let Some(r) = n.strip_prefix("start ") {
                    now.insert(r.to_owned(), lives.len());
                    lives.push(Vec::new());
                }
            }
            Seen::Rev(l) => {
                if let Some(i) = l.by.as_ref().and_then(|r| now.get(r)) {
                    lives[*i].push(l.clone());
                }
            }
            _ => {}
        }
    }
    lives
}

/// No update reached two revisions (or one twice) in one life of a replica.
pub fn no_update_handled_twice(life: &[Rev], made: &[(String, String)]) -> Result<(), Broken> {
    let by_update = revisions_by_update(life);
    for (key, rv) in made {
        if let Some(revs) = by_update.get(&(key.as_str(), rv.as_str())) {
            if revs.len() > 1 {
                let by = life.first().and_then(|l| l.by.as_deref()).unwrap_or("-");
                return Err(format!("update {key}@{rv} handled by {revs:?} on {by}"));
            }
        }
    }
    Ok(())
}

/// The reconciles each replica has under way, by plugin and key, as the lines go by: a
/// reconcile line opens one, its `done` line closes it, and so does the replica's crash. A
/// reconcile the host cut off ([`Seen::Ended`], which names no plugin) closes the key for every
/// plugin of its replica: at worst a pair missed, never one made up.
struct Underway<'p> {
    plan: &'p Plan,
    open: HashMap<(String, String), Vec<String>>,
}

impl<'p> Underway<'p> {
    fn new(plan: &'p Plan) -> Self {
        Underway {
            plan,
            open: HashMap::new(),
        }
    }
    fn others(&self, plugin: &str, key: &str, by: &str) -> Vec<&str> {
        self.open
            .get(&(plugin.to_owned(), key.to_owned()))
            .map(|v| v.iter().filter(|r| *r != by).map(String::as_str).collect())
            .unwrap_or_default()
    }
    /// Follows one thing seen.
    fn see(&mut self, s: &Seen) {
        match s {
            Seen::Rev(l) => {
                let Some(by) = &l.by else { return };
                let at = (self.plan.plugin_of(&l.revision), l.key.clone());
                match l.what.as_str() {
                    "reconcile" if l.rv != "-" => {
                        let v = self.open.entry(at).or_default();
                        if !v.contains(by) {
                            v.push(by.clone());
                        }
                    }
                    "done" => {
                        if let Some(v) = self.open.get_mut(&at) {
                            v.retain(|r| r != by);
                        }
                    }
                    _ => {}
                }
            }
            Seen::Note(n) => {
                if let Some(r) = n.strip_prefix("crash ") {
                    for v in self.open.values_mut() {
                        v.retain(|x| x != r);
                    }
                }
            }
            Seen::Ended { by, key } => {
                for ((_, k), v) in self.open.iter_mut() {
                    if k == key {
                        v.retain(|r| r != by);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Each kind of line the other checks judge was seen at all: a capture that lost one (a
/// field recorded in a way it did not read) would let the checks that read it pass on nothing.
pub fn every_kind_of_line_seen(seen: &[Seen], writes: bool) -> Result<(), Broken> {
    let reconciled = seen
        .iter()
        .any(|s| matches!(s, Seen::Rev(l) if l.what == "reconcile"));
    let answered = seen.iter().any(|s| matches!(s, Seen::Answered(_)));
    let sent = seen
        .iter()
        .any(|s| matches!(s, Seen::Sent { by, key, .. } if !by.is_empty() && !key.is_empty()));
    match (reconciled, answered, sent || !writes) {
        (true, true, true) => Ok(()),
        _ => Err(format!(
            "the capture missed a kind of line: reconciles {reconciled}, answers {answered}, \
             writes sent {sent} (writes planned: {writes})"
        )),
    }
}

/// No two replicas reconciled one key of one plugin at the same time. (Two plugins may: a
/// rename starts the new one before the old one goes, as a new controller is deployed before
/// the old one is deleted.)
pub fn no_key_on_two_replicas_at_once(seen: &[Seen], plan: &Plan) -> Result<(), Broken> {
    let mut u = Underway::new(plan);
    for s in seen {
        if let Seen::Rev(l) = s {
            if let (Some(by), "reconcile") = (&l.by, l.what.as_str()) {
                let plugin = plan.plugin_of(&l.revision);
                let others = u.others(&plugin, &l.key, by);
                if !others.is_empty() {
                    return Err(format!(
                        "{by} reconciled {}@{} ({plugin}) while {others:?} still did",
                        l.key, l.rv
                    ));
                }
            }
        }
        u.see(s);
    }
    Ok(())
}

/// A replica sends a write for a plugin's key only while it is the last to have begun
/// reconciling that key for that plugin: none after the key moved to another replica. (A
/// write sent before its replica lost the key may still reach the server after, and be
/// applied over the new owner's: no client can recall a request the network or the server
/// holds, and the host cuts its side at once — which [`no_key_on_two_replicas_at_once`]
/// checks — but only a precondition, a resourceVersion the write names, lets the server
/// refuse it. docs/replicas.md says so.)
pub fn writes_follow_the_key(seen: &[Seen], plan: &Plan) -> Result<(), Broken> {
    let mut began: HashMap<(String, &str), &str> = HashMap::new();
    for s in seen {
        match s {
            Seen::Rev(l) if l.what == "reconcile" => {
                if let Some(by) = &l.by {
                    began.insert((plan.plugin_of(&l.revision), &l.key), by);
                }
            }
            Seen::Sent { by, key, plugin } if !key.is_empty() => {
                match began.get(&(plugin.clone(), key.as_str())) {
                    Some(b) if b == by => {}
                    other => {
                        return Err(format!(
                            "{by} sent a write for {key} ({plugin}) after {} began reconciling it",
                            other.unwrap_or(&"nobody")
                        ))
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Each plugin's lines apart (a rename's old and new plugin, each with its revisions), in
/// order.
pub fn by_plugin(lines: &[Rev], plan: &Plan) -> Vec<Vec<Rev>> {
    let mut apart: Vec<(String, Vec<Rev>)> = Vec::new();
    for l in lines {
        let plugin = plan.plugin_of(&l.revision);
        match apart.iter_mut().find(|(p, _)| *p == plugin) {
            Some((_, v)) => v.push(l.clone()),
            None => apart.push((plugin, vec![l.clone()])),
        }
    }
    apart.into_iter().map(|(_, v)| v).collect()
}

/// A revision the guest refuses to start never printed a line: the one running carried on.
pub fn refused_revisions_never_run(lines: &[Rev], refused: &str) -> Result<(), Broken> {
    match lines.iter().find(|l| l.revision == refused) {
        Some(l) => Err(format!(
            "the refused revision ran: {} {}@{}",
            l.what, l.key, l.rv
        )),
        None => Ok(()),
    }
}

/// Once a replica removed a plugin (the entry taken out, or renamed and the new plugin
/// running: the note `retired <plugin> on <replica>`), no revision of it that ran there
/// before prints another line there: nothing of the old plugin reconciles on.
pub fn retired_plugins_stay_retired(seen: &[Seen], plan: &Plan) -> Result<(), Broken> {
    // The labels each replica has run, and those retired there.
    let mut ran: HashMap<(&str, &str), ()> = HashMap::new();
    let mut retired: HashMap<(String, String), ()> = HashMap::new();
    for s in seen {
        match s {
            Seen::Rev(l) => {
                let by = l.by.as_deref().unwrap_or(SINGLE);
                if retired.contains_key(&(by.to_owned(), l.revision.clone())) {
                    return Err(format!(
                        "{} of retired plugin {} went on: {} {}@{} on {by}",
                        l.revision,
                        plan.plugin_of(&l.revision),
                        l.what,
                        l.key,
                        l.rv
                    ));
                }
                ran.insert((by, &l.revision), ());
            }
            Seen::Note(n) => {
                let Some((plugin, on)) = n
                    .strip_prefix("retired ")
                    .and_then(|r| r.split_once(" on "))
                else {
                    continue;
                };
                for (by, label) in ran.keys() {
                    if *by == on && plan.plugin_of(label) == plugin {
                        retired.insert((on.to_owned(), (*label).to_owned()), ());
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// At the end every replica runs the entry's plugin and nothing else: a rename left no old
/// plugin behind, a removal and a refused revision nothing.
pub fn the_entry_is_what_runs(
    running: &std::collections::BTreeMap<String, Vec<String>>,
    plugin: Option<&str>,
) -> Result<(), Broken> {
    let want: Vec<&str> = plugin.into_iter().collect();
    for (replica, names) in running {
        if names.iter().map(String::as_str).ne(want.iter().copied()) {
            return Err(format!(
                "at the end {replica} runs {names:?}, where the entry asks for {want:?}"
            ));
        }
    }
    Ok(())
}

/// The replica of a single-replica run, whose lines name none.
const SINGLE: &str = "replica-0";

/// Under leader election, every write left the replica that last wrote the leader Lease
/// `lease` (as the API server accepted it): none was sent by a replica that had lost it.
pub fn writes_only_by_the_leader(seen: &[Seen], lease: &str) -> Result<(), Broken> {
    let mut holder: Option<&str> = None;
    let named = format!("/leases/{lease}");
    for s in seen {
        match s {
            Seen::Answered(a)
                if a.accepted_write()
                    && (a.path.ends_with(&named)
                        || (a.method == "POST" && a.path.ends_with("/leases"))) =>
            {
                holder = Some(&a.agent);
            }
            Seen::Sent { by, key, .. } if holder != Some(by.as_str()) => {
                return Err(format!(
                    "{by} sent a write (for {key:?}) while {} held the lease",
                    holder.unwrap_or("nobody")
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Under shards no handler's write reaches the API server (every replica runs the handlers:
/// N replicas, N copies): the host refuses them.
pub fn no_handler_writes(seen: &[Seen]) -> Result<(), Broken> {
    match seen.iter().find_map(|s| match s {
        Seen::Arrived(a) if a.path.contains("/secrets/seen-") => Some(a),
        _ => None,
    }) {
        Some(a) => Err(format!(
            "a handler's write from {} reached the API server: {} {}",
            a.agent, a.method, a.path
        )),
        None => Ok(()),
    }
}

/// At the end, every object's mark (Secret `mark-<name>`) names its last version: the
/// cluster's state is what the last updates ask for.
pub fn end_state_marks_last_versions(
    em: &kwh_emulator::EmulatorHandle,
    made: &[(String, String)],
) -> Result<(), Broken> {
    let last: HashMap<&str, &str> = made
        .iter()
        .map(|(k, rv)| (k.as_str(), rv.as_str()))
        .collect();
    let mut keys: Vec<_> = last.into_iter().collect();
    keys.sort();
    for (key, rv) in keys {
        let Some((ns, name)) = key.split_once('/') else {
            continue;
        };
        let mark = em.get("v1", "Secret", Some(ns), &format!("mark-{name}"));
        let marked = mark
            .as_ref()
            .and_then(|m| m["metadata"]["annotations"]["reviser/rv"].as_str());
        if marked != Some(rv) {
            let by = mark
                .as_ref()
                .and_then(|m| m["metadata"]["annotations"]["reviser/by"].as_str());
            return Err(format!(
                "at the end {key}@{rv} is marked {marked:?} (by {by:?})"
            ));
        }
    }
    Ok(())
}
