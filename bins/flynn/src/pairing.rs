//! `flynn pairing`: approve the senders who asked to talk to Flynn on a
//! chat channel. Works on the session database directly (the daemon sees
//! the change with the sender's next message) or through a running daemon
//! (`--gateway`, `FLYNN_GATEWAY_URL`), with the same output.

use std::sync::Arc;

use flynn_api::methods;
use flynn_core::Pairing;
use flynn_core::config;
use flynn_core::gateway::api::{NoParams, PairingApproveParams, PairingList, PairingRevokeParams};
use flynn_core::gateway::convert;
use flynn_core::protocol::clock::now_millis;
use serde_json::json;

use crate::cli::{PairingArgs, PairingCommand};
use crate::env::CliEnv;
use crate::exit::Failure;
use crate::remote;
use crate::sessions::timestamp;

/// Channels a pairing can be for.
const CHANNELS: &[&str] = &["telegram", "discord", "slack", "whatsapp"];

pub async fn run(args: PairingArgs) -> Result<(), Failure> {
    if let PairingCommand::Approve { channel, .. } | PairingCommand::Revoke { channel, .. } =
        &args.command
        && !CHANNELS.contains(&channel.as_str())
    {
        return Err(Failure::usage(format!(
            "unknown channel '{channel}' (expected one of: {})",
            CHANNELS.join(", ")
        )));
    }
    let remote = match remote::target(args.gateway.as_deref(), args.config.as_deref())? {
        Some(target) => {
            let client = remote::connect(&target).await?;
            Some((target, client))
        }
        None => None,
    };
    let store = match &remote {
        Some(_) => None,
        None => {
            let loaded = config::load(args.config.as_deref(), &CliEnv)?;
            let store: Arc<dyn Pairing> =
                flynn_core::sessions::open(&loaded.config.sessions, &loaded.paths.home)
                    .await
                    .map_err(|e| Failure::other(e.to_string()))?;
            Some(store)
        }
    };
    let storage = |e: flynn_core::SessionsError| Failure::other(e.to_string());
    match args.command {
        PairingCommand::List { json } => {
            let list = match (&remote, &store) {
                (Some((target, client)), _) => {
                    remote::call::<methods::PairingList>(target, client, &NoParams {}).await?
                }
                (None, Some(store)) => PairingList {
                    pending: store
                        .pairing_pending(now_millis())
                        .await
                        .map_err(storage)?
                        .into_iter()
                        .map(convert::pairing_code)
                        .collect(),
                    approved: store
                        .approved_peers()
                        .await
                        .map_err(storage)?
                        .into_iter()
                        .map(convert::paired_sender)
                        .collect(),
                },
                (None, None) => unreachable_source(),
            };
            print_list(&list, json);
        }
        PairingCommand::Approve {
            channel,
            code,
            owner,
            json,
        } => {
            let peer = match (&remote, &store) {
                (Some((target, client)), _) => {
                    let params = PairingApproveParams {
                        channel: channel.clone(),
                        code: code.clone(),
                        owner,
                    };
                    remote::call::<methods::PairingApprove>(target, client, &params).await?
                }
                (None, Some(store)) => {
                    let mut peer = store
                        .pairing_approve(&channel, &code, now_millis())
                        .await
                        .map_err(storage)?
                        .map_err(|refusal| Failure::other(refusal.to_string()))?;
                    if owner {
                        store
                            .set_peer_owner(&peer.channel, &peer.sender, true)
                            .await
                            .map_err(storage)?;
                        peer.owner = true;
                    }
                    convert::paired_sender(peer)
                }
                (None, None) => unreachable_source(),
            };
            if json {
                println!("{}", json!(peer));
            } else if peer.owner {
                println!(
                    "Approved {} on {} as an owner: their messages have your rights.",
                    who(&peer.sender, peer.name.as_deref()),
                    peer.channel
                );
            } else {
                println!(
                    "Approved {} on {} as a guest: they can talk to Flynn now, in their own session and memory. (`--owner` approves an owner.)",
                    who(&peer.sender, peer.name.as_deref()),
                    peer.channel
                );
            }
        }
        PairingCommand::Revoke {
            channel,
            sender,
            json,
        } => {
            let revoked = match (&remote, &store) {
                (Some((target, client)), _) => {
                    let params = PairingRevokeParams {
                        channel: channel.clone(),
                        sender: sender.clone(),
                    };
                    remote::call::<methods::PairingRevoke>(target, client, &params)
                        .await?
                        .revoked
                }
                (None, Some(store)) => store
                    .revoke_peer(&channel, &sender)
                    .await
                    .map_err(storage)?,
                (None, None) => unreachable_source(),
            };
            if json {
                println!("{}", json!({"revoked": revoked}));
            } else if revoked {
                println!("Revoked {sender} on {channel}.");
            } else {
                return Err(Failure::other(format!(
                    "{sender} was not approved by pairing on {channel} (senders in allow_from are changed in the config)"
                )));
            }
        }
    }
    Ok(())
}

/// `open` above returns exactly one of the two.
fn unreachable_source() -> ! {
    unreachable!("either the daemon or the database is open")
}

fn who(sender: &str, name: Option<&str>) -> String {
    match name {
        Some(name) if name != sender => format!("{name} ({sender})"),
        _ => sender.to_owned(),
    }
}

fn print_list(list: &PairingList, json: bool) {
    if json {
        println!("{}", json!(list));
        return;
    }
    if list.pending.is_empty() {
        println!("No pairing codes waiting.");
    } else {
        println!("Waiting for approval:");
        for p in &list.pending {
            println!(
                "  {:<9} {}  {}  (expires {})",
                p.channel,
                p.code,
                who(&p.sender, p.name.as_deref()),
                timestamp(p.expires_at)
            );
        }
        if let Some(first) = list.pending.first() {
            println!(
                "Approve with: flynn pairing approve {} {}",
                first.channel, first.code
            );
        }
    }
    if !list.approved.is_empty() {
        println!("Approved by pairing:");
        for p in &list.approved {
            println!(
                "  {:<9} {}  {}  (since {})",
                p.channel,
                who(&p.sender, p.name.as_deref()),
                if p.owner { "owner" } else { "guest" },
                timestamp(p.approved_at)
            );
        }
    }
}
