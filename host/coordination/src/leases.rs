//! `coordination.k8s.io/v1` Leases: the one lock type leader election and shard membership use.
//!
//! A Lease is read and written whole, with optimistic concurrency on `resourceVersion`, as
//! client-go's `LeaseLock` does: an update carries the resourceVersion it read, so two replicas
//! that both saw a lease expire cannot both take it (the second write answers 409 Conflict).
//! Writes start from the object as last read and change only `spec` (and the labels asked
//! for), so fields another client set on the Lease survive a renewal.

use std::collections::BTreeMap;
use std::time::SystemTime;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use kwh_client::client::{Client, WriteParams};
use kwh_client::params::ListParams;
use kwh_client::resource::ApiResource;
use kwh_client::time::{self, micro_time};
use kwh_client::Error;

/// The Lease resource.
pub fn lease_resource() -> ApiResource {
    ApiResource::new("coordination.k8s.io/v1", "Lease", "leases", true)
}

/// A Lease's `spec`, as the API types name it. Times are `MicroTime` strings on the wire
/// (six fractional digits); [`LeaseSpec::renewed_at`] reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Who holds it; empty or absent when released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long a holder keeps it after its last renewal, as the other candidates count it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
    /// When the current holder took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// When the current holder last renewed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// How many times it changed hands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i32>,
}

impl LeaseSpec {
    /// The holder, `None` when the lease is free (absent or empty identity).
    pub fn holder(&self) -> Option<&str> {
        self.holder_identity.as_deref().filter(|h| !h.is_empty())
    }

    /// `renewTime` as a time, when present and well formed.
    pub fn renewed_at(&self) -> Option<SystemTime> {
        self.renew_time.as_deref().and_then(time::parse)
    }

    /// A spec held by `identity`, acquired and renewed at `now`.
    pub fn held(identity: &str, duration_seconds: i32, now: SystemTime, transitions: i32) -> Self {
        let t = micro_time(now);
        LeaseSpec {
            holder_identity: Some(identity.to_string()),
            lease_duration_seconds: Some(duration_seconds),
            acquire_time: Some(t.clone()),
            renew_time: Some(t),
            lease_transitions: Some(transitions),
        }
    }
}

