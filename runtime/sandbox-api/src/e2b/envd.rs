//! The daemon's files: `GET /files` (a file's bytes), `POST /files`
//! (multipart form files, or one file as the body) and
//! `filesystem.Filesystem/ListDir` (a directory's entries, one level).
//! Each is the `/v1` files route's `sandbox cp` through a private scratch
//! directory, with its rules and caps. Paths are absolute paths in the
//! box; a command or a file is always the box's own user's, so a request
//! naming another user is refused. Runs in the server.

use std::os::unix::fs::PermissionsExt;
use std::path::Path as FsPath;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::caller::{box_of, Caller};
use super::connect::{self, RpcError};
use super::rest::Rest;
use crate::app::{owned, too_large, App};
use crate::error::{ApiError, ApiResult, Code};
use crate::files::{self, PathQuery, Scratch};
use crate::owners::Client;
use crate::worker::Request as Work;

/// Most files in one upload.
const MAX_FILES: usize = 64;

pub(crate) async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
pub(crate) struct FileQuery {
    path: Option<String>,
    username: Option<String>,
}

/// The box of a daemon HTTP request, and the path it names (checked by
/// the files routes' own rules).
fn target(app: &App, caller: &Caller, q: &FileQuery) -> Result<(Client, String), Rest> {
    let Caller::Box { client, id } = caller else {
        return Err(Rest(ApiError::new(Code::Unauthorized, "a box's access token")));
    };
    if q.username.as_deref().is_some_and(|u| !u.is_empty()) {
        let why = "username: files are the box's own user's here";
        return Err(Rest(ApiError::field(Code::BadRequest, "username", why)));
    }
    owned(app, client, id)?;
    Ok((client.clone(), id.clone()))
}

pub(crate) async fn read(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<FileQuery>,
) -> Result<Response, Rest> {
    let (client, id) = target(&app, &caller, &q)?;
    let path = q.path.ok_or_else(|| Rest(ApiError::field(Code::BadRequest, "path", "path: missing")))?;
    Ok(files::read(State(app), Extension(client), Path(id), Query(PathQuery { path })).await?)
}

pub(crate) async fn write(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<FileQuery>,
    req: Request,
) -> Result<Json<Value>, Rest> {
    let (_, id) = target(&app, &caller, &q)?;
    let ctype = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let tmp = Scratch::new(&app.root)?;
    let mut written = Vec::new();
    if ctype.starts_with("multipart/form-data") {
        let mut form = Multipart::from_request(req, &()).await.map_err(|e| Rest(ApiError::bad(e.body_text())))?;
        while let Some(field) = form.next_field().await.map_err(|e| Rest(ApiError::bad(e.body_text())))? {
            // The query's path is one file's; otherwise each part names its own.
            let path = match (&q.path, written.is_empty()) {
                (Some(p), true) => p.clone(),
                (Some(_), false) => return Err(Rest(ApiError::field(Code::BadRequest, "path", "path: one file only"))),
                (None, _) => field.file_name().map(String::from).ok_or_else(|| {
                    Rest(ApiError::field(Code::BadRequest, "path", "path: a part without a file name"))
                })?,
            };
            if written.len() == MAX_FILES {
                return Err(Rest(ApiError::bad(format!("at most {MAX_FILES} files in one upload"))));
            }
            let file = tmp.path().join(written.len().to_string());
            save(&app, field, &file).await?;
            written.push(put(&app, &id, &file, path).await?);
        }
    } else {
        let path = q.path.clone().ok_or_else(|| Rest(ApiError::field(Code::BadRequest, "path", "path: missing")))?;
        let (parts, body) = req.into_parts();
        let file = tmp.path().join("0");
        files::receive(&app, &parts.headers, body, &file).await?;
        written.push(put(&app, &id, &file, path).await?);
    }
    if written.is_empty() {
        return Err(Rest(ApiError::bad("no file in the upload")));
    }
    Ok(Json(Value::Array(written)))
}

