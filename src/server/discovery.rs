//! The discovery file, `.treadle/server.json` beside the state file: where a running server
//! listens, so that the other commands go through it. It never holds the token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the discovery file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// Where the server listens.
    pub addr: SocketAddr,
    /// The server's process.
    pub pid: u32,
    /// Whether requests need `Authorization: Bearer <token>`.
    pub token_required: bool,
}

/// Why the discovery file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct DiscoveryError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// The discovery file of a state file: `state.redb` → `server.json` in the same directory.
pub fn path_for(state: &Path) -> PathBuf {
    state.with_file_name("server.json")
}

/// Writes the file whole (a temporary file renamed into place: a reader never sees half).
pub fn write(state: &Path, discovery: &Discovery) -> Result<(), DiscoveryError> {
    let path = path_for(state);
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let err = |source| DiscoveryError {
        path: path.clone(),
        source,
    };
    let bytes = serde_json::to_vec_pretty(discovery).map_err(|e| err(e.into()))?;
    std::fs::write(&tmp, bytes).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)
}

/// Reads the file, if there is one that parses.
pub fn read(state: &Path) -> Option<Discovery> {
    let bytes = std::fs::read(path_for(state)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes the file if it is still this process's (a later server may have replaced it).
pub fn remove(state: &Path) {
    if read(state).is_some_and(|d| d.pid == std::process::id()) {
        let _ = std::fs::remove_file(path_for(state));
    }
}
