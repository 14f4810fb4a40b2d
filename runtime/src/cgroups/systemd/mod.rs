//! The systemd driver (`--systemd-cgroup`), as runc's: the container is a
//! transient scope unit `prefix-name.scope` in `slice`, started over D-Bus
//! with init in it and `Delegate=yes`, its limits given as unit properties
//! where systemd has them (`props`). The scope's cgroup is then an ordinary
//! cgroup v2 directory: limits systemd has no property for, the device
//! filter, the freezer, statistics and `exec`'s joins all go through the
//! cgroupfs v2 path on it. Removing it is stopping the unit. Runs in the
//! runtime process; `dbus` holds the calls to systemd.

mod dbus;
mod props;

use std::path::Path;

use nix::unistd::Pid;
use oci_spec::runtime::LinuxResources;

use self::dbus::{Bus, Prop};
use super::{Cgroup, CgroupError, Result};

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

/// The unit a `slice:prefix:name` record names, and where its cgroup is.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Scope {
    pub(super) unit: String,
    pub(super) slice: String,
    /// The cgroup below the cgroup2 mount, e.g. `/system.slice/x-y.scope`.
    pub(super) path: String,
}

impl Scope {
    /// runc's reading of `slice:prefix:name`: an empty slice is
    /// `system.slice`, the unit `prefix-name.scope`.
    pub(super) fn parse(recorded: &str) -> Result<Scope, String> {
        let parts: Vec<&str> = recorded.split(':').collect();
        let [slice, prefix, name] = parts[..] else {
            return Err(format!(
                "linux.cgroupsPath {recorded:?}: with --systemd-cgroup it must be \"slice:prefix:name\""
            ));
        };
        if name.ends_with(".slice") {
            // runc reads this as a slice unit of that name for the
            // container, and asks systemd to start it with init in it;
            // systemd puts no process straight into a slice, so runc's
            // create always fails there ("Cannot set property PIDs").
            // Failing here, before anything exists, is the same outcome.
            return Err(format!(
                "linux.cgroupsPath {recorded:?}: a name ending in \".slice\" asks for a slice unit {name:?} \
                 holding the container's processes, and systemd puts no process straight into a slice (runc's \
                 create fails there too); name a scope instead"
            ));
        }
        if name.is_empty() || name.contains('/') || prefix.contains('/') {
            return Err(format!("linux.cgroupsPath {recorded:?}: the name is empty or has a '/'"));
        }
        let slice = if slice.is_empty() { "system.slice" } else { slice };
        let dir = expand_slice(slice).map_err(|why| format!("linux.cgroupsPath {recorded:?}: {why}"))?;
        let unit = format!("{prefix}-{name}.scope");
        let path = format!("{}/{unit}", dir.trim_end_matches('/'));
        Ok(Scope { unit, slice: slice.to_string(), path })
    }
}

/// A slice's cgroup: `a-b.slice` is `/a.slice/a-b.slice` (systemd's rule,
/// and runc's checks of the name).
fn expand_slice(slice: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("slice {slice:?} {why}"));
    let Some(stem) = slice.strip_suffix(".slice") else { return bad("does not end in \".slice\"") };
    if slice.contains('/') {
        return bad("has a '/'");
    }
    if stem == "-" {
        return Ok("/".into());
    }
    if stem.is_empty() || stem.contains("--") || stem.starts_with('-') || stem.ends_with('-') {
        return bad("is not a valid slice name");
    }
    let (mut path, mut prefix) = (String::new(), String::new());
    for part in stem.split('-') {
        path.push_str(&format!("/{prefix}{part}.slice"));
        prefix.push_str(&format!("{part}-"));
    }
    Ok(path)
}

impl Cgroup {
    fn scope(&self) -> Result<&Scope> {
        let bad = || CgroupError::Path(format!("{:?} is not a systemd \"slice:prefix:name\"", self.recorded));
        self.scope.as_ref().ok_or_else(bad)
    }

    /// Starts the scope with `pid` (init) in it and `r`'s limits, and
    /// waits until systemd has made it. The caller then writes every limit
    /// to the cgroup's files, as runc does after starting the unit.
    pub(super) fn start_scope(&self, pid: Pid, r: &LinuxResources) -> Result<()> {
        let scope = self.scope()?;
        let on = |e: SdError| e.on(&scope.unit);
        let mut props = base_props(scope, &self.id, pid)?;
        props.extend(props::resources(r).map_err(|why| on(SdError { op: "convert linux.resources for", why }))?);
        let bus = Bus::connect().map_err(on)?;
        let job = bus.start(&scope.unit, &props).map_err(on)?;
        bus.wait_job(&job).map_err(on)?;
        let state = bus.unit_property(&scope.unit, "org.freedesktop.systemd1.Unit", "ActiveState").map_err(on)?;
        if state != "active" {
            let why = format!("it is {state:?} after its start job (see journalctl -u {})", scope.unit);
            return Err(on(SdError { op: "start", why }));
        }
        let cg = bus.unit_property(&scope.unit, "org.freedesktop.systemd1.Scope", "ControlGroup").map_err(on)?;
        if cg != scope.path {
            let why =
                format!("systemd placed it at cgroup {cg}, not {}; is systemd in a cgroup namespace?", scope.path);
            return Err(on(SdError { op: "place", why }));
        }
        Ok(())
    }

