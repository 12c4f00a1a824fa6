//! Custom tools: a command the pipeline writes (`{ name, description, run }` in an agent's
//! `tools:`), offered to the model as a tool whose parameters are the `{{ .args.NAME }}`
//! its command reads.
//!
//! * Every value the model gives reaches the shell as one quoted word: an action reading
//!   `.args` is shell-quoted whether or not it ends in `| shellquote`
//!   (`crate::template::render_for_shell`), so backticks, `$(...)` and `;` in a
//!   model's argument are text, never code.
//! * `args:` pins values: a pinned name is left out of the schema the model sees, and the
//!   pinned value is put over whatever the model sent before the command is rendered.
//! * `touches:` lists the paths its command reads or writes, so its calls are ordered only
//!   with calls touching those paths; without it a call may touch anything and is ordered
//!   with every other call of its batch.
//! * `max_calls:` refuses a call past the budget before anything runs; a refused call does
//!   not count toward `required:`.
//! * The command runs like `run_shell` (step directory, environment, confinement, process
//!   group, timeout); its result is `{exit_code, stdout, stderr}` as JSON, each stream cut
//!   so the whole stays within `MAX_OUTPUT_BYTES`. A non-zero exit is a result the model
//!   reads, not an error; only an exit code of 0 counts as a success for `required:`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use treadle_session::{Effect, Footprint, Tool, ToolError};

use crate::template::{TemplateError, fields_under, render_for_shell};
use crate::tools::{MAX_OUTPUT_BYTES, Ran, Workspace, describe_exit, execute, place_of, truncate};

/// How long a custom tool's command may run.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The field root a custom tool's command reads its arguments from (`.args.NAME`).
const ARGS: &str = "args";

/// A custom tool as the pipeline defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What the model is told it does.
    pub description: String,
    /// The command template.
    pub run: String,
    /// The step fails unless a call of it succeeded.
    pub required: bool,
    /// The most calls in one conversation.
    pub max_calls: Option<u32>,
    /// Arguments the pipeline sets; the model neither sees nor overrides them.
    pub pinned: BTreeMap<String, Value>,
    /// The paths, relative to the step directory, its command touches (`touches:`);
    /// `None`: it may touch anything.
    pub touches: Option<Vec<String>>,
}

impl CustomSpec {
    /// The parameters the model fills: the `.args` names the command reads, less the pinned.
    pub fn parameters(&self) -> Result<Vec<String>, TemplateError> {
        Ok(fields_under(&self.run, ARGS)?
            .into_iter()
            .filter(|name| !self.pinned.contains_key(name))
            .collect())
    }

    /// The JSON Schema of the model's arguments: one required string per parameter. Other
    /// properties are let through (and ignored), so a model that sends a pinned argument
    /// anyway gets the pipeline's value rather than a refusal.
    pub fn schema(&self) -> Result<Value, TemplateError> {
        let names = self.parameters()?;
        let properties: Map<String, Value> = names
            .iter()
            .map(|n| (n.clone(), json!({"type": "string"})))
            .collect();
        Ok(json!({
            "type": "object",
            "properties": properties,
            "required": names,
        }))
    }

    /// What of the tool a step's cache key hashes: everything that changes what a call does.
    pub fn key_view(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "run": self.run,
            "required": self.required,
            "max_calls": self.max_calls,
            "args": self.pinned,
        })
        // `touches:` only orders a batch's calls; it changes no call's result, so it is
        // left out of the key.
    }
}

/// How a custom tool's calls went, shared with the step that checks `required:`.
#[derive(Debug, Default)]
pub struct Tally {
    calls: AtomicU32,
    successes: AtomicU32,
}

impl Tally {
    /// Calls that exited 0.
    pub fn successes(&self) -> u32 {
        self.successes.load(Ordering::SeqCst)
    }
}

/// The tool.
pub struct CustomTool {
    spec: CustomSpec,
    schema: Value,
    ws: Workspace,
    tally: Arc<Tally>,
}

impl CustomTool {
    /// The tool of `spec`, running in `ws`, counting its calls in `tally`. A command that
    /// is not a template this reads is refused here, before the model sees the tool.
    pub fn new(spec: CustomSpec, ws: Workspace, tally: Arc<Tally>) -> Result<Self, TemplateError> {
        let schema = spec.schema()?;
        Ok(Self {
            spec,
            schema,
            ws,
            tally,
        })
    }

    /// The model's arguments with the pinned ones put over them, or which are missing.
    fn arguments(&self, given: Value) -> Result<Map<String, Value>, ToolError> {
        let mut args = match given {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(ToolError::new(format!(
                    "{} takes an object of arguments, not {other}",
                    self.spec.name
                )));
            }
        };
        for (k, v) in &self.spec.pinned {
            args.insert(k.clone(), v.clone());
        }
        let missing: Vec<String> = fields_under(&self.spec.run, ARGS)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| args.get(n).is_none_or(Value::is_null))
            .collect();
        if !missing.is_empty() {
            return Err(ToolError::new(format!(
                "{} is missing argument(s): {}; call it again with every one of them",
                self.spec.name,
                missing.join(", ")
            )));
        }
        Ok(args)
    }
}

