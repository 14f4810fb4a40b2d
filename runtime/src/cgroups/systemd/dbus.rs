//! The calls of systemd's D-Bus API (org.freedesktop.systemd1) the driver
//! makes, over a `bus::Conn`: to the system instance on the system bus
//! (or, as root without a bus daemon, systemd's private socket, as runc
//! falls back to), or to the caller's user instance on its session bus.
//! Each `Bus` is one connection, closed when dropped: nothing of it
//! outlives the command, no thread included.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bus::{self, Addr, Conn, Failure};
use super::wire::{Call, Prop, Writer};
use super::SdError;

const DEST: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// How long a start or stop job may take, as runc waits; systemd finishes
/// a scope's in milliseconds, but a busy manager queues jobs.
const JOB_PATIENCE: Duration = Duration::from_secs(30);

/// How long the connect, and then each call, may take: systemd answers in
/// milliseconds, and a hung bus must not hang `create` or `delete`.
const CALL_PATIENCE: Duration = Duration::from_secs(25);

/// The system bus when DBUS_SYSTEM_BUS_ADDRESS does not say (the
/// specification's default).
const SYSTEM_BUS: &str = "/var/run/dbus/system_bus_socket";

/// systemd's own socket, which takes root's calls without a bus daemon.
const PRIVATE_SOCKET: &str = "/run/systemd/private";

/// Which systemd manages the container's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Instance {
    System,
    /// The caller's own (`systemd --user`), for rootless containers.
    User,
}

pub(super) struct Bus {
    conn: Conn,
    /// Straight to systemd: no bus daemon to ask for signals.
    direct: bool,
    watching: bool,
}

impl Bus {
    pub(super) fn connect(instance: Instance) -> Result<Bus, SdError> {
        let op = match instance {
            Instance::System => "connect to the system bus for",
            Instance::User => "connect to the user's bus for",
        };
        let err = |why: String| SdError { op, why };
        let (addrs, private) = match instance {
            Instance::System => (system_addresses(), nix::unistd::geteuid().is_root()),
            Instance::User => (user_addresses().map_err(err)?, false),
        };
        let mut tried = Vec::new();
        for addr in &addrs {
            match Conn::open(addr, false, CALL_PATIENCE) {
                Ok(conn) => return Ok(Bus { conn, direct: false, watching: false }),
                Err(f) => tried.push(f.why),
            }
        }
        // runc's fallback when there is no bus daemon (a kind node, say).
        // Each attempt has its own deadline: a hung bus daemon and a hung
        // systemd together cost two of them, still a bounded wait.
        if private && Path::new(PRIVATE_SOCKET).exists() {
            let addr = Addr::Path(PRIVATE_SOCKET.into());
            match Conn::open(&addr, true, CALL_PATIENCE) {
                Ok(conn) => return Ok(Bus { conn, direct: true, watching: false }),
                Err(f) => tried.push(f.why),
            }
        }
        Err(err(tried.join("; ")))
    }

    fn manager_call<'a>(&self, member: &'a str, signature: &'a str, body: Writer) -> Call<'a> {
        let destination = (!self.direct).then_some(DEST);
        Call { destination, path: MANAGER_PATH, interface: MANAGER, member, signature, body: body.buf, flags: 0 }
    }

    /// A manager method taking the unit's name and maybe more, returning
    /// an object path (a job or a unit) or nothing.
    fn on_unit(
        &mut self,
        member: &str,
        signature: &str,
        unit: &str,
        rest: impl Fn(&mut Writer),
    ) -> Result<Option<String>, Failure> {
        let mut body = Writer::default();
        body.str(unit);
        rest(&mut body);
        let call = self.manager_call(member, signature, body);
        let reply = self.conn.call(&call)?;
        if reply.signature.starts_with('o') {
            return reply
                .args()
                .str()
                .map(Some)
                .map_err(|e| Failure { name: None, why: format!("the reply to {member}: {e}") });
        }
        Ok(None)
    }

    /// Has the bus pass on JobRemoved, before the call that makes the job.
    fn watch_jobs(&mut self) {
        if !self.watching {
            let rule = format!(
                "type='signal',sender='{DEST}',path='{MANAGER_PATH}',interface='{MANAGER}',member='JobRemoved'"
            );
            self.conn.watch(&rule, self.direct, MANAGER, "JobRemoved");
            self.watching = true;
        }
    }

    /// StartTransientUnit in mode "replace"; returns the job. A unit of
    /// that name that systemd still has (a failed one left over) is reset
    /// and the start tried once more, as runc does.
    pub(super) fn start(&mut self, unit: &str, props: &[Prop]) -> Result<String, SdError> {
        self.watch_jobs();
        let args = |b: &mut Writer| {
            b.str("replace");
            b.props(props);
            b.array(8, |_| {}); // no auxiliary units
        };
        let mut r = self.on_unit("StartTransientUnit", "ssa(sv)a(sa(sv))", unit, args);
        if r.as_ref().is_err_and(|f| f.name.as_deref() == Some("org.freedesktop.systemd1.UnitExists")) {
            // A unit that is not failed can't be reset: the retry then
            // fails with systemd's own message.
            let _ = self.reset_failed(unit);
            r = self.on_unit("StartTransientUnit", "ssa(sv)a(sa(sv))", unit, args);
        }
        let job = r.map_err(|f| SdError::new("start", f.why))?;
        job.ok_or_else(|| SdError::new("start", "StartTransientUnit returned no job"))
    }

