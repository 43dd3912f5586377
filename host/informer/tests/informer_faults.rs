//! The reflector over real HTTP against a scripted loopback server that answers what no API
//! server should: the faults reported from outside, end to end.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use tokio::net::TcpListener;

use kwh_client::client::{Client, ResourceClient};
use kwh_client::resource::ApiResource;
use kwh_client::Config;
use kwh_informer::backoff::Backoff;
use kwh_informer::reflector::{Reflector, ReflectorOptions};
use kwh_informer::stop::StopSignal;
use kwh_informer::store::Store;

/// Serves `answer(path and query)` to every request and logs the requests.
async fn serve(answer: fn(&str) -> &'static [u8]) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let uri = req.uri().to_string();
                    let body = answer(&uri);
                    seen.lock().push(uri);
                    async move {
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                            body,
                        ))))
                    }
                });
            tokio::spawn(async move {
                let http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
            });
        }
    });
    (url, log)
}

/// Reported from outside: one bookmark at resourceVersion `zzz` left the informer relisting
/// at `zzz` forever (and a 1 MiB one failed every request locally). The bookmark is refused
/// where it arrives: no request ever carries it, and every watch and relist goes on from the
/// last good RV, after a backoff.
#[tokio::test]
async fn a_bookmark_whose_resource_version_is_not_an_integer_is_never_sent_back() {
    let (url, log) = serve(|uri| {
        if uri.contains("watch=") {
            b"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"zzz\"}}}\n"
        } else {
            br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[]}"#
        }
    })
    .await;
    let client = Client::new(Config::new(url.parse().unwrap())).unwrap();
    let res = ApiResource::new("v1", "ConfigMap", "configmaps", true);
    let opts = ReflectorOptions {
        backoff: Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(10),
            2.0,
            1.0,
            Duration::from_secs(120),
        ),
        ..Default::default()
    };
    let r = Arc::new(Reflector::new(
        Arc::new(ResourceClient::new(client, res, Some("ns".into()))),
        Arc::new(Store::new()),
        opts,
    ));
    let stop = StopSignal::new();
    let task = tokio::spawn({
        let (r, stop) = (r.clone(), stop.clone());
        async move { r.run(stop).await }
    });
    tokio::time::timeout(Duration::from_secs(20), async {
        while log.lock().len() < 8 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("eight requests within 20 s");
    stop.stop();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the reflector stops")
        .unwrap();
    let reqs = log.lock().clone();
    assert!(reqs.iter().all(|u| !u.contains("zzz")), "{reqs:#?}");
    let (watches, lists): (Vec<&String>, Vec<&String>) =
        reqs.iter().partition(|u| u.contains("watch="));
    assert!(
        watches.iter().all(|u| u.contains("resourceVersion=10")),
        "{reqs:#?}"
    );
    // After the first list (at RV 0), each relist asks for the last good RV.
    assert!(lists.len() >= 2, "{reqs:#?}");
    assert!(
        lists[1..].iter().all(|u| u.contains("resourceVersion=10")),
        "{reqs:#?}"
    );
    assert_eq!(r.last_sync_resource_version(), "10");
}
