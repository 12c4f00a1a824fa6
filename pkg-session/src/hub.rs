//! Fan-out of events to subscribers (being written).
