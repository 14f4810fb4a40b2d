//! The few calls of systemd's D-Bus API (org.freedesktop.systemd1) the
//! driver makes, through zbus' blocking API on the system bus. zbus built
//! with its `tokio` feature drives the connection on a current-thread
//! runtime inside each call, not on threads of its own. Only its connect
//! runs on tokio's blocking pool: one thread, which ends after 10 s idle.
//! That is harmless here: init is cloned before the first call (the scope
//! is started with init's pid), and nothing later forks without exec.

use std::time::{Duration, Instant};

use zbus::blocking::Connection;
use zbus::proxy::CacheProperties;
use zbus::zvariant::{OwnedObjectPath, Value};

use super::SdError;

const DEST: &str = "org.freedesktop.systemd1";

/// A unit property as StartTransientUnit and SetUnitProperties take it.
pub(super) type Prop = (&'static str, Value<'static>);

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_async = false,
    blocking_name = "ManagerProxy"
)]
trait Manager {
    /// `ssa(sv)a(sa(sv))`: the last argument (auxiliary units) stays empty.
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[Prop],
        aux: &[(&str, &[Prop])],
    ) -> zbus::Result<OwnedObjectPath>;

    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    fn set_unit_properties(&self, name: &str, runtime: bool, properties: &[Prop]) -> zbus::Result<()>;

    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
}

/// A connection to systemd on the system bus.
pub(super) struct Bus {
    conn: Connection,
}

/// How long a start or stop job may take; systemd finishes a scope's in
/// milliseconds, but a busy manager queues jobs.
const JOB_PATIENCE: Duration = Duration::from_secs(30);

impl Bus {
    pub(super) fn connect() -> Result<Bus, SdError> {
        let conn = Connection::system().map_err(|e| SdError::new("connect to the system bus", e))?;
        Ok(Bus { conn })
    }

    fn manager(&self) -> Result<ManagerProxy<'_>, SdError> {
        let b = ManagerProxy::builder(&self.conn).cache_properties(CacheProperties::No);
        b.build().map_err(|e| SdError::new("reach org.freedesktop.systemd1", e))
    }

    /// StartTransientUnit in mode "replace"; returns the job.
    pub(super) fn start(&self, unit: &str, props: &[Prop]) -> Result<OwnedObjectPath, SdError> {
        self.manager()?.start_transient_unit(unit, "replace", props, &[]).map_err(|e| SdError::new("start", e))
    }

    /// StopUnit in mode "replace"; `None` when systemd has no such unit.
    pub(super) fn stop(&self, unit: &str) -> Result<Option<OwnedObjectPath>, SdError> {
        match self.manager()?.stop_unit(unit, "replace") {
            Ok(job) => Ok(Some(job)),
            Err(e) if is_no_such_unit(&e) => Ok(None),
            Err(e) => Err(SdError::new("stop", e)),
        }
    }

    /// SetUnitProperties with runtime=true (lost at reboot, as the unit is).
    pub(super) fn set(&self, unit: &str, props: &[Prop]) -> Result<(), SdError> {
        self.manager()?.set_unit_properties(unit, true, props).map_err(|e| SdError::new("set properties of", e))
    }

    /// Waits until systemd is done with `job`: a finished job's object
    /// leaves the bus (polled rather than waiting for JobRemoved, so the
    /// wait has a deadline). A scope's job is done in a millisecond or two;
    /// the pause between polls doubles from there, so a queued job costs
    /// a few bus calls, not thousands.
    pub(super) fn wait_job(&self, job: &OwnedObjectPath) -> Result<(), SdError> {
        let proxy = self.proxy(job.as_str(), "org.freedesktop.systemd1.Job")?;
        let deadline = Instant::now() + JOB_PATIENCE;
        let mut pause = Duration::from_millis(1);
        while proxy.get_property::<String>("State").is_ok() {
            if Instant::now() > deadline {
                let why = format!("job {} still queued after {}s", job.as_str(), JOB_PATIENCE.as_secs());
                return Err(SdError { op: "wait for", why });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
        Ok(())
    }

    /// A property of the loaded unit `unit` on interface `iface`
    /// (`Unit` for ActiveState, `Scope` for ControlGroup).
    pub(super) fn unit_property(&self, unit: &str, iface: &str, name: &str) -> Result<String, SdError> {
        let path = self.manager()?.get_unit(unit).map_err(|e| SdError::new("find", e))?;
        let proxy = self.proxy(path.as_str(), iface)?;
        proxy.get_property::<String>(name).map_err(|e| SdError::new("read a property of", e))
    }

    fn proxy(&self, path: &str, iface: &str) -> Result<zbus::blocking::Proxy<'_>, SdError> {
        let err = |e| SdError::new("reach an object of", e);
        let b = zbus::blocking::proxy::Builder::<zbus::blocking::Proxy<'_>>::new(&self.conn);
        let b = b.destination(DEST).map_err(err)?.path(path.to_string()).map_err(err)?;
        let b = b.interface(iface.to_string()).map_err(err)?.cache_properties(CacheProperties::No);
        b.build().map_err(err)
    }
}

fn is_no_such_unit(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit")
}
