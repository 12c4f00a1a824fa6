//! [`SessionBuilder::from_env`]: a builder configured from the conventional variables.

use crate::builder::SessionBuilder;

/// The variable [`SessionBuilder::from_env`] reads the endpoint from.
const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
/// The variable [`SessionBuilder::from_env`] reads the model name from.
const ENV_MODEL: &str = "OPENAI_MODEL";
/// The variable [`SessionBuilder::from_env`] takes the API key from, when it is set.
const ENV_API_KEY: &str = "OPENAI_API_KEY";

impl SessionBuilder {
    /// A builder with its endpoint, model and key from the variables the OpenAI SDKs use:
    ///
    /// | variable | sets | when unset |
    /// |---|---|---|
    /// | `OPENAI_BASE_URL` | [`endpoint`](SessionBuilder::endpoint), e.g. `http://127.0.0.1:8091/v1` | `start` fails with [`StartError::MissingEndpoint`](crate::StartError::MissingEndpoint), whose message names the variable |
    /// | `OPENAI_MODEL` | [`model`](SessionBuilder::model) | `start` fails with [`StartError::MissingModel`](crate::StartError::MissingModel), whose message names the variable |
    /// | `OPENAI_API_KEY` | [`api_key_env`](SessionBuilder::api_key_env)`("OPENAI_API_KEY")` | no key: no `Authorization` header (local servers need none) |
    ///
    /// There is deliberately no default endpoint: a program whose variable is missing
    /// fails at start with an error that says which one, rather than sending its prompts
    /// to a server nobody chose. The key is read when the session starts, like any
    /// `api_key_env`, and never written anywhere. Every later call on the builder
    /// overrides what the environment gave.
    ///
    /// ```no_run
    /// use treadle_session::SessionBuilder;
    ///
    /// # async fn demo() -> Result<(), treadle_session::Error> {
    /// let session = SessionBuilder::from_env().start().await?;
    /// println!("{}", session.turn("Say hello.").answer().await?);
    /// # Ok(()) }
    /// ```
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder = SessionBuilder::new();
        if let Some(url) = var(ENV_BASE_URL) {
            builder = builder.endpoint(url);
        }
        if let Some(model) = var(ENV_MODEL) {
            builder = builder.model(model);
        }
        if var(ENV_API_KEY).is_some() {
            builder = builder.api_key_env(ENV_API_KEY);
        }
        builder
    }
}
