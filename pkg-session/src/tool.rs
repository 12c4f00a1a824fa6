//! Tools the model may call: the [`Tool`] trait, typed tools, and the set a session holds.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

pub use crate::effect::Effect;
pub use crate::footprint::{Footprint, Place};
use crate::inference::ToolSpec;
use crate::interned::Interned;
use crate::question::HumanQuestion;

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
    /// Runs the call. `arguments` is the parsed JSON object the model wrote, already
    /// checked against [`Tool::parameters`].
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError>;

    /// What this call reads and writes. Of two calls of one batch that conflict (one writes
    /// what the other reads or writes, see [`Footprint::conflicts`]), the later starts only
    /// once the earlier has ended; the rest run in parallel. Default:
    /// [`Footprint::Everything`], the safe assumption about a tool that says nothing: its
    /// calls run after every call before them and before every call after them.
    fn touches(&self, arguments: &serde_json::Value) -> Footprint {
        let _ = arguments;
        Footprint::Everything
    }

    /// Whether a successful call of this tool is the turn's last piece of work (a verdict,
    /// a final report). The model then gets one more call to answer in text; tool calls it
    /// makes in that call are not run (each is answered that the turn is over) and the turn
    /// ends with its text. Default: `false`.
    fn ends_turn(&self) -> bool {
        false
    }

    /// What a call does to the world (see [`Effect`]). An effectful call is journaled before
    /// and after it runs, and a restore never runs it again without an answer. Default:
    /// [`Effect::Effectful`], the safe assumption about a tool that says nothing.
    fn effect(&self) -> Effect {
        Effect::Effectful
    }

    /// When a person answers this call instead of the tool running: the question (and how
    /// long it may wait). The batch then opens a `human_input` gate; the answer, as JSON, is
    /// the call's result. Default: `None` (the tool runs). [`AskHuman`](crate::AskHuman)
    /// is the built-in one.
    fn human_question(
        &self,
        arguments: &serde_json::Value,
    ) -> Option<(HumanQuestion, Option<std::time::Duration>)> {
        let _ = arguments;
        None
    }
}

/// A tool made from an async function of typed arguments.
///
/// ```
/// use treadle_session::{FnTool, Tool, ToolError};
///
/// #[treadle_session::schema]
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
    effect: Effect,
    touches: Touches,
    _args: PhantomData<fn(A)>,
}

/// What a tool function may return: `Ok` with any serializable value (a string is given to
/// the model as is, anything else as compact JSON), or `Err` with anything displayable
/// (the model reads it as the call's error).
pub trait ToolResult: Send {
    fn into_tool_result(self) -> Result<String, ToolError>;
}

impl<T, E> ToolResult for Result<T, E>
where
    T: serde::Serialize + Send,
    E: std::fmt::Display + Send,
{
    fn into_tool_result(self) -> Result<String, ToolError> {
        let value = self.map_err(|error| ToolError::new(error.to_string()))?;
        match serde_json::to_value(&value) {
            Ok(serde_json::Value::String(text)) => Ok(text),
            Ok(other) => Ok(other.to_string()),
            Err(error) => Err(ToolError::new(format!(
                "the tool's result could not be serialized: {error}"
            ))),
        }
    }
}

impl<A> FnTool<A, ()> {
    /// A tool from a plain (synchronous, infallible) function whose result is any
    /// serializable value.
    ///
    /// ```
    /// use treadle_session::{FnTool, Tool};
    /// #[treadle_session::schema]
    /// struct Add { a: i64, b: i64 }
    /// let add = FnTool::plain("add", "Adds two numbers.", |x: Add| x.a + x.b);
    /// assert_eq!(add.name(), "add");
    /// ```
    pub fn plain<T, G>(
        name: impl Into<String>,
        description: impl Into<String>,
        function: G,
    ) -> FnTool<A, impl Fn(A) -> std::future::Ready<Result<T, ToolError>> + Send + Sync + 'static>
    where
        A: JsonSchema + DeserializeOwned + Send + 'static,
        T: serde::Serialize + Send + 'static,
        G: Fn(A) -> T + Send + Sync + 'static,
    {
        FnTool::new(name, description, move |args: A| {
            std::future::ready(Ok(function(args)))
        })
    }
}

impl<A, F, Fut> FnTool<A, F>
where
    A: JsonSchema + DeserializeOwned + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: ToolResult,
{
    pub fn new(name: impl Into<String>, description: impl Into<String>, function: F) -> Self {
        let parameters = schema_of::<A>();
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            function,
            effect: Effect::Effectful,
            touches: Touches::Everything,
            _args: PhantomData,
        }
    }

    /// Declares what a call does to the world (default [`Effect::Effectful`]).
    #[must_use]
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// Declares that calls touch nothing another call could see, so they run in parallel
    /// with any (see [`Tool::touches`]; the default is that they touch everything).
    #[must_use]
    pub fn touches_nothing(mut self) -> Self {
        self.touches = Touches::Only(Vec::new(), Vec::new());
        self
    }

    /// Declares that a call reads the place its argument `name` (a top-level key) names, and
    /// touches nothing else.
    #[must_use]
    pub fn reads_arg(mut self, name: impl Into<String>) -> Self {
        self.touches = Touches::Only(vec![name.into()], Vec::new());
        self
    }

    /// Declares that a call writes the place its argument `name` (a top-level key) names,
    /// and touches nothing else: calls of one batch naming the same value run one after
    /// another, in call order.
    #[must_use]
    pub fn writes_arg(mut self, name: impl Into<String>) -> Self {
        self.touches = Touches::Only(Vec::new(), vec![name.into()]);
        self
    }
}

/// What an [`FnTool`]'s calls touch, as its builder declared.
enum Touches {
    Everything,
    /// The arguments naming what a call reads, and what it writes.
    Only(Vec<String>, Vec<String>),
}

