//! The operations endpoint: `/metrics` (OpenMetrics text), `/healthz`, `/readyz` (naming what
//! keeps it unready) and `/statusz` (each plugin's state as JSON; `/statusz?digest=1` adds
//! each informer's cache digest, to compare a cache with the API server's state from outside).
//!
//! Plain HTTP/1.1 on a separate listener, so scraping never competes with anything else; the
//! handlers only read atomics and render text.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::runtime::RuntimeStatus;

/// The OpenMetrics 1.0 text format that `prometheus-client` encodes; Prometheus asks for it
/// first in its `Accept` header.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves the endpoints on `addr` until the returned task is aborted. Returns the bound
/// address (useful when `addr` has port 0).
pub async fn serve(
    addr: SocketAddr,
    status: RuntimeStatus,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener accept failed");
                    continue;
                }
            };
            let status = status.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let status = status.clone();
                    async move { Ok::<_, Infallible>(handle(&status, &req)) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await
                {
                    tracing::debug!(error = %e, "metrics connection ended with error");
                }
            });
        }
    });
    Ok((bound, task))
}

fn text(code: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

fn handle(status: &RuntimeStatus, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => match status.render_metrics() {
            Ok(body) => text(StatusCode::OK, OPENMETRICS, body),
            Err(e) => {
                tracing::warn!(error = %e, "metrics scrape failed");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("{e}\n"),
                )
            }
        },
        "/healthz" | "/livez" => text(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let (ready, body) = status.readiness();
            let code = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(code, "text/plain", body)
        }
        "/statusz" => {
            let digests = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "digest=1" || p == "digest"));
            let body = if digests {
                status.render_status_with_digests()
            } else {
                status.render_status()
            };
            text(StatusCode::OK, "application/json", body)
        }
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}
