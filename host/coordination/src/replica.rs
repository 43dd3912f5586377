//! This process among its replicas: the leader election and the shard membership asked for,
//! started before the plugins and stopped after them, and the [`Ownership`] both feed.
//!
//! It lives here rather than in the binary so that everything that runs a replica — the
//! `host` binary and the simulation of several replicas — runs the same code.

use std::sync::Arc;

use kwh_client::Client;

use crate::leader_election::{
    ElectionConfig, Fence, LeaderElection, LeaderSeen, Role, Timings, TimingsError,
};
use crate::membership::{LeaderLink, MemberState, Membership};
use crate::ownership::{ElectionStatus, Gain, Ownership, Shards};

/// What a replica takes part in.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Elect one leader through a Lease.
    pub leader_elect: bool,
    /// Divide reconcile keys among the live replicas.
    pub shards: bool,
    /// The namespace of the Leases.
    pub namespace: String,
    /// The leader Lease's name, also the shard group's.
    pub lease_name: String,
    /// Lease duration, renew deadline and retry period.
    pub timings: Timings,
}

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// Leader-only plugins under shards need someone to lead.
    #[error("plugin {0} is leaderOnly: with --shards it needs --leader-elect")]
    LeaderOnlyNeedsElection(String),
    /// The timings are not ones client-go accepts.
    #[error("leader election: {0}")]
    Timings(#[from] TimingsError),
}

/// The running election and membership of this process.
pub struct Replica {
    ownership: Ownership,
    election: Option<LeaderElection>,
    membership: Option<Membership>,
}

impl Replica {
    /// Alone: owns everything.
    pub fn single() -> Self {
        Replica {
            ownership: Ownership::single(),
            election: None,
            membership: None,
        }
    }

    /// Starts the election and the membership `settings` ask for, as `identity`.
    /// `leader_only_plugins` names the plugins that run on the leader only (refused under
    /// shards without an election).
    pub fn start(
        settings: &Settings,
        client: &Client,
        identity: &str,
        leader_only_plugins: &[String],
    ) -> Result<Self, ReplicaError> {
        if !settings.leader_elect && !settings.shards {
            return Ok(Replica::single());
        }
        if settings.shards && !settings.leader_elect && !leader_only_plugins.is_empty() {
            return Err(ReplicaError::LeaderOnlyNeedsElection(
                leader_only_plugins.join(", "),
            ));
        }
        settings.timings.validate()?;
        let namespace = settings.namespace.as_str();
        let election = if settings.leader_elect {
            Some(LeaderElection::spawn(
                client.clone(),
                ElectionConfig {
                    namespace: namespace.to_string(),
                    name: settings.lease_name.clone(),
                    identity: identity.to_string(),
                    timings: settings.timings.clone(),
                },
            )?)
        } else {
            None
        };
        let leader_fence = match &election {
            Some(e) => e.fence(),
            // Sharded without an election: no plugin is leader-only (checked above).
            None if settings.shards => Fence::closed(),
            None => Fence::always_open(),
        };
        let shards = settings.shards.then(|| {
            Arc::new(Shards::new(
                identity,
                Fence::closed(),
                settings.timings.lease_duration,
            ))
        });
        let status = election.as_ref().map(|e| ElectionStatus {
            lease: format!("{namespace}/{}", settings.lease_name),
            identity: identity.to_string(),
            role: e.role(),
        });
        let ownership = Ownership::new(leader_fence, shards.clone(), status);
        if let Some(e) = &election {
            replay_on_leadership(e, &ownership);
        }
        // With an election, the leader counts as a member through its leader Lease and does
        // not renew a membership Lease too.
        let link = election.as_ref().map(|e| LeaderLink {
            seen: e.leader_seen(),
            fence: e.fence(),
        });
        let membership = shards.map(|s| {
            Membership::spawn(
                client.clone(),
                namespace,
                &settings.lease_name,
                settings.timings.clone(),
                s,
                ownership.clone(),
                link,
            )
        });
        tracing::info!(
            identity,
            namespace,
            lease = %settings.lease_name,
            leader_elect = settings.leader_elect,
            shards = settings.shards,
            "replica coordination started"
        );
        Ok(Replica {
            ownership,
            election,
            membership,
        })
    }

    /// Which work this process may do.
    pub fn ownership(&self) -> Ownership {
        self.ownership.clone()
    }

    /// With an election: this process's role as it changes, and the leader it last saw.
    pub fn election(
        &self,
    ) -> Option<(
        tokio::sync::watch::Receiver<Role>,
        tokio::sync::watch::Receiver<Option<LeaderSeen>>,
    )> {
        self.election.as_ref().map(|e| (e.role(), e.leader_seen()))
    }

    /// Resolves when this process lost its lease (leader or membership): it must stop.
    pub async fn lost(&self) -> &'static str {
        let election = async {
            match &self.election {
                Some(e) => {
                    let mut r = e.role();
                    let _ = r.wait_for(|r| *r == Role::Lost).await;
                }
                None => std::future::pending().await,
            }
        };
        let membership = async {
            match &self.membership {
                Some(m) => {
                    let mut s = m.state();
                    let _ = s.wait_for(|s| *s == MemberState::Lost).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = election => "leader election lost",
            _ = membership => "shard membership lost",
        }
    }

    /// Leaves the shard group and releases the leader Lease: after the plugins stopped, so
    /// the next owner starts only once nothing here acts any more.
    pub async fn stop(self) {
        if let Some(m) = self.membership {
            m.leave().await;
        }
        if let Some(e) = self.election {
            e.release().await;
        }
    }
}

/// A new leader replays its caches to its handlers, as a controller that starts.
fn replay_on_leadership(election: &LeaderElection, ownership: &Ownership) {
    let mut role = election.role();
    let own = ownership.clone();
    tokio::spawn(async move {
        while role.changed().await.is_ok() {
            if *role.borrow_and_update() == Role::Leader {
                own.gained(Gain::Leadership);
            }
        }
    });
}
