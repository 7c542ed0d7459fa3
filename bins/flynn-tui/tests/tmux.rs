//! `flynn-tui` in a real terminal (tmux) against a gateway: a streamed
//! answer, Esc cancelling a turn, and a reconnect after the daemon
//! restarts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use flynn_core::Flynn;
use flynn_core::gateway::{Gateway, GatewayParts, RemoteApprover};
use flynn_core::protocol::config::{FlynnConfig, ProviderConfig, ProviderKind, TiersConfig};
use flynn_testkit::{FakeOpenAi, Reply};

const TOKEN: &str = "tui-test-token-0123456789";
const STALL: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"working\"},\"finish_reason\":null}]}\n\n";

fn config(fake: &FakeOpenAi) -> FlynnConfig {
    let mut config = FlynnConfig::default();
    let mut provider = ProviderConfig::new(ProviderKind::OpenaiCompatible);
    provider.base_url = Some(fake.base_url());
    config.providers.insert("fake".into(), provider);
    config.models.tiers = TiersConfig {
        default: vec!["fake/m".parse().unwrap()],
        ..TiersConfig::default()
    };
    config.memory.enabled = false;
    config
}

/// A tmux server of its own, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux is missing: run scripts/install-test-deps.sh");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "tui"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    async fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {text:?}; the screen:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_cancel_and_reconnect_in_a_real_terminal() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let flynn = Flynn::builder()
        .config(config(&fake))
        .home(home.path())
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let gateway = |flynn: &Flynn| {
        Gateway::new(GatewayParts {
            manager: flynn.manager().clone(),
            config: config(&fake),
            config_file: None,
            token: TOKEN.to_owned(),
            approver: RemoteApprover::new(),
            channels: None,
        })
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let serving = gateway(&flynn).serve(listener).unwrap();
    let addr = serving.local_addr();

    let tmux = Tmux {
        socket: format!("flynn-tui-test-{}", std::process::id()),
    };
    let command = format!(
        "env FLYNN_GATEWAY_TOKEN={TOKEN} {} --gateway http://{addr} --session tui:e2e",
        env!("CARGO_BIN_EXE_flynn-tui")
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "tui",
        "-x",
        "90",
        "-y",
        "24",
        &command,
    ]);
    tmux.wait_for("● connected").await;

    fake.push(Reply::Text("Hi from the **fake** model.".into()));
    tmux.keys(&["hello there", "Enter"]);
    tmux.wait_for("Hi from the fake model.").await;
    tmux.wait_for("› hello there").await;

    fake.push(Reply::Stall(STALL.into()));
    tmux.keys(&["a long job", "Enter"]);
    tmux.wait_for("answering").await;
    tmux.wait_for("Esc cancels").await;
    tmux.keys(&["Escape"]);
    tmux.wait_for("· cancelled").await;

    // The daemon goes away and comes back on the same address.
    serving.shutdown(Duration::from_secs(2)).await;
    tmux.wait_for("reconnecting").await;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let serving = gateway(&flynn).serve(listener).unwrap();
    tmux.wait_for("● connected").await;
    tmux.wait_for("Hi from the fake model.").await;
    fake.push(Reply::Text("Still here.".into()));
    tmux.keys(&["again", "Enter"]);
    tmux.wait_for("Still here.").await;

    tmux.keys(&["C-c"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The session ends with the program.
    while tmux.run(&["list-sessions"]).contains("tui:") {
        assert!(Instant::now() < deadline, "flynn-tui did not quit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.violations(), Vec::<String>::new());
    flynn.shutdown().await;
    serving.shutdown(Duration::from_secs(2)).await;
}
