//! Tools the model may call: the [`Tool`] trait, typed tools, and the set a session holds.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::inference::ToolSpec;

/// Why a tool call did not produce a result. The model reads the message as the call's
/// result, so write it for the model: say what was wrong and what would work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Something the model can call.
///
/// Most tools are easier to write with [`FnTool`], which derives the argument schema from
/// a Rust type. Implement this trait directly when the schema is only known at run time
/// (an MCP server's tool, for instance).
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// The JSON Schema of the arguments object.
    fn parameters(&self) -> serde_json::Value;
    /// Runs the call. `arguments` is the parsed JSON object the model wrote.
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError>;
}

/// A tool made from an async function of typed arguments.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use treadle_session::{FnTool, Tool, ToolError};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Echo {
///     /// What to say back.
///     text: String,
/// }
///
/// let echo = FnTool::new("echo", "Says the text back.", |args: Echo| async move {
///     Ok::<_, ToolError>(args.text)
/// });
/// assert_eq!(echo.name(), "echo");
/// assert!(echo.parameters()["properties"]["text"].is_object());
/// ```
pub struct FnTool<A, F> {
    name: String,
    description: String,
    parameters: serde_json::Value,
    function: F,
    _args: PhantomData<fn(A)>,
}

impl<A, F, Fut> FnTool<A, F>
where
    A: JsonSchema + DeserializeOwned + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
{
    pub fn new(name: impl Into<String>, description: impl Into<String>, function: F) -> Self {
        let mut parameters = serde_json::to_value(schemars::schema_for!(A)).unwrap_or_default();
        if let Some(object) = parameters.as_object_mut() {
            // Endpoints reject or ignore these meta keys in a function's parameters.
            object.remove("$schema");
            object.remove("title");
        }
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            function,
            _args: PhantomData,
        }
    }
}

#[async_trait::async_trait]
impl<A, F, Fut> Tool for FnTool<A, F>
where
    A: JsonSchema + DeserializeOwned + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> serde_json::Value {
        self.parameters.clone()
    }

    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        let args: A = serde_json::from_value(arguments).map_err(|e| {
            ToolError::new(format!(
                "invalid arguments for {}: {e}; expected an object matching {}",
                self.name, self.parameters
            ))
        })?;
        (self.function)(args).await
    }
}

/// The tools of one loop, by name, with their specs computed once.
#[derive(Clone, Default)]
pub(crate) struct ToolSet {
    by_name: HashMap<String, Arc<dyn Tool>>,
    specs: Arc<Vec<ToolSpec>>,
}

impl ToolSet {
    pub(crate) fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let specs = tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect();
        let by_name = tools
            .into_iter()
            .map(|t| (t.name().to_owned(), t))
            .collect();
        Self {
            by_name,
            specs: Arc::new(specs),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name)
    }

    pub(crate) fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}
