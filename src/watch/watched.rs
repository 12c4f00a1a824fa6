//! What the watcher reads from a pipeline: which resources to check, and for each job its
//! gets (`trigger:`, `passed:`), its concurrency limits and its failure ceiling; and the
//! rule that decides a job's next inputs from the resources' latest versions and the green
//! builds of the jobs its `passed:` names.

use std::collections::{BTreeMap, BTreeSet};

use super::store::Versions;
use crate::pipeline::walk::visit_job;
use crate::pipeline::{Job, Loaded, StepKind};

/// One `get` of a job, as the watcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    /// The resource fetched.
    pub resource: String,
    /// A new version of it builds the job.
    pub trigger: bool,
    /// Jobs in whose one green build its version must have been.
    pub passed: Vec<String>,
}

/// One job, as the watcher sees it.
#[derive(Debug, Clone)]
pub struct WatchedJob {
    /// The job's name.
    pub name: String,
    /// Its gets that the watcher decides a version for (`trigger:` or `passed:`).
    pub gets: Vec<Get>,
    /// At most this many builds at once (`serial:` and `serial_groups:` mean 1; unset:
    /// unlimited).
    pub max_in_flight: Option<u32>,
    /// Jobs sharing one of these never build at the same time.
    pub serial_groups: Vec<String>,
    /// A shutdown stops a running build at once instead of waiting for it.
    pub interruptible: bool,
    /// Pause after this many failed builds in a row.
    pub max_failures: Option<u32>,
}

/// A watched pipeline.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Its name (the file's stem), which keys its rows in the state file.
    pub name: String,
    /// The loaded file.
    pub loaded: Loaded,
    /// Its jobs that have a `trigger: true` get.
    pub jobs: Vec<WatchedJob>,
}

impl Watched {
    /// Reads what the watcher needs of a loaded pipeline.
    pub fn of(name: String, loaded: Loaded) -> Self {
        let jobs = loaded
            .pipeline
            .jobs
            .iter()
            .map(watched_job)
            .filter(|j| j.gets.iter().any(|g| g.trigger))
            .collect();
        Self { name, loaded, jobs }
    }

    /// The resources a trigger get fetches, each once.
    pub fn trigger_resources(&self) -> Vec<String> {
        let set: BTreeSet<&String> = self
            .jobs
            .iter()
            .flat_map(|j| j.gets.iter().filter(|g| g.trigger).map(|g| &g.resource))
            .collect();
        set.into_iter().cloned().collect()
    }

    /// The job named `name`, if it is watched.
    pub fn job(&self, name: &str) -> Option<&WatchedJob> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

fn watched_job(job: &Job) -> WatchedJob {
    let mut gets: Vec<Get> = Vec::new();
    visit_job(job, &mut |s| {
        let StepKind::Get(crate::pipeline::GetStep {
            resource: r,
            trigger,
            passed,
            ..
        }) = &s.kind
        else {
            return;
        };
        let trigger = trigger.as_ref().is_some_and(|t| t.value);
        let passed: Vec<String> = passed
            .iter()
            .flat_map(|p| p.value.iter().map(|n| n.value.clone()))
            .collect();
        if !trigger && passed.is_empty() {
            return;
        }
        match gets.iter_mut().find(|g| g.resource == r.value) {
            // Two gets of one resource fetch one version: the stricter reading wins.
            Some(g) => {
                g.trigger |= trigger;
                g.passed.extend(passed);
            }
            None => gets.push(Get {
                resource: r.value.clone(),
                trigger,
                passed,
            }),
        }
    });
    let serial = job.serial.as_ref().is_some_and(|s| s.value) || !job.serial_groups.is_empty();
    WatchedJob {
        name: job.name.value.clone(),
        gets,
        max_in_flight: if serial {
            Some(1)
        } else {
            job.max_in_flight.as_ref().map(|m| m.value.max(1))
        },
        serial_groups: job.serial_groups.clone(),
        interruptible: job.interruptible.unwrap_or(false),
        max_failures: job.max_consecutive_failures.as_ref().map(|m| m.value),
    }
}

/// Why a job has no inputs to build with yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// A resource it gets has not been checked successfully yet.
    Unchecked(String),
    /// No versions passed its `passed:` jobs together yet.
    NotPassed(Vec<String>),
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unchecked(r) => write!(f, "`{r}` has not been checked yet"),
            Self::NotPassed(jobs) => {
                write!(f, "no version has passed [{}] yet", jobs.join(", "))
            }
        }
    }
}

