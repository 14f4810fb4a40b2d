//! The few calls of systemd's D-Bus API (org.freedesktop.systemd1) the
//! driver makes, through zbus on the system bus. zbus' blocking API would
//! run every call on a process-wide multi-threaded tokio runtime that zbus
//! keeps for good (a worker per CPU, plus a pool thread for the connect that
//! idles on for 10 s). Here each `Bus` drives its connection on a
//! current-thread runtime of its own instead: zbus' tasks run only inside
//! its calls, and dropping the `Bus` ends the runtime and with it the one
//! pool thread the connect used. No thread is left behind for `run` to
//! carry while it waits, or for a later fork to copy.

use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use zbus::proxy::CacheProperties;
use zbus::zvariant::{OwnedObjectPath, Value};
use zbus::Connection;

use super::SdError;

const DEST: &str = "org.freedesktop.systemd1";

/// A unit property as StartTransientUnit and SetUnitProperties take it.
pub(super) type Prop = (&'static str, Value<'static>);

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_blocking = false,
    async_name = "ManagerProxy"
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

    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;
}

/// A connection to systemd on the system bus, with the runtime that
/// drives it.
pub(super) struct Bus {
    /// Declared first: dropped before the runtime, which then drops the
    /// connection's tasks and joins its idle connect thread.
    conn: Connection,
    rt: Runtime,
}

/// How long a start or stop job may take; systemd finishes a scope's in
/// milliseconds, but a busy manager queues jobs.
const JOB_PATIENCE: Duration = Duration::from_secs(30);

/// How long one call (or the connect) may take: systemd answers in
/// milliseconds, and a hung bus must not hang `create` or `delete`.
const CALL_PATIENCE: Duration = Duration::from_secs(25);

impl Bus {
    /// Runs `call` on the bus's runtime, given up after [`CALL_PATIENCE`].
    fn within<T>(
        rt: &Runtime,
        op: &'static str,
        call: impl std::future::Future<Output = Result<T, SdError>>,
    ) -> Result<T, SdError> {
        within_for(rt, op, CALL_PATIENCE, call)
    }
}

fn within_for<T>(
    rt: &Runtime,
    op: &'static str,
    patience: Duration,
    call: impl std::future::Future<Output = Result<T, SdError>>,
) -> Result<T, SdError> {
    rt.block_on(async { tokio::time::timeout(patience, call).await }).unwrap_or_else(|_| {
        Err(SdError { op, why: format!("no answer from systemd within {} ms", patience.as_millis()) })
    })
}

impl Bus {
    pub(super) fn connect() -> Result<Bus, SdError> {
        let err = |e: &dyn std::fmt::Display| SdError::new("connect to the system bus", e);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| err(&e))?;
        let conn =
            Bus::within(&rt, "connect to the system bus", async { Connection::system().await.map_err(|e| err(&e)) })?;
        Ok(Bus { conn, rt })
    }

    async fn manager(&self) -> Result<ManagerProxy<'_>, SdError> {
        let b = ManagerProxy::builder(&self.conn).cache_properties(CacheProperties::No);
        b.build().await.map_err(|e| SdError::new("reach org.freedesktop.systemd1", e))
    }

    /// StartTransientUnit in mode "replace"; returns the job. A unit of
    /// that name that systemd still has (a failed one left over) is reset
    /// and the start tried once more, as runc does.
    pub(super) fn start(&self, unit: &str, props: &[Prop]) -> Result<OwnedObjectPath, SdError> {
        Bus::within(&self.rt, "start", async {
            let m = self.manager().await?;
            match m.start_transient_unit(unit, "replace", props, &[]).await {
                Err(e) if is_dbus_error(&e, "org.freedesktop.systemd1.UnitExists") => {
                    // A unit that is not failed can't be reset: the retry
                    // then fails with systemd's own message.
                    let _ = m.reset_failed_unit(unit).await;
                    m.start_transient_unit(unit, "replace", props, &[]).await
                }
                other => other,
            }
            .map_err(|e| SdError::new("start", e))
        })
    }

    /// StopUnit in mode "replace"; `None` when systemd has no such unit.
    pub(super) fn stop(&self, unit: &str) -> Result<Option<OwnedObjectPath>, SdError> {
        Bus::within(&self.rt, "stop", async {
            match self.manager().await?.stop_unit(unit, "replace").await {
                Ok(job) => Ok(Some(job)),
                Err(e) if is_dbus_error(&e, "org.freedesktop.systemd1.NoSuchUnit") => Ok(None),
                Err(e) => Err(SdError::new("stop", e)),
            }
        })
    }

    /// SetUnitProperties with runtime=true (lost at reboot, as the unit is).
    pub(super) fn set(&self, unit: &str, props: &[Prop]) -> Result<(), SdError> {
        Bus::within(&self.rt, "set properties of", async {
            let m = self.manager().await?;
            m.set_unit_properties(unit, true, props).await.map_err(|e| SdError::new("set properties of", e))
        })
    }

    /// Waits until systemd is done with `job`: a finished job's object
    /// leaves the bus (polled rather than waiting for JobRemoved, so the
    /// wait has a deadline). A scope's job is done in a millisecond or two;
    /// the pause between polls doubles from there, so a queued job costs
    /// a few bus calls, not thousands.
    pub(super) fn wait_job(&self, job: &OwnedObjectPath) -> Result<(), SdError> {
        let deadline = Instant::now() + JOB_PATIENCE;
        let mut pause = Duration::from_millis(1);
        let queued = || {
            Bus::within(&self.rt, "wait for", async {
                let proxy = self.proxy(job.as_str(), "org.freedesktop.systemd1.Job").await?;
                Ok::<bool, SdError>(proxy.get_property::<String>("State").await.is_ok())
            })
        };
        while queued()? {
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
        Bus::within(&self.rt, "read a property of", async {
            let path = self.manager().await?.get_unit(unit).await.map_err(|e| SdError::new("find", e))?;
            let proxy = self.proxy(path.as_str(), iface).await?;
            proxy.get_property::<String>(name).await.map_err(|e| SdError::new("read a property of", e))
        })
    }

    async fn proxy(&self, path: &str, iface: &str) -> Result<zbus::Proxy<'_>, SdError> {
        let err = |e| SdError::new("reach an object of", e);
        let b = zbus::proxy::Builder::<zbus::Proxy<'_>>::new(&self.conn);
        let b = b.destination(DEST).map_err(err)?.path(path.to_string()).map_err(err)?;
        let b = b.interface(iface.to_string()).map_err(err)?.cache_properties(CacheProperties::No);
        b.build().await.map_err(err)
    }
}

fn is_dbus_error(e: &zbus::Error, want: &str) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_without_an_answer_is_given_up() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let t = Instant::now();
        let r: Result<(), SdError> = within_for(&rt, "start", Duration::from_millis(50), std::future::pending());
        let e = r.unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(e.op, "start");
        assert!(e.why.contains("no answer"), "{}", e.why);
        let ok = within_for(&rt, "stop", Duration::from_secs(5), async { Ok::<u8, SdError>(7) });
        assert_eq!(ok.ok(), Some(7));
    }
}
