//! `flynn store copy`, as a user runs it.

use flynn_testkit::{FakeOpenAi, Reply};

use crate::{Env, stderr, stdout};

#[tokio::test(flavor = "multi_thread")]
async fn a_store_is_copied_into_an_empty_one_and_a_full_one_is_refused() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hi there.".into()));
    let env = Env::new()
        .var("OPENAI_BASE_URL", fake.base_url())
        .var("OPENAI_API_KEY", "sk-x");
    let sent = env.run(&["send", "--session", "cli:notes", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{}", stderr(&sent));

    let from = env.path().join("home/sessions.db");
    let to = env.path().join("moved/sessions.db");
    let to_url = format!("sqlite://{}", to.display());
    let copied = env.run(&["store", "copy", from.to_str().unwrap(), &to_url]);
    assert_eq!(copied.status.code(), Some(0), "{}", stderr(&copied));
    assert_eq!(
        stdout(&copied),
        format!(
            "copied 1 sessions, 2 messages, 1 turns, 1 usage records from {} to {}\n",
            from.display(),
            to.display()
        )
    );
    // The copy is a store Flynn reads: the conversation is there.
    let listed = env
        .command(&["sessions", "show", "cli:notes"])
        .env("FLYNN_HOME", env.path().join("moved"))
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    assert!(stdout(&listed).contains("Hi there."), "{}", stdout(&listed));

    let again = env.run(&["store", "copy", from.to_str().unwrap(), &to_url]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again),
        format!(
            "error: session database error: the session store {} is not empty (1 sessions, 2 messages, 1 turns, 1 usage records): copy into an empty database (a new file, or a new PostgreSQL database)\n",
            to.display()
        )
    );
    let wrong = env.run(&["store", "copy", "mysql://db/flynn", &to_url]);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(stderr(&wrong).starts_with("error: FROM: sessions.url 'mysql://db/flynn'"));
}
