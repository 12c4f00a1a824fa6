//! Rule 3, deltas-before-done: every `TokenDelta` of a step reaches a subscriber before
//! that step's `StepDone`, and after the `StepDone` of the step before it (a step's model
//! call may start before that step's commit is acknowledged, its deltas may not be
//! published before), on every subscription that receives both — and the deltas add up
//! to exactly what was committed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use treadle_event::{Block, DeltaKind, EventFilter, EventKind, LoopScope, StepId};
use treadle_proofs::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_of_a_step_arrive_before_its_step_done() {
    for seed in 0..SCHEDULES {
        let (script, steps) = tool_turns(seed, 1);
        let world = World::start(script, seed, Duration::from_micros(300)).await;
        let session = world.session().start().await.expect("start");
        // Two subscriptions with different filters that both receive deltas and StepDone.
        let mut everything = session.subscribe(EventFilter::all());
        let mut main_only = session.subscribe(EventFilter {
            ephemeral: LoopScope::Only(vec![session.main_loop()]),
            enduring: LoopScope::Only(vec![session.main_loop()]),
        });
        session.turn("go").submit().await.expect("submit");

        for sub in [&mut everything, &mut main_only] {
            let deliveries = until_terminal(sub).await;
            let mut done: HashSet<StepId> = HashSet::new();
            let mut text: HashMap<StepId, String> = HashMap::new();
            let mut args: HashMap<(StepId, u32), String> = HashMap::new();
            let mut step_dones = 0;
            // The step whose deltas came last.
            let mut streaming: Option<StepId> = None;
            for d in &deliveries {
                let step = d.event.header.step;
                match &d.event.kind {
                    EventKind::TokenDelta {
                        kind,
                        index,
                        text: piece,
                    } => {
                        let step = step.expect("deltas carry their step");
                        assert!(
                            !done.contains(&step),
                            "seed {seed}: a delta arrived after its StepDone: {:?}",
                            names(&deliveries)
                        );
                        if let Some(before) = streaming.filter(|s| *s != step) {
                            assert!(
                                done.contains(&before),
                                "seed {seed}: a step's delta arrived before the StepDone of \
                                 the step before it: {:?}",
                                names(&deliveries)
                            );
                        }
                        streaming = Some(step);
                        match kind {
                            DeltaKind::Text => text.entry(step).or_default().push_str(piece),
                            DeltaKind::ToolArguments => args
                                .entry((step, index.unwrap_or(0)))
                                .or_default()
                                .push_str(piece),
                            DeltaKind::Reasoning => {}
                        }
                    }
                    EventKind::StepDone { messages, .. } => {
                        let step = step.expect("StepDone carries its step");
                        step_dones += 1;
                        done.insert(step);
                        let assistant = &messages[0];
                        assert_eq!(
                            text.get(&step).cloned().unwrap_or_default(),
                            assistant.text_content(),
                            "seed {seed}: text deltas differ from the committed text"
                        );
                        let mut index = 0;
                        for block in &assistant.content {
                            if let Block::ToolUse { arguments, .. } = block {
                                assert_eq!(
                                    args.get(&(step, index)).map(String::as_str).unwrap_or(""),
                                    arguments,
                                    "seed {seed}: argument deltas differ"
                                );
                                index += 1;
                            }
                        }
                    }
                    _ => {}
                }
            }
            assert_eq!(step_dones, steps[0], "seed {seed}");
        }
        session.shutdown().await;
    }
}
