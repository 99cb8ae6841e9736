//! The metrics endpoint: `GET /metrics` on `metrics_address`, Prometheus
//! text. One server per address for the whole library: the first instance
//! that names an address starts it, later ones share it, and it stays up
//! while the library is loaded.

use std::collections::HashMap;
use std::net::SocketAddr;

use tokio::sync::Mutex;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {address}: {reason}")]
pub(crate) struct ServeError {
    /// The address asked for.
    pub address: String,
    /// What went wrong.
    pub reason: String,
}

/// The addresses served, and the address each is bound to; held across a
/// bind, so that two instances opening at once start one server.
fn servers() -> &'static Mutex<HashMap<String, SocketAddr>> {
    static SERVERS: std::sync::OnceLock<Mutex<HashMap<String, SocketAddr>>> = std::sync::OnceLock::new();
    SERVERS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Serves `/metrics` on `address` (such as `127.0.0.1:9464`) unless it is
/// served already; returns the bound address. Call on a tokio runtime that
/// outlives the instances (the plugin's own).
pub(crate) async fn ensure(address: &str) -> Result<SocketAddr, ServeError> {
    let fail = |reason: String| ServeError {
        address: address.to_string(),
        reason,
    };
    let mut servers = servers().lock().await;
    if let Some(bound) = servers.get(address) {
        return Ok(*bound);
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let bound = listener.local_addr().map_err(|e| fail(e.to_string()))?;
    servers.insert(address.to_string(), bound);
    tokio::spawn(accept(listener));
    tracing::info!("metrics served at http://{bound}/metrics");
    Ok(bound)
}

async fn accept(listener: tokio::net::TcpListener) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("metrics endpoint: accepting a connection failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            // A client that connects and sends nothing is dropped after 10 s.
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer))
                .await;
            if let Err(e) = served {
                tracing::debug!("metrics endpoint: a connection ended: {e}");
            }
        });
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let response = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => Response::builder()
            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .body(Full::new(Bytes::from(super::render()))),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"metrics are at GET /metrics\n"))),
    };
    Ok(response.expect("a valid response"))
}