#[async_trait::async_trait]
impl Tool for CustomTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn touches(&self, _arguments: &Value) -> Footprint {
        // Undeclared, its command may read and write anything, so its calls are ordered
        // with every other call of the batch. Declared paths are written (and read).
        let Some(paths) = &self.spec.touches else {
            return Footprint::Everything;
        };
        let writes = paths.iter().map(|path| place_of(&self.ws, path)).collect();
        Footprint::Only {
            reads: Vec::new(),
            writes,
        }
    }

    fn effect(&self) -> Effect {
        Effect::Effectful
    }

    async fn call(&self, arguments: Value) -> Result<String, ToolError> {
        super::call_budget::spend(&self.tally.calls, self.spec.max_calls, &self.spec.name)?;
        let args = self.arguments(arguments)?;
        let command = render_for_shell(&self.spec.run, &json!({ ARGS: args }), ARGS)
            .map_err(|e| ToolError::new(format!("{}: {e}", self.spec.name)))?;
        let ran = execute(&self.ws, &command, TIMEOUT).await?;
        let Some(status) = ran.status else {
            return Err(ToolError::new(format!(
                "{} timed out after {}s and was stopped",
                self.spec.name,
                TIMEOUT.as_secs()
            )));
        };
        if status.success() {
            self.tally.successes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(result(status.code(), &describe_exit(status), ran))
    }
}

/// `{exit_code, stdout, stderr}`, each stream cut to half the output budget.
fn result(code: Option<i32>, how: &str, ran: Ran) -> String {
    let half = MAX_OUTPUT_BYTES / 2 - 200;
    let hint = "write the output to a file and read it";
    let mut out = json!({
        "exit_code": code,
        "stdout": truncate(ran.stdout, half, hint),
        "stderr": truncate(ran.stderr, half, hint),
    });
    if code.is_none() {
        out["status"] = Value::String(how.to_owned());
    }
    out.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(run: &str) -> CustomSpec {
        CustomSpec {
            name: "post".into(),
            description: "Posts.".into(),
            run: run.into(),
            required: false,
            max_calls: None,
            pinned: BTreeMap::new(),
            touches: None,
        }
    }

    fn tool(spec: CustomSpec) -> (tempfile::TempDir, CustomTool, Arc<Tally>) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let tally = Arc::new(Tally::default());
        let tool = CustomTool::new(spec, ws, tally.clone()).unwrap();
        (dir, tool, tally)
    }

    #[test]
    fn the_schema_is_the_args_the_command_reads_less_the_pinned() {
        let mut s = spec("echo {{ .args.repo }} {{ .args.body | shellquote }}");
        s.pinned.insert("repo".into(), json!("jtarchie/ci"));
        let schema = s.schema().unwrap();
        assert_eq!(schema["required"], json!(["body"]));
        assert!(schema["properties"].get("repo").is_none());
    }

    #[tokio::test]
    async fn a_value_is_text_never_code() {
        let (dir, tool, tally) = tool(spec("printf '%s\\n' {{ .args.body }} > out.txt"));
        let out = tool
            .call(json!({"body": "hi `touch pwned` $(touch pwned2); touch pwned3"}))
            .await
            .unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["exit_code"], 0);
        let written = std::fs::read_to_string(dir.path().join("out.txt")).unwrap();
        assert_eq!(written, "hi `touch pwned` $(touch pwned2); touch pwned3\n");
        for f in ["pwned", "pwned2", "pwned3"] {
            assert!(!dir.path().join(f).exists(), "{f} was created");
        }
        assert_eq!(tally.successes(), 1);
    }

    #[tokio::test]
    async fn pinned_values_win_and_missing_ones_are_named() {
        let mut s = spec("echo {{ .args.repo }} {{ .args.body }}");
        s.pinned.insert("repo".into(), json!("pinned/repo"));
        let (_dir, tool, _) = tool(s);
        let out = tool
            .call(json!({"repo": "evil/repo", "body": "ok"}))
            .await
            .unwrap();
        assert!(out.contains(r#""stdout":"pinned/repo ok\n""#), "{out}");
        let err = tool.call(json!({})).await.unwrap_err();
        assert!(err.0.contains("missing argument(s): body"), "{err}");
    }

    #[tokio::test]
    async fn a_spent_budget_refuses_before_running_and_failures_are_results() {
        let mut s = spec("echo run >> calls.txt; exit {{ .args.code }}");
        s.max_calls = Some(2);
        let (dir, tool, tally) = tool(s);
        let failed = tool.call(json!({"code": "3"})).await.unwrap();
        assert!(failed.contains(r#""exit_code":3"#), "{failed}");
        tool.call(json!({"code": "0"})).await.unwrap();
        let err = tool.call(json!({"code": "0"})).await.unwrap_err();
        assert!(err.0.contains("call budget exhausted"), "{err}");
        let calls = std::fs::read_to_string(dir.path().join("calls.txt")).unwrap();
        assert_eq!(calls.lines().count(), 2);
        assert_eq!(tally.successes(), 1);
    }
}
