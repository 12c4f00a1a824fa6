//! Starting a configured session: its model client and journal, its hub, its loops and
//! their actors (where `SessionBuilder::start` and `restore` end).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorRef};
use treadle_event::{LoopId, SessionId, Usage};
use treadle_hook::HookRunner;

use crate::actor::{LoopActor, LoopArgs};
use crate::context::LoopContext;
use crate::delegate::{self, DelegateTool};
use crate::error::StartError;
use crate::hub::{Hub, HubOptions};
use crate::inference::{ApiKey, ModelClient, ModelConfig};
use crate::journal::{Claimed, Journal, SessionClaim};
use crate::protocol::LoopMsg;
use crate::restore::{RestoreError, Restored, RestoredLoop};
use crate::resume::ResumedTurn;
use crate::session::{Session, SessionParts};
use crate::tool::ToolSet;

use super::{JournalChoice, SessionBuilder};

impl SessionBuilder {
    pub(crate) fn connect(&mut self) -> Result<(ModelClient, Journal), StartError> {
        let endpoint = self.endpoint.clone().ok_or(StartError::MissingEndpoint)?;
        let model = self.model.clone().ok_or(StartError::MissingModel)?;
        let api_key = match (&self.api_key, &self.api_key_env) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(var)) => Some(ApiKey::from_env(var)?),
            (None, None) => None,
        };
        if let Some(key) = &api_key {
            self.secrets.extend([key.expose()]);
        }
        let mut config = ModelConfig::new(endpoint, model);
        config.api_key = api_key;
        config.temperature = self.temperature;
        config.top_p = self.top_p;
        config.max_tokens = self.max_tokens;
        config.reasoning_effort = self.reasoning_effort.clone();
        config.idle_timeout = self.idle_timeout;
        if let Some(timeout) = self.connect_timeout {
            config.connect_timeout = timeout;
        }
        config.max_response_bytes = self.max_response_bytes;
        config.call_timeout = self.call_timeout;
        config.limit_names = self.limit_names;
        if let Some(retry) = self.retry {
            config.retry = retry;
        }
        let client = ModelClient::new(config)?;
        let journal = match &self.journal {
            Some(JournalChoice::Shared(journal)) => journal.clone(),
            Some(JournalChoice::Path(path)) => Journal::open(path)?,
            None => Journal::open_temporary()?,
        };
        Ok((client, journal))
    }

    /// The session's hub, whose journal appends pass this builder's hooks.
    pub(crate) fn hub(&self, session: SessionId, journal: &Journal, main_loop: LoopId) -> Hub {
        Hub::with_hooks(
            session,
            journal.clone(),
            HubOptions {
                queue_capacity: self.subscriber_capacity,
            },
            HookRunner::new(self.hooks.clone()),
            main_loop,
            self.fence.clone(),
        )
    }

    /// What a fork journals and maps from this builder: the system prompt, the delegation
    /// link, the sub-agents' names (their loop ids derive from them).
    pub(crate) fn system_text(&self) -> Option<String> {
        self.system.clone()
    }

    pub(crate) fn parent_link(&self) -> Option<treadle_event::ParentLink> {
        self.parent.clone()
    }

    pub(crate) fn sub_agent_names(&self) -> Vec<String> {
        self.sub_agents.iter().map(|a| a.name.clone()).collect()
    }

    /// Spawns the sub-agent loops, then the main loop with a delegation tool per sub-agent.
    pub(crate) async fn launch(
        self,
        client: ModelClient,
        journal: Journal,
        hub: Hub,
        mut restored: Restored,
        mut resumed: HashMap<LoopId, ResumedTurn>,
        claim: Arc<SessionClaim>,
    ) -> Result<Session, StartError> {
        let session = hub.session();
        let hooks = hub.hooks().clone();
        let delegated = Arc::new(Mutex::new(Usage::default()));
        let secrets = Arc::new(self.secrets);
        let span = crate::trace::session(session, client.model());
        let mut tools = self.tools;
        let mut children = Vec::new();
        for agent in self.sub_agents {
            let loop_id = delegate::loop_id(session, &agent.name);
            let ctx = LoopContext {
                session,
                loop_id,
                client: client.clone(),
                tools: ToolSet::new(agent.tools),
                hooks: hooks.clone(),
                hub: hub.clone(),
                system: agent.system,
                max_steps: agent.max_steps,
                queue_capacity: self.queue_capacity,
                delegated: Arc::default(),
                owns_session: false,
                claim: claim.clone(),
                batch: self.batch.clone(),
                secrets: secrets.clone(),
                span: span.clone(),
                compaction: self.compaction,
            };
            let child = spawn_loop(
                ctx,
                restored.loops.remove(&loop_id),
                resumed.remove(&loop_id),
            )
            .await?;
            tools.push(Arc::new(DelegateTool {
                name: agent.name,
                description: agent.description,
                child: child.clone(),
                child_loop: loop_id,
                hub: hub.clone(),
                charge_to: delegated.clone(),
            }));
            children.push(child);
        }
        let main_loop = restored.main_loop;
        let ctx = LoopContext {
            session,
            loop_id: main_loop,
            client,
            tools: ToolSet::new(tools),
            hooks,
            hub: hub.clone(),
            system: self.system,
            max_steps: self.max_steps,
            queue_capacity: self.queue_capacity,
            delegated,
            owns_session: true,
            claim: claim.clone(),
            batch: self.batch,
            secrets,
            span,
            compaction: self.compaction,
        };
        let actor = spawn_loop(
            ctx,
            restored.loops.remove(&main_loop),
            resumed.remove(&main_loop),
        )
        .await?;
        Ok(Session::from_parts(SessionParts {
            id: session,
            main_loop,
            actor,
            children,
            hub,
            journal,
            structured_output: self.structured_output,
            claim: Arc::downgrade(&claim),
        }))
    }
}

async fn spawn_loop(
    ctx: LoopContext,
    restored: Option<RestoredLoop>,
    resume: Option<ResumedTurn>,
) -> Result<ActorRef<LoopMsg>, StartError> {
    let restored = restored.unwrap_or_default();
    let args = LoopArgs {
        ctx: Arc::new(ctx),
        history: restored.history.into(),
        turns_started: restored.turns_started,
        resume,
    };
    let (actor, _join) = Actor::spawn(None, LoopActor, args)
        .await
        .map_err(|e| StartError::Spawn(e.to_string()))?;
    Ok(actor)
}

/// Claims session `id` for a restore. A session whose last handle was dropped (or that was
/// shut down) is still finishing its turn, and an import is writing its events: wait for
/// either, up to 30 s. A live one is refused.
pub(super) async fn claim_for_restore(
    journal: &Journal,
    id: SessionId,
) -> Result<SessionClaim, RestoreError> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match journal.claim(id) {
            Ok(claim) => return Ok(claim),
            Err(Claimed::Stopping | Claimed::Importing)
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(_) => return Err(RestoreError::Live { session: id }),
        }
    }
}
