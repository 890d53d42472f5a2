//! The HTTP server: a listener task that accepts connections, and one task
//! per connection that serves HTTP/1.1 with hyper.

use super::routes::{Reply, Routes};
use super::settings::{ManagementError, ManagementSettings, RouteRequest};
use super::timer::RtTimer;
use crate::cluster::Cluster;
use futures_lite::FutureExt;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use smol_hyper::rt::FuturesIo;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use troupe_core::rt;

/// The largest request body accepted (forms are a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;
/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's body.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running management HTTP server.
///
/// It serves until [`stop`](ManagementServer::stop) is called or it is
/// dropped; either closes the listener and every open connection.
pub struct ManagementServer {
    local_addr: SocketAddr,
    read_only: bool,
    /// Closed (dropped) to stop the listener and the connections.
    stop: Option<async_channel::Sender<()>>,
    accept: Option<rt::JoinHandle<()>>,
}

impl fmt::Debug for ManagementServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagementServer")
            .field("local_addr", &self.local_addr)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl ManagementServer {
    /// Binds `settings.bind` and starts serving the routes of
    /// [`management`](super) for `cluster`. Fails if the address cannot be
    /// bound.
    pub fn start(
        cluster: Cluster,
        settings: ManagementSettings,
    ) -> Result<ManagementServer, ManagementError> {
        let cannot = |e: std::io::Error| {
            ManagementError(format!(
                "cannot listen for management HTTP on `{}`: {e}",
                settings.bind
            ))
        };
        let listener = std::net::TcpListener::bind(settings.bind.as_str()).map_err(cannot)?;
        let local_addr = listener.local_addr().map_err(cannot)?;
        listener.set_nonblocking(true).map_err(cannot)?;
        let listener = rt::TcpListener::from(listener);
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let routes = Arc::new(Routes::new(cluster, &settings));
        let accept = rt::spawn(accept_loop(listener, routes, stopped));
        tracing::info!(
            "management HTTP listening on http://{local_addr}{}",
            if settings.read_only {
                " (read-only)"
            } else {
                ""
            }
        );
        Ok(ManagementServer {
            local_addr,
            read_only: settings.read_only,
            stop: Some(stop),
            accept: Some(accept),
        })
    }

    /// The address the server listens on (with the port the OS chose when
    /// bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// True if the server refuses `POST`, `PUT` and `DELETE`.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Stops the server: closes every open connection and the listener,
    /// and returns once the listener is closed.
    pub async fn stop(mut self) {
        self.stop.take();
        if let Some(accept) = self.accept.take() {
            accept.await;
        }
    }
}

/// Completes when the server is stopped (every sender is gone).
async fn stopped(signal: &async_channel::Receiver<()>) {
    while signal.recv().await.is_ok() {}
}

async fn accept_loop(
    listener: rt::TcpListener,
    routes: Arc<Routes>,
    signal: async_channel::Receiver<()>,
) {
    loop {
        let accepted = async { Some(listener.accept().await) }
            .or(async {
                stopped(&signal).await;
                None
            })
            .await;
        match accepted {
            None => break,
            Some(Ok((stream, peer))) => {
                let routes = routes.clone();
                let signal = signal.clone();
                // Each connection is its own task: a slow client holds up
                // no one else.
                rt::spawn(async move {
                    serve_connection(stream, peer, routes)
                        .or(stopped(&signal))
                        .await
                });
            }
            Some(Err(e)) => {
                // Out of file descriptors and the like: back off rather
                // than spin.
                tracing::warn!("management HTTP cannot accept a connection: {e}");
                rt::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    tracing::debug!("management HTTP stopped");
}

async fn serve_connection(stream: rt::TcpStream, peer: SocketAddr, routes: Arc<Routes>) {
    let service = service_fn(move |request| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(respond(&routes, request).await) }
    });
    let result = http1::Builder::new()
        .timer(RtTimer)
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(FuturesIo::new(stream), service)
        .await;
    if let Err(e) = result {
        tracing::debug!("management HTTP connection from {peer} ended: {e}");
    }
}

async fn respond(routes: &Routes, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let collected = rt::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await;
    let reply = match collected {
        None => Reply::message(
            StatusCode::REQUEST_TIMEOUT,
            "The request body did not arrive in time",
        ),
        Some(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Reply::message(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("The request body is larger than {MAX_BODY} bytes"),
        ),
        Some(Err(e)) => Reply::message(
            StatusCode::BAD_REQUEST,
            format!("Cannot read the request body: {e}"),
        ),
        Some(Ok(body)) => {
            let request = RouteRequest {
                method: parts.method.as_str().to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().map(str::to_string),
                body: Vec::from(body.to_bytes()),
            };
            let handled = AssertUnwindSafe(routes.handle(&parts.method, &request))
                .catch_unwind()
                .await;
            handled.unwrap_or_else(|_| {
                tracing::error!(
                    "management HTTP: a bug made {} {} panic",
                    parts.method,
                    parts.uri.path()
                );
                Reply::message(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal error (see the server's log)",
                )
            })
        }
    };
    tracing::debug!(
        "management HTTP {} {} -> {}",
        parts.method,
        parts.uri,
        reply.status
    );
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if let Some(allow) = reply.allow {
        headers.insert(ALLOW, HeaderValue::from_static(allow));
    }
    response
}
