//! The container's device rules as the unit's `DevicePolicy` and
//! `DeviceAllow`, as runc sends them: systemd then installs a device
//! filter of its own on the unit's cgroup, beside the one the cgroup v2
//! path installs from the same rules (`limits`), and keeps it across
//! `daemon-reload` and property changes.
//!
//! A device is usable only where both filters allow it, so systemd's list
//! must never be narrower than the rules: it is built from the same rules
//! in the same order (the spec's, the allowances for `linux.devices`, then
//! the default set), and where systemd can't say exactly what they mean it
//! allows more, never less, and the cgroup's own filter holds the line:
//!
//! * a deny rule takes permissions away only from an earlier allow rule
//!   for exactly the same devices (cgroup v1's reading, and runc's);
//! * an allow rule for one minor of every major (`c *:5`) becomes
//!   `char-*` (runc leaves it out, and systemd then refuses the device);
//! * rules that end up allowing every device but some (a deny list) leave
//!   systemd's filter off (`DevicePolicy=auto`), where runc has systemd
//!   refuse every device.

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

use super::wire::{Prop, Value};

/// One allowed set of devices: type, major, minor (`None`: any).
#[derive(Debug, PartialEq, Eq)]
struct Allowed {
    block: bool,
    major: Option<i64>,
    minor: Option<i64>,
    perms: String,
}

/// The device properties for `rules`, given in the order the cgroup's own
/// filter applies them.
pub(super) fn props<'a>(rules: impl IntoIterator<Item = &'a LinuxDeviceCgroup>) -> Vec<Prop> {
    let mut allow_all = false;
    let mut list: Vec<Allowed> = Vec::new();
    for rule in rules {
        let block = match rule.typ().unwrap_or(LinuxDeviceType::A) {
            // "a" starts over: every device allowed, or none.
            LinuxDeviceType::A => {
                allow_all = rule.allow();
                list.clear();
                continue;
            }
            LinuxDeviceType::B => true,
            LinuxDeviceType::C | LinuxDeviceType::U => false,
            LinuxDeviceType::P => continue,
        };
        let perms: String = rule.access().as_deref().unwrap_or("").chars().filter(|c| "rwm".contains(*c)).collect();
        if perms.is_empty() || allow_all {
            // In a deny list the cgroup's own filter does all the work.
            continue;
        }
        let same = |a: &&mut Allowed| a.block == block && a.major == rule.major() && a.minor == rule.minor();
        match (rule.allow(), list.iter_mut().find(same)) {
            (true, Some(a)) => a.perms = union(&a.perms, &perms),
            (true, None) => list.push(Allowed { block, major: rule.major(), minor: rule.minor(), perms }),
            (false, Some(a)) => a.perms.retain(|c| !perms.contains(c)),
            (false, None) => {}
        }
        list.retain(|a| !a.perms.is_empty());
    }
    if allow_all {
        return vec![("DevicePolicy", Value::Str("auto".into())), ("DeviceAllow", Value::Pairs(Vec::new()))];
    }
    let entries = list.iter().map(|a| (entry(a), a.perms.clone())).collect();
    vec![
        ("DevicePolicy", Value::Str("strict".into())),
        // DeviceAllow adds to what the unit has: empty it first.
        ("DeviceAllow", Value::Pairs(Vec::new())),
        ("DeviceAllow", Value::Pairs(entries)),
    ]
}

/// systemd's name for the devices: `/dev/char/1:3` (read as numbers since
/// systemd 240, never looked up), `char-136` for a whole major (systemd
/// 240 and later), `char-*` for all.
fn entry(a: &Allowed) -> String {
    let kind = if a.block { "block" } else { "char" };
    match (a.major, a.minor) {
        (Some(major), Some(minor)) => format!("/dev/{kind}/{major}:{minor}"),
        (Some(major), None) => format!("{kind}-{major}"),
        (None, _) => format!("{kind}-*"),
    }
}

/// Permissions in systemd's order, each once.
fn union(a: &str, b: &str) -> String {
    "rwm".chars().filter(|c| a.contains(*c) || b.contains(*c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(allow: bool, typ: &str, major: Option<i64>, minor: Option<i64>, access: &str) -> LinuxDeviceCgroup {
        serde_json::from_value(serde_json::json!({
            "allow": allow, "type": typ, "major": major, "minor": minor, "access": access
        }))
        .unwrap()
    }

    fn allowed(p: &[Prop]) -> (&str, Vec<(String, String)>) {
        let Value::Str(policy) = &p[0].1 else { panic!("{p:?}") };
        let Value::Pairs(list) = &p.last().unwrap().1 else { panic!("{p:?}") };
        (policy.as_str(), list.clone())
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.into(), b.into())
    }

    #[test]
    fn an_allow_list_after_deny_all_is_the_strict_list() {
        let rules = [
            rule(false, "a", None, None, "rwm"),
            rule(true, "c", Some(1), Some(3), "rwm"),
            rule(true, "c", None, None, "m"),
            rule(true, "b", Some(8), None, "r"),
            rule(true, "c", Some(136), None, "rwm"),
            rule(true, "c", Some(1), Some(3), "r"),
        ];
        let p = props(&rules);
        assert_eq!(p.len(), 3, "the policy, the list emptied, the list: {p:?}");
        assert_eq!(p[1], ("DeviceAllow", Value::Pairs(vec![])));
        let (policy, list) = allowed(&p);
        assert_eq!(policy, "strict");
        let want = [pair("/dev/char/1:3", "rwm"), pair("char-*", "m"), pair("block-8", "r"), pair("char-136", "rwm")];
        assert_eq!(list, want);
    }

    #[test]
    fn denies_take_away_only_from_the_same_devices() {
        let rules = [
            rule(false, "a", None, None, "rwm"),
            rule(true, "c", Some(1), Some(3), "rwm"),
            rule(true, "c", Some(5), None, "rw"),
            rule(false, "c", Some(1), Some(3), "w"),
            rule(false, "c", Some(5), Some(1), "rw"),
            rule(false, "c", Some(1), Some(5), "rwm"),
            rule(true, "c", None, Some(9), "r"),
            rule(true, "c", Some(7), Some(7), ""),
        ];
        let (_, list) = allowed(&props(&rules));
        let want = [pair("/dev/char/1:3", "rm"), pair("char-5", "rw"), pair("char-*", "r")];
        assert_eq!(list, want, "a narrower deny leaves the wider allow; *:9 widens to all; no access, no rule");
        let gone = [
            rule(false, "a", None, None, ""),
            rule(true, "b", Some(8), Some(0), "r"),
            rule(false, "b", Some(8), Some(0), "r"),
        ];
        assert_eq!(allowed(&props(&gone)).1, vec![], "a rule with nothing left goes");
    }

    #[test]
    fn a_deny_list_leaves_systemds_filter_off() {
        let rules = [rule(true, "a", None, None, "rwm"), rule(false, "c", Some(1), Some(11), "rwm")];
        let p = props(&rules);
        assert_eq!(p, vec![("DevicePolicy", Value::Str("auto".into())), ("DeviceAllow", Value::Pairs(vec![]))]);
        let back = [
            rule(true, "a", None, None, "rwm"),
            rule(false, "a", None, None, "rwm"),
            rule(true, "c", Some(1), Some(3), "rw"),
        ];
        assert_eq!(allowed(&props(&back)), ("strict", vec![pair("/dev/char/1:3", "rw")]));
        assert_eq!(allowed(&props(&[])), ("strict", vec![]), "no rules: nothing allowed, as in the cgroup's filter");
    }
}
