//! [`dispatch`]: a parsed command line run as its command, which returns the exit code.

// The grammar, the helpers and every command's module are the parent's.
use super::*;

/// Runs a parsed command line and returns the exit code.
pub async fn dispatch(cli: Cli) -> u8 {
    match crate::pipeline::vars::gather(&cli.vars_files, &cli.vars) {
        Ok(vars) => {
            let _ = VARS.set(vars);
        }
        Err(e) => {
            crate::console::tell!("treadle: {e}");
            return EXIT_CONFIG;
        }
    }
    match cli.command {
        Command::Run {
            file,
            json,
            state,
            shadow: Some(run),
            model,
            agent_file,
            ..
        } => {
            let options = crate::shadow::ShadowOptions {
                run,
                state,
                model,
                agent_file,
            };
            shadow::run(&file, json, &options).await
        }
        Command::Run {
            file,
            job,
            json,
            state,
            record,
            replay_model,
            resume,
            replay,
            from,
            force,
            rerun,
            fork,
            at,
            prompt,
            prompt_file,
            ..
        } => {
            let tape = tape::TapeArgs {
                record,
                replay: replay_model,
            };
            let Ok(prompt) = run::fork_prompt(prompt, prompt_file) else {
                return EXIT_CONFIG;
            };
            let start = match (resume, replay, from, rerun) {
                _ if fork.is_some() => crate::cache::Start::Fork(crate::cache::ForkRun {
                    of: fork.unwrap_or_default(),
                    at: at.unwrap_or_default(),
                    prompt,
                }),
                (Some(r), _, _, _) => crate::cache::Start::Resume(r),
                (None, Some(r), Some(step), _) => crate::cache::Start::Replay(r, step),
                (None, None, _, Some(step)) => crate::cache::Start::Rerun(step),
                _ if force => crate::cache::Start::Force,
                _ => crate::cache::Start::Fresh,
            };
            run::run(&file, job, json, state, tape, start).await
        }
        Command::Validate {
            file,
            preflight: true,
            job,
        } => preflight::validate(&file, job.as_deref()).await,
        Command::Validate { file, .. } => inspect::validate(&file),
        Command::Plan { file, job, json } => match remote::server_for(&file, None).await {
            Some(client) => remote::plan(client, &file, job.as_deref(), json).await,
            None => plan::plan(&file, job.as_deref(), json),
        },
        Command::Schema => inspect::schema(),
        Command::Runs {
            file,
            show: Some(run),
            json,
            state,
            ..
        } => match remote::server_for(&file, state.clone()).await {
            Some(client) => remote::show(client, run, json).await,
            None => inspect::show(&file, run, json, state),
        },
        Command::Runs {
            file,
            steps,
            cost,
            all,
            state,
            ..
        } => {
            // Runs of this file only, unless `--all` (the state file is the directory's).
            let only = (!all).then_some(file.as_path());
            match remote::server_for(&file, state.clone()).await {
                Some(client) => remote::runs(client, steps, cost, only).await,
                None if cost => cost::runs(&file, steps, state, only),
                None => inspect::runs(&file, steps, state, only),
            }
        }
        Command::Test { file, json, state } => test::test(&file, json, state).await,
        Command::Approvals { file, state } => {
            match remote::server_for(&file, state.clone()).await {
                Some(client) => remote::approvals(client).await,
                None => approvals::list(&file, state),
            }
        }
        Command::Approve(a) => answer(a, Answer::Approve).await,
        Command::Answer { at, json } => questions::answer(at, json).await,
        Command::Serve {
            paths,
            addr,
            token_env,
            state,
            interval,
            nats,
            unclaimed_warning,
            allowed_hosts,
            no_adopt,
            header_timeout,
            write_timeout,
            user_tokens,
            approver_header,
        } => {
            let nats = match nats.config() {
                Ok(n) => n,
                Err(e) => {
                    crate::console::tell!("treadle serve: {e}");
                    return EXIT_CONFIG;
                }
            };
            let options = crate::server::ServeOptions {
                paths,
                addr,
                token_env,
                state,
                interval,
                nats,
                unclaimed_warning,
                allowed_hosts,
                no_adopt,
                limits: crate::server::listen::Limits {
                    header: header_timeout,
                    stall: write_timeout,
                },
                identity: crate::server::identity::IdentityOptions {
                    user_tokens,
                    approver_header,
                },
            };
            serve::serve(options).await
        }
        Command::Worker {
            nats,
            slots,
            dir,
            drain_timeout,
        } => worker::worker(nats, slots, dir, drain_timeout).await,
        Command::Reject(a) => answer(a, Answer::Reject).await,
        Command::Watch {
            file,
            interval,
            max_concurrent,
            addr,
            json,
            state,
        } => {
            let args = watch::WatchArgs {
                file,
                interval,
                max_concurrent: usize::from(max_concurrent),
                addr,
                json,
                state,
            };
            watch::watch(args).await
        }
        Command::Jobs {
            action: Some(JobsAction::Resume { name, file, state }),
            ..
        } => jobs::resume(&name, &file, state),
        Command::Jobs { file, state, .. } => jobs::list(&file, state),
        Command::Init { file } => init::init(&file),
        Command::Docs { page } => docs::docs(page.as_deref()),
        Command::Completions { shell } => shell::completions(shell),
        Command::Man => shell::man(),
    }
}
