//! `exec --cgroup`: an exec'd process in an existing sub-cgroup of the
//! container's cgroup, as runc 1.1 does it. Each argument is `PATH` (the
//! same sub-cgroup in every hierarchy; cgroup v2's only form) or
//! `CONTROLLER[,CONTROLLER...]:PATH` (cgroup v1, one path per controller's
//! hierarchy; the others keep the container's own cgroup). The runtime
//! process writes the new process's pid into each, before it runs
//! anything of its own. Runs in the runtime process.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use nix::unistd::Pid;

use super::check::Layout;
use super::{io_err, Cgroup, CgroupError, Mount, Result};

/// Parsed `--cgroup` arguments.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SubCgroups {
    /// `PATH`: every hierarchy.
    all: Option<PathBuf>,
    /// `CONTROLLER:PATH`, by controller (or `name=...` hierarchy).
    per: BTreeMap<String, PathBuf>,
}

fn bad(why: String) -> CgroupError {
    CgroupError::Path(format!("invalid --cgroup argument: {why}"))
}

/// A sub-cgroup path: below the container's cgroup, whatever its spelling
/// (a leading `/` is the container's cgroup, as for runc; `..` could leave
/// it and is refused).
fn below(arg: &str, path: &str) -> Result<PathBuf> {
    if Path::new(path).components().any(|c| c == Component::ParentDir) {
        return Err(bad(format!("{arg} (the sub-cgroup must lie below the container's cgroup)")));
    }
    let clean = super::path::clean(Path::new(path));
    Ok(clean.strip_prefix("/").unwrap_or(&clean).to_path_buf())
}

impl SubCgroups {
    pub(crate) fn parse(args: &[String]) -> Result<SubCgroups> {
        let mut s = SubCgroups::default();
        for arg in args {
            match arg.split_once(':') {
                Some((ctrls, path)) => {
                    for c in ctrls.split(',') {
                        if c.is_empty() {
                            return Err(bad(format!("{arg} (empty <controller> prefix)")));
                        }
                        if s.per.insert(c.to_string(), below(arg, path)?).is_some() {
                            return Err(bad(format!("controller {c} given more than once")));
                        }
                    }
                }
                None if args.len() == 1 => s.all = Some(below(arg, arg)?),
                None => return Err(bad(format!("{arg} (missing <controller>: prefix)"))),
            }
        }
        Ok(s)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_none() && self.per.is_empty()
    }

    /// The sub-path for hierarchy `m`, if any argument names it.
    fn for_hierarchy(&self, m: &Mount) -> Option<&PathBuf> {
        let name = m.options.split(',').find(|o| o.starts_with("name="));
        let mut names = m.controllers.iter().map(String::as_str).chain(name);
        names.find_map(|n| self.per.get(n)).or(self.all.as_ref())
    }
}

impl Cgroup {
    /// The directories a process exec'd with `sub` joins, each checked to
    /// exist (runc's sub-cgroups are made by the caller, not the runtime).
    pub(crate) fn sub_dirs(&self, sub: &SubCgroups) -> Result<Vec<PathBuf>> {
        let dirs = if self.layout == Layout::Unified {
            if !sub.per.is_empty() {
                return Err(bad("CONTROLLER:PATH is for cgroup v1; on cgroup v2 give the PATH alone".into()));
            }
            vec![self.v2_dir().join(sub.all.as_deref().unwrap_or(Path::new("")))]
        } else {
            let known = |c: &String| self.mounts.iter().any(|m| for_name(m, c));
            if let Some(c) = sub.per.keys().find(|c| !known(c)) {
                return Err(bad(format!("no cgroup hierarchy here has the {c} controller")));
            }
            let dir = |m: &Mount| {
                let base = m.dir.join(self.rel_in(m));
                sub.for_hierarchy(m).map_or(base.clone(), |s| base.join(s))
            };
            self.mounts.iter().map(dir).collect()
        };
        for d in &dirs {
            if !d.is_dir() {
                let why = format!("{}: no such sub-cgroup of the container's cgroup (make it first)", d.display());
                return Err(CgroupError::Path(format!("--cgroup: {why}")));
            }
        }
        Ok(dirs)
    }

    /// Moves `pid` into `dirs` (from [`Cgroup::sub_dirs`]).
    pub(crate) fn add_to(&self, pid: Pid, dirs: &[PathBuf]) -> Result<()> {
        for d in dirs {
            let procs = d.join("cgroup.procs");
            std::fs::write(&procs, pid.as_raw().to_string()).map_err(io_err("write", &procs))?;
        }
        Ok(())
    }
}

/// Whether hierarchy `m` is the one of controller (or `name=`) `c`.
fn for_name(m: &Mount, c: &str) -> bool {
    m.controllers.iter().any(|x| x == c) || m.options.split(',').any(|o| o == c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_runcs_two_forms_and_refuses_what_runc_refuses() {
        let s = SubCgroups::parse(&args(&["/a/b"])).unwrap();
        assert_eq!(s.all, Some(PathBuf::from("a/b")));
        let s = SubCgroups::parse(&args(&["cpu,cpuacct:x", "memory:y"])).unwrap();
        assert_eq!(s.per.len(), 3);
        assert_eq!(s.per["cpuacct"], PathBuf::from("x"));
        assert!(SubCgroups::parse(&args(&[])).unwrap().is_empty());
        for wrong in [&["a", "b"][..], &[":x"], &["cpu:x", "cpu:y"], &["memory:x", "y"], &["../x"], &["cpu:a/../../b"]]
        {
            let e = SubCgroups::parse(&args(wrong)).unwrap_err().to_string();
            assert!(e.contains("invalid --cgroup argument"), "{wrong:?}: {e}");
        }
    }

    #[test]
    fn v1_hierarchies_take_their_controllers_sub_path_and_the_rest_stay() {
        let root = tempfile::tempdir().unwrap();
        let ms = super::super::fixture::hybrid_mounts(root.path());
        let cg = Cgroup::open_with(root.path(), "/ct".into(), BTreeMap::new(), false, "ct", Layout::Hybrid, ms.clone());
        for m in &ms {
            std::fs::create_dir_all(m.dir.join("ct/sub")).unwrap();
        }
        let s = SubCgroups::parse(&args(&["memory:sub"])).unwrap();
        let dirs = cg.sub_dirs(&s).unwrap();
        assert_eq!(dirs.len(), ms.len());
        let memory = dirs.iter().filter(|d| d.ends_with("sub")).collect::<Vec<_>>();
        assert_eq!(memory.len(), 1, "{dirs:?}");
        assert!(memory[0].starts_with(root.path().join("memory")), "{dirs:?}");
        let e = cg.sub_dirs(&SubCgroups::parse(&args(&["nosuch"])).unwrap()).unwrap_err().to_string();
        assert!(e.contains("no such sub-cgroup"), "{e}");
        let e = cg.sub_dirs(&SubCgroups::parse(&args(&["rdma:sub"])).unwrap()).unwrap_err().to_string();
        assert!(e.contains("rdma"), "{e}");
    }
}
