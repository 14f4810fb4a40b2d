//! The `features` document (to be written).
