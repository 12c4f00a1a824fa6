//! `treadle docs [PAGE]`: the pages of docs/, embedded in the binary at build time (see
//! build.rs), printed in the terminal; without a page, the list of pages.

use crate::console::{say, tell};

use super::EXIT_CONFIG;

/// Every page of docs/, `(name without .md, markdown)`, sorted by name.
pub const PAGES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/docs_pages.rs"));

/// The first heading of a page, as its title in the list.
fn title(text: &str) -> &str {
    text.lines()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or("")
        .trim()
}

pub(super) fn docs(page: Option<&str>) -> u8 {
    let Some(page) = page else {
        say!("Pages (treadle docs PAGE):");
        for (name, text) in PAGES {
            say!("  {name:<16} {}", title(text));
        }
        return 0;
    };
    let wanted = page.strip_suffix(".md").unwrap_or(page);
    if let Some((_, text)) = PAGES.iter().find(|(name, _)| *name == wanted) {
        say!("{}", text.trim_end());
        return 0;
    }
    let names: Vec<&str> = PAGES.iter().map(|(name, _)| *name).collect();
    let near = names
        .iter()
        .filter(|name| strsim::jaro_winkler(name, wanted) > 0.8)
        .max_by(|a, b| strsim::jaro_winkler(a, wanted).total_cmp(&strsim::jaro_winkler(b, wanted)));
    match near {
        Some(near) => tell!("treadle: no page `{wanted}`; did you mean `{near}`?"),
        None => tell!(
            "treadle: no page `{wanted}`; the pages are: {}",
            names.join(", ")
        ),
    }
    EXIT_CONFIG
}