    /// `update`: the new limits as unit properties, kept until the unit
    /// goes. The caller writes the cgroup's files.
    pub(super) fn set_scope_properties(&self, r: &LinuxResources) -> Result<()> {
        let scope = self.scope()?;
        let on = |e: SdError| e.on(&scope.unit);
        let props = props::resources(r).map_err(|why| on(SdError { op: "convert linux.resources for", why }))?;
        if props.is_empty() {
            return Ok(());
        }
        Bus::connect().and_then(|bus| bus.set(&scope.unit, &props)).map_err(on)
    }

    /// Stops the scope and waits for systemd to remove its cgroup; a unit
    /// systemd no longer has (its processes all gone, or never started)
    /// is fine.
    pub(super) fn stop_scope(&self) -> Result<()> {
        let scope = self.scope()?;
        let bus = Bus::connect().map_err(|e| e.on(&scope.unit))?;
        if let Some(job) = bus.stop(&scope.unit).map_err(|e| e.on(&scope.unit))? {
            bus.wait_job(&job).map_err(|e| e.on(&scope.unit))?;
        }
        Ok(())
    }
}

/// What is left of `r` for the cgroup's files once systemd has the
/// properties: all of it (as runc writes it), but `cpu.shares`. libcgroups
/// turns shares into cpu.weight by a newer formula than the CPUWeight runc
/// gives systemd (1024 shares: 100, not 39); the file keeps systemd's.
pub(super) fn for_files(r: &LinuxResources) -> LinuxResources {
    let mut r = r.clone();
    if let Some(mut cpu) = r.cpu().clone().filter(|c| c.shares().is_some()) {
        cpu.set_shares(None);
        r.set_cpu(Some(cpu));
    }
    r
}

/// What every scope gets: runc's set, plus accounting so that systemd
/// enables the controllers the limits need.
fn base_props(scope: &Scope, id: &str, pid: Pid) -> Result<Vec<Prop>> {
    use zbus::zvariant::Value;
    let pid = u32::try_from(pid.as_raw()).map_err(|_| CgroupError::Path(format!("bad init pid {pid}")))?;
    let mut props: Vec<Prop> = vec![
        ("Description", Value::from(format!("tinyrun container {id}"))),
        ("Slice", Value::from(scope.slice.clone())),
        ("PIDs", Value::from(vec![pid])),
        ("Delegate", Value::from(true)),
        ("DefaultDependencies", Value::from(false)),
    ];
    for acct in ["MemoryAccounting", "CPUAccounting", "IOAccounting", "TasksAccounting"] {
        props.push((acct, Value::from(true)));
    }
    Ok(props)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_a_scope_in_a_slice() {
        let s = Scope::parse("system.slice:tinyrun:ct1").unwrap();
        assert_eq!((s.unit.as_str(), s.slice.as_str()), ("tinyrun-ct1.scope", "system.slice"));
        assert_eq!(s.path, "/system.slice/tinyrun-ct1.scope");
        assert_eq!(Scope::parse(":p:n").unwrap().path, "/system.slice/p-n.scope", "empty slice: system.slice");
        assert_eq!(Scope::parse("a-b.slice:p:n").unwrap().path, "/a.slice/a-b.slice/p-n.scope");
        assert_eq!(Scope::parse("-.slice:p:n").unwrap().path, "/p-n.scope");
    }

    #[test]
    fn bad_records_are_refused_naming_the_path() {
        for bad in
            ["a:b", "x.slice:p:n.slice", "x:p:n", "a--b.slice:p:n", "-a.slice:p:n", "a/b.slice:p:n", "s.slice:p:"]
        {
            let e = Scope::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        assert!(Scope::parse("s.slice:p:n.slice").unwrap_err().contains("slice unit"));
    }

    #[test]
    fn the_files_get_all_but_the_shares() {
        use oci_spec::runtime::{LinuxCpuBuilder, LinuxResourcesBuilder};
        let cpu = LinuxCpuBuilder::default().shares(512u64).quota(1000i64).build().unwrap();
        let r = LinuxResourcesBuilder::default().cpu(cpu).build().unwrap();
        let files = for_files(&r);
        let c = files.cpu().as_ref().unwrap();
        assert_eq!((c.shares(), c.quota()), (None, Some(1000)));
    }
}
