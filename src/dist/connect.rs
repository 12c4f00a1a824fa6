//! How a server or worker reaches NATS: the URLs (several, comma-separated), the
//! credentials in their conventional forms, TLS, the replica count, and the start-up wait
//! while no NATS server answers yet. Parsed once, at the command line, into [`NatsConfig`];
//! nothing here ever prints a secret (see [`NatsConfig::shown`]).
//!
//! Credentials, the first that applies: a creds file (`--nats-creds`, JWT and seed, as
//! `nsc` writes it); an nkey seed file (`--nats-nkey`); a user and password, or a token,
//! in the URL (`nats://user:pass@host`, `nats://token@host`); `NATS_USER`/`NATS_PASSWORD`;
//! `NATS_TOKEN`. A client certificate (`--nats-tls-cert`, `--nats-tls-key`) and a CA
//! (`--nats-ca`) go with any of them.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::{ConnectOptions, ServerAddr};

use super::DistError;

/// Who this process says it is to NATS.
#[derive(Debug, Clone, Default)]
pub enum Credentials {
    /// None: the server lets anyone in.
    #[default]
    Anonymous,
    /// A user and password.
    UserPassword(String, String),
    /// A token.
    Token(String),
    /// An nkey seed (read from a file at start-up).
    Nkey(String),
    /// A creds file (user JWT and nkey seed).
    CredsFile(PathBuf),
}

/// Where NATS is and how to reach it: what `--nats` and the other `--nats-*` options say.
#[derive(Clone, Default)]
pub struct NatsConfig {
    /// The servers, their user info taken out (it went into [`Credentials`]).
    pub servers: Vec<ServerAddr>,
    /// Who to say this is.
    pub credentials: Credentials,
    /// A client certificate and its key (PEM files).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// A CA to trust (PEM file).
    pub ca: Option<PathBuf>,
    /// Replicas of each stream, bucket and object store; `None`: 3 on a cluster of 3 or
    /// more servers, else 1.
    pub replicas: Option<usize>,
    /// The key step messages are signed with ([`super::sign`]).
    pub signing: Option<super::sign::SigningKey>,
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NatsConfig({})", self.shown())
    }
}

/// Why `--nats` or a `--nats-*` option does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A URL of the list is not one.
    #[error(
        "--nats: `{0}` is not a NATS URL ({1})\nhint: give nats://host:4222 or tls://host:4222, several separated by commas"
    )]
    Url(String, String),
    /// No URL.
    #[error("--nats: no URL given\nhint: give nats://host:4222")]
    Empty,
    /// A file cannot be read.
    #[error("{option} {path}: {why}")]
    File {
        /// The option.
        option: &'static str,
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// A certificate without its key, or the other way round.
    #[error("--nats-tls-cert and --nats-tls-key go together: give both")]
    HalfCertificate,
}

/// The URL list as given (`a,b,c`), each without its user info, and the user info of the
/// first URL that carries some.
pub fn parse_urls(list: &str) -> Result<(Vec<ServerAddr>, Credentials), ConfigError> {
    let mut servers = Vec::new();
    let mut credentials = Credentials::Anonymous;
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let addr: ServerAddr = part
            .parse()
            .map_err(|e: std::io::Error| ConfigError::Url(redact(part), e.to_string()))?;
        let mut url = addr.clone().into_inner();
        if !url.username().is_empty() && matches!(credentials, Credentials::Anonymous) {
            credentials = match url.password() {
                Some(pass) => Credentials::UserPassword(url.username().to_owned(), pass.to_owned()),
                None => Credentials::Token(url.username().to_owned()),
            };
        }
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let plain =
            ServerAddr::from_url(url).map_err(|e| ConfigError::Url(redact(part), e.to_string()))?;
        servers.push(plain);
    }
    if servers.is_empty() {
        return Err(ConfigError::Empty);
    }
    Ok((servers, credentials))
}

