//! The gate: policy, hooks and approval before a tool runs.

use std::sync::Mutex;

use async_trait::async_trait;
use flynn_protocol::config::{HookAction, HookRule, ToolPolicyConfig};
use flynn_protocol::{Resolution, ToolEffect, TurnId};
use flynn_tools::{
    ApprovalRequest, ApproveAll, Approver, Decision, DenyAll, GateObserver, ToolError, ToolPolicy,
    TypedTool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Notify;

use super::*;

/// An approver and observer that writes down everything the gate does.
struct Recorder {
    answer: Answer,
    /// How long the approver takes to answer.
    delay: Duration,
    log: Mutex<Vec<String>>,
    requests: Mutex<Vec<ApprovalRequest>>,
    /// Signalled when the approver is asked.
    asked: Notify,
}

enum Answer {
    Approve,
    Never,
}

impl Recorder {
    fn new(answer: Answer, delay: Duration) -> Arc<Self> {
        Arc::new(Recorder {
            answer,
            delay,
            log: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            asked: Notify::new(),
        })
    }

    fn push(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[async_trait]
impl Approver for Recorder {
    async fn approve(&self, request: &ApprovalRequest) -> Decision {
        self.push(format!("asked about {}", request.tool));
        self.requests.lock().unwrap().push(request.clone());
        self.asked.notify_one();
        tokio::time::sleep(self.delay).await;
        match self.answer {
            Answer::Approve => Decision::Approve,
            Answer::Never => std::future::pending().await,
        }
    }
}

impl GateObserver for Recorder {
    fn confirmation_requested(&self, request: &ApprovalRequest) {
        self.push(format!(
            "requested {} {} ({}, {} s)",
            request.tool,
            request.call_id,
            request.effect.as_str(),
            request.timeout.as_secs()
        ));
    }

    fn confirmation_resolved(&self, request: &ApprovalRequest, resolution: Resolution) {
        self.push(format!("resolved {} {resolution:?}", request.call_id));
    }
}

/// Built-in tools behind hooks that confirm `shell.*`.
fn confirming(confirm_timeout_secs: u64) -> ToolExecutor {
    let config = ToolsConfig {
        hooks: vec![HookRule {
            tool: "shell.*".into(),
            action: HookAction::Confirm,
        }],
        confirm_timeout_secs,
        ..ToolsConfig::default()
    };
    ToolExecutor::from_config(Arc::new(builtin::registry(&config)), &config)
}

fn gated(dir: &Path, approver: Arc<dyn Approver>, observer: Arc<Recorder>) -> ToolContext {
    ToolContext {
        approver,
        observer: Some(observer),
        turn: Some(TurnId(7)),
        ..ToolContext::new(dir)
    }
}

/// A command that leaves a file behind when it runs.
fn touch() -> ToolCall {
    call(
        "shell.exec",
        json!({"command": "echo ran > ran.txt; echo done"}),
    )
}

#[tokio::test]
async fn an_approved_call_runs_after_the_observer_hears_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new(Answer::Approve, Duration::ZERO);
    let ctx = gated(dir.path(), recorder.clone(), recorder.clone());
    let executor = confirming(120);
    assert!(executor.needs_confirmation("shell.exec"));
    assert!(!executor.needs_confirmation("file.read"));

    assert_eq!(executor.execute(&touch(), &ctx).await, ok("done\n"));
    assert!(dir.path().join("ran.txt").exists());
    assert_eq!(
        recorder.log(),
        [
            "requested shell.exec call-1 (runs_processes, 120 s)",
            "asked about shell.exec",
            "resolved call-1 Approved",
        ]
    );
    assert_eq!(
        recorder.requests.lock().unwrap().clone(),
        [ApprovalRequest {
            session: "local:default".parse().unwrap(),
            agent: "main".into(),
            turn: Some(TurnId(7)),
            call_id: "call-1".into(),
            tool: "shell.exec".into(),
            input: json!({"command": "echo ran > ran.txt; echo done"}),
            effect: ToolEffect::RunsProcesses,
            timeout: Duration::from_secs(120),
            reason: None,
        }]
    );

    // Tools no hook holds back run without asking.
    std::fs::write(dir.path().join("a.txt"), "text").unwrap();
    assert_eq!(
        executor
            .execute(&call("file.read", json!({"path": "a.txt"})), &ctx)
            .await,
        ok("     1\ttext\n")
    );
    assert_eq!(recorder.log().len(), 3);
}

#[tokio::test]
async fn approve_all_runs_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new(Answer::Never, Duration::ZERO);
    let ctx = gated(dir.path(), Arc::new(ApproveAll), recorder.clone());
    assert_eq!(confirming(120).execute(&touch(), &ctx).await, ok("done\n"));
    assert!(dir.path().join("ran.txt").exists());
    assert_eq!(
        recorder.log(),
        [
            "requested shell.exec call-1 (runs_processes, 120 s)",
            "resolved call-1 Approved",
        ]
    );
}

#[tokio::test]
async fn a_denied_call_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new(Answer::Never, Duration::ZERO);
    let ctx = gated(
        dir.path(),
        Arc::new(DenyAll::new("the user said no")),
        recorder.clone(),
    );
    assert_eq!(
        confirming(120).execute(&touch(), &ctx).await,
        err("shell.exec was denied: the user said no")
    );
    assert!(!dir.path().join("ran.txt").exists());
    assert_eq!(
        recorder.log(),
        [
            "requested shell.exec call-1 (runs_processes, 120 s)",
            "resolved call-1 Denied",
        ]
    );

    // A plain context has no one to ask.
    let ctx = ToolContext::new(dir.path());
    assert_eq!(
        confirming(120).execute(&touch(), &ctx).await,
        err("shell.exec was denied: no one is available to approve it")
    );
    assert!(!dir.path().join("ran.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_confirmation_times_out_as_a_denial() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new(Answer::Never, Duration::ZERO);
    let ctx = gated(dir.path(), recorder.clone(), recorder.clone());
    let started = tokio::time::Instant::now();
    assert_eq!(
        confirming(5).execute(&touch(), &ctx).await,
        err("shell.exec was denied: nobody answered within 5 s")
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(!dir.path().join("ran.txt").exists());
    assert_eq!(
        recorder.log(),
        [
            "requested shell.exec call-1 (runs_processes, 5 s)",
            "asked about shell.exec",
            "resolved call-1 TimedOut",
        ]
    );
}

#[tokio::test]
async fn cancelling_the_turn_ends_a_confirmation_wait() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new(Answer::Never, Duration::ZERO);
    let ctx = gated(dir.path(), recorder.clone(), recorder.clone());
    let executor = confirming(600);
    let touch = touch();
    let (result, ()) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(executor.execute(&touch, &ctx), async {
            recorder.asked.notified().await;
            ctx.cancel.cancel();
        })
    })
    .await
    .expect("the call ended when the turn was cancelled");
    assert_eq!(result, err("shell.exec was cancelled"));
    assert!(!dir.path().join("ran.txt").exists());
    assert_eq!(
        recorder.log(),
        [
            "requested shell.exec call-1 (runs_processes, 600 s)",
            "asked about shell.exec",
            "resolved call-1 Cancelled",
        ]
    );

    // A call of an already cancelled turn asks no one.
    assert_eq!(
        executor.execute(&touch, &ctx).await,
        err("shell.exec was cancelled")
    );
    assert_eq!(recorder.log().len(), 3);
}

