//! Against the real Google, with the account signed in on this machine:
//! read-only calls of each service it allows. Run with
//! `FLYNN_GOOGLE_LIVE=1 cargo test -p flynn-google --test it live -- --ignored`.

use std::sync::Arc;

use flynn_google::tools::{CalendarList, DriveSearch, GmailSearch, TasksList};
use flynn_google::{Google, service_granted};
use flynn_protocol::config::{GoogleConfig, GoogleService};
use flynn_tools::{ToolContext, TypedTool};

async fn call<T: TypedTool>(tool: T, args: serde_json::Value) -> String {
    let args: T::Args = serde_json::from_value(args).unwrap();
    let dir = tempfile::tempdir().unwrap();
    tool.run(args, &ToolContext::new(dir.path()))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
#[ignore = "needs FLYNN_GOOGLE_LIVE=1 and a Google account signed in with `flynn auth google login`"]
async fn the_signed_in_account_answers_each_service_it_allows() {
    assert_eq!(
        std::env::var("FLYNN_GOOGLE_LIVE").as_deref(),
        Ok("1"),
        "set FLYNN_GOOGLE_LIVE=1 to run the live Google test"
    );
    let google = Arc::new(
        Google::from_config(&GoogleConfig::default(), |name| std::env::var(name).ok()).unwrap(),
    );
    let account = google.resolve(None).expect("an account is signed in");
    let file = google.store().load().unwrap();
    let scopes = file.google.accounts[&account].scopes();
    let allows = |service| service_granted(service, &scopes);
    if allows(GoogleService::Gmail) {
        println!(
            "{}",
            call(GmailSearch(google.clone()), serde_json::json!({"max": 1})).await
        );
    }
    if allows(GoogleService::Calendar) {
        println!(
            "{}",
            call(CalendarList(google.clone()), serde_json::json!({})).await
        );
    }
    if allows(GoogleService::Drive) {
        println!(
            "{}",
            call(DriveSearch(google.clone()), serde_json::json!({"max": 3})).await
        );
    }
    if allows(GoogleService::Tasks) {
        println!(
            "{}",
            call(TasksList(google.clone()), serde_json::json!({})).await
        );
    }
}
