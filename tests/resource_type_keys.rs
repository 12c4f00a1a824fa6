//! The keys of a `resource_types:` entry beyond the shell scripts, as pipelines written
//! for `steps` use them: `expr:` and `mcp:` backends (one per type), container keys
//! (`privileged:` and the rest need `image:`; none on an `expr:` type), `env:` by name
//! (passed to the scripts; a value is refused unechoed), the built-in Slack types, and a
//! put's `inputs: all`. Wrong ones are load errors at `FILE:LINE:COL` with a hint; right
//! ones load, and what this treadle cannot run fails at run time saying so.

use crate::common;

use common::Fixture;

fn refused(yaml: &str, at: &str, what: &str) -> String {
    let f = Fixture::new(yaml);
    let r = f.treadle(&["validate"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains(&format!("treadle.yml:{at}: ")),
        "expected location {at} in:\n{err}"
    );
    assert!(err.contains(what), "expected `{what}` in:\n{err}");
    assert!(err.contains("\nhint: "), "expected a hint in:\n{err}");
    err
}

fn loads(yaml: &str) {
    let f = Fixture::new(yaml);
    // An agent's key must be set for the file to validate; it is never used here.
    let r = f.treadle_env(&["validate"], &[("OPENAI_API_KEY", "unused")]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
}

const JOB: &str = "resources:\n  - { name: r, type: t, source: {} }\njobs:\n  - name: j\n    plan:\n      - get: r\n";

#[test]
fn a_type_is_written_one_way() {
    refused(
        &format!(
            "resource_types:\n  - name: t\n    config:\n      check: echo []\n      in: 'true'\n      expr:\n        check: '[]'\n{JOB}"
        ),
        "7:9",
        "sets both `check:/in:/out:` and `expr:`",
    );
    refused(
        &format!(
            "mcp_servers:\n  - {{ name: s, command: x }}\nresource_types:\n  - name: t\n    config:\n      mcp:\n        server: nope\n        check: {{ tool: list }}\n{JOB}"
        ),
        "7:17",
        "MCP server `nope`, which `mcp_servers:` does not define",
    );
    refused(
        &format!(
            "resource_types:\n  - name: t\n    config:\n      expr:\n        check: '[]'\n        check_file: c.expr\n{JOB}"
        ),
        "6:21",
        "`check_file:` and `check:` are both set",
    );
}

#[test]
fn container_keys_need_an_image_and_never_sit_on_an_expr_type() {
    let shell = "    config:\n      check: echo []\n      in: 'true'\n";
    refused(
        &format!("resource_types:\n  - name: t\n    privileged: true\n{shell}{JOB}"),
        "3:17",
        "`privileged` of resource type `t` needs `image:`",
    );
    refused(
        &format!(
            "resource_types:\n  - name: t\n    image: alpine\n    container_limits: {{}}\n{shell}{JOB}"
        ),
        "4:23",
        "`container_limits` sets no limit",
    );
    refused(
        &format!(
            "resource_types:\n  - name: t\n    network: none\n    config:\n      expr:\n        check: '[]'\n{JOB}"
        ),
        "3:14",
        "written with `expr:` and sets `network`",
    );
    loads(&format!(
        "resource_types:\n  - name: t\n    image: docker:27-dind\n    privileged: true\n    user: root\n    network: bridge\n    container_limits: {{ cpu: 1024, memory: 4294967296 }}\n{shell}{JOB}"
    ));
}

#[test]
fn env_names_variables_and_a_value_is_refused_unechoed() {
    let err = refused(
        &format!(
            "resource_types:\n  - name: t\n    env: [DEPLOY_TOKEN=hunter2]\n    config:\n      check: echo []\n      in: 'true'\n{JOB}"
        ),
        "3:11",
        "an `env:` entry of resource type `t` is not a variable name",
    );
    assert!(!err.contains("hunter2"), "{err}");
    refused(
        "mcp_servers:\n  - { name: s, command: x }\nresource_types:\n  - name: t\n    config:\n      mcp:\n        server: s\n        check: { tool: list }\nresources:\n  - { name: r, type: t, env: [TOKEN], source: {} }\njobs:\n  - name: j\n    plan:\n      - get: r\n",
        "10:31",
        "its type `t` is MCP-backed",
    );
}

#[test]
fn a_type_env_reaches_its_scripts_by_name_and_nothing_else_does() {
    let yaml = r#"resource_types:
  - name: t
    env: [PASSED_TO_CHECK]
    config:
      check: |
        printf '[{"p": "%s", "h": "%s"}]' "${PASSED_TO_CHECK-unset}" "${HIDDEN_FROM_CHECK-unset}"
      in: echo {{ .version.p | shellquote }} {{ .version.h | shellquote }} > v.txt
resources:
  - { name: r, type: t, source: {} }
jobs:
  - name: j
    plan:
      - get: r
      - task: show
        inputs: [r]
        run: cat r/v.txt
"#;
    let f = Fixture::new(yaml);
    let r = f.treadle_env(
        &["run"],
        &[("PASSED_TO_CHECK", "yes"), ("HIDDEN_FROM_CHECK", "leak")],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    assert!(r.stdout().contains("yes unset"), "{}", r.stdout());
}

#[test]
fn expr_types_run_and_mcp_and_slack_types_say_at_run_time_that_they_cannot() {
    let expr = "resource_types:\n  - name: t\n    env: [BOT_TOKEN]\n    config:\n      expr:\n        check: |\n          1..source.count | map(({n: string(#)}))\n        in: '{\"n.txt\": version.n}'\nresources:\n  - { name: r, type: t, source: { count: 3 } }\njobs:\n  - name: j\n    plan:\n      - get: r\n";
    loads(expr);
    let f = Fixture::new(expr);
    let r = f.treadle(&["run"]);
    let said = format!("{}{}", r.stdout(), r.stderr());
    assert_eq!(r.code(), 0, "{said}");
    assert!(said.contains(r#"fetched r at {"n":"3"}"#), "{said}");
    loads(
        "mcp_servers:\n  - { name: linear, endpoint: 'https://mcp.linear.app/mcp', auth: { type: oauth } }\nresource_types:\n  - name: t\n    config:\n      mcp:\n        server: linear\n        check: { tool: list_issues }\n        in: { tool: get, args: { id: '{{ .version.id }}', limit: 20 } }\n        out: { tool: create_issue }\nresources:\n  - { name: r, type: t, source: { team: ENG } }\njobs:\n  - name: j\n    plan:\n      - get: r\n        trigger: true\n      - put: r\n        params: { title: x }\n",
    );
    let slack = "resources:\n  - { name: mentions, type: slack-mentions, source: { channels: [] } }\n  - { name: reply, type: slack-reply, env: [SECOND_BOT_TOKEN], source: { token_env: SECOND_BOT_TOKEN } }\njobs:\n  - name: j\n    plan:\n      - get: mentions\n        version: every\n      - put: reply\n        inputs: [mentions]\n";
    loads(slack);
    refused(
        &slack.replace("      - put: reply\n", "      - put: mentions\n"),
        "9:14",
        "needs its type `slack-mentions` to have a `out:` stage",
    );
    let r = Fixture::new(slack).treadle(&["run"]);
    assert_ne!(r.code(), 0);
    let said = format!("{}{}", r.stdout(), r.stderr());
    assert!(
        said.contains("type `slack-mentions`, a built-in type of `steps`"),
        "{said}"
    );
}

#[test]
fn inputs_all_belongs_on_a_put() {
    refused(
        "jobs:\n  - name: j\n    plan:\n      - task: a\n        outputs: [a]\n        run: echo 1 > a/x\n      - task: b\n        inputs: all\n        run: ls a\n",
        "8:17",
        "`inputs: all` is valid only on a `put:` step",
    );
    refused(
        "jobs:\n  - name: j\n    plan:\n      - task: b\n        inputs: some\n        run: ls\n",
        "5:9",
        "`all` (on a put)",
    );
}

#[test]
fn a_type_of_the_file_may_take_a_slack_types_name() {
    let yaml = "resource_types:\n  - name: slack-reply\n    config:\n      out: |\n        printf '{\"ts\": \"1\"}'\nresources:\n  - { name: reply, type: slack-reply, source: {} }\njobs:\n  - name: j\n    plan:\n      - put: reply\n";
    let r = Fixture::new(yaml).treadle(&["run"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    assert!(
        r.stdout().contains(r#"put reply: version {"ts":"1"}"#),
        "{}",
        r.stdout()
    );
}

#[test]
fn an_agents_container_keys_need_an_image_and_its_env_is_names() {
    let agent = |keys: &str| {
        format!(
            "agents:\n  - name: builder\n    source: {{ model: openai/gpt-4o-mini, api_key_env: OPENAI_API_KEY }}\n{keys}    tools: [run_shell]\njobs:\n  - name: j\n    plan:\n      - agent: builder\n        prompt: hi\n"
        )
    };
    refused(
        &agent("    privileged: true\n"),
        "4:17",
        "`privileged` of agent `builder` needs `image:`",
    );
    refused(
        &agent("    env: [A=b]\n"),
        "4:11",
        "an `env:` entry of agent `builder` is not a variable name",
    );
    loads(&agent(
        "    image: docker:27-dind\n    privileged: true\n    user: root\n    env: [DOCKER_HOST]\n    container_limits: { cpu: 1024, memory: 4294967296 }\n",
    ));
}

#[test]
fn a_type_without_in_gets_its_version_as_version_json_and_one_without_check_cannot_get() {
    let yaml = "resource_types:\n  - name: t\n    config:\n      check: |\n        printf '[{\"ts\": \"1\"}, {\"ts\": \"2\"}]'\nresources:\n  - { name: r, type: t, source: {} }\njobs:\n  - name: j\n    plan:\n      - get: r\n      - task: show\n        inputs: [r]\n        run: cat r/version.json\n";
    let r = Fixture::new(yaml).treadle(&["run"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    assert!(r.stdout().contains(r#""ts": "2""#), "{}", r.stdout());
    refused(
        &yaml.replace("      check: |\n", "      out: |\n"),
        "11:14",
        "needs its type `t` to have a `check:` stage",
    );
}
