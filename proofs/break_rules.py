#!/usr/bin/env python3
# Breaks each rule once, runs the proof that should catch it, and restores the file.
import subprocess, sys
import os
R=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..') + '/'
breaks = [
 ("single-writer", "pkg-session/src/actor.rs",
  "        self.running = None;\n        if self.stopping.is_some() {",
  "        self.running = None;\n        self.history.push(Message::user(\"written outside a commit\"));\n        if self.stopping.is_some() {",
  "single_writer"),
 ("commit-before-publish", "pkg-session/src/hub/mod.rs",
  "        let appended = self.inner.journal.append_all(&events).await;\n",
  "        let next = self.inner.journal.last_seq(self.inner.session).ok().flatten().unwrap_or(0) + 1;\n        for (at, event) in (next..).zip(&events) { self.publish(Arc::new(event.clone()), Some(at)); }\n        let appended = self.inner.journal.append_all(&events).await;\n",
  "commit_before_publish"),
 ("deltas-before-done", "pkg-session/src/turn/mod.rs",
  "            ctx.emit_now(&header, || EventKind::TokenDelta { kind, index, text });",
  "            let (ctx, header) = (ctx.clone(), header.clone());\n            tokio::spawn(async move { tokio::time::sleep(std::time::Duration::from_millis(3)).await; ctx.emit(header, move || EventKind::TokenDelta { kind, index, text }); });",
  "deltas_before_done"),
 # A step's model call overlapping the step before's log sync publishes its deltas at once
 # instead of holding them until that step's commit is acknowledged.
 ("deltas-held-until-commit", "pkg-session/src/turn/overlap.rs",
  "        if !self.holding.load(Ordering::Acquire) {",
  "        if true || !self.holding.load(Ordering::Acquire) {",
  "deltas_before_done"),
 ("discarded-step", "pkg-session/src/turn/mod.rs",
  "            Some(Err(error)) => {\n                let kind = error.failure();\n                let error = error.to_string();",
  "            Some(Err(error)) => {\n                let partial = crate::protocol::StepCommit { step, index: self.steps, messages: vec![Message::text(treadle_event::Role::Assistant, \"partial\")].into(), usage: Usage::default(), model: String::new(), effects: Vec::new() };\n                let _ = self.commit(partial).await;\n                let kind = error.failure();\n                let error = error.to_string();",
  "discarded_step"),
 ("hook-order", "pkg-session/src/turn/mod.rs",
  "                    StepEnd::Discarded(end) => match outcome_of(end) {",
  "                    StepEnd::Discarded(_) if true => OperationOutcome::Completed,\n                    StepEnd::Discarded(end) => match outcome_of(end) {",
  "hook_order"),
 ("no-silent-loss", "pkg-session/src/hub/mod.rs",
  "                Err(Rejected::Full) if !enduring => {",
  "                Err(Rejected::Full) if true => {",
  "no_silent_loss"),
 ("gate-survival", "pkg-session/src/resume.rs",
  "            .then(|| parked_step(&in_flight)",
  "            .then(|| None::<StagedStep>",
  "gate_survival"),
 ("exactly-once-effects", "pkg-session/src/batch/mod.rs",
  "    if let Some(gate) = prior.gates.remove(&(call.id.clone(), GateKind::Effect))\n",
  "    if let Some(gate) = None::<PriorGate>.filter(|_| prior.gates.remove(&(call.id.clone(), GateKind::Effect)).is_some())\n",
  "exactly_once_effects"),
 ("idempotent-append", "pkg-session/src/journal/writer.rs",
  "            if let Some(seq) = existing {",
  "            if let Some(seq) = existing.filter(|_| false) {",
  "idempotent_append"),
 ("fork-exact", "pkg-session/src/fork.rs",
  "            session: fork,\n            loop_id: Some(loop_id),",
  "            session: parent,\n            loop_id: Some(loop_id),",
  "fork_exact"),
 ("hook-fail-closed", "pkg-hook/src/command.rs",
  "                let denied = guard && self.spec.on_error == OnHookError::Deny;",
  "                let denied = false && guard && self.spec.on_error == OnHookError::Deny;",
  "hook_fail_closed"),
 # A run going on after its process stopped no longer restores the step's session: the step
 # starts a new conversation, asking the model again for committed steps. The proof runs the
 # `treadle` binary, so it is built with the break (and again once the file is restored).
 ("run-survives-restart", "src/run/exec/continued.rs",
  "    let (of, _) = left_by(ctx, entry).await?;",
  "    let (of, _) = left_by(ctx, entry).await.filter(|_| false)?;",
  "run_survives_restart"),
 # A resume reuses a recorded step whatever its key: a step whose configuration changed
 # (and every step chained after it) is skipped. The proof runs the workflow example
 # binary, built with the break (and again once the file is restored).
 # A workflow's agent step caught mid-way starts a new conversation on resume, as if its
 # key had changed: the model is asked again for the calls the step had committed.
 # The serving server's port is no longer kept from its steps: a task granted `network:
 # any` reaches the approval API. The proof runs the `treadle` binary, built with the break.
 ("controls-out", "src/server/app.rs",
  "    crate::confine::network::forbid_port(addr.port());",
  "    let _ = addr.port();",
  "controls_out"),
 ("workflow-agent-resume", "src/run/exec/continued.rs",
  "    if row.key != key {",
  "    if row.key != key || entry.seq < u32::MAX {",
  "workflow_agent_resume"),
 ("workflow-resume", "src/run/exec/cached.rs",
  "        if outcome.key == key {",
  "        if outcome.key == key || ctx.mode.resuming() {",
  "workflow_resume"),
 # `resume_last()` no longer finds the run its program was killed in: the program starts
 # a fresh run, and the steps recorded before the kill run again.
 ("workflow-resume-last", "src/workflow/resume.rs",
  "                    .filter(|r| unfinished(r.status))",
  "                    .filter(|r| unfinished(r.status) && r.id == 0)",
  "workflow_resume"),
]
# Proofs that run a binary of the treadle crate, which their crate does not build.
binary = {"run-survives-restart": ['--bin','treadle'], "controls-out": ['--bin','treadle']}