/// `text` with the user info of any URL in it replaced by `***`: what may be printed.
pub fn redact(text: &str) -> String {
    text.split(',')
        .map(|part| match (part.find("://"), part.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}***{}", &part[..scheme + 3], &part[at..])
            }
            (None, Some(at)) => format!("***{}", &part[at..]),
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What the options say, read into a config: `urls` from `--nats`, the environment's
/// `NATS_USER`/`NATS_PASSWORD`/`NATS_TOKEN` where the URL has no user info, and the files.
pub struct Given<'a> {
    /// `--nats`.
    pub urls: &'a str,
    /// `--nats-creds`.
    pub creds: Option<PathBuf>,
    /// `--nats-nkey`.
    pub nkey: Option<PathBuf>,
    /// `--nats-tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// `--nats-tls-key`.
    pub tls_key: Option<PathBuf>,
    /// `--nats-ca`.
    pub ca: Option<PathBuf>,
    /// `--nats-replicas`.
    pub replicas: Option<usize>,
    /// `--nats-signing-key` (a file).
    pub signing_key: Option<PathBuf>,
}

impl Given<'_> {
    /// Parses what was given.
    pub fn config(self) -> Result<NatsConfig, ConfigError> {
        let (servers, mut credentials) = parse_urls(self.urls)?;
        if matches!(credentials, Credentials::Anonymous) {
            let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
            credentials = match (env("NATS_USER"), env("NATS_PASSWORD"), env("NATS_TOKEN")) {
                (Some(user), Some(pass), _) => Credentials::UserPassword(user, pass),
                (_, _, Some(token)) => Credentials::Token(token),
                _ => Credentials::Anonymous,
            };
        }
        if let Some(path) = self.nkey {
            let seed = read("--nats-nkey", &path)?;
            credentials = Credentials::Nkey(seed.trim().to_owned());
        }
        if let Some(path) = self.creds {
            read("--nats-creds", &path)?;
            credentials = Credentials::CredsFile(path);
        }
        let client_cert = match (self.tls_cert, self.tls_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(ConfigError::HalfCertificate),
        };
        let signing = match self.signing_key {
            Some(path) => Some(signing_key_file(&path)?),
            None => super::sign::SigningKey::from_env(),
        };
        Ok(NatsConfig {
            servers,
            credentials,
            client_cert,
            ca: self.ca,
            replicas: self.replicas,
            signing,
        })
    }
}

/// The contents of `path`, or an error naming the option (and never the contents).
pub(super) fn read(option: &'static str, path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        option,
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

/// The signing key in the file `path` (`--nats-signing-key`): an empty file is an error.
fn signing_key_file(path: &std::path::Path) -> Result<super::sign::SigningKey, ConfigError> {
    let secret = read("--nats-signing-key", path)?;
    if secret.trim().is_empty() {
        return Err(ConfigError::File {
            option: "--nats-signing-key",
            path: path.display().to_string(),
            why: "the file is empty".to_owned(),
        });
    }
    Ok(super::sign::SigningKey::new(&secret))
}

impl NatsConfig {
    /// The servers as they may be printed: no user info (it was taken out), and which kind
    /// of credentials, never their value.
    pub fn shown(&self) -> String {
        let urls: Vec<&str> = self.servers.iter().map(ServerAddr::as_url_str).collect();
        let who = match &self.credentials {
            Credentials::Anonymous => "",
            Credentials::UserPassword(user, _) => return format!("{} as {user}", urls.join(",")),
            Credentials::Token(_) => " with a token",
            Credentials::Nkey(_) => " with an nkey",
            Credentials::CredsFile(_) => " with a creds file",
        };
        format!("{}{who}", urls.join(","))
    }

    /// The client's options: credentials, TLS, and reconnecting for ever, soon (at most a
    /// second between tries, so that a worker back on line extends its steps' deliveries
    /// before they are handed out again).
    async fn options(&self, name: &str) -> Result<ConnectOptions, DistError> {
        let mut o = match &self.credentials {
            Credentials::Anonymous => ConnectOptions::new(),
            Credentials::UserPassword(u, p) => {
                ConnectOptions::with_user_and_password(u.clone(), p.clone())
            }
            Credentials::Token(t) => ConnectOptions::with_token(t.clone()),
            Credentials::Nkey(seed) => ConnectOptions::with_nkey(seed.clone()),
            Credentials::CredsFile(path) => ConnectOptions::with_credentials_file(path)
                .await
                .map_err(|e| DistError::Connect {
                    url: self.shown(),
                    why: format!("--nats-creds {}: {e}", path.display()),
                })?,
        };
        if let Some((cert, key)) = &self.client_cert {
            o = o
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        if let Some(ca) = &self.ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(o.name(name)
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(3))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis(100 * attempts.min(10) as u64)
            }))
    }

    /// Connects, waiting (and saying so, once) while no server of the list answers; an
    /// answer that refuses this process (authorization, TLS) is an error at once.
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client, DistError> {
        let mut said = false;
        loop {
            let options = self.options(name).await?;
            match options.connect(self.servers.clone()).await {
                Ok(client) => {
                    if said {
                        crate::console::tell!("{name}: NATS at {} answers", self.shown());
                    }
                    return Ok(client);
                }
                Err(e) if waits(&e) => {
                    if !said {
                        crate::console::tell!(
                            "{name}: waiting for a NATS server at {} to answer ({e}); retrying every second",
                            self.shown()
                        );
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) if tls_refused(&e) => {
                    return Err(DistError::Connect {
                        url: self.shown(),
                        why: format!(
                            "the TLS handshake failed: {e} (a server that verifies clients needs --nats-tls-cert and --nats-tls-key signed by a CA it trusts; its own certificate must be signed by the CA given with --nats-ca)"
                        ),
                    });
                }
                Err(e) => {
                    return Err(DistError::Connect {
                        url: self.shown(),
                        why: e.to_string(),
                    });
                }
            }
        }
    }
}

