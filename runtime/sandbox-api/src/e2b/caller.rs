//! Who an e2b request is from: an API key (one of the server's tokens),
//! for the control plane, or a box's access token, for that box's daemon
//! routes. The token is an HMAC of the box id under its creator's key, so
//! the server keeps no secret of its own and a token opens one box only.

use std::path::Path;
use std::sync::Arc;

use axum::http::HeaderMap;
use hmac::Mac;

use super::connect::RpcError;
use crate::app::{owned, App};
use crate::owners::{self, same_secret, Client};

/// The daemon version the create answer reports: the SDK picks its
/// request shapes from it (0.4.0 and later: no default user is sent).
pub(crate) const ENVD_VERSION: &str = "0.5.7";

/// Who an e2b request is from, as its headers prove.
#[derive(Clone)]
pub(crate) enum Caller {
    /// An API key (one of the tokens): the control plane.
    Key { client: Client, key: Arc<str> },
    /// A box's access token: that box's daemon, and nothing else.
    Box { client: Client, id: String },
}

/// Box `id`'s access token for the client whose key is `key`.
pub(crate) fn access_token(key: &str, id: &str) -> String {
    hex(&mac(key, id).finalize().into_bytes())
}

fn mac(key: &str, id: &str) -> hmac::Hmac<sha2::Sha256> {
    // HMAC takes a key of any length.
    let mut m = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key.as_bytes()).expect("hmac takes any key");
    m.update(b"tinyrun e2b access token\0");
    m.update(id.as_bytes());
    m
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)?.to_str().ok()
}

/// The caller `h` proves to be, against the server's `tokens`.
pub(crate) fn caller(h: &HeaderMap, tokens: &[String], root: &Path) -> Option<Caller> {
    if let Some(given) = header(h, "x-api-key") {
        let t = tokens.iter().find(|t| same_secret(t, given))?;
        return Some(Caller::Key { client: Client::token(t), key: Arc::from(t.as_str()) });
    }
    let given = header(h, "x-access-token")?;
    let id = header(h, "e2b-sandbox-id")?;
    let owner = owners::owner(root, id)?;
    let given = decode_hex(given)?;
    // The key of the box's owner; the MAC is compared in constant time.
    let key = tokens.iter().find(|t| Client::token(t).name() == owner)?;
    mac(key, id).verify_slice(&given).ok()?;
    Some(Caller::Box { client: Client::token(key), id: id.to_string() })
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// The box a daemon request is for: the one its access token opens, if
/// it is still its owner's to use.
pub(crate) fn box_of(app: &App, caller: &Caller) -> Result<String, RpcError> {
    match caller {
        Caller::Box { client, id } => {
            owned(app, client, id)?;
            Ok(id.clone())
        }
        Caller::Key { .. } => Err(RpcError::new("unauthenticated", "the daemon takes a box's access token")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_token_opens_its_own_box_only() {
        let t = tempfile::tempdir().unwrap();
        owners::make_dirs(t.path()).unwrap();
        let (a, b) = ("key-a-0123456789abcdef".to_string(), "key-b-0123456789abcdef".to_string());
        let tokens = vec![a.clone(), b.clone()];
        owners::record(t.path(), "api-1", &Client::token(&a).name()).unwrap();
        owners::record(t.path(), "api-2", &Client::token(&b).name()).unwrap();
        let ask = |token: &str, id: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-access-token", token.parse().unwrap());
            h.insert("e2b-sandbox-id", id.parse().unwrap());
            caller(&h, &tokens, t.path())
        };
        assert!(matches!(ask(&access_token(&a, "api-1"), "api-1"), Some(Caller::Box { id, .. }) if id == "api-1"));
        // Box 1's token for box 2, a token made with another key, a box never made.
        assert!(ask(&access_token(&a, "api-1"), "api-2").is_none());
        assert!(ask(&access_token(&a, "api-2"), "api-2").is_none());
        assert!(ask(&access_token(&a, "api-3"), "api-3").is_none());
        assert!(ask("00", "api-1").is_none());
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "key-c-0123456789abcdef".parse().unwrap());
        assert!(caller(&h, &tokens, t.path()).is_none());
        h.insert("x-api-key", b.parse().unwrap());
        assert!(
            matches!(caller(&h, &tokens, t.path()), Some(Caller::Key { client, .. }) if client == Client::token(&b))
        );
    }
}