def build_binary(name):
    out = subprocess.run(['cargo','build','-q','-p','treadle'] + binary[name], cwd=R, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        print(out.stdout[-3000:] + out.stderr[-3000:])
    return out.returncode == 0
if sys.argv[1:] == ['--check']:
    # Every break still applies: its file exists, its pattern is in it, and the proof it
    # names is a module of the proofs. A file moved or a line rewritten would otherwise make
    # a break say "pattern not found" only when someone runs it.
    proofs = open(R+'proofs/tests/main.rs').read()
    stale = []
    for name, path, old, new, test in breaks:
        try:
            src = open(R+path).read()
        except OSError as e:
            stale.append(f"{name}: {path}: {e.strerror}")
            continue
        if old not in src:
            stale.append(f"{name}: its pattern is not in {path}")
        if f"mod {test};" not in proofs:
            stale.append(f"{name}: no proof module `{test}` in proofs/tests/main.rs")
    for line in stale:
        print(line)
    print(f"{len(breaks)} breaks, {len(stale)} stale")
    sys.exit(1 if stale else 0)
only = sys.argv[1:]
for name, path, old, new, test in breaks:
    if only and name not in only: continue
    src = open(R+path).read()
    assert old in src, (name, 'pattern not found')
    open(R+path,'w').write(src.replace(old, new, 1))
    try:
        if name in binary and not build_binary(name):
            print(f"{name}: the binary did not build with the break", flush=True)
            continue
        out = subprocess.run(['cargo','test','-q','-p','treadle-proofs','--test','proofs',test+'::'], cwd=R, capture_output=True, text=True, timeout=900)
        text = out.stdout + out.stderr
        failed = [l for l in text.splitlines() if l.startswith('test ') and 'FAILED' in l] 
        compile_err = 'error[' in text or 'error:' in text and 'could not compile' in text
        msgs = [l.strip() for l in text.splitlines() if 'panicked' in l or l.strip().startswith('seed') or 'assertion' in l][:3]
        print(f"{name}: rc={out.returncode} compile_error={compile_err} failed={failed} {msgs}", flush=True)
        if compile_err: print(text[-3000:])
    finally:
        open(R+path,'w').write(src)
        if name in binary:
            build_binary(name)