/// A Lease as read: the parts the lock logic uses, and the object to write back from.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion`: what the next update must carry.
    pub resource_version: String,
    /// `metadata.uid` (empty if the server sent none): what an Event about the Lease names, so
    /// that `kubectl describe lease` finds it.
    pub uid: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec`.
    pub spec: LeaseSpec,
    /// The object as the server returned it (managedFields cut): an update changes its spec.
    object: Value,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: LeaseSpec,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resource_version: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Lease {
    /// Decodes one Lease object.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        let object: Value =
            serde_json::from_slice(bytes).map_err(|e| Error::Decode(format!("Lease: {e}")))?;
        let wire: Wire = serde_json::from_value(object.clone())
            .map_err(|e| Error::Decode(format!("Lease: {e}")))?;
        Ok(Lease {
            name: wire.metadata.name,
            resource_version: wire.metadata.resource_version,
            uid: wire.metadata.uid,
            labels: wire.metadata.labels,
            spec: wire.spec,
            object,
        })
    }
}

/// Reads and writes the Leases of one namespace.
#[derive(Clone)]
pub struct LeaseClient {
    client: Client,
    resource: ApiResource,
    namespace: String,
    params: WriteParams,
}

impl LeaseClient {
    /// Leases in `namespace`, written with `field_manager`.
    pub fn new(client: Client, namespace: &str, field_manager: &str) -> Self {
        LeaseClient {
            client,
            resource: lease_resource(),
            namespace: namespace.to_string(),
            params: WriteParams {
                field_manager: Some(field_manager.to_string()),
                ..WriteParams::default()
            },
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// GET one Lease; `Ok(None)` when it does not exist.
    pub async fn get(&self, name: &str) -> Result<Option<Lease>, Error> {
        match self
            .client
            .get(&self.resource, Some(&self.namespace), name)
            .await
        {
            Ok(o) => Lease::from_json(&o.raw_bytes()).map(Some),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// POST a new Lease; 409 AlreadyExists when another replica created it first.
    pub async fn create(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        spec: &LeaseSpec,
    ) -> Result<Lease, Error> {
        let mut metadata = json!({ "name": name, "namespace": self.namespace });
        if !labels.is_empty() {
            metadata["labels"] = json!(labels);
        }
        let body = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        });
        let o = self
            .client
            .create(
                &self.resource,
                Some(&self.namespace),
                to_bytes(&body)?,
                &self.params,
            )
            .await?;
        Lease::from_json(&o.raw_bytes())
    }

    /// PUT `current` with a new spec and the resourceVersion it was read at: 409 Conflict when
    /// someone wrote it since.
    pub async fn update(&self, current: &Lease, spec: &LeaseSpec) -> Result<Lease, Error> {
        let mut body = current.object.clone();
        body["spec"] = serde_json::to_value(spec).map_err(|e| Error::Decode(e.to_string()))?;
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(current.resource_version.clone()),
            );
        }
        let o = self
            .client
            .replace(
                &self.resource,
                Some(&self.namespace),
                &current.name,
                to_bytes(&body)?,
                &self.params,
            )
            .await?;
        Lease::from_json(&o.raw_bytes())
    }

    /// The Leases matching a label selector.
    pub async fn list(&self, label_selector: &str) -> Result<Vec<Lease>, Error> {
        let params = ListParams {
            label_selector: Some(label_selector.to_string()),
            ..ListParams::default()
        };
        let list = self
            .client
            .list(&self.resource, Some(&self.namespace), &params)
            .await?;
        list.items
            .iter()
            .map(|o| Lease::from_json(&o.raw_bytes()))
            .collect()
    }

    /// DELETE a Lease if it still has the resourceVersion given (a precondition: a lease that
    /// changed hands meanwhile is left alone). A missing lease is not an error.
    pub async fn delete(&self, current: &Lease) -> Result<(), Error> {
        let params = kwh_client::client::DeleteParams {
            precondition_resource_version: Some(current.resource_version.clone()),
            ..Default::default()
        };
        match self
            .client
            .delete(
                &self.resource,
                Some(&self.namespace),
                &current.name,
                &params,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn to_bytes(v: &Value) -> Result<Bytes, Error> {
    serde_json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| Error::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str =
        include_str!("../../../../shared/apiserver-samples/rbac-leases-events/lease-create.json");

    #[test]
    fn the_recorded_lease_decodes_with_its_times() {
        let l = Lease::from_json(SAMPLE.as_bytes()).unwrap();
        assert_eq!(l.name, "kube-wasm-host");
        assert_eq!(l.resource_version, "60578");
        assert_eq!(l.spec.holder(), Some("host-a_1f2e"));
        assert_eq!(l.spec.lease_duration_seconds, Some(15));
        assert_eq!(l.spec.lease_transitions, Some(0));
        let t = l.spec.renewed_at().unwrap();
        assert_eq!(micro_time(t), "2026-11-24T22:59:48.085870Z");
    }

    #[test]
    fn a_held_spec_is_written_as_client_go_writes_it() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_795_000_000_085_870);
        let spec = LeaseSpec::held("host-a_1f2e", 15, t, 0);
        let v = serde_json::to_value(&spec).unwrap();
        let request: Value = serde_json::from_str(include_str!(
            "../../../../shared/apiserver-samples/rbac-leases-events/lease.request.json"
        ))
        .unwrap();
        let want: Vec<_> = request["spec"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let got: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            {
                let mut g = got;
                g.sort();
                g
            },
            {
                let mut w = want;
                w.sort();
                w
            }
        );
        assert!(v["renewTime"].as_str().unwrap().ends_with(".085870Z"));
    }

    #[test]
    fn a_released_lease_has_no_holder() {
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            ..LeaseSpec::default()
        };
        assert_eq!(spec.holder(), None);
    }
}
