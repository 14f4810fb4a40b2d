//! Seccomp filters from `linux.seccomp`, through libseccomp (to be written).