#[tokio::test]
async fn a_policy_denial_reaches_neither_hook_nor_approver() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::new(Answer::Approve, Duration::ZERO);
    let agent = ToolPolicyConfig {
        deny: vec!["shell.*".into()],
        ..ToolPolicyConfig::default()
    };
    let ctx = ToolContext {
        agent: "coder".into(),
        policy: Arc::new(ToolPolicy::new(&ToolsConfig::default(), Some(&agent))),
        ..gated(dir.path(), recorder.clone(), recorder.clone())
    };
    assert_eq!(
        confirming(120).execute(&touch(), &ctx).await,
        err("shell.exec was denied: not allowed for agent 'coder' by the tools policy")
    );
    assert!(!dir.path().join("ran.txt").exists());
    assert_eq!(recorder.log(), Vec::<String>::new());
}

#[test]
fn denials_are_their_own_kind_of_error() {
    let denied = ToolError::Denied {
        tool: "shell.exec".into(),
        reason: "the user said no".into(),
    };
    assert_eq!(
        denied.to_string(),
        "shell.exec was denied: the user said no"
    );
    assert!(denied.is_denied());
    assert!(
        !ToolError::Cancelled {
            tool: "shell.exec".into()
        }
        .is_denied()
    );
}

/// `test.wait`: waits on the tokio clock, so paused time controls it.
struct Wait;

