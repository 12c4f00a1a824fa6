//! The hook contract (being written).
