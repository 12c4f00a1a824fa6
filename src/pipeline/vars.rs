//! Pipeline vars: `((name))` in the file, filled from `--var name=value` and
//! `--vars-file FILE` before the file is parsed, or at run time from a `load_var:` step.
//!
//! Substitution is textual, so a var may stand anywhere a value does. A `((name))` that
//! nothing supplies (no `--var`, no `load_var:` step of the file) is a load error, found
//! where it is written; left alone it would reach a shell as that literal text.

use std::collections::BTreeMap;

use super::at::Pos;

/// Why a `--var` or a vars file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum VarsError {
    /// A `--var` without `=`.
    #[error("`--var {0}` is not NAME=VALUE")]
    NotAPair(String),
    /// A var name with characters other than letters, digits, `_`, `-`, `.`.
    #[error("`{0}` is not a var name (letters, digits, `_`, `-` and `.`)")]
    BadName(String),
    /// The vars file cannot be read.
    #[error("cannot read the vars file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The vars file is not a YAML mapping of names to scalars.
    #[error("the vars file {path} is not a mapping of names to values: {why}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Reads `--vars-file` files (in order), then `--var` pairs, later ones winning.
pub fn gather(files: &[std::path::PathBuf], pairs: &[String]) -> Result<Vars, VarsError> {
    let mut vars = Vars::new();
    for path in files {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| VarsError::Read {
            path: shown.clone(),
            source,
        })?;
        let map: BTreeMap<String, super::flow_keys::Scalar> = serde_saphyr::from_str(&text)
            .map_err(|e| VarsError::Parse {
                path: shown.clone(),
                why: e.to_string(),
            })?;
        for (k, v) in map {
            if !is_name(&k) {
                return Err(VarsError::BadName(k));
            }
            vars.insert(k, v.0);
        }
    }
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| VarsError::NotAPair(pair.clone()))?;
        if !is_name(k) {
            return Err(VarsError::BadName(k.to_owned()));
        }
        vars.insert(k.to_owned(), v.to_owned());
    }
    Ok(vars)
}

/// Var names and their values.
pub type Vars = BTreeMap<String, String>;

/// Each `((name))` in `text` with its position, in order.
pub fn uses(text: &str) -> Vec<(String, Pos)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        let mut offset = 0;
        while let Some(start) = rest.find("((") {
            let Some(len) = rest[start..].find("))") else {
                break;
            };
            let name = rest[start + 2..start + len].trim();
            if is_name(name) {
                let column = line[..offset + start].chars().count() + 1;
                found.push((
                    name.to_owned(),
                    Pos {
                        line: u32::try_from(n + 1).unwrap_or(u32::MAX),
                        column: u32::try_from(column).unwrap_or(u32::MAX),
                    },
                ));
            }
            offset += start + len + 2;
            rest = &rest[start + len + 2..];
        }
    }
    found
}

/// Replaces each `((name))` whose name `vars` holds; the others stay as written.
pub fn substitute(text: &str, vars: &Vars) -> String {
    if vars.is_empty() || !text.contains("((") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("((") {
        let Some(len) = rest[start..].find("))") else {
            break;
        };
        out.push_str(&rest[..start]);
        match vars.get(rest[start + 2..start + len].trim()) {
            Some(v) => out.push_str(v),
            None => out.push_str(&rest[start..start + len + 2]),
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_known_names_and_finds_the_rest() {
        let vars = Vars::from([("tag".to_owned(), "v1".to_owned())]);
        let text = "run: echo ((tag)) (( other ))\n  x: ((tag))";
        assert_eq!(substitute(text, &vars), "run: echo v1 (( other ))\n  x: v1");
        let left = uses(&substitute(text, &vars));
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, "other");
        assert_eq!((left[0].1.line, left[0].1.column), (1, 14));
    }

    #[test]
    fn a_var_pair_needs_an_equals_sign_and_a_plain_name() {
        assert!(gather(&[], &["a=b=c".to_owned()]).is_ok_and(|v| v["a"] == "b=c"));
        assert!(matches!(
            gather(&[], &["novalue".to_owned()]),
            Err(VarsError::NotAPair(_))
        ));
        assert!(matches!(
            gather(&[], &["a b=c".to_owned()]),
            Err(VarsError::BadName(_))
        ));
    }
}