/// Whether a failed connection is worth waiting out (no server answers yet) rather than a
/// refusal to report.
fn waits(e: &async_nats::ConnectError) -> bool {
    use async_nats::ConnectErrorKind as K;
    matches!(e.kind(), K::Io | K::TimedOut | K::Dns) && !tls_refused(e)
}

/// Whether the server answered, but the TLS handshake failed: a certificate refused either
/// way (the client's, by a server with `verify: true`; the server's, by this client). The
/// TLS stream reports such an answer as invalid data, unlike a server that is away (refused,
/// reset, timed out), which is waited out.
fn tls_refused(e: &async_nats::ConnectError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData)
}

/// The replica count to use: `configured`, else 3 when the server says it is one of a
/// cluster of 3 or more (its `connect_urls` list the cluster's members), else 1.
pub fn replicas(configured: Option<usize>, info: &async_nats::ServerInfo) -> usize {
    if let Some(n) = configured {
        return n;
    }
    let mut members: Vec<&str> = info.connect_urls.iter().map(String::as_str).collect();
    members.sort_unstable();
    members.dedup();
    let size = match info.cluster {
        Some(_) => members.len().max(1),
        None => 1,
    };
    if size >= 3 { 3 } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_is_taken_out_of_the_urls_and_never_shown() {
        let (servers, creds) = parse_urls("nats://ann:s3cret@a:4222, nats://b:4223").unwrap();
        assert_eq!(servers.len(), 2);
        assert!(
            matches!(creds, Credentials::UserPassword(ref u, ref p) if u == "ann" && p == "s3cret")
        );
        let config = NatsConfig {
            servers,
            credentials: creds,
            ..NatsConfig::default()
        };
        assert!(!config.shown().contains("s3cret"), "{}", config.shown());
        assert!(!format!("{config:?}").contains("s3cret"));
        let (_, token) = parse_urls("nats://t0ken@a:4222").unwrap();
        assert!(matches!(token, Credentials::Token(ref t) if t == "t0ken"));
        assert_eq!(
            redact("nats://ann:s3cret@a:4222,b:1"),
            "nats://***@a:4222,b:1"
        );
        assert!(
            !parse_urls("nats://x:pw@a:notaport")
                .unwrap_err()
                .to_string()
                .contains("pw")
        );
    }
}
