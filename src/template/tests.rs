//! Tests of `template`.

use super::*;
use serde_json::json;

fn data() -> Value {
    json!({
        "source": { "uri": "https://example.com/a b", "word": "hello" },
        "version": { "ref": "abc'123", "n": "7" },
        "params": {},
    })
}

fn r(t: &str) -> Result<String, TemplateError> {
    render(t, &data())
}

#[test]
fn fields_pipes_and_functions_render_as_go_does() {
    assert_eq!(
        r("git ls-remote {{ .source.uri | shellquote }}").unwrap(),
        "git ls-remote 'https://example.com/a b'"
    );
    assert_eq!(
        r("echo {{ .version.ref | shellquote }}").unwrap(),
        r"echo 'abc'\''123'"
    );
    assert_eq!(
        r("{{ .source.word | upper | shellquote }}").unwrap(),
        "HELLO"
    );
    assert_eq!(
        r(r#"{{ index .version "ts" | default "0" }}"#).unwrap(),
        "0"
    );
    assert_eq!(r(r#"{{ index .version "n" | default "0" }}"#).unwrap(), "7");
    assert_eq!(
        r(r#"{{ index .params "lines" | default "100" }}"#).unwrap(),
        "100"
    );
    assert_eq!(
        r(r#"{{ default "x" (index .source "word") }}"#).unwrap(),
        "hello"
    );
    assert_eq!(r("a {{- .version.n -}}  b").unwrap(), "a7b");
    assert_eq!(r("{{ .params }}").unwrap(), "{}");
    assert_eq!(r("no actions").unwrap(), "no actions");
}

#[test]
fn a_missing_key_is_an_error_naming_it() {
    let e = r("echo {{ .version.ts }}").unwrap_err();
    assert!(
        matches!(&e, TemplateError::MissingKey { key, .. } if key == ".version.ts"),
        "{e}"
    );
    assert!(e.to_string().contains(r#"index .version "ts""#), "{e}");
    let e = r("{{ .nothing }}").unwrap_err();
    assert!(
        matches!(&e, TemplateError::MissingKey { key, .. } if key == ".nothing"),
        "{e}"
    );
}

#[test]
fn bad_templates_are_errors_not_text() {
    assert!(matches!(
        r("{{ .source.uri "),
        Err(TemplateError::Parse { .. })
    ));
    assert!(matches!(
        r("{{ if .x }}y{{ end }}"),
        Err(TemplateError::Parse { .. })
    ));
    assert!(matches!(
        r(r#"{{ "open }}"#),
        Err(TemplateError::Parse { .. })
    ));
    assert!(matches!(
        r("{{ nosuch .source }}"),
        Err(TemplateError::Function { .. })
    ));
    assert!(matches!(
        r("{{ shellquote }}"),
        Err(TemplateError::Function { .. })
    ));
}

#[test]
fn shellquote_leaves_safe_words_bare_and_quotes_the_rest() {
    assert_eq!(shellquote("v1.2-3"), "v1.2-3");
    assert_eq!(shellquote(""), "''");
    assert_eq!(shellquote("$(rm -rf /)"), "'$(rm -rf /)'");
    assert_eq!(shellquote("it's"), r"'it'\''s'");
}

#[test]
fn shell_commands_quote_every_value_they_read() {
    let data = json!({"args": {"body": "it's `rm -rf` $(x)", "n": 3}, "source": {"w": "a b"}});
    let cmd = render_for_shell(
        "post {{ .args.body }} {{ .args.body | shellquote }} {{ .args.n }} {{ .source.w }}",
        &data,
        "args",
    )
    .unwrap();
    assert_eq!(
        cmd,
        r"post 'it'\''s `rm -rf` $(x)' 'it'\''s `rm -rf` $(x)' 3 a b"
    );
    assert_eq!(
        render_for_shell("{{ upper .args.n }}", &data, "args").unwrap(),
        "3"
    );
}

#[test]
fn fields_under_a_root_are_listed_once_in_order() {
    let names = fields_under(
        "x {{ .args.b | shellquote }} {{ .args.a }} {{ (.args.b) }} {{ .source.c }}",
        "args",
    )
    .unwrap();
    assert_eq!(names, ["b", "a"]);
    assert!(fields_under("{{ .args.", "args").is_err());
}
