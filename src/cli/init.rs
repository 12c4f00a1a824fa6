//! `treadle init [FILE]`: writes a first pipeline (a task and an agent step, with the
//! schema modeline) and the schema it names; never overwrites a pipeline.

use std::io::Write;
use std::path::Path;

use super::EXIT_CONFIG;
use crate::console::{say, tell};

/// The schema file the modeline names, written beside the pipeline.
const SCHEMA_FILE: &str = "treadle.schema.json";

/// The first pipeline. The agent names no model, so it runs on the local model server.
pub const TEMPLATE: &str = "\
# yaml-language-server: $schema=treadle.schema.json
# A first pipeline: a task writes a note, an agent reads it with read_file and answers.
# Run it with `treadle run`. The agent names no model, so it uses the local model server
# (`treadle docs local-model`); give it `source: { model: openai/gpt-4o-mini }` to use
# OpenAI with $OPENAI_API_KEY instead (`treadle docs pipelines`).
agents:
  - name: helper
    system: You read files with the read_file tool and answer in one line.
    tools: [read_file]
    temperature: 0
    # The local model answers one request at a time: a request may wait its turn.
    limits: { model_idle: 10m }
jobs:
  - name: main
    plan:
      - task: write-note
        outputs: [inbox]
        run: echo \"Remember to water the plants on Friday.\" > inbox/note.txt
      - agent: helper
        inputs: [inbox]
        prompt: Read inbox/note.txt with read_file, then say what it asks and when.
        timeout: 15m
        assert:
          tool_calls:
            - name: read_file
";

pub(super) fn init(file: &Path) -> u8 {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .and_then(|mut f| f.write_all(TEMPLATE.as_bytes()));
    match created {
        Ok(()) => say!("wrote {}", file.display()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            tell!(
                "treadle: {} already exists; init never overwrites a pipeline (give another \
                 file name: `treadle init NEW.yml`)",
                file.display()
            );
            return EXIT_CONFIG;
        }
        Err(e) => {
            tell!("treadle: cannot write {}: {e}", file.display());
            return EXIT_CONFIG;
        }
    }
    let schema = crate::pipeline::dir_of(file).join(SCHEMA_FILE);
    if schema.exists() {
        say!("kept {} (already there)", schema.display());
        return 0;
    }
    let text = serde_json::to_string_pretty(&crate::pipeline::schema()).unwrap_or_default();
    match std::fs::write(&schema, text + "\n") {
        Ok(()) => say!("wrote {} (the modeline's schema)", schema.display()),
        // The pipeline is written and runs without it; only editor help is missing.
        Err(e) => tell!("treadle: cannot write {}: {e}", schema.display()),
    }
    0
}
