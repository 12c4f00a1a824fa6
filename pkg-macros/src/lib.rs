//! The attribute macros of `treadle-session`, used through its re-exports
//! (`#[treadle_session::schema]`); not a crate to depend on directly.
//!
//! # Layout
//!
//! * `lib.rs`: [`macro@schema`], the one macro.

use proc_macro::TokenStream;
use std::str::FromStr;

/// What [`macro@schema`] puts before the item: the two derives a tool's argument type or a
/// typed answer needs, told to find serde and schemars in treadle-session's re-exports, so
/// a user crate needs neither as a dependency of its own.
const DERIVES: &str = r#"
#[derive(::treadle_session::serde::Deserialize, ::treadle_session::schemars::JsonSchema)]
#[serde(crate = "::treadle_session::serde")]
#[schemars(crate = "::treadle_session::schemars")]
"#;

/// Derives `Deserialize` and `JsonSchema` for a tool's argument type or a typed answer,
/// through `treadle_session`'s re-exports of serde and schemars. Other derives and serde
/// or schemars attributes (`#[serde(rename_all = "...")]`, doc comments as descriptions)
/// go on the item as usual. It takes no arguments.
#[proc_macro_attribute]
pub fn schema(args: TokenStream, item: TokenStream) -> TokenStream {
    if !args.is_empty() {
        return error("#[treadle_session::schema] takes no arguments");
    }
    match TokenStream::from_str(DERIVES) {
        Ok(derives) => derives.into_iter().chain(item).collect(),
        Err(e) => error(&format!("treadle_session::schema: {e}")),
    }
}

/// A `compile_error!` carrying `message`.
fn error(message: &str) -> TokenStream {
    TokenStream::from_str(&format!("compile_error!({message:?});")).unwrap_or_default()
}
