//! Every method and subscription of the protocol.

use flynn_protocol::config::TokenScope;
use serde_json::Value;

use crate::types::*;
use crate::{MethodInfo, NoParams};

/// Defines each method's unit type and [`METHODS`].
macro_rules! protocol {
    (
        methods { $( $method:ident = $name:literal ($params:ty) -> $output:ty, [$($scope:ident),*], $summary:literal; )* }
        subscriptions { $( $sub:ident = $sname:literal ($sparams:ty) => $notification:literal ($item:ty), $unsubscribe:literal, [$($sscope:ident),*], $ssummary:literal; )* }
    ) => {
        /// One unit type per method and subscription, named after it
        /// (`sessions.list` is `SessionsList`).
        pub mod methods {
            use super::*;
            $(
                #[doc = concat!("`", $name, "`: ", $summary)]
                #[derive(Debug, Clone, Copy)]
                pub struct $method;

                impl crate::Method for $method {
                    const NAME: &'static str = $name;
                    const SCOPES: &'static [TokenScope] = &[$(TokenScope::$scope),*];
                    const SUMMARY: &'static str = $summary;
                    type Params = $params;
                    type Output = $output;
                }
            )*
            $(
                #[doc = concat!("`", $sname, "`: ", $ssummary)]
                #[derive(Debug, Clone, Copy)]
                pub struct $sub;

                impl crate::Subscription for $sub {
                    const NAME: &'static str = $sname;
                    const NOTIFICATION: &'static str = $notification;
                    const UNSUBSCRIBE: &'static str = $unsubscribe;
                    const SCOPES: &'static [TokenScope] = &[$(TokenScope::$sscope),*];
                    const SUMMARY: &'static str = $ssummary;
                    type Params = $sparams;
                    type Item = $item;
                }
            )*
        }

        /// Every method's and subscription's name with the scopes that may
        /// call it, for the gateway's check: a table of plain data, so a
        /// binary that checks scopes does not link the schema generators
        /// [`METHODS`] points at.
        pub const SCOPES: &[(&str, &[TokenScope])] = &[
            $( ($name, &[$(TokenScope::$scope),*]), )*
            $( ($sname, &[$(TokenScope::$sscope),*]), )*
        ];

        /// Every method, then every subscription.
        pub const METHODS: &[MethodInfo] = &[
            $( MethodInfo::method::<methods::$method>(), )*
            $( MethodInfo::subscription::<methods::$sub>(), )*
        ];
    };
}

protocol! {
    methods {
        AgentCancel = "agent.cancel" (CancelParams) -> CancelResult, [Chat],
            "Cancels a session's running turn, or one turn by id (running or waiting).";
        AgentStatus = "agent.status" (StatusParams) -> StatusResult, [Chat, Read],
            "Running and open turns, active sessions, whether the daemon is draining.";
        SessionsList = "sessions.list" (NoParams) -> Vec<SessionSummary>, [Chat, Read],
            "Every session, most recently updated first.";
        SessionsHistory = "sessions.history" (HistoryParams) -> HistoryResult, [Chat, Read],
            "A session's messages: the last page, a page before a cursor, or what came after one.";
        SessionsSend = "sessions.send" (SendParams) -> SendResult, [Chat],
            "Like agent.send, answering once the turn is over (for HTTP clients).";
        SessionsReset = "sessions.reset" (SessionParams) -> ResetResult, [Chat],
            "Deletes a session's history and metadata (usage records stay).";
        ToolsList = "tools.list" (ToolsListParams) -> Vec<ToolInfo>, [Read],
            "Every registered tool, with whether the agent's policy allows it.";
        ToolsInvoke = "tools.invoke" (InvokeParams) -> InvokeResult, [Admin],
            "Runs one tool call outside a turn, under the agent's policy, hooks and audit log.";
        ConfirmationsList = "confirmations.list" (NoParams) -> Vec<PendingConfirmation>, [Approve],
            "Tool calls of gateway turns waiting for a person.";
        ConfirmationsResolve = "confirmations.resolve" (ResolveParams) -> ResolveResult, [Approve],
            "Approves or denies one waiting tool call.";
        ConfigGet = "config.get" (ConfigGetParams) -> Value, [Admin],
            "The running config (or one value by dotted path), secrets masked.";
        ConfigPatch = "config.patch" (ConfigPatchParams) -> ConfigPatchResult, [Admin],
            "Sets values in the config file by dotted path, keeping its comments; validated before it is written; applies after a restart.";
        UsageSummary = "usage.summary" (UsageParams) -> crate::types::UsageSummary, [Read],
            "Tokens and cost per tier and per purpose, over every session or one.";
        SystemHealth = "system.health" (NoParams) -> Health, [Read],
            "Status, version, uptime and load.";
        SystemVersion = "system.version" (NoParams) -> VersionInfo, [Chat],
            "The daemon's and the protocol's versions.";
        SystemRestart = "system.restart" (NoParams) -> RestartResult, [Admin],
            "Drains (running turns finish) and starts the daemon again.";
        SystemLogs = "system.logs" (LogsParams) -> LogsResult, [Read],
            "The daemon's recent log lines (the last 1000 are kept), newest last.";
        ProvidersStatus = "providers.status" (ProvidersParams) -> Vec<ProviderStatus>, [Read],
            "Whether each configured provider answers (its model list, asked with the key; cached 30 s unless refresh).";
        ChannelsStatus = "channels.status" (NoParams) -> Vec<ChannelInfo>, [Read],
            "Each chat channel's health: connected, retrying (with the last error), unavailable; the web chat included.";
        ClusterStatus = "cluster.status" (NoParams) -> crate::types::ClusterStatus, [Read],
            "The daemons sharing this one's PostgreSQL database: each node, whether it is alive, the sessions and roles it holds; no nodes when the store is not shared.";
        McpStatus = "mcp.status" (NoParams) -> Vec<McpServerStatus>, [Read],
            "Each enabled MCP server Flynn uses as a client: its phase, tool count, last error and next retry.";
        PairingList = "pairing.list" (NoParams) -> crate::types::PairingList, [Approve],
            "Pairing codes waiting for approval, and the senders approved by pairing.";
        PairingApprove = "pairing.approve" (PairingApproveParams) -> PairedSender, [Approve],
            "Approves a pairing code: its sender may talk to Flynn on that channel from now on.";
        PairingRevoke = "pairing.revoke" (PairingRevokeParams) -> PairingRevokeResult, [Approve],
            "Takes back a sender's approval by pairing.";
    }
    subscriptions {
        AgentSend = "agent.send" (SendParams) => "agent.event" (Notification), "agent.unsubscribe", [Chat],
            "Accepts a message and streams its turn's events; the last is a run_state of complete, cancelled or error (a chat command: one command event).";
        SessionsSubscribe = "sessions.subscribe" (SubscribeParams) => "sessions.event" (Notification), "sessions.unsubscribe", [Chat, Read],
            "Every event of the named sessions, or of all sessions.";
    }
}
