//! Which /30 each box has, recorded under `<root>/sandbox-net/`.

use super::*;

pub(super) const DIR: &str = "sandbox-net";

pub(super) struct Records {
    pub(super) dir: PathBuf,
}

impl Records {
    pub(super) fn new(root: &Path) -> Records {
        Records { dir: root.join(DIR) }
    }

    pub(super) fn lock(&self) -> Result<Flock<File>> {
        crate::lockdir::lock(&self.dir)
    }

    /// (first address of the /30, owner id, record path) of each record.
    pub(super) fn all(&self) -> Result<Vec<(u32, String, PathBuf)>> {
        let mut out = Vec::new();
        let dir = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io("read", &self.dir, e)),
        };
        for entry in dir {
            let entry = entry.map_err(|e| Error::io("read", &self.dir, e))?;
            let Some(net) = entry.file_name().to_str().and_then(|n| n.parse::<Ipv4Addr>().ok()) else { continue };
            let path = entry.path();
            let owner = std::fs::read_to_string(&path).map_err(|e| Error::io("read", &path, e))?;
            out.push((u32::from(net), owner.trim().to_string(), path));
        }
        Ok(out)
    }

    /// A free /30 of `range` for box `id`: none recorded, and none that
    /// overlaps an address the host already has (another root's box, or
    /// anything else on the host).
    pub(super) fn allocate(&self, range: Cidr, id: &str, host: &[(Ipv4Addr, u8)]) -> Result<Link> {
        let _lock = self.lock()?;
        let taken: Vec<u32> = self.all()?.into_iter().map(|(n, _, _)| n).collect();
        let first = u32::from(range.addr);
        let end = u64::from(first) + range.size();
        let free = (u64::from(first)..end).step_by(4).filter_map(|n| u32::try_from(n).ok()).find(|&n| {
            let net = Cidr { addr: Ipv4Addr::from(n), len: 30 };
            !taken.contains(&n)
                && !host
                    .iter()
                    .any(|&(a, len)| net.contains(a) || Cidr { addr: a, len: len.min(32) }.contains(net.addr))
        });
        let Some(net) = free else {
            return Err(Error::InvalidState(format!(
                "no free /30 left in the egress link range {range} for sandbox {id}: each is used by a box or \
                 overlaps an address or subnet of the host's; terminate boxes or choose another --egress-range"
            )));
        };
        let path = self.dir.join(Ipv4Addr::from(net).to_string());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        f.write_all(format!("{id}\n").as_bytes()).map_err(|e| Error::io("write", &path, e))?;
        Ok(link_of(net))
    }
}