impl Touches {
    fn footprint(&self, arguments: &serde_json::Value) -> Footprint {
        let Touches::Only(reads, writes) = self else {
            return Footprint::Everything;
        };
        let places = |names: &[String]| -> Vec<Place> {
            names
                .iter()
                .filter_map(|name| arguments.get(name))
                .map(|value| match value {
                    serde_json::Value::String(text) => Place::new(text.clone()),
                    other => Place::new(other.to_string()),
                })
                .collect()
        };
        Footprint::Only {
            reads: places(reads),
            writes: places(writes),
        }
    }
}

#[async_trait::async_trait]
impl<A, F, Fut> Tool for FnTool<A, F>
where
    A: JsonSchema + DeserializeOwned + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: ToolResult,
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
        (self.function)(args).await.into_tool_result()
    }

    fn effect(&self) -> Effect {
        self.effect
    }

    fn touches(&self, arguments: &serde_json::Value) -> Footprint {
        self.touches.footprint(arguments)
    }
}

/// The JSON Schema of `T` as endpoints take it for a function's parameters or a response
/// format: without the `$schema` and `title` meta keys, which some reject.
pub(crate) fn schema_of<T: JsonSchema>() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

/// A tool call's arguments that do not fit the tool's parameter schema; its text is what
/// the model is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "arguments of {tool} do not fit its parameter schema: {}{}",
    problems.join("; "),
    if *more { "; ..." } else { "" }
)]
pub(crate) struct ArgumentsMismatch {
    /// The tool's name.
    pub tool: String,
    /// The first few problems, each with its place in the arguments.
    pub problems: Vec<String>,
    /// Whether there were more than those.
    pub more: bool,
}

/// The tools of one loop, by name, with their specs and argument validators computed once.
#[derive(Clone, Default)]
pub(crate) struct ToolSet {
    by_name: HashMap<String, Entry>,
    specs: Arc<[Arc<ToolSpec>]>,
}

/// Specs shared by every loop of the process whose tool has the same name, description
/// and parameters: a process serving many sessions with one tool kept its schema once per
/// session, a third of a KB per schema field (docs/benchmarks.md, the idle session).
static SPECS: Interned<ToolSpec> = Interned::new();

#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    /// `None` when the tool's schema does not compile: such a tool's arguments are passed
    /// through unchecked (the tool still parses them), rather than making it uncallable.
    validator: Option<Arc<jsonschema::Validator>>,
}

impl ToolSet {
    pub(crate) fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut specs = Vec::with_capacity(tools.len());
        let mut by_name = HashMap::with_capacity(tools.len());
        for tool in tools {
            let parameters = tool.parameters();
            // Shared with every other loop of the process whose tool has this schema.
            let validator = match crate::validators::shared(&parameters) {
                Ok(validator) => Some(validator),
                Err(error) => {
                    tracing::warn!(tool = tool.name(), %error, "the tool's parameter schema does not compile; its arguments are not checked");
                    None
                }
            };
            // The key is the spec's own text, so only equal specs are shared.
            let key = serde_json::json!([tool.name(), tool.description(), parameters]);
            let spec = SPECS.get_or_build(key.to_string(), || {
                Ok::<_, std::convert::Infallible>(ToolSpec {
                    name: tool.name().to_owned(),
                    description: tool.description().to_owned(),
                    parameters: key[2].clone(),
                })
            });
            let Ok(spec) = spec;
            specs.push(spec);
            by_name.insert(tool.name().to_owned(), Entry { tool, validator });
        }
        Self {
            by_name,
            specs: specs.into(),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|entry| &entry.tool)
    }

    /// Checks `arguments` against the schema of tool `name`. The error lists what is wrong
    /// (at most a few problems, each with its place in the arguments), for the model.
    pub(crate) fn check(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(), ArgumentsMismatch> {
        const SHOWN: usize = 5;
        let Some(validator) = self.by_name.get(name).and_then(|e| e.validator.as_ref()) else {
            return Ok(());
        };
        let problems = crate::validators::problems(validator, arguments, SHOWN + 1);
        if problems.is_empty() {
            return Ok(());
        }
        let more = problems.len() > SHOWN;
        Err(ArgumentsMismatch {
            tool: name.to_owned(),
            problems: problems.into_iter().take(SHOWN).collect(),
            more,
        })
    }

    pub(crate) fn specs(&self) -> &[Arc<ToolSpec>] {
        &self.specs
    }

    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// What a tool's panic said, for the error result the model gets instead.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, JsonSchema)]
    struct Probe {
        #[allow(dead_code)]
        spec_sharing_probe: u32,
    }

    fn probe(description: &str) -> Arc<dyn Tool> {
        Arc::new(FnTool::plain("probe", description, |_: Probe| 0))
    }

    #[test]
    fn loops_with_equal_tools_share_one_spec_and_others_do_not() {
        // Two tools alike (as two sessions built with the same tool), and one whose
        // description differs.
        let (a, b) = (
            ToolSet::new(vec![probe("Probes.")]),
            ToolSet::new(vec![probe("Probes.")]),
        );
        let other = ToolSet::new(vec![probe("Probes otherwise.")]);
        assert!(
            Arc::ptr_eq(&a.specs()[0], &b.specs()[0]),
            "equal specs are one"
        );
        assert!(!Arc::ptr_eq(&a.specs()[0], &other.specs()[0]));
        assert_eq!(other.specs()[0].description, "Probes otherwise.");
        assert_eq!(a.specs()[0].parameters, probe("Probes.").parameters());
        // Each set still calls its own tool object.
        assert!(a.get("probe").is_some() && b.get("probe").is_some());
    }
}
