//! Files into and out of a box: `files` (one file's bytes), `files/list`
//! (a directory's entries) and `archive` (a directory as tar). Each goes
//! through `sandbox cp` in a worker, between the box and a scratch
//! directory private to the server (`<root>/sandbox-api/tmp`, mode 0700),
//! so the box side has exactly cp's rules: box paths resolved inside the
//! box, a symlink leading out of what is copied refused, the byte and
//! entry caps. Uploads are written to the scratch directory as they come,
//! counted against the cap (a body that announces more is refused before
//! a byte is read) and dropped if they stall. Runs in the server.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::app::{owned, too_large, App};
use crate::error::{ApiError, ApiResult, Code};
use crate::owners::Client;
use crate::worker::Request as Work;

/// A scratch directory, removed with everything in it when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(root: &FsPath) -> ApiResult<Scratch> {
        let mut b = [0u8; 8];
        getrandom(&mut b)?;
        let name: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let p = crate::owners::dir(root).join("tmp").join(name);
        std::fs::create_dir(&p).map_err(|e| ApiError::internal(format!("mkdir {}: {e}", p.display())))?;
        Ok(Scratch(p))
    }

    pub(crate) fn path(&self) -> &FsPath {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn getrandom(b: &mut [u8]) -> ApiResult<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(b))
        .map_err(|e| ApiError::internal(format!("read /dev/urandom: {e}")))
}

#[derive(Deserialize)]
pub(crate) struct PathQuery {
    pub(crate) path: String,
}

/// `ID:PATH` for cp, the path checked to be absolute and one cp can name.
pub(crate) fn box_path(id: &str, q: &PathQuery) -> ApiResult<String> {
    let p = &q.path;
    if !p.starts_with('/') || p.contains('\0') || p.len() > 4096 {
        return Err(ApiError::field(Code::BadRequest, "path", format!("path {p:?}: an absolute path in the box")));
    }
    Ok(format!("{id}:{p}"))
}

/// The upload cap: the server's body cap and the policy's copy cap.
pub(crate) fn cap(app: &App) -> u64 {
    app.max_body.min(app.policy.max_copy_limit)
}

/// Writes the request body to `to`, at most `cap` bytes, each chunk
/// within the idle timeout.
pub(crate) async fn receive(app: &App, headers: &HeaderMap, body: Body, to: &FsPath) -> ApiResult<u64> {
    let cap = cap(app);
    let announced = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > cap) {
        return Err(too_large(cap));
    }
    let mut f =
        tokio::fs::File::create(to).await.map_err(|e| ApiError::internal(format!("create {}: {e}", to.display())))?;
    let mut stream = body.into_data_stream();
    let mut n = 0u64;
    loop {
        let chunk = match tokio::time::timeout(app.idle, stream.next()).await {
            Err(_) => return Err(ApiError::new(Code::Timeout, "the upload stalled")),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(ApiError::bad(format!("read the body: {e}"))),
            Ok(Some(Ok(c))) => c,
        };
        n += chunk.len() as u64;
        if n > cap {
            return Err(too_large(cap));
        }
        f.write_all(&chunk).await.map_err(|e| ApiError::internal(format!("write {}: {e}", to.display())))?;
    }
    f.flush().await.map_err(|e| ApiError::internal(format!("write {}: {e}", to.display())))?;
    Ok(n)
}

/// The name cp gives the copy: the box path's last component, so a copy
/// into an existing directory lands as cp would put it.
fn base_name(q: &PathQuery) -> String {
    let name = q.path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if name.is_empty() || name == "." || name == ".." {
        "upload".into()
    } else {
        name.into()
    }
}

