//! Fixtures shared by the session's test files: a scripted model server on loopback and a
//! session builder pointed at it, journaling into a temp dir.

#![allow(dead_code)]

use tempfile::TempDir;
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{Session, SessionBuilder};

/// A scripted OpenAI-compatible server answering with `replies`, in order.
pub async fn server(replies: impl IntoIterator<Item = Reply>) -> ScriptedServer {
    ScriptedServer::start(Script::new(replies))
        .await
        .expect("scripted server")
}

/// A session builder for model `scripted` at `endpoint`, journaling to `j.redb` in `dir`.
pub fn session(endpoint: &str, dir: &TempDir) -> SessionBuilder {
    Session::builder()
        .endpoint(endpoint)
        .model("scripted")
        .journal_path(dir.path().join("j.redb"))
}
