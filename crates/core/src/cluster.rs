//! What a daemon does for the whole cluster, on one node at a time
//! (see `flynn_sessions::cluster`): each chat channel's connection (role
//! `channel:<name>`) and the automation (role `automation`: cron jobs and
//! the heartbeat, and the answers nodes that died left unsent). A node
//! takes a role when it is free or its holder is dead, keeps it while it
//! runs, and gives it up if another node took it meanwhile (this one went
//! silent too long).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use flynn_channels::{ConnectGate, Registry};
use flynn_chat::ChannelRouter;
use flynn_cron::Automation;
use flynn_orchestrator::SessionManager;
use flynn_protocol::TurnId;
use flynn_sessions::{Cluster, Lease};
use tokio_util::sync::CancellationToken;

/// How often a node checks a role it holds or waits for. A role whose
/// holder died moves within [`NODE_TTL`](flynn_sessions::cluster::NODE_TTL)
/// and this.
pub const ROLE_CHECK: Duration = Duration::from_secs(3);

/// The role of the automation.
pub const AUTOMATION: &str = "automation";

/// The role of a chat channel's connection.
pub fn channel_role(channel: &str) -> String {
    format!("channel:{channel}")
}

/// Admits a channel's connection on the node holding its role.
pub struct RoleGate {
    cluster: Arc<dyn Cluster>,
}

impl RoleGate {
    pub fn new(cluster: Arc<dyn Cluster>) -> Self {
        RoleGate { cluster }
    }
}

#[async_trait::async_trait]
impl ConnectGate for RoleGate {
    async fn admit(
        &self,
        channel: &str,
        standby: &(dyn Fn(String) + Send + Sync),
        stop: &CancellationToken,
    ) -> Option<CancellationToken> {
        let role = channel_role(channel);
        loop {
            match self.cluster.acquire_role(&role).await {
                Ok(Lease::Held) => break,
                Ok(Lease::HeldBy(holder)) => standby(holder.0),
                Err(error) => {
                    tracing::warn!(channel, %error, "cannot check which node holds the channel's connection");
                }
            }
            tokio::select! {
                () = stop.cancelled() => return None,
                () = tokio::time::sleep(ROLE_CHECK) => {}
            }
        }
        tracing::info!(channel, node = %self.cluster.node(), "this node holds the channel's connection");
        let admitted = CancellationToken::new();
        let revoked = admitted.clone();
        let cluster = self.cluster.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            keep(&*cluster, &role, &stop).await;
            revoked.cancel();
        });
        Some(admitted)
    }
}

/// Keeps a role this node holds until `stop`, or until another node took
/// it (this one was silent too long), or this node is no longer counted
/// alive; gives it back in the first case.
async fn keep(cluster: &dyn Cluster, role: &str, stop: &CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                if let Err(error) = cluster.release_role(role).await {
                    tracing::warn!(role, %error, "cannot give the role back; another node takes it once this one stops");
                }
                return;
            }
            () = tokio::time::sleep(ROLE_CHECK) => {}
        }
        if !cluster.is_alive() {
            tracing::error!(
                role,
                "this node went silent longer than the cluster waits; giving up the role"
            );
            return;
        }
        match cluster.acquire_role(role).await {
            Ok(Lease::Held) => {}
            Ok(Lease::HeldBy(holder)) => {
                tracing::error!(role, %holder, "another node took the role over");
                return;
            }
            // The database is away: keep it while the node counts alive.
            Err(error) => tracing::warn!(role, %error, "cannot renew the role"),
        }
    }
}

/// While this node runs the automation, sends the answers that nodes
/// which are gone stored but never sent (see
/// [`SessionManager::outbox_of_gone_nodes`]), each once: `sent` holds
/// the turns already handed to the router, by the start-up outbox or an
/// earlier look. Looks every [`ROLE_CHECK`]; ends at `stop`.
pub async fn send_outbox_of_gone_nodes(
    cluster: Arc<dyn Cluster>,
    manager: SessionManager,
    router: ChannelRouter,
    mut sent: HashSet<TurnId>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ROLE_CHECK) => {}
        }
        let runs_automation = match cluster.nodes().await {
            Ok(nodes) => nodes
                .iter()
                .any(|n| &n.id == cluster.node() && n.roles.iter().any(|r| r == AUTOMATION)),
            Err(error) => {
                tracing::warn!(%error, "cannot list the cluster's nodes");
                false
            }
        };
        if !runs_automation {
            continue;
        }
        match manager.outbox_of_gone_nodes().await {
            Ok(outbox) => {
                let new: Vec<_> = outbox.into_iter().filter(|u| sent.insert(u.turn)).collect();
                if !new.is_empty() {
                    tracing::warn!(
                        answers = new.len(),
                        "sending what nodes that died stored but never sent"
                    );
                    router.follow_up(new, Vec::new());
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the answers of nodes that died");
            }
        }
    }
}

/// Runs the automation on whichever node holds its role: waits for the
/// role, starts the automation, and stops it for good if the role is
/// lost (the node then needs a restart to stand by again). Ends at `stop`.
pub async fn run_automation(
    cluster: Arc<dyn Cluster>,
    automation: Automation,
    channels: Option<Registry>,
    stop: CancellationToken,
) {
    loop {
        match cluster.acquire_role(AUTOMATION).await {
            Ok(Lease::Held) => break,
            Ok(Lease::HeldBy(_)) => {}
            Err(error) => {
                tracing::warn!(%error, "cannot check which node runs the automation");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ROLE_CHECK) => {}
        }
    }
    tracing::info!(node = %cluster.node(), "this node runs the cron jobs and the heartbeat");
    if let Err(error) = automation.start(channels).await {
        tracing::error!(%error, "cannot start the automation");
        let _ = cluster.release_role(AUTOMATION).await;
        return;
    }
    keep(&*cluster, AUTOMATION, &stop).await;
    if !stop.is_cancelled() {
        tracing::error!(
            "this node no longer runs the automation; restart it to stand by for it again"
        );
        automation.shutdown(Duration::ZERO).await;
    }
}
