//! The `--nats*` options `treadle serve` and `treadle worker` share, read into the one
//! typed [`NatsConfig`] at the boundary (see src/dist/connect.rs and docs/scale-out.md).

use std::path::PathBuf;

use crate::dist::connect::{ConfigError, Given, NatsConfig};

/// How to reach NATS.
#[derive(Debug, Clone, clap::Args)]
pub struct NatsArgs {
    /// Run task and agent steps on `treadle worker` processes through this NATS server
    /// (JetStream on): one URL or several separated by commas, e.g.
    /// nats://n1:4222,nats://n2:4222; `nats://user:pass@host` and `nats://token@host` carry
    /// credentials (see docs/scale-out.md).
    #[arg(long, value_name = "URL[,URL...]")]
    pub nats: Option<String>,
    /// Replicas of each stream and bucket (default: 3 on a cluster of 3 or more servers,
    /// else 1); an existing stream with fewer is raised.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub nats_replicas: Option<u8>,
    /// A NATS creds file (user JWT and seed, as `nsc` writes it).
    #[arg(long, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// A file holding an nkey seed (SU...).
    #[arg(long, value_name = "FILE")]
    pub nats_nkey: Option<PathBuf>,
    /// A TLS client certificate (PEM); with --nats-tls-key.
    #[arg(long, value_name = "FILE")]
    pub nats_tls_cert: Option<PathBuf>,
    /// The TLS client certificate's key (PEM).
    #[arg(long, value_name = "FILE")]
    pub nats_tls_key: Option<PathBuf>,
    /// A CA certificate (PEM) to trust for the NATS servers' certificates.
    #[arg(long, value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,
    /// A file holding the secret step messages are signed with (server) and checked
    /// against (worker); default: the variable TREADLE_NATS_SIGNING_KEY.
    #[arg(long, value_name = "FILE")]
    pub nats_signing_key: Option<PathBuf>,
}

impl NatsArgs {
    /// The config, when `--nats` was given.
    pub fn config(self) -> Result<Option<NatsConfig>, ConfigError> {
        let Some(urls) = self.nats.as_deref() else {
            return Ok(None);
        };
        Given {
            urls,
            creds: self.nats_creds,
            nkey: self.nats_nkey,
            tls_cert: self.nats_tls_cert,
            tls_key: self.nats_tls_key,
            ca: self.nats_ca,
            replicas: self.nats_replicas.map(usize::from),
            signing_key: self.nats_signing_key,
        }
        .config()
        .map(Some)
    }
}
