//! The server: listeners, who each connection is, the caps every request
//! gets, and the shutdown. Runs in the server process (tokio, several
//! threads); nothing here forks but through module `spawn`.
//!
//! Caps: a request header over [`MAX_HEADER`] or not complete within
//! `--idle-timeout` closes the connection (slow-loris); JSON bodies are
//! capped at [`crate::app::MAX_JSON`], uploads at `--max-body` (refused from their
//! Content-Length before a byte is read, or as soon as they pass it), and
//! an upload that stalls for `--idle-timeout` is dropped. Each connection
//! is a task of its own, and each request's work a worker process of its
//! own, so a slow or vanished client holds up nobody else.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::Request;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::app::App;
use crate::args::Args;
use crate::error::{ApiError, Code};
use crate::metrics::Metrics;
use crate::owners::{self, Client};
use crate::policy::Policy;
use crate::spawn::Workers;
use crate::worker::Request as Work;

/// Most bytes of a request's header section.
const MAX_HEADER: usize = 64 << 10;

pub(crate) fn main(args: Args) -> anyhow::Result<()> {
    let policy = match &args.policy {
        Some(p) => Policy::load(p)?,
        None => Policy::default(),
    };
    let max_body = tinyrun_sandbox::parse_size(&args.max_body).context("--max-body")?;
    let idle = tinyrun_sandbox::parse_duration(&args.idle_timeout).context("--idle-timeout")?;
    let drain = tinyrun_sandbox::parse_duration(&args.drain_timeout).context("--drain-timeout")?;
    let tcp = args.listen.as_deref().map(|l| loopback(l, args.token_file.as_deref())).transpose()?;
    std::fs::create_dir_all(&args.root).with_context(|| format!("mkdir {}", args.root.display()))?;
    let root = std::fs::canonicalize(&args.root).with_context(|| format!("the root {}", args.root.display()))?;
    owners::make_dirs(&root).context("the server's directory under the root")?;
    let exe = std::fs::read_link("/proc/self/exe").context("our own binary")?;
    let app = Arc::new(App {
        workers: Workers::new(exe, &root),
        root: root.clone(),
        policy,
        pending: owners::Pending::default(),
        metrics: Metrics::default(),
        max_body,
        idle,
        background: TaskTracker::new(),
        ending: Default::default(),
        e2b: Default::default(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(serve(
        app,
        args.socket.unwrap_or_else(|| root.join("sandbox.sock")),
        args.group,
        tcp,
        drain,
        args.keep_boxes,
        args.e2b,
    ))
}

/// The TCP address and its tokens: loopback only, and never without tokens.
fn loopback(addr: &str, tokens: Option<&Path>) -> anyhow::Result<(SocketAddr, Vec<String>)> {
    let a: SocketAddr = addr.parse().with_context(|| format!("--listen {addr:?}: use 127.0.0.1:PORT"))?;
    anyhow::ensure!(a.ip().is_loopback(), "--listen {addr}: only a loopback address (the API has no TLS)");
    let path = tokens.context("--listen needs --token-file: TCP clients are told apart by their token")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("--token-file {}", path.display()))?;
    let tokens: Vec<String> = text.lines().map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
    anyhow::ensure!(
        tokens.iter().all(|t| t.len() >= 16),
        "--token-file {}: each token needs 16 characters or more",
        path.display()
    );
    anyhow::ensure!(!tokens.is_empty(), "--token-file {}: no token", path.display());
    Ok((a, tokens))
}

async fn serve(
    app: Arc<App>,
    socket: PathBuf,
    group: Option<String>,
    tcp: Option<(SocketAddr, Vec<String>)>,
    drain: Duration,
    keep: bool,
    e2b: bool,
) -> anyhow::Result<()> {
    // A restarted server adopts the boxes recorded as clients' and ends
    // those a killed one made but never recorded.
    let swept = app.workers.call(&Work::Sweep { all: false }, None).await;
    swept.map_err(|e| anyhow::anyhow!("adopt the root's boxes: {e}"))?;
    let unix = bind_unix(&socket, group.as_deref())?;
    let tcp = match tcp {
        Some((addr, tokens)) => {
            Some((TcpListener::bind(addr).await.with_context(|| format!("listen on {addr}"))?, tokens))
        }
        None => None,
    };
    app.workers.top_up();
    let router = crate::routes::router(app.clone());
    let e2b = e2b.then(|| crate::e2b::router(app.clone()));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    eprintln!("tinyrun sandbox serve: listening on {}", socket.display());
    loop {
        tokio::select! {
            c = unix.accept() => if let Ok((s, _)) = c {
                let client = s.peer_cred().map(|c| Client::Uid(c.uid()));
                if let Ok(client) = client {
                    connection(&app, &graceful, TokioIo::new(s), router.clone(), Auth::Peer(client));
                }
            },
            c = async { tcp.as_ref().unwrap().0.accept().await }, if tcp.is_some() => if let Ok((s, _)) = c {
                let tokens = tcp.as_ref().map(|t| t.1.clone()).unwrap_or_default();
                let auth = Auth::Tokens(Arc::new(tokens), e2b.clone());
                connection(&app, &graceful, TokioIo::new(s), router.clone(), auth);
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    // No new connections; those open finish what they are doing.
    drop(unix);
    let _ = std::fs::remove_file(&socket);
    let _ = tokio::time::timeout(drain, graceful.shutdown()).await;
    app.background.close();
    let _ = tokio::time::timeout(drain, app.background.wait()).await;
    let swept = app.workers.call(&Work::Sweep { all: !keep }, None).await;
    app.workers.retire().await;
    swept.map_err(|e| anyhow::anyhow!("end the clients' boxes: {e}"))?;
    Ok(())
}

fn bind_unix(path: &Path, group: Option<&str>) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    // A socket left by a server that was killed; anything else is not ours.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        anyhow::ensure!(m.file_type().is_socket(), "{} exists and is not a socket", path.display());
        std::fs::remove_file(path).with_context(|| format!("remove the old socket {}", path.display()))?;
    }
    let gid = group
        .map(|g| match nix::unistd::Group::from_name(g) {
            Ok(Some(gr)) => Ok(gr.gid),
            _ => g
                .parse::<u32>()
                .map(nix::unistd::Gid::from_raw)
                .map_err(|_| anyhow::anyhow!("--group {g:?}: no such group")),
        })
        .transpose()?;
    // Made under a umask that lets nobody in until the mode and group are
    // set: a socket's permissions are checked at connect.
    let l = crate::spawn::with_umask(nix::sys::stat::Mode::from_bits_truncate(0o077), || UnixListener::bind(path));
    let l = l.with_context(|| format!("listen on {}", path.display()))?;
    if let Some(gid) = gid {
        nix::unistd::chown(path, None, Some(gid)).with_context(|| format!("chown {}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("chmod 0660 {}", path.display()))?;
    Ok(l)
}

/// How a connection's client is known.
#[derive(Clone)]
enum Auth {
    /// SO_PEERCRED, read at accept.
    Peer(Client),
    /// A bearer token on each request, one of these; with the e2b routes
    /// (`--e2b`), the e2b SDK's keys and access tokens for those.
    Tokens(Arc<Vec<String>>, Option<axum::Router>),
}

fn connection<I>(
    app: &Arc<App>,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    io: TokioIo<I>,
    router: axum::Router,
    auth: Auth,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let metrics = app.clone();
    let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
        let router = router.clone();
        let auth = auth.clone();
        let app = metrics.clone();
        async move {
            let client = match &auth {
                Auth::Peer(c) => Some(c.clone()),
                Auth::Tokens(tokens, Some(e2b)) if crate::e2b::is_e2b_path(req.uri().path()) => {
                    let resp = match crate::e2b::caller(req.headers(), tokens, &app.root) {
                        Some(c) => {
                            req.extensions_mut().insert(c);
                            e2b.clone().oneshot(req.map(axum::body::Body::new)).await.into_response()
                        }
                        None => crate::e2b::unauthorized(req.uri().path()),
                    };
                    app.metrics.request(resp.status());
                    return Ok(resp);
                }
                Auth::Tokens(tokens, _) => bearer(&req, tokens),
            };
            let resp = match client {
                Some(c) => {
                    req.extensions_mut().insert(c);
                    router.oneshot(req.map(axum::body::Body::new)).await.into_response()
                }
                None => ApiError::new(Code::Unauthorized, "a bearer token is needed (Authorization: Bearer TOKEN)")
                    .into_response(),
            };
            app.metrics.request(resp.status());
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(app.idle)
        .max_buf_size(MAX_HEADER)
        .keep_alive(true)
        .serve_connection(io, service);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        let _ = conn.await;
    });
}

/// The client a request's bearer token names, compared in constant time.
fn bearer<B>(req: &Request<B>, tokens: &[String]) -> Option<Client> {
    let h = req.headers().get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let given = h.strip_prefix("Bearer ")?.trim();
    tokens.iter().find(|t| owners::same_secret(t, given)).map(|t| Client::token(t))
}
