//! Making the container's init process: the clone, the conversation with
//! it, and the script it runs.

pub(crate) mod exec_init;
pub(crate) mod finalize;
pub(crate) mod foreground;
pub(crate) mod init;
pub(crate) mod launch;
pub(crate) mod sync;
