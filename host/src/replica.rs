//! This process among its replicas: leader election and shard membership, from the flags
//! (`--leader-elect…`, `--shards`) or the keys of `--config`, started before the plugins and
//! stopped after them.

use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use kwh_client::duration::parse_duration;
use kwh_client::Client;
use kwh_coordination::leader_election::{Role, Timings};
use kwh_coordination::ownership::Ownership;
use kwh_coordination::replica as coordination;
use kwh_plugin::events::{EventRecorder, EventType, NewEvent, ObjectRef};

/// The flags. Durations are written as kube-controller-manager's flags take them (`15s`,
/// `1500ms`); the defaults are client-go's.
#[derive(Args, Debug, Default)]
pub struct ReplicaArgs {
    /// Elect one leader among the replicas through a Lease; only the leader runs the plugins
    /// (with `--shards`: only the plugins marked `leaderOnly`).
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Leases (default: the namespace of the kubeconfig context, in a pod
    /// its own namespace).
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Name of the leader Lease; also the shard group's name (default kube-wasm-host).
    #[arg(long, value_name = "NAME")]
    pub leader_elect_lease_name: Option<String>,
    /// How long a Lease holds after its last renewal (default 15s; whole seconds).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Option<Duration>,
    /// How long a leader (or member) keeps acting without renewing (default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Option<Duration>,
    /// The interval between acquire and renew attempts (default 2s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub leader_elect_retry_period: Option<Duration>,
    /// Divide reconcile keys among the live replicas (each holds a membership Lease;
    /// rendezvous hashing over the members). Every replica still caches everything.
    #[arg(long)]
    pub shards: bool,
}

/// The same settings as keys of `--config` (flags win); flattened into the config file's keys.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaConfig {
    pub leader_elect: Option<bool>,
    pub leader_elect_namespace: Option<String>,
    pub leader_elect_lease_name: Option<String>,
    pub leader_elect_lease_duration: Option<String>,
    pub leader_elect_renew_deadline: Option<String>,
    pub leader_elect_retry_period: Option<String>,
    pub shards: Option<bool>,
}

/// What was asked for, merged and checked.
#[derive(Debug, Clone)]
pub struct ReplicaSettings {
    pub leader_elect: bool,
    pub shards: bool,
    pub namespace: Option<String>,
    pub lease_name: String,
    pub timings: Timings,
}

impl ReplicaSettings {
    /// Flags over config keys over client-go's defaults; the timings are checked as client-go
    /// checks them.
    pub fn resolve(args: &ReplicaArgs, file: &ReplicaConfig) -> anyhow::Result<Self> {
        let dur = |key: &str, flag: Option<Duration>, v: &Option<String>, default: Duration| match (
            flag, v,
        ) {
            (Some(d), _) => Ok(d),
            (None, Some(s)) => {
                parse_duration(s).map_err(|e| anyhow::anyhow!("config key {key}: {e}"))
            }
            (None, None) => Ok(default),
        };
        let d = Timings::default();
        let timings = Timings {
            lease_duration: dur(
                "leaderElectLeaseDuration",
                args.leader_elect_lease_duration,
                &file.leader_elect_lease_duration,
                d.lease_duration,
            )?,
            renew_deadline: dur(
                "leaderElectRenewDeadline",
                args.leader_elect_renew_deadline,
                &file.leader_elect_renew_deadline,
                d.renew_deadline,
            )?,
            retry_period: dur(
                "leaderElectRetryPeriod",
                args.leader_elect_retry_period,
                &file.leader_elect_retry_period,
                d.retry_period,
            )?,
        };
        let s = ReplicaSettings {
            leader_elect: args.leader_elect || file.leader_elect.unwrap_or(false),
            shards: args.shards || file.shards.unwrap_or(false),
            namespace: args
                .leader_elect_namespace
                .clone()
                .or_else(|| file.leader_elect_namespace.clone()),
            lease_name: args
                .leader_elect_lease_name
                .clone()
                .or_else(|| file.leader_elect_lease_name.clone())
                .unwrap_or_else(|| "kube-wasm-host".into()),
            timings,
        };
        if s.leader_elect || s.shards {
            s.timings
                .validate()
                .map_err(|e| anyhow::anyhow!("leader election: {e}"))?;
        }
        Ok(s)
    }
}