pub(crate) async fn write(
    State(app): State<Arc<App>>,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    owned(&app, &client, &id)?;
    let to = box_path(&id, &q)?;
    let tmp = Scratch::new(&app.root)?;
    let file = tmp.path().join(base_name(&q));
    receive(&app, &headers, body, &file).await?;
    let from = file.to_string_lossy().into_owned();
    app.workers.call(&Work::Copy { from, to, limit: cap(&app) }, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Copies box path `q` of `id` out into a scratch directory; returns it
/// and the copy's path there.
pub(crate) async fn copy_out(app: &App, id: &str, q: &PathQuery) -> ApiResult<(Scratch, PathBuf)> {
    let from = box_path(id, q)?;
    let tmp = Scratch::new(&app.root)?;
    let out = tmp.path().join("out");
    let to = out.to_string_lossy().into_owned();
    app.workers.call(&Work::Copy { from, to, limit: app.policy.max_copy_limit }, None).await?;
    Ok((tmp, out))
}

/// A file's bytes as a streamed body; the scratch directory goes once it
/// is open (the open file lives on).
async fn send(tmp: Scratch, file: &FsPath, ctype: &'static str) -> ApiResult<Response> {
    let f =
        tokio::fs::File::open(file).await.map_err(|e| ApiError::internal(format!("open {}: {e}", file.display())))?;
    let len = f.metadata().await.map(|m| m.len()).unwrap_or(0);
    drop(tmp);
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(f));
    Ok(([(header::CONTENT_TYPE, ctype.to_string()), (header::CONTENT_LENGTH, len.to_string())], body).into_response())
}

pub(crate) async fn read(
    State(app): State<Arc<App>>,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> ApiResult<Response> {
    owned(&app, &client, &id)?;
    let (tmp, out) = copy_out(&app, &id, &q).await?;
    let m = std::fs::symlink_metadata(&out).map_err(|e| ApiError::internal(format!("the copy: {e}")))?;
    if !m.file_type().is_file() {
        return Err(ApiError::field(
            Code::BadRequest,
            "path",
            format!("{} is not a regular file (use archive for a directory)", q.path),
        ));
    }
    send(tmp, &out, "application/octet-stream").await
}

pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> ApiResult<Json<Value>> {
    use std::os::unix::fs::PermissionsExt;
    owned(&app, &client, &id)?;
    let (_tmp, out) = copy_out(&app, &id, &q).await?;
    let rd = std::fs::read_dir(&out)
        .map_err(|_| ApiError::field(Code::BadRequest, "path", format!("{} is not a directory", q.path)))?;
    let mut entries = Vec::new();
    for e in rd.flatten() {
        let Ok(m) = e.path().symlink_metadata() else { continue };
        let t = m.file_type();
        let kind = if t.is_file() {
            "file"
        } else if t.is_dir() {
            "dir"
        } else if t.is_symlink() {
            "symlink"
        } else {
            "other"
        };
        let name = e.file_name().to_string_lossy().into_owned();
        entries.push(json!({"name": name, "type": kind, "size": m.len(), "mode": m.permissions().mode() & 0o7777}));
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(Json(json!({"path": q.path, "entries": entries})))
}

pub(crate) async fn read_archive(
    State(app): State<Arc<App>>,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> ApiResult<Response> {
    owned(&app, &client, &id)?;
    let (tmp, out) = copy_out(&app, &id, &q).await?;
    if !std::fs::symlink_metadata(&out).is_ok_and(|m| m.is_dir()) {
        return Err(ApiError::field(
            Code::BadRequest,
            "path",
            format!("{} is not a directory (use files for a file)", q.path),
        ));
    }
    let tar = tmp.path().join("out.tar");
    let (dir, t) = (out.clone(), tar.clone());
    tokio::task::spawn_blocking(move || crate::archive::pack(&dir, &t))
        .await
        .map_err(|e| ApiError::internal(format!("pack: {e}")))??;
    send(tmp, &tar, "application/x-tar").await
}

pub(crate) async fn write_archive(
    State(app): State<Arc<App>>,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    owned(&app, &client, &id)?;
    let to = box_path(&id, &q)?;
    let tmp = Scratch::new(&app.root)?;
    let tar = tmp.path().join("in.tar");
    receive(&app, &headers, body, &tar).await?;
    let dir = tmp.path().join("in");
    let (t, d, limit) = (tar.clone(), dir.clone(), cap(&app));
    tokio::task::spawn_blocking(move || crate::archive::unpack(&t, &d, limit))
        .await
        .map_err(|e| ApiError::internal(format!("unpack: {e}")))??;
    // Its entries go into the box directory (made if missing), as `cp DIR/. ID:PATH`.
    let from = format!("{}/.", dir.to_string_lossy());
    app.workers.call(&Work::Copy { from, to, limit: cap(&app) }, None).await?;
    Ok(StatusCode::NO_CONTENT)
}
