//! `treadle plan` against the run it predicts, over every pipeline in docs/ (the YAML
//! blocks `docs_yaml` runs) and examples/: plan, run, plan again, run again, and for each
//! step, "plan says cached" exactly when the run replays it and "plan says skipped"
//! exactly when the run skips it. Agent steps talk to the docs' scripted agent.
//!
//! What a plan cannot know is checked as far as the run shows it: a case that hangs on a
//! verdict or a failure is held to what the run did once that verdict is known; a step
//! the plan says would run may be skipped only after a step of the run failed (the plan
//! does not foresee failures no route catches).

use crate::common;
use crate::docs_yaml::{git_repo, job_names, obedient_agent, yaml_blocks};

use std::collections::HashMap;
use std::path::Path;

use common::Fixture;
use serde_json::Value;
use treadle_scripted::{Script, ScriptedServer};

/// What the run did with one step (by seq and name; a cell shares its step's seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Did {
    Replayed,
    Ran,
    Skipped,
}

/// One job's run, read from its `--json` events.
#[derive(Default, Debug)]
struct RunSeen {
    /// The first thing each step did.
    first: HashMap<(u64, String), Did>,
    /// How each step ended each time, in order: failed, and its verdict.
    ends: HashMap<String, Vec<(bool, Option<String>)>>,
    any_failed: bool,
}

fn runs_by_job(stdout: &str) -> HashMap<String, RunSeen> {
    let mut job_of: HashMap<u64, String> = HashMap::new();
    let mut out: HashMap<String, RunSeen> = HashMap::new();
    for line in stdout.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let run = e["run"].as_u64().unwrap_or(0);
        if e["event"] == "run_started" {
            job_of.insert(run, e["job"].as_str().unwrap_or_default().to_owned());
        }
        let Some(job) = job_of.get(&run) else {
            continue;
        };
        let seen = out.entry(job.clone()).or_default();
        let name = e["name"].as_str().unwrap_or_default().to_owned();
        let at = (e["seq"].as_u64().unwrap_or(u64::MAX), name.clone());
        let did = match e["event"].as_str() {
            Some("step_cached") => Some(Did::Replayed),
            Some("step_started") => Some(Did::Ran),
            Some("step_skipped") => Some(Did::Skipped),
            _ => None,
        };
        if let Some(d) = did {
            seen.first.entry(at).or_insert(d);
        }
        if e["event"] == "step_finished" {
            let failed = e["status"] != "succeeded";
            seen.any_failed |= failed;
            let verdict = e["verdict"].as_str().map(str::to_owned);
            seen.ends.entry(name).or_default().push((failed, verdict));
        }
    }
    out
}

/// Whether one step's conditions held, the n-th on its n-th end in the run (`None`: the
/// run does not say).
fn held(step: &str, conds: &[&Value], run: &RunSeen) -> Option<bool> {
    let ends = run.ends.get(step).map(Vec::as_slice).unwrap_or_default();
    for (n, cond) in conds.iter().enumerate() {
        let Some((failed, verdict)) = ends.get(n) else {
            return Some(false);
        };
        let ok = if let Some(says) = cond["says"].as_str() {
            verdict
                .as_ref()
                .is_some_and(|v| says.split(" or ").any(|s| s == v))
        } else if cond["fails"] == true {
            *failed
        } else {
            !*failed
        };
        if !ok {
            return Some(false);
        }
    }
    Some(true)
}

/// Whether a case's conditions held: any list of which all hold.
fn case_held(case: &Value, run: &RunSeen) -> Option<bool> {
    let when = case["when"].as_array()?;
    if when.is_empty() {
        return None;
    }
    let mut answer = Some(false);
    for all in when {
        let all: Vec<&Value> = all
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let mut steps: Vec<&str> = all.iter().filter_map(|c| c["step"].as_str()).collect();
        steps.dedup();
        let mut each: Vec<Option<bool>> = steps
            .iter()
            .map(|step| {
                let mine: Vec<&Value> =
                    all.iter().copied().filter(|c| c["step"] == *step).collect();
                held(step, &mine, run)
            })
            .collect();
        // A condition in words (a guard, a file's matrix) the run does not report.
        if all.iter().any(|c| c["step"].is_null()) {
            each.push(None);
        }
        if each.iter().all(|h| *h == Some(true)) {
            return Some(true);
        }
        if !each.contains(&Some(false)) {
            answer = None;
        }
    }
    answer
}

