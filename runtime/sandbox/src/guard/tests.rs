//! Helpers for the guard's unit tests.

use serde_json::Value;

/// Merges `extra` into `base`: objects key by key, anything else replaced.
pub(crate) fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}
