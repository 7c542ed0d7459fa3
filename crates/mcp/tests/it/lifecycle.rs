//! When servers start and stop: `start: boot` and `start: lazy`, `stop()`
//! ending the child process, and a command that does not exist.

use std::time::{Duration, Instant};

use flynn_mcp::Phase;
use flynn_testkit::mcp::EventLog;
use flynn_tools::ToolPolicy;
use serde_json::json;

use crate::support::{Harness, alive, fixture, pids, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_server_starts_when_prepared_and_stop_ends_its_process() {
    let harness = Harness::new(|workspace| {
        json!({
            "eager": fixture(&workspace.join("eager"), json!({})),
            "lazy": fixture(&workspace.join("lazy"), json!({"start": "lazy"})),
        })
    });
    std::fs::create_dir_all(harness.workspace.path().join("eager")).unwrap();
    std::fs::create_dir_all(harness.workspace.path().join("lazy")).unwrap();
    let lazy_log = EventLog::file(harness.workspace.path().join("lazy/fixture.log"));
    let eager_log = EventLog::file(harness.workspace.path().join("eager/fixture.log"));

    harness.servers.start_boot();
    harness
        .phase("eager", Phase::Running, Duration::from_secs(10))
        .await;
    let lazy = harness.server("lazy").status();
    assert_eq!((lazy.phase, lazy.tools), (Phase::Idle, 0), "{lazy:?}");
    assert_eq!(lazy_log.events(), Vec::<String>::new());
    assert!(
        harness
            .names()
            .iter()
            .all(|name| !name.starts_with("lazy."))
    );
    // A call before it started says so.
    let early = harness.call("lazy.add", json!({"a": 1, "b": 2})).await;
    assert!(
        early.is_error && early.content.starts_with("unknown tool 'lazy.add'"),
        "{early:?}"
    );

    // What a turn does before listing an agent's tools.
    harness.registry.prepare(&ToolPolicy::allow_all()).await;
    let lazy = harness.server("lazy").status();
    assert_eq!((lazy.phase, lazy.tools), (Phase::Running, 10), "{lazy:?}");
    assert_eq!(
        harness.call("lazy.add", json!({"a": 1, "b": 2})).await,
        crate::support::ok("3")
    );

    let mut processes = pids(&lazy_log);
    processes.extend(pids(&eager_log));
    assert_eq!(processes.len(), 2);
    assert!(processes.iter().all(|pid| alive(*pid)));

    let started = Instant::now();
    harness.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopping took {:?}",
        started.elapsed()
    );
    for name in ["eager", "lazy"] {
        assert_eq!(harness.server(name).status().phase, Phase::Stopped);
    }
    wait_until(
        Duration::from_secs(5),
        "the servers' processes to end",
        || processes.iter().all(|pid| !alive(*pid)),
    )
    .await;
    let after = harness.call("lazy.add", json!({"a": 1, "b": 2})).await;
    assert!(after.is_error, "{after:?}");
    // Stopped for good: not started again.
    harness.server("lazy").start();
    assert_eq!(harness.server("lazy").status().phase, Phase::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_does_not_exist_is_reported_without_holding_up_ready() {
    let harness = Harness::new(|_| {
        json!({
            "missing": {
                "command": "flynn-no-such-mcp-server",
                "args": ["--stdio"],
                "startup_timeout_secs": 10,
            }
        })
    });

    let started = Instant::now();
    harness.server("missing").ready().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "ready() took {:?}",
        started.elapsed()
    );
    let status = harness.server("missing").status();
    assert_eq!(status.phase, Phase::Restarting, "{status:?}");
    assert_eq!(status.transport, "stdio");
    assert_eq!(status.target, "flynn-no-such-mcp-server --stdio");
    assert_eq!(status.tools, 0);
    let reason = status.error.clone().unwrap_or_default();
    assert!(
        reason.starts_with("cannot start 'flynn-no-such-mcp-server': not found"),
        "{status:?}"
    );
    assert!(status.retry_in_secs.is_some(), "{status:?}");
    assert_eq!(harness.names(), Vec::<String>::new());
    harness.stop().await;
}