/// Checks one definite plan against what the run did; `Err` says how they disagree.
fn agrees(plan: &Value, did: Did, run: &RunSeen) -> Result<(), String> {
    let p = plan["plan"].as_str().unwrap_or_default();
    match (p, did) {
        ("cached", Did::Replayed) | ("skipped", Did::Skipped) | ("run", Did::Ran) => Ok(()),
        // A failure no route catches ends the job; the plan does not foresee it.
        ("run", Did::Skipped) if run.any_failed => Ok(()),
        ("depends", _) => {
            let cases = plan["cases"].as_array().cloned().unwrap_or_default();
            let holding: Vec<&Value> = cases
                .iter()
                .filter(|c| case_held(c, run) == Some(true))
                .collect();
            if let [one] = holding.as_slice() {
                return agrees(&one["then"], did, run);
            }
            // Undecided by the run's verdicts: what it did must be one of the cases,
            // or none of them holding (a guard that did not pass).
            let fits = cases.iter().any(|c| agrees(&c["then"], did, run).is_ok());
            if fits || did == Did::Skipped {
                Ok(())
            } else {
                Err(format!("the run {did:?} it, which none of the cases says"))
            }
        }
        _ => Err(format!("plan says {p}, the run {did:?} it")),
    }
}

/// Compares each plan line with the run; returns (lines compared, disagreements).
fn compare(plans: &str, runs: &HashMap<String, RunSeen>) -> (usize, Vec<String>) {
    let mut compared = 0;
    let mut wrong = Vec::new();
    for line in plans.lines() {
        let Ok(plan) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let job = plan["job"].as_str().unwrap_or_default();
        let Some(run) = runs.get(job) else {
            continue;
        };
        for step in plan["steps"].as_array().into_iter().flatten() {
            if step["plan"] == "container" {
                continue;
            }
            let name = step["name"].as_str().unwrap_or_default();
            let at = (step["seq"].as_u64().unwrap_or(0), name.to_owned());
            let did = run.first.get(&at).copied().unwrap_or(Did::Skipped);
            compared += 1;
            if let Err(why) = agrees(step, did, run) {
                wrong.push(format!("job {job}, step `{name}`: {why}\n  plan: {step}"));
            }
        }
    }
    (compared, wrong)
}

fn pipelines() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = yaml_blocks()
        .into_iter()
        .map(|(file, line, yaml)| (format!("{}:{line}", file.display()), yaml))
        .collect();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<_> = std::fs::read_dir(&examples)
        .expect("examples/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    files.sort();
    for f in files {
        all.push((
            f.display().to_string(),
            std::fs::read_to_string(&f).expect("example"),
        ));
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_says_cached_and_skipped_exactly_when_the_run_replays_and_skips() {
    let server = ScriptedServer::start(Script::from_fn(obedient_agent))
        .await
        .expect("server");
    let url = server.base_url().to_string();
    let (compared, wrong, cached) = tokio::task::spawn_blocking(move || {
        let (mut compared, mut wrong, mut cached) = (0, Vec::new(), 0);
        let (mut skipped, mut depends) = (0, 0);
        for (name, yaml) in pipelines() {
            let f = Fixture::new(&yaml);
            if yaml.contains("uri: ./repo") {
                git_repo(&f.path().join("repo"));
            }
            let env = [("TREADLE_LOCAL_URL", url.as_str())];
            // Each job planned just before it runs: an earlier job of the file may have
            // filled the cache it reads.
            for round in 1..=2 {
                for job in job_names(&f) {
                    let plan = f.treadle_env(&["plan", "--json", "--job", &job], &env);
                    assert_eq!(plan.code(), 0, "{name}: plan\n{}", plan.stderr());
                    let ran = f.treadle_env(&["run", "--json", "--job", &job], &env);
                    let (n, w) = compare(&plan.stdout(), &runs_by_job(&ran.stdout()));
                    compared += n;
                    cached += plan.stdout().matches("\"plan\":\"cached\"").count();
                    skipped += plan.stdout().matches("\"plan\":\"skipped\"").count();
                    depends += plan.stdout().matches("\"plan\":\"depends\"").count();
                    wrong.extend(w.into_iter().map(|w| format!("{name} (round {round}): {w}")));
                }
            }
        }
        eprintln!(
            "plan_vs_run: {compared} steps compared; planned as cached {cached}, skipped {skipped}, depending on the run {depends}"
        );
        (compared, wrong, cached)
    })
    .await
    .expect("the comparison");
    assert!(compared >= 100, "only {compared} steps were compared");
    assert!(cached >= 50, "only {cached} steps were planned as cached");
    assert!(wrong.is_empty(), "{}", wrong.join("\n----\n"));
}
