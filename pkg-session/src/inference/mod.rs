//! Streaming inference from OpenAI-compatible endpoints (being written).
