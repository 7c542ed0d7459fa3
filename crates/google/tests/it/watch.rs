//! New mail from the mailbox's history.

use flynn_google::watch::{arrived, cursor_now};
use flynn_testkit::google::{Mail, OWNER};

use crate::Setup;

fn mail(from: &str, subject: &str) -> Mail {
    Mail {
        from: from.into(),
        subject: subject.into(),
        text: "Hello.".into(),
        ..Mail::default()
    }
}

#[tokio::test]
async fn only_new_inbox_mail_matching_the_query_arrives() {
    let setup = Setup::signed_in(&["openid", "email", "gmail.modify"]);
    let google = &setup.google;
    setup
        .fake
        .add_mail(OWNER, mail("bank@bank.example", "Old statement"));
    let cursor = cursor_now(google, None).await.unwrap();
    let nothing = arrived(google, None, &cursor, Some("from:bank.example"))
        .await
        .unwrap();
    assert!(nothing.messages.is_empty());
    assert_eq!(nothing.cursor, cursor);

    let news = setup
        .fake
        .add_mail(OWNER, mail("news@paper.example", "Headlines"));
    let bank = setup
        .fake
        .add_mail(OWNER, mail("alerts@bank.example", "Card payment"));
    let found = arrived(google, None, &cursor, Some("from:bank.example"))
        .await
        .unwrap();
    assert_eq!(found.messages, vec![bank.clone()]);
    assert!(!found.gap);
    let all = arrived(google, None, &cursor, None).await.unwrap();
    assert_eq!(all.messages, vec![news, bank]);
    // From the new cursor, nothing again.
    let after = arrived(google, None, &found.cursor, None).await.unwrap();
    assert!(after.messages.is_empty());

    setup.fake.expire_history(OWNER);
    let gap = arrived(google, None, &found.cursor, None).await.unwrap();
    assert!(gap.gap && gap.messages.is_empty());
    assert_ne!(gap.cursor, found.cursor);
    setup.assert_strict();
}
