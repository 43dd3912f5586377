//! Seeding through the API, so the same code fills the emulator and a real cluster. Seeding is
//! never measured.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures_util::{stream, StreamExt, TryStreamExt};
use http::Method;
use kube::Client;

use crate::api;
use crate::objects::Kind;

/// What was seeded.
#[derive(Debug, Clone, Copy)]
pub struct Seeded {
    /// Stored size of one object (JSON as the server answered its create, `managedFields`
    /// included), measured on a probe before the padding was chosen.
    pub stored_bytes: usize,
    pub took: Duration,
}

/// Creates `count` objects of `kind` in `ns` (created if missing), each padded to about `size`
/// bytes as stored, `concurrency` creates in flight.
pub async fn seed(
    client: &Client,
    kind: Kind,
    ns: &str,
    count: usize,
    size: usize,
    concurrency: usize,
) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    api::create_namespace(client, ns).await?;
    let base = probe(client, kind, ns, 0).await?;
    let pad = size.saturating_sub(base);
    // The padding is inside a string, so the stored size grows with it byte for byte; the
    // probe at the chosen padding says what was reached.
    let stored_bytes = probe(client, kind, ns, pad).await?;
    let path = format!("{}?fieldManager=peers", kind.collection(ns));
    stream::iter(0..count)
        .map(|i| {
            let body = kind.object(ns, i, pad).to_string().into_bytes();
            let path = &path;
            async move {
                api::call(client, Method::POST, path, "application/json", body)
                    .await
                    .with_context(|| format!("seeding {}", kind.name(i)))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(Seeded {
        stored_bytes,
        took: started.elapsed(),
    })
}

/// Creates and deletes a probe object padded by `pad`; its stored size.
async fn probe(client: &Client, kind: Kind, ns: &str, pad: usize) -> anyhow::Result<usize> {
    let probe_index = 999_999;
    let body = kind.object(ns, probe_index, pad).to_string().into_bytes();
    let path = kind.collection(ns);
    let created = api::call(
        client,
        Method::POST,
        &format!("{path}?fieldManager=peers"),
        "application/json",
        body,
    )
    .await?;
    let name = kind.name(probe_index);
    api::call(
        client,
        Method::DELETE,
        &format!("{path}/{name}"),
        "application/json",
        Vec::new(),
    )
    .await?;
    if created.is_empty() {
        bail!("creating the probe {name}: the answer was empty");
    }
    Ok(created.len())
}
