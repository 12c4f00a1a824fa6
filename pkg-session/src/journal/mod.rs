//! The durable event journal on redb (being written).
