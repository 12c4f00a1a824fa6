//! Secret values masked in text before it is printed or recorded ([`Redactor`]): every
//! line of the transcript, a step's output in its record, a tool's result on tape.

use treadle_session::Secrets;

/// Masks secret values in text, in plain and encoded forms (the session's scrubber).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Secrets,
}

impl Redactor {
    /// Masks each of these values (short ones are ignored: they would mask ordinary words).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        Self {
            secrets: Secrets::new(secrets),
        }
    }

    /// The text with every form of every secret replaced by `***`.
    pub fn mask(&self, text: &str) -> String {
        self.secrets.scrub(text).into_owned()
    }

    /// The scrubber itself, for what is written elsewhere (tapes, tool results).
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }
}