/// How often a new leader looks whether its fence opened, to record its Event.
const FENCE_POLL: Duration = Duration::from_millis(50);

/// The running election and membership of this process (`kwh_coordination`'s), and what the
/// binary adds: the Event it records on the leader Lease.
pub struct Replica {
    inner: coordination::Replica,
    /// With an election: the leader Lease (its uid filled in as each Event is recorded: the
    /// Lease may not exist yet at start), and the note of this process's "became leader".
    leader_event: Option<(ObjectRef, String)>,
}

/// The reporting controller of the host's own Events.
const EVENTS_CONTROLLER: &str = "kube-wasm-host";

impl Replica {
    /// Starts the election and the membership asked for, as `identity`.
    pub fn start(
        settings: &ReplicaSettings,
        client: &Client,
        identity: &str,
        leader_only_plugins: &[String],
    ) -> anyhow::Result<Self> {
        let namespace = settings
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let inner = coordination::Replica::start(
            &coordination::Settings {
                leader_elect: settings.leader_elect,
                shards: settings.shards,
                namespace: namespace.clone(),
                lease_name: settings.lease_name.clone(),
                timings: settings.timings.clone(),
            },
            client,
            identity,
            leader_only_plugins,
        )?;
        let leader_event = settings.leader_elect.then(|| {
            let lease = ObjectRef {
                api_version: "coordination.k8s.io/v1".into(),
                kind: "Lease".into(),
                namespace: Some(namespace),
                name: settings.lease_name.clone(),
                uid: None,
            };
            (lease, format!("{identity} became leader"))
        });
        Ok(Replica {
            inner,
            leader_event,
        })
    }

    /// Records an Event on the leader Lease each time this process becomes the leader, as
    /// client-go's leader election does (`Normal`, reason `LeaderElection`, the note
    /// `<identity> became leader`): what `kubectl get events` shows operators of
    /// controller-runtime managers. A process already leading when this is called records it
    /// at once. Nothing without an election.
    pub fn record_leadership(&self, events: EventRecorder) {
        let (Some((mut role, seen)), Some((regarding, note))) =
            (self.inner.election(), self.leader_event.clone())
        else {
            return;
        };
        // The Event writer writes behind this replica's own fence: with shards, its
        // membership's, which a new process opens only at its first membership round.
        let fence = self.inner.ownership().fence();
        tokio::spawn(async move {
            let mut leading = false;
            loop {
                let mut now = *role.borrow_and_update() == Role::Leader;
                if now && !leading && !fence.is_open() {
                    // Written before the fence opens, the Event would be refused: wait for it
                    // (a membership round, a retry period at most) while still leading.
                    while now && !fence.is_open() {
                        tokio::select! {
                            _ = tokio::time::sleep(FENCE_POLL) => {}
                            r = role.changed() => if r.is_err() { return },
                        }
                        now = *role.borrow_and_update() == Role::Leader;
                    }
                }
                if now && !leading {
                    // The election publishes the Lease it wrote before it announces the
                    // role, so its uid is known here: `kubectl describe lease` matches
                    // Events on it.
                    let uid = seen.borrow().as_ref().and_then(|s| s.lease_uid.clone());
                    events.record(
                        EVENTS_CONTROLLER,
                        NewEvent {
                            regarding: ObjectRef {
                                uid,
                                ..regarding.clone()
                            },
                            event_type: EventType::Normal,
                            reason: "LeaderElection".into(),
                            action: "Acquire".into(),
                            note: Some(note.clone()),
                        },
                    );
                }
                leading = now;
                if role.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Which work this process may do.
    pub fn ownership(&self) -> Ownership {
        self.inner.ownership()
    }

    /// Resolves when this process lost its lease (leader or membership): it must stop.
    pub async fn lost(&self) -> &'static str {
        self.inner.lost().await
    }

    /// Leaves the shard group and releases the leader Lease, after the plugins stopped.
    pub async fn stop(self) {
        self.inner.stop().await
    }
}
