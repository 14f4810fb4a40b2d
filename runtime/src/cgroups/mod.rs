//! Cgroups: a thin adapter over `libcgroups` (to be written).
