//! The accept loop: our own instead of `axum::serve`, which exposes none of hyper's
//! connection settings (issue 14, F8).
//!
//! Per connection: hyper's HTTP/1 server with its header-read timeout on a tokio
//! timer; an idle watchdog (no request in flight and no byte read or written for the
//! idle timeout → the socket is closed); one permit of a semaphore sized to the
//! connection cap, held for the connection's life. Over the cap the connection gets a
//! fixed `503` problem+json answer and is closed ([`super::limits`] says why and how
//! many at once). Graceful shutdown: the loop stops accepting, tells every connection
//! to finish its request in flight and close, and returns once all have.
//!
//! Each request carries `axum::extract::ConnectInfo<SocketAddr>` with the peer address.

use super::limits::{HttpLimits, REJECTIONS_IN_FLIGHT_MAX};
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// How long an over-cap connection may take to send its request head before it is
/// answered anyway (a client that gets an answer before it has written its request
/// takes it for a protocol error, not a 503).
const REJECTION_READ_MS_MAX: u64 = 1_000;
/// How long the answer may take to write, and how long what the client sends after
/// it is drained (so closing is a FIN, not a reset that could discard the answer).
const REJECTION_WRITE_MS_MAX: u64 = 1_000;
const REJECTION_DRAIN_MS_MAX: u64 = 500;
/// Bytes read from an over-cap connection, at most (its head, then the drain).
const REJECTION_READ_BYTES_MAX: usize = 16 * 1024;

/// Serve `router` on `listener` within `limits` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = super::headers::every_answer(router);
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let rejecting = Arc::new(Semaphore::new(REJECTIONS_IN_FLIGHT_MAX));
    let (stop_tx, stop_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let conn = Connection {
                    router: router.clone(),
                    peer,
                    header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
                    idle_timeout: Duration::from_millis(limits.idle_timeout_ms),
                    _permit: permit,
                };
                tokio::spawn(conn.run(stream, stop_rx.clone()));
            }
            Err(_) => reject(stream, peer, &rejecting),
        }
    }
    drop(stop_rx);
    drop(listener);
    // Every connection holds a receiver: tell them to stop, then wait until the
    // last one has dropped its receiver.
    let _ = stop_tx.send(());
    stop_tx.closed().await;
    Ok(())
}

/// As `axum::serve`: errors of one connection are skipped at once; others (out of
/// file descriptors) back off for a second so the loop does not spin.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

struct Connection {
    router: Router,
    peer: SocketAddr,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    /// The connection's place under the cap, given back when it closes.
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run(self, stream: TcpStream, mut stop: watch::Receiver<()>) {
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
        });
        let (router, peer, counted) = (self.router.clone(), self.peer, activity.clone());
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let in_flight = counted.begin();
            let router = router.clone();
            async move {
                let response = router.oneshot(req).await;
                drop(in_flight);
                response
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        let mut conn = pin!(builder.serve_connection(io, service));
        let mut idle = pin!(activity.idle(self.idle_timeout));
        let mut stopping = false;
        loop {
            tokio::select! {
                done = conn.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(peer = %self.peer, error = %e, "connection ended");
                    }
                    break;
                }
                _ = &mut idle => {
                    tracing::debug!(peer = %self.peer, "idle connection closed");
                    break;
                }
                _ = stop.changed(), if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Answer an over-cap connection with a fixed 503 and close it, or, when that many
/// answers are already being written, close it at once.
fn reject(stream: TcpStream, peer: SocketAddr, rejecting: &Arc<Semaphore>) {
    tracing::warn!(%peer, "connection cap reached; refusing a connection");
    let Ok(permit) = rejecting.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(
            Duration::from_millis(
                REJECTION_READ_MS_MAX + REJECTION_WRITE_MS_MAX + REJECTION_DRAIN_MS_MAX,
            ),
            answer_over_cap(stream),
        )
        .await;
    });
}

async fn answer_over_cap(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    let mut head = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(REJECTION_READ_MS_MAX);
    while head.len() < REJECTION_READ_BYTES_MAX && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
            Ok(Ok(_)) | Ok(Err(_)) => return Ok(()),
            Err(_) => break,
        }
    }
    let problem = super::Problem::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "TOO_MANY_CONNECTIONS",
        "the service has as many connections open as it allows; retry shortly",
    );
    let body = serde_json::to_vec(&problem.body()).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
         content-length: {}\r\nretry-after: 1\r\nx-content-type-options: nosniff\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(Duration::from_millis(REJECTION_WRITE_MS_MAX), write)
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let mut drained = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(REJECTION_DRAIN_MS_MAX);
    while drained < REJECTION_READ_BYTES_MAX {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
    Ok(())
}

/// When a connection last moved a byte, and how many of its requests are in flight.
struct Activity {
    started: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

/// Counts one request as in flight while it lives.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Release);
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Completes once the connection has been idle for `limit`.
    async fn idle(&self, limit: Duration) {
        let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        loop {
            let quiet_ms = self
                .now_ms()
                .saturating_sub(self.last_ms.load(Ordering::Acquire));
            let busy = self.in_flight.load(Ordering::Acquire) > 0;
            if !busy && quiet_ms >= limit_ms {
                return;
            }
            let wait_ms = if busy { limit_ms } else { limit_ms - quiet_ms };
            tokio::time::sleep(Duration::from_millis(wait_ms.max(1))).await;
        }
    }
}

/// A stream that records its activity on every byte read or written.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
