//! Who answers an approval, as the operator decides it: a token with a name
//! (`--user-token NAME=ENV`), or a header an authenticating proxy in front of the server
//! sets (`--approver-header X-Forwarded-User`). When either is configured, the `by` of an
//! answer is taken from it and the request body's `by` is not believed; a request that
//! names nobody is refused rather than recorded as answered by someone.

use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName};

use super::error::ApiError;

/// `NAME=ENV`: a user, and the environment variable holding their token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserToken {
    /// Who the token is.
    pub name: String,
    /// The variable holding it.
    pub env: String,
}

/// Why a `--user-token` or `--approver-header` is not usable.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Not `NAME=ENV`.
    #[error("`{0}`: expected NAME=ENV (a user's name, and the variable holding their token)")]
    Shape(String),
    /// The variable is unset or empty.
    #[error("--user-token {name}={env}: the variable is not set (or empty)")]
    Unset {
        /// The user.
        name: String,
        /// The variable.
        env: String,
    },
    /// Two users with one token: an answer could not say which of them gave it.
    #[error("--user-token {0} and {1} hold the same token")]
    Shared(String, String),
    /// Not a header name.
    #[error("--approver-header `{0}` is not a header name")]
    Header(String),
}

impl FromStr for UserToken {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((name, env)) if !name.trim().is_empty() && !env.trim().is_empty() => Ok(Self {
                name: name.trim().to_owned(),
                env: env.trim().to_owned(),
            }),
            _ => Err(IdentityError::Shape(s.to_owned())),
        }
    }
}

/// Parses `--approver-header`.
pub fn header_name(s: &str) -> Result<HeaderName, IdentityError> {
    HeaderName::from_str(s).map_err(|_| IdentityError::Header(s.to_owned()))
}

/// What `treadle serve` was told about identities.
#[derive(Debug, Clone, Default)]
pub struct IdentityOptions {
    /// `--user-token NAME=ENV`, repeatable.
    pub user_tokens: Vec<UserToken>,
    /// `--approver-header NAME`.
    pub approver_header: Option<HeaderName>,
}

/// The user a request's token names (set by the guard as a request extension).
#[derive(Debug, Clone)]
pub struct Caller(pub String);

/// The identities the server knows.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// `(name, token)` of each named token.
    tokens: Vec<(String, String)>,
    /// The header naming who a request comes from.
    header: Option<HeaderName>,
}

impl Identity {
    /// Reads each named token from its variable.
    pub fn from_options(options: &IdentityOptions) -> Result<Self, IdentityError> {
        let mut tokens: Vec<(String, String)> = Vec::new();
        for u in &options.user_tokens {
            let token = std::env::var(&u.env)
                .ok()
                .filter(|t| !t.is_empty())
                .ok_or_else(|| IdentityError::Unset {
                    name: u.name.clone(),
                    env: u.env.clone(),
                })?;
            if let Some((other, _)) = tokens.iter().find(|(_, t)| *t == token) {
                return Err(IdentityError::Shared(other.clone(), u.name.clone()));
            }
            tokens.push((u.name.clone(), token));
        }
        Ok(Self {
            tokens,
            header: options.approver_header.clone(),
        })
    }

    /// Whether any named token exists (then every protected route needs a token).
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The user whose token is `given`, compared in time that does not depend on the text.
    pub fn named(&self, given: &str, same: impl Fn(&[u8], &[u8]) -> bool) -> Option<&str> {
        let mut found = None;
        // Every token is compared, so which one matched does not show in the time taken.
        for (name, token) in &self.tokens {
            if same(given.as_bytes(), token.as_bytes()) && found.is_none() {
                found = Some(name.as_str());
            }
        }
        found
    }

    /// Who answers: the token's user, else the configured header's value; `Ok(None)` when
    /// the operator configured neither (the request's own `by` stands).
    pub fn approver(
        &self,
        caller: Option<&Caller>,
        headers: &HeaderMap,
    ) -> Result<Option<String>, ApiError> {
        if let Some(Caller(name)) = caller {
            return Ok(Some(name.clone()));
        }
        let Some(header) = &self.header else {
            return if self.has_tokens() {
                Err(ApiError::Forbidden(
                    "this server records who answers from a named token (--user-token), and this request's token names nobody: answer with your own token".to_owned(),
                ))
            } else {
                Ok(None)
            };
        };
        let value = headers
            .get(header)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 200);
        match value {
            Some(v) => Ok(Some(v.to_owned())),
            None => Err(ApiError::Forbidden(format!(
                "this server records who answers from the `{header}` header (--approver-header), and this request has none: answer through the proxy that sets it, or with a named token"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_tokens_parse_as_name_and_variable() {
        let u: UserToken = "alice=ALICE_TOKEN".parse().unwrap();
        assert_eq!((u.name.as_str(), u.env.as_str()), ("alice", "ALICE_TOKEN"));
        assert!("alice".parse::<UserToken>().is_err());
        assert!("=X".parse::<UserToken>().is_err());
    }

    #[test]
    fn the_header_names_the_approver_and_its_absence_is_refused() {
        let id = Identity {
            tokens: Vec::new(),
            header: Some(header_name("x-forwarded-user").unwrap()),
        };
        let mut h = HeaderMap::new();
        assert!(id.approver(None, &h).is_err());
        h.insert("x-forwarded-user", "bob".parse().unwrap());
        assert_eq!(id.approver(None, &h).unwrap().as_deref(), Some("bob"));
        let alice = Caller("alice".into());
        assert_eq!(
            id.approver(Some(&alice), &h).unwrap().as_deref(),
            Some("alice")
        );
        assert_eq!(
            Identity::default().approver(None, &h).unwrap(),
            None,
            "nothing configured: the request's own `by` stands"
        );
    }
}
