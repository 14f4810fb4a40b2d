//! The systemd driver (`--systemd-cgroup`), as runc's: the container is a
//! transient unit (`unit`: a scope `prefix-name.scope` in a slice, or a
//! slice of its own), started over D-Bus with init in it, `Delegate=yes`
//! for a scope, its limits (`props`) and device rules (`devices`) given as
//! unit properties. A rootless caller's unit goes to its own systemd. The
//! unit's cgroup is then an ordinary cgroup v2 directory: limits systemd
//! has no property for, the cgroup's own device filter, the freezer,
//! statistics and `exec`'s joins all go through the cgroupfs v2 path on
//! it. Removing it is stopping the unit. Runs in the runtime process;
//! `dbus` holds the calls to systemd, over `bus` and `wire`.

mod bus;
mod dbus;
mod devices;
mod props;
mod unit;
mod wire;

use std::path::Path;

use nix::unistd::Pid;
use oci_spec::runtime::{LinuxDevice, LinuxResources};

use self::dbus::{Bus, Instance};
pub(super) use self::unit::{user_instance_owner, Unit};
use self::wire::{Prop, Value};
use super::{io_err, Cgroup, CgroupError, Result};

/// A failed call to systemd, before the unit is named.
#[derive(Debug)]
pub(super) struct SdError {
    op: &'static str,
    why: String,
}

impl SdError {
    fn new(op: &'static str, e: impl std::fmt::Display) -> SdError {
        SdError { op, why: e.to_string() }
    }

    fn on(self, unit: &str) -> CgroupError {
        CgroupError::Systemd { op: self.op, unit: unit.to_string(), why: self.why }
    }
}

/// Whether systemd runs this host (sd_booted's test).
pub(super) fn booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

impl Cgroup {
    fn unit(&self) -> Result<&Unit> {
        let bad = || CgroupError::Path(format!("{:?} is not a systemd \"slice:prefix:name\"", self.recorded));
        self.unit.as_ref().ok_or_else(bad)
    }

    /// Starts the unit with `pid` (init) in it and `r`'s limits and device
    /// rules, and waits until systemd has made it. The caller then writes
    /// every limit to the cgroup's files, as runc does after starting it.
    pub(super) fn start_unit(&self, pid: Pid, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        let unit = self.unit()?;
        let on = |e: SdError| e.on(&unit.name);
        let mut props = base_props(unit, &self.id, pid)?;
        props.extend(unit_props(r, devices).map_err(on)?);
        let mut bus = Bus::connect(unit.instance).map_err(on)?;
        let job = bus.start(&unit.name, &props).map_err(on)?;
        let result = bus.wait_job(&job);
        if result.as_ref().map_or(true, |r| r != "done") {
            // As runc: a unit left failed must not block the name.
            let _ = bus.reset_failed(&unit.name);
            let why = |r: String| format!("systemd's start job ended {r:?} (see journalctl -u {})", unit.name);
            return Err(on(result.map_or_else(|e| e, |r| SdError { op: "start", why: why(r) })));
        }
        check_started(&mut bus, unit).map_err(on)?;
        if unit.is_slice() {
            // systemd puts no process straight into a slice (runc's
            // request with init in it fails there): init goes in through
            // the cgroup's own file once the slice is up.
            let procs = Path::new(super::ROOT).join(unit.path.trim_start_matches('/')).join("cgroup.procs");
            std::fs::write(&procs, pid.as_raw().to_string()).map_err(io_err("write", &procs))?;
        }
        Ok(())
    }

    /// `update`: the new limits and the device rules as unit properties,
    /// kept until the unit goes. The caller writes the cgroup's files.
    pub(super) fn set_unit_properties(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        let unit = self.unit()?;
        let on = |e: SdError| e.on(&unit.name);
        let props = unit_props(r, devices).map_err(on)?;
        Bus::connect(unit.instance).and_then(|mut bus| bus.set(&unit.name, &props)).map_err(on)
    }

    /// Stops the unit and waits for systemd to remove its cgroup; a unit
    /// systemd no longer has (its processes all gone, or never started)
    /// is fine. A unit that ends failed is reset, as runc does, so that
    /// systemd forgets it.
    pub(super) fn stop_unit(&self) -> Result<()> {
        let unit = self.unit()?;
        let on = |e: SdError| e.on(&unit.name);
        let mut bus = Bus::connect(unit.instance).map_err(on)?;
        if let Some(job) = bus.stop(&unit.name).map_err(on)? {
            let result = bus.wait_job(&job).map_err(on)?;
            if result != "done" {
                crate::warn::warn(&format!("systemd's stop job for {} ended {result:?}; going on", unit.name));
            }
        }
        let _ = bus.reset_failed(&unit.name);
        Ok(())
    }
}