/// One multipart part into `to`, at most the upload cap, each chunk
/// within the idle timeout.
async fn save(app: &App, mut field: axum::extract::multipart::Field<'_>, to: &FsPath) -> ApiResult<()> {
    let cap = files::cap(app);
    let mut f =
        tokio::fs::File::create(to).await.map_err(|e| ApiError::internal(format!("create {}: {e}", to.display())))?;
    let mut n = 0u64;
    loop {
        let chunk = match tokio::time::timeout(app.idle, field.chunk()).await {
            Err(_) => return Err(ApiError::new(Code::Timeout, "the upload stalled")),
            Ok(Err(e)) => return Err(ApiError::bad(format!("read the upload: {e}"))),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(c))) => c,
        };
        n += chunk.len() as u64;
        if n > cap {
            return Err(too_large(cap));
        }
        f.write_all(&chunk).await.map_err(|e| ApiError::internal(format!("write {}: {e}", to.display())))?;
    }
    f.flush().await.map_err(|e| ApiError::internal(format!("write {}: {e}", to.display())))
}

/// Copies `file` to `path` in box `id`; the entry the daemon reports.
async fn put(app: &App, id: &str, file: &FsPath, path: String) -> ApiResult<Value> {
    let to = files::box_path(id, &PathQuery { path: path.clone() })?;
    let from = file.to_string_lossy().into_owned();
    app.workers.call(&Work::Copy { from, to, limit: files::cap(app) }, None).await?;
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("").to_string();
    Ok(json!({"name": name, "type": "file", "path": path}))
}

#[derive(Deserialize)]
struct ListDirRequest {
    path: String,
    #[serde(default)]
    depth: u32,
}

pub(crate) async fn list_dir(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, RpcError> {
    let id = box_of(&app, &caller)?;
    let req: ListDirRequest = connect::unary(&headers, body).await?;
    if req.depth > 1 {
        return Err(RpcError::invalid("depth: one level only here"));
    }
    let (_tmp, out) = files::copy_out(&app, &id, &PathQuery { path: req.path.clone() }).await?;
    let rd = std::fs::read_dir(&out).map_err(|_| RpcError::invalid(format!("{} is not a directory", req.path)))?;
    let mut entries: Vec<Value> = rd.flatten().filter_map(|e| entry(&req.path, &e)).collect();
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(Json(json!({ "entries": entries })))
}

/// A directory entry as the daemon describes one (`EntryInfo`, in the
/// protobuf JSON mapping: 64-bit numbers as strings).
fn entry(dir: &str, e: &std::fs::DirEntry) -> Option<Value> {
    let m = e.path().symlink_metadata().ok()?;
    let t = m.file_type();
    let (kind, c) = if t.is_file() {
        ("FILE_TYPE_FILE", '-')
    } else if t.is_dir() {
        ("FILE_TYPE_DIRECTORY", 'd')
    } else if t.is_symlink() {
        ("FILE_TYPE_SYMLINK", 'l')
    } else {
        return None;
    };
    let name = e.file_name().to_string_lossy().into_owned();
    let mode = m.permissions().mode() & 0o777;
    let rwx: String = (0..9).rev().map(|i| if mode & (1 << i) != 0 { ['x', 'w', 'r'][i % 3] } else { '-' }).collect();
    let modified = m.modified().ok().map(|t| humantime::format_rfc3339_seconds(t).to_string());
    let mut v = json!({
        "name": name,
        "type": kind,
        "path": format!("{}/{name}", dir.trim_end_matches('/')),
        "size": m.len().to_string(),
        "mode": mode,
        "permissions": format!("{c}{rwx}"),
        "owner": "",
        "group": "",
        "isSymlink": t.is_symlink(),
    });
    if let Some(t) = modified {
        v["modifiedTime"] = json!(t);
    }
    if t.is_symlink() {
        v["symlinkTarget"] = json!(std::fs::read_link(e.path()).ok()?.to_string_lossy());
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_entry_is_described_as_the_daemon_does() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("a.txt");
        std::fs::write(&f, b"hello").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        let mut got: Vec<_> =
            std::fs::read_dir(t.path()).unwrap().flatten().filter_map(|e| super::entry("/work/", &e)).collect();
        got.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        assert_eq!(got[0]["path"], "/work/a.txt");
        assert_eq!(got[0]["type"], "FILE_TYPE_FILE");
        assert_eq!(got[0]["size"], "5");
        assert_eq!(got[0]["permissions"], "-rw-r-----");
        assert_eq!(got[1]["type"], "FILE_TYPE_DIRECTORY");
    }
}