/// The inputs `job` would build with now: each unconstrained trigger get at its
/// resource's `latest` version; the gets with `passed:` at versions that were green
/// together in one build of each named job (`green(job)`: that job's green builds'
/// versions, newest first), the newest such builds preferred.
pub fn inputs(
    job: &WatchedJob,
    latest: &BTreeMap<String, String>,
    green: &dyn Fn(&str) -> Vec<Versions>,
) -> Result<Versions, Waiting> {
    let mut out = Versions::new();
    for g in job.gets.iter().filter(|g| g.passed.is_empty()) {
        let v = latest
            .get(&g.resource)
            .ok_or_else(|| Waiting::Unchecked(g.resource.clone()))?;
        out.insert(g.resource.clone(), v.clone());
    }
    let upstream: Vec<String> = job
        .gets
        .iter()
        .flat_map(|g| g.passed.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if upstream.is_empty() {
        return Ok(out);
    }
    // For each upstream job: the resources it constrains, and its green builds.
    let constrained: Vec<(Vec<&str>, Vec<Versions>)> = upstream
        .iter()
        .map(|u| {
            let resources = job
                .gets
                .iter()
                .filter(|g| g.passed.contains(u))
                .map(|g| g.resource.as_str())
                .collect();
            (resources, green(u))
        })
        .collect();
    match choose(&constrained, Versions::new()) {
        Some(chosen) => {
            out.extend(chosen);
            Ok(out)
        }
        None => Err(Waiting::NotPassed(upstream)),
    }
}

/// Picks one green build of each upstream job (newest first) that agree on every
/// resource they share; the versions they fix.
fn choose(upstream: &[(Vec<&str>, Vec<Versions>)], fixed: Versions) -> Option<Versions> {
    let Some(((resources, builds), rest)) = upstream.split_first() else {
        return Some(fixed);
    };
    'builds: for build in builds {
        let mut next = fixed.clone();
        for r in resources {
            let Some(v) = build.get(*r) else {
                continue 'builds;
            };
            match next.get(*r) {
                Some(held) if held != v => continue 'builds,
                _ => {
                    next.insert((*r).to_owned(), v.clone());
                }
            }
        }
        if let Some(found) = choose(rest, next) {
            return Some(found);
        }
    }
    None
}

/// Whether `job` must be queued: a trigger get's version differs from what the job was
/// last queued with (or it never was).
pub fn triggered(job: &WatchedJob, now: &Versions, last: Option<&Versions>) -> bool {
    let Some(last) = last else {
        return true;
    };
    job.gets
        .iter()
        .filter(|g| g.trigger)
        .any(|g| now.get(&g.resource) != last.get(&g.resource))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(pairs: &[(&str, &str)]) -> Versions {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn job(gets: Vec<Get>) -> WatchedJob {
        WatchedJob {
            name: "deploy".into(),
            gets,
            max_in_flight: None,
            serial_groups: Vec::new(),
            interruptible: false,
            max_failures: None,
        }
    }

    fn get(resource: &str, trigger: bool, passed: &[&str]) -> Get {
        Get {
            resource: resource.into(),
            trigger,
            passed: passed.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn versions_must_have_passed_together() {
        // upstream build 1: repo=r2 config=c1; build 2: repo=r1 config=c2 (newest first).
        let builds = vec![
            v(&[("repo", "r1"), ("config", "c2")]),
            v(&[("repo", "r2"), ("config", "c1")]),
        ];
        let j = job(vec![
            get("repo", true, &["up"]),
            get("config", true, &["up"]),
        ]);
        let got = inputs(&j, &BTreeMap::new(), &|_| builds.clone()).unwrap();
        assert_eq!(got, v(&[("repo", "r1"), ("config", "c2")]));
    }

    #[test]
    fn two_upstream_jobs_must_agree() {
        let a = vec![v(&[("repo", "r3")]), v(&[("repo", "r2")])];
        let b = vec![v(&[("repo", "r2")]), v(&[("repo", "r1")])];
        let j = job(vec![get("repo", true, &["a", "b"])]);
        let green = |u: &str| if u == "a" { a.clone() } else { b.clone() };
        assert_eq!(
            inputs(&j, &BTreeMap::new(), &green).unwrap(),
            v(&[("repo", "r2")])
        );
        let none = |_: &str| Vec::new();
        assert_eq!(
            inputs(&j, &BTreeMap::new(), &none),
            Err(Waiting::NotPassed(vec!["a".into(), "b".into()]))
        );
    }

    #[test]
    fn only_a_trigger_get_that_moved_queues_the_job() {
        let j = job(vec![get("repo", true, &[]), get("tools", false, &["x"])]);
        let last = v(&[("repo", "r1"), ("tools", "t1")]);
        assert!(!triggered(
            &j,
            &v(&[("repo", "r1"), ("tools", "t2")]),
            Some(&last)
        ));
        assert!(triggered(
            &j,
            &v(&[("repo", "r2"), ("tools", "t1")]),
            Some(&last)
        ));
        assert!(triggered(&j, &last, None));
        let latest = BTreeMap::new();
        assert_eq!(
            inputs(&j, &latest, &|_| Vec::new()),
            Err(Waiting::Unchecked("repo".into()))
        );
    }
}