#[derive(Deserialize, JsonSchema)]
struct WaitArgs {
    millis: u64,
}

#[async_trait]
impl TypedTool for Wait {
    type Args = WaitArgs;

    fn name(&self) -> &str {
        "test.wait"
    }

    fn description(&self) -> &str {
        "Wait."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: WaitArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        tokio::time::sleep(Duration::from_millis(args.millis)).await;
        Ok(format!("waited {} ms", args.millis))
    }
}

#[tokio::test(start_paused = true)]
async fn the_confirmation_wait_does_not_count_against_the_tool_timeout() {
    let config = ToolsConfig {
        hooks: vec![HookRule {
            tool: "test.*".into(),
            action: HookAction::Confirm,
        }],
        ..ToolsConfig::default()
    };
    let mut registry = ToolRegistry::new();
    registry.register(Wait);
    let executor = ToolExecutor::from_config(Arc::new(registry), &config);
    // The approver takes 2 s; the tool may run for 1 s after that.
    let recorder = Recorder::new(Answer::Approve, Duration::from_secs(2));
    let ctx = gated(Path::new("/"), recorder.clone(), recorder.clone());

    let started = tokio::time::Instant::now();
    assert_eq!(
        executor
            .execute(&call("test.wait", json!({"millis": 500})), &ctx)
            .await,
        ok("waited 500 ms")
    );
    assert_eq!(started.elapsed(), Duration::from_millis(2500));

    // The tool's own timeout still applies once it runs.
    let started = tokio::time::Instant::now();
    assert_eq!(
        executor
            .execute(&call("test.wait", json!({"millis": 1500})), &ctx)
            .await,
        err("test.wait timed out after 1s")
    );
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

#[tokio::test]
async fn a_log_hook_writes_an_audit_line_and_runs_the_call() {
    crate::logs::capture();
    let config = ToolsConfig {
        hooks: vec![HookRule {
            tool: "shell.exec".into(),
            action: HookAction::Log,
        }],
        ..ToolsConfig::default()
    };
    let executor = ToolExecutor::from_config(Arc::new(builtin::registry(&config)), &config);
    let dir = tempfile::tempdir().unwrap();
    // Supervised: reading is silent; the hook makes shell.exec log
    // instead of asking.
    let ctx = ToolContext {
        policy: Arc::new(ToolPolicy::new(&config, None)),
        session: "test:log-hook".parse().unwrap(),
        ..ToolContext::new(dir.path())
    };
    assert!(!executor.needs_confirmation("shell.exec"));
    assert_eq!(executor.execute(&touch(), &ctx).await, ok("done\n"));
    assert!(dir.path().join("ran.txt").exists());
    std::fs::write(dir.path().join("a.txt"), "text").unwrap();
    assert_eq!(
        executor
            .execute(&call("file.read", json!({"path": "a.txt"})), &ctx)
            .await,
        ok("     1\ttext\n")
    );
    assert_eq!(
        crate::logs::lines()
            .into_iter()
            .filter(|line| line.contains("session=test:log-hook"))
            .collect::<Vec<_>>(),
        [
            r#"INFO flynn::audit: message=tool call session=test:log-hook agent=main tool=shell.exec arguments={"command":"echo ran > ran.txt; echo done"}"#
        ]
    );
}