    /// StopUnit in mode "replace"; `None` when systemd has no such unit.
    pub(super) fn stop(&mut self, unit: &str) -> Result<Option<String>, SdError> {
        self.watch_jobs();
        match self.on_unit("StopUnit", "ss", unit, |b| b.str("replace")) {
            Ok(job) => Ok(job),
            Err(f) if f.name.as_deref() == Some("org.freedesktop.systemd1.NoSuchUnit") => Ok(None),
            Err(f) => Err(SdError::new("stop", f.why)),
        }
    }

    /// ResetFailedUnit: a failed unit is forgotten, so its name can be
    /// used again.
    pub(super) fn reset_failed(&mut self, unit: &str) -> Result<(), SdError> {
        self.on_unit("ResetFailedUnit", "s", unit, |_| {}).map(|_| ()).map_err(|f| SdError::new("reset", f.why))
    }

    /// SetUnitProperties with runtime=true (lost at reboot, as the unit is).
    pub(super) fn set(&mut self, unit: &str, props: &[Prop]) -> Result<(), SdError> {
        let args = |b: &mut Writer| {
            b.bool(true);
            b.props(props);
        };
        self.on_unit("SetUnitProperties", "sba(sv)", unit, args)
            .map(|_| ())
            .map_err(|f| SdError::new("set properties of", f.why))
    }

    /// Waits for systemd's JobRemoved of `job` and returns its result
    /// ("done", "failed", "canceled", ...).
    pub(super) fn wait_job(&mut self, job: &str) -> Result<String, SdError> {
        let ours = |m: &super::wire::Message| {
            let mut a = m.args();
            m.signature == "uoss" && a.u32().is_ok() && a.str().is_ok_and(|p| p == job)
        };
        let m = self.conn.signal(JOB_PATIENCE, ours).map_err(|f| SdError::new("wait for the job of", f.why))?;
        let mut a = m.args();
        let (_, _, _, result) = (a.u32(), a.str(), a.str(), a.str());
        result.map_err(|e| SdError::new("wait for the job of", e))
    }

    /// A property of the loaded unit `unit` on interface `iface`
    /// (`Unit` for ActiveState, `Scope` or `Slice` for ControlGroup).
    pub(super) fn unit_property(&mut self, unit: &str, iface: &str, name: &str) -> Result<String, SdError> {
        let path = self.on_unit("GetUnit", "s", unit, |_| {}).map_err(|f| SdError::new("find", f.why))?;
        let path = path.ok_or_else(|| SdError::new("find", "GetUnit returned no object"))?;
        let mut body = Writer::default();
        body.str(iface);
        body.str(name);
        let destination = (!self.direct).then_some(DEST);
        let call = Call {
            destination,
            path: &path,
            interface: "org.freedesktop.DBus.Properties",
            member: "Get",
            signature: "ss",
            body: body.buf,
            flags: 0,
        };
        let reply = self.conn.call(&call).map_err(|f| SdError::new("read a property of", f.why))?;
        reply.args().variant_str().map_err(|e| SdError::new("read a property of", e))
    }
}

/// DBUS_SYSTEM_BUS_ADDRESS's unix addresses, or the standard socket.
fn system_addresses() -> Vec<Addr> {
    match std::env::var("DBUS_SYSTEM_BUS_ADDRESS") {
        Ok(list) if !list.is_empty() => bus::parse_addresses(&list),
        _ => vec![Addr::Path(SYSTEM_BUS.into())],
    }
}

/// The user's session bus, as runc finds it: DBUS_SESSION_BUS_ADDRESS,
/// else `$XDG_RUNTIME_DIR/bus` where it exists.
fn user_addresses() -> Result<Vec<Addr>, String> {
    if let Ok(list) = std::env::var("DBUS_SESSION_BUS_ADDRESS").map(|l| l.trim().to_string()) {
        if !list.is_empty() {
            let addrs = bus::parse_addresses(&list);
            if addrs.is_empty() {
                return Err(format!("DBUS_SESSION_BUS_ADDRESS {list:?} names no unix socket"));
            }
            return Ok(addrs);
        }
    }
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()).map(PathBuf::from);
    match xdg.map(|d| d.join("bus")) {
        Some(bus) if bus.exists() => Ok(vec![Addr::Path(bus)]),
        Some(bus) => Err(format!("{} does not exist, and DBUS_SESSION_BUS_ADDRESS is not set", bus.display())),
        None => Err("neither DBUS_SESSION_BUS_ADDRESS nor XDG_RUNTIME_DIR is set: no user bus to reach".into()),
    }
}
