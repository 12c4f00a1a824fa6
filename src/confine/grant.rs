//! `network:` on a task, an agent (its `run_shell`) and `defaults:`: what a step's commands
//! may connect to. Enforced by `crate::confine` (docs/security.md, "Network").
//!
//! `none` (the default of a confined step), `loopback` (a network of its own holding only
//! `lo`), a list of `host:port` (connections to those ports; the host is documentation, the
//! kernel filters ports), or `any`. `host` and `bridge`, the values `steps` passes to
//! `docker run --network`, mean `any`; another name is a container network, valid only
//! beside `image:` (treadle has no container runtime: such a step fails saying so).

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A step's network grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// No TCP connection and no listening socket.
    None,
    /// A private network with only its own loopback interface.
    Loopback,
    /// TCP connections to (and listening on) these ports only.
    Ports(Vec<Endpoint>),
    /// Every port but the serving server's own.
    Any,
    /// A container network name (only meaningful beside `image:`).
    Container(String),
}

/// One `host:port` of a `network:` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host as written (not enforced: Landlock filters ports).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Reads one `host:port` entry.
fn endpoint(text: &str) -> Result<Endpoint, String> {
    let bad = || {
        format!("`{text}` is not host:port; write e.g. `localhost:5432` or `api.github.com:443`")
    };
    let (host, port) = text.trim().rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok(Endpoint {
        host: host.trim_matches(['[', ']']).to_owned(),
        port,
    })
}

impl Network {
    /// Reads a named grant.
    fn named(name: &str) -> Self {
        match name {
            "none" => Self::None,
            "loopback" => Self::Loopback,
            "any" | "host" | "bridge" => Self::Any,
            other => Self::Container(other.to_owned()),
        }
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Network;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("none, loopback, any, or a list of host:port")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Network, E> {
                Ok(Network::named(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Network, A::Error> {
                let mut ports = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    ports.push(endpoint(&text).map_err(de::Error::custom)?);
                }
                Ok(Network::Ports(ports))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::None => serializer.serialize_str("none"),
            Self::Loopback => serializer.serialize_str("loopback"),
            Self::Any => serializer.serialize_str("any"),
            Self::Container(name) => serializer.serialize_str(name),
            Self::Ports(list) => serializer.collect_seq(list.iter().map(ToString::to_string)),
        }
    }
}

impl JsonSchema for Network {
    fn schema_name() -> Cow<'static, str> {
        "Network".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "What the step's commands may connect to: none (the default), \
                loopback, any, or a list of host:port (ports enforced by the kernel).",
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string", "pattern": "^.+:[0-9]+$" } }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_lists_are_read() {
        let read = |y: &str| serde_saphyr::from_str::<Network>(y);
        assert_eq!(read("none").unwrap(), Network::None);
        assert_eq!(read("bridge").unwrap(), Network::Any);
        assert_eq!(
            read("[localhost:5432, '[::1]:8080']").unwrap(),
            Network::Ports(vec![
                Endpoint {
                    host: "localhost".into(),
                    port: 5432
                },
                Endpoint {
                    host: "::1".into(),
                    port: 8080
                }
            ])
        );
        let err = read("[localhost]").unwrap_err().to_string();
        assert!(err.contains("is not host:port"), "{err}");
        assert!(read("[x:0]").is_err());
    }
}
