//! Sessions and their forks in a process of their own, for the fork proof to kill with
//! SIGKILL.
//!
//! Usage: `treadle-fork-child ENDPOINT JOURNAL SEED`. It starts a session on JOURNAL, then
//! runs a seeded random sequence of operations over it and the forks it makes: a turn
//! (`<session id> q<k> steps <n>`, so every input names the session it was given to), a
//! turn interrupted after a random while, a fork at a random committed point of a random
//! session, a shutdown and restore. It prints `op <k>` before each operation (the proof
//! kills it after a chosen one) and `done` after the last, then waits to be killed.

use std::io::Write;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use treadle_event::ForkPoint;
use treadle_proofs::echo_tool;
use treadle_session::{CommittedTurn, Session};

/// How many operations one sequence has.
const OPS: u32 = 40;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(endpoint), Some(journal), Some(seed)) = (args.next(), args.next(), args.next())
    else {
        return Err("usage: treadle-fork-child ENDPOINT JOURNAL SEED".into());
    };
    let seed: u64 = seed.parse()?;
    let builder = || {
        Session::builder()
            .endpoint(endpoint.clone())
            .model("scripted")
            .journal_path(journal.clone())
            .tool(echo_tool(seed))
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut sessions = vec![builder().start().await?];
    for k in 0..OPS {
        say(&format!("op {k}"))?;
        let at = rng.random_range(0..sessions.len());
        let session = sessions[at].clone();
        match rng.random_range(0..8) {
            0..4 => {
                let steps = rng.random_range(0..3);
                session
                    .turn(format!("{} q{k} steps {steps}", session.id()))
                    .run()
                    .await?;
            }
            4 => interrupted_turn(&session, k, &mut rng).await?,
            5 | 6 => {
                // Half the forks are taken while the parent runs a turn.
                let running = rng.random_bool(0.5).then(|| {
                    let session = session.clone();
                    let input = format!("{} q{k} steps 2", session.id());
                    tokio::spawn(async move { session.turn(input).run().await })
                });
                let turns = session.journal().committed_turns(session.id())?;
                if let Some(point) = pick_point(&turns, &mut rng) {
                    sessions.push(builder().fork(session.id(), point).await?);
                }
                if let Some(turn) = running {
                    turn.await??;
                }
            }
            _ => {
                let id = session.id();
                drop(session);
                let old = sessions.remove(at);
                old.shutdown().await;
                // The last handle goes before the restore claims the session again.
                drop(old);
                sessions.insert(at, builder().restore(id).await?);
            }
        }
    }
    say("done")?;
    std::future::pending::<()>().await;
    Ok(())
}

/// A turn of three steps, interrupted after a random while (maybe after it ended).
async fn interrupted_turn(
    session: &Session,
    k: u32,
    rng: &mut rand::rngs::StdRng,
) -> Result<(), Box<dyn std::error::Error>> {
    let turn = tokio::spawn({
        let session = session.clone();
        let input = format!("{} q{k} steps 3", session.id());
        async move { session.turn(input).run().await }
    });
    tokio::time::sleep(Duration::from_micros(rng.random_range(0..6000))).await;
    session.interrupt().await?;
    turn.await??;
    Ok(())
}

/// A random committed point of `turns`: before a turn, after an ended one, after a step.
fn pick_point(turns: &[CommittedTurn], rng: &mut rand::rngs::StdRng) -> Option<ForkPoint> {
    let turn = turns.get(rng.random_range(0..turns.len().max(1)))?;
    match rng.random_range(0..3) {
        0 => Some(ForkPoint::BeforeTurn(turn.turn)),
        1 if turn.ended => Some(ForkPoint::AfterTurn(turn.turn)),
        _ => match turn.steps.len() {
            0 => Some(ForkPoint::BeforeTurn(turn.turn)),
            n => Some(ForkPoint::AfterStep(turn.steps[rng.random_range(0..n)])),
        },
    }
}

fn say(line: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{line}")?;
    stdout.flush()
}
