//! A tool wrapper that masks secret values in what a tool returns.
//!
//! Tool results are committed to the session journal, which lives in the state file, and
//! are sent to the model. A task may have written an API key into an artifact, or a
//! command may print one; masking the result keeps the key out of both.

use std::sync::Arc;

use treadle_session::{Secrets, Tool, ToolError};

/// `inner`, with every secret in its results and errors replaced by `***`, in plain and
/// encoded forms (see `treadle_session::Secrets`).
pub struct Masked {
    inner: Arc<dyn Tool>,
    secrets: Arc<Secrets>,
}

impl Masked {
    /// Wraps each tool; secrets shorter than 6 characters are ignored, as they would mask
    /// ordinary words.
    pub fn wrap_all(tools: Vec<Arc<dyn Tool>>, secrets: &[String]) -> Vec<Arc<dyn Tool>> {
        let secrets = Arc::new(Secrets::new(secrets));
        if secrets.is_empty() {
            return tools;
        }
        tools
            .into_iter()
            .map(|inner| {
                Arc::new(Masked {
                    inner,
                    secrets: secrets.clone(),
                }) as Arc<dyn Tool>
            })
            .collect()
    }

    fn mask(&self, text: String) -> String {
        self.secrets.scrub(&text).into_owned()
    }
}

#[async_trait::async_trait]
impl Tool for Masked {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> serde_json::Value {
        self.inner.parameters()
    }
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        match self.inner.call(arguments).await {
            Ok(text) => Ok(self.mask(text)),
            Err(e) => Err(ToolError::new(self.mask(e.to_string()))),
        }
    }
    fn touches(&self, arguments: &serde_json::Value) -> treadle_session::Footprint {
        self.inner.touches(arguments)
    }
    fn effect(&self) -> treadle_session::Effect {
        self.inner.effect()
    }
    fn human_question(
        &self,
        arguments: &serde_json::Value,
    ) -> Option<(treadle_session::HumanQuestion, Option<std::time::Duration>)> {
        self.inner.human_question(arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use treadle_session::FnTool;

    #[tokio::test]
    async fn results_and_errors_are_masked() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Args {
            fail: bool,
        }
        let tool: Arc<dyn Tool> = Arc::new(FnTool::new("echo", "echo", |a: Args| async move {
            if a.fail {
                Err(ToolError::new("bad sk-secret-123"))
            } else {
                Ok("key=sk-secret-123".to_owned())
            }
        }));
        let tools = Masked::wrap_all(vec![tool], &["sk-secret-123".to_owned()]);
        let ok = tools[0].call(serde_json::json!({"fail": false})).await;
        assert_eq!(ok.ok().as_deref(), Some("key=***"));
        let err = tools[0].call(serde_json::json!({"fail": true})).await;
        assert_eq!(err.err().map(|e| e.to_string()).as_deref(), Some("bad ***"));
    }
}