/// systemd has the unit active, at the cgroup the driver expects.
fn check_started(bus: &mut Bus, unit: &Unit) -> Result<(), SdError> {
    let state = bus.unit_property(&unit.name, "org.freedesktop.systemd1.Unit", "ActiveState")?;
    if state != "active" {
        let why = format!("it is {state:?} after its start job (see journalctl -u {})", unit.name);
        return Err(SdError { op: "start", why });
    }
    let iface = if unit.is_slice() { "org.freedesktop.systemd1.Slice" } else { "org.freedesktop.systemd1.Scope" };
    let cg = bus.unit_property(&unit.name, iface, "ControlGroup")?;
    if cg != unit.path {
        let why = match unit.instance {
            Instance::System => {
                format!("systemd placed it at cgroup {cg}, not {}; is systemd in a cgroup namespace?", unit.path)
            }
            Instance::User => format!("the user's systemd placed it at cgroup {cg}, not {}", unit.path),
        };
        return Err(SdError { op: "place", why });
    }
    Ok(())
}

/// The limits and device rules as properties. The device rules are the
/// ones the cgroup's own filter applies, in its order: the spec's, the
/// allowances for `linux.devices`, then the default set.
fn unit_props(r: &LinuxResources, devices: &[LinuxDevice]) -> Result<Vec<Prop>, SdError> {
    let mut props = props::resources(r).map_err(|why| SdError { op: "convert linux.resources for", why })?;
    let rules = super::limits::with_device_allows(r, devices).devices().clone().unwrap_or_default();
    let defaults: Vec<_> = super::v1::default_rules().collect();
    props.extend(devices::props(rules.iter().chain(&defaults)));
    Ok(props)
}

/// What every unit gets: runc's set, plus accounting so that systemd
/// enables the controllers the limits need. A scope goes in its slice with
/// init in it; a slice wants its parent, and takes init afterwards.
fn base_props(unit: &Unit, id: &str, pid: Pid) -> Result<Vec<Prop>> {
    let pid = u32::try_from(pid.as_raw()).map_err(|_| CgroupError::Path(format!("bad init pid {pid}")))?;
    let mut props: Vec<Prop> = vec![("Description", Value::Str(format!("tinyrun container {id}")))];
    if unit.is_slice() {
        props.push(("Wants", Value::Strs(vec![unit.slice.clone()])));
    } else {
        props.push(("Slice", Value::Str(unit.slice.clone())));
        props.push(("Delegate", Value::Bool(true)));
        props.push(("PIDs", Value::U32s(vec![pid])));
    }
    for acct in ["MemoryAccounting", "CPUAccounting", "IOAccounting", "TasksAccounting"] {
        props.push((acct, Value::Bool(true)));
    }
    props.push(("DefaultDependencies", Value::Bool(false)));
    Ok(props)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_takes_init_and_delegation_and_a_slice_wants_its_parent() {
        let names = |p: &[Prop]| p.iter().map(|(n, _)| *n).collect::<Vec<_>>();
        let scope = Unit::parse("system.slice:tinyrun:c", None).unwrap();
        let p = base_props(&scope, "c", Pid::from_raw(42)).unwrap();
        assert!(p.contains(&("PIDs", Value::U32s(vec![42]))) && p.contains(&("Delegate", Value::Bool(true))));
        assert!(p.contains(&("Slice", Value::Str("system.slice".into()))), "{:?}", names(&p));
        let slice = Unit::parse("system.slice:tinyrun:system-c.slice", None).unwrap();
        let p = base_props(&slice, "c", Pid::from_raw(42)).unwrap();
        assert!(p.contains(&("Wants", Value::Strs(vec!["system.slice".into()]))), "{:?}", names(&p));
        for absent in ["PIDs", "Delegate", "Slice"] {
            assert!(!names(&p).contains(&absent), "a slice takes no {absent}: {:?}", names(&p));
        }
    }

    #[test]
    fn device_rules_follow_the_cgroups_own_order_with_the_defaults_last() {
        let r: LinuxResources = serde_json::from_value(serde_json::json!({
            "devices": [{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 1, "minor": 11, "access": "r"}]
        }))
        .unwrap();
        let fuse: LinuxDevice =
            serde_json::from_value(serde_json::json!({"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}))
                .unwrap();
        let p = unit_props(&r, &[fuse]).unwrap();
        assert_eq!(p[0], ("DevicePolicy", Value::Str("strict".into())));
        let Some((_, Value::Pairs(list))) = p.last() else { panic!("{p:?}") };
        let has = |d: &str, perms: &str| list.contains(&(d.to_string(), perms.to_string()));
        assert!(has("/dev/char/1:11", "r") && has("/dev/char/10:229", "rwm"), "{list:?}");
        assert!(has("/dev/char/1:3", "rwm") && has("char-136", "rwm") && has("char-*", "m"), "defaults: {list:?}");
    }
}
