//! Each tool against the fake, and what the owner reads when something is
//! wrong.

use flynn_google::tools::{
    CalendarCreate, CalendarDelete, CalendarList, CalendarUpdate, DocsAppend, DocsCreate,
    DriveRead, DriveSearch, DriveUpload, GmailAttachment, GmailDraft, GmailLabel, GmailRead,
    GmailSearch, GmailSend, TasksAdd, TasksComplete, TasksList,
};
use flynn_protocol::ToolEffect;
use flynn_testkit::google::{Attachment, Mail, OWNER};
use flynn_tools::{ToolContext, TypedTool};
use serde_json::{Value, json};

use crate::{ALL, Setup};

async fn run<T: TypedTool>(tool: T, args: Value, setup: &Setup) -> Result<String, String> {
    let args: T::Args = serde_json::from_value(args).expect("arguments parse");
    tool.run(args, &ToolContext::new(setup.workspace()))
        .await
        .map_err(|e| e.to_string())
}

fn ann(subject: &str, text: &str) -> Mail {
    Mail {
        from: "Ann Smith <ann@example.com>".into(),
        subject: subject.into(),
        text: text.into(),
        message_id: Some(format!("<{}@mail.example.com>", subject.len())),
        ..Mail::default()
    }
}

#[tokio::test]
async fn gmail_finds_reads_and_saves_an_attachment() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    setup
        .fake
        .add_mail(OWNER, ann("Lunch", "Shall we have lunch on Friday?"));
    let invoice = setup.fake.add_mail(
        OWNER,
        Mail {
            html: Some("<p>Your <b>invoice</b> for November is attached.</p>".into()),
            text: String::new(),
            attachments: vec![Attachment {
                name: "invoice-11.pdf".into(),
                media_type: "application/pdf".into(),
                data: b"%PDF-1.4 fake invoice".to_vec(),
            }],
            ..ann("Invoice November", "")
        },
    );

    let found = run(
        GmailSearch(g()),
        json!({"query": "subject:invoice"}),
        &setup,
    )
    .await
    .unwrap();
    assert!(found.contains(&format!("id {invoice}")), "{found}");
    assert!(found.contains("Ann Smith <ann@example.com>"), "{found}");
    assert!(found.contains("Invoice November · unread"), "{found}");
    assert!(!found.contains("Lunch"), "{found}");

    let read = run(GmailRead(g()), json!({"id": invoice}), &setup)
        .await
        .unwrap();
    assert!(read.contains("Subject: Invoice November"), "{read}");
    // The HTML part, as text.
    assert!(
        read.contains("Your invoice for November is attached."),
        "{read}"
    );
    assert!(read.contains("- invoice-11.pdf (application/pdf"), "{read}");

    let saved = run(
        GmailAttachment(g()),
        json!({"message": invoice, "name": "invoice-11.pdf"}),
        &setup,
    )
    .await
    .unwrap();
    assert!(saved.contains("attachments/invoice-11.pdf"), "{saved}");
    let bytes = std::fs::read(setup.workspace().join("attachments/invoice-11.pdf")).unwrap();
    assert_eq!(bytes, b"%PDF-1.4 fake invoice");
    let missing = run(
        GmailAttachment(g()),
        json!({"message": invoice, "name": "other.pdf"}),
        &setup,
    )
    .await
    .unwrap_err();
    assert!(missing.contains("it has: invoice-11.pdf"), "{missing}");

    let empty = run(
        GmailSearch(g()),
        json!({"query": "from:nobody@example.com"}),
        &setup,
    )
    .await
    .unwrap();
    assert_eq!(empty, "No message matches from:nobody@example.com.");
    setup.assert_strict();
}

#[tokio::test]
async fn a_reply_goes_in_the_thread_with_its_references_and_drafts_wait() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    let original = setup.fake.add_mail(
        OWNER,
        ann("Dinner on Saturday?", "Are you coming on Saturday?"),
    );
    let sent = run(
        GmailSend(g()),
        json!({
            "to": ["Ann Smith <ann@example.com>"],
            "subject": "Re: Dinner on Saturday?",
            "body": "Yes, I'll be there.",
            "reply_to": original,
        }),
        &setup,
    )
    .await
    .unwrap();
    assert!(
        sent.starts_with("sent \"Re: Dinner on Saturday?\" from owner@example.com"),
        "{sent}"
    );
    let mail = &setup.fake.sent(OWNER)[0];
    assert_eq!(mail.to, "\"Ann Smith\" <ann@example.com>");
    assert_eq!(mail.text.trim(), "Yes, I'll be there.");
    assert_eq!(mail.thread_id, original);
    let header = |name: &str| {
        mail.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    // ann() gives the message id <19@…> ("Dinner on Saturday?" is 19 long).
    assert_eq!(
        header("In-Reply-To").as_deref(),
        Some("<19@mail.example.com>")
    );
    assert_eq!(
        header("References").as_deref(),
        Some("<19@mail.example.com>")
    );

    // One address as a string, as models often write it.
    let drafted = run(
        GmailDraft(g()),
        json!({"to": "bob@example.com", "cc": ["carol@example.com"], "subject": "Plans", "body": "Draft only."}),
        &setup,
    )
    .await
    .unwrap();
    assert!(drafted.contains("saved the draft \"Plans\""), "{drafted}");
    assert_eq!(setup.fake.drafts(OWNER).len(), 1);
    assert_eq!(setup.fake.sent(OWNER).len(), 1, "a draft is not sent");

    let bad = run(
        GmailSend(g()),
        json!({"to": ["not an address"], "subject": "x", "body": "y"}),
        &setup,
    )
    .await
    .unwrap_err();
    assert!(
        bad.contains("'not an address' in to is not an email address"),
        "{bad}"
    );
    assert_eq!(GmailSend(g()).effect(), ToolEffect::ActsOnAccount);
    assert_eq!(GmailDraft(g()).effect(), ToolEffect::ActsOnAccount);
    assert!(GmailRead(g()).untrusted_output());
    setup.assert_strict();
}

#[tokio::test]
async fn labels_mark_read_archive_and_make_new_ones() {
    let setup = Setup::signed_in(&ALL);
    let id = setup.fake.add_mail(OWNER, ann("Newsletter", "News."));
    let done = run(
        GmailLabel(setup.google.clone()),
        json!({"id": id, "add": ["Receipts", "STARRED"], "remove": ["UNREAD", "INBOX"]}),
        &setup,
    )
    .await
    .unwrap();
    assert!(done.contains("added [Receipts, STARRED]"), "{done}");
    let labels = setup.fake.labels_of(OWNER, &id);
    assert!(labels.contains(&"STARRED".to_owned()), "{labels:?}");
    assert!(!labels.contains(&"UNREAD".to_owned()) && !labels.contains(&"INBOX".to_owned()));
    assert!(labels.iter().any(|l| l.starts_with("Label_")), "{labels:?}");
    setup.assert_strict();
}

#[tokio::test]
async fn calendar_times_are_the_calendars_own() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    setup.fake.set_time_zone(OWNER, "Europe/Berlin");
    setup.fake.add_event(
        OWNER,
        "primary",
        json!({
            "summary": "Dentist",
            "location": "Main St 5",
            "start": {"dateTime": "2026-12-01T09:00:00Z"},
            "end": {"dateTime": "2026-12-01T10:00:00Z"},
        }),
    );
    setup.fake.add_event(
        OWNER,
        "primary",
        json!({
            "summary": "Holiday",
            "start": {"date": "2026-12-02"},
            "end": {"date": "2026-12-03"},
        }),
    );
    let listed = run(
        CalendarList(g()),
        json!({"from": "2026-12-01", "to": "2026-12-01"}),
        &setup,
    )
    .await
    .unwrap();
    assert!(listed.contains("(Europe/Berlin)"), "{listed}");
    // 09:00 UTC is 10:00 in Berlin.
    assert!(
        listed.contains("Tue 01 Dec 2026 10:00–11:00 · Dentist · at Main St 5"),
        "{listed}"
    );
    assert!(!listed.contains("Holiday"), "{listed}");

    let created = run(
        CalendarCreate(g()),
        json!({"title": "Call Ann", "start": "2026-12-04T15:30", "attendees": ["ann@example.com"]}),
        &setup,
    )
    .await
    .unwrap();
    assert!(
        created.contains("Fri 04 Dec 2026 15:30–16:30 · Call Ann"),
        "{created}"
    );
    let events = setup.fake.events(OWNER, "primary");
    let call = events.iter().find(|e| e["summary"] == "Call Ann").unwrap();
    assert_eq!(call["start"]["dateTime"], "2026-12-04T15:30:00+01:00");
    let id = call["id"].as_str().unwrap().to_owned();

    let moved = run(
        CalendarUpdate(g()),
        json!({"id": id, "start": "2026-12-04T16:00", "end": "2026-12-04T16:45"}),
        &setup,
    )
    .await
    .unwrap();
    assert!(moved.contains("16:00–16:45 · Call Ann"), "{moved}");
    run(CalendarDelete(g()), json!({"id": id}), &setup)
        .await
        .unwrap();
    let again = run(CalendarDelete(g()), json!({"id": id}), &setup)
        .await
        .unwrap_err();
    assert!(again.contains("410"), "{again}");
    let bad = run(
        CalendarCreate(g()),
        json!({"title": "x", "start": "tomorrow"}),
        &setup,
    )
    .await
    .unwrap_err();
    assert!(bad.contains("'tomorrow' is not a time"), "{bad}");
    setup.assert_strict();
}

#[tokio::test]
async fn drive_finds_reads_and_uploads() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    let doc = setup.fake.add_file(
        OWNER,
        "Trip plan",
        "application/vnd.google-apps.document",
        b"Day 1: Lisbon. Day 2: Porto.",
    );
    let sheet = setup.fake.add_file(
        OWNER,
        "Budget",
        "application/vnd.google-apps.spreadsheet",
        b"item,cost\nhotel,300\n",
    );
    let found = run(DriveSearch(g()), json!({"query": "Lisbon"}), &setup)
        .await
        .unwrap();
    assert!(
        found.contains(&format!("id {doc} · Google Doc · Trip plan")),
        "{found}"
    );
    assert!(!found.contains("Budget"), "{found}");
    let read = run(DriveRead(g()), json!({"id": doc}), &setup)
        .await
        .unwrap();
    assert!(read.contains("Day 1: Lisbon. Day 2: Porto."), "{read}");
    let csv = run(DriveRead(g()), json!({"id": sheet}), &setup)
        .await
        .unwrap();
    assert!(csv.contains("hotel,300"), "{csv}");

    std::fs::write(setup.workspace().join("notes.txt"), "packing list").unwrap();
    let uploaded = run(DriveUpload(g()), json!({"path": "notes.txt"}), &setup)
        .await
        .unwrap();
    assert!(
        uploaded.starts_with("uploaded notes.txt to Drive as notes.txt"),
        "{uploaded}"
    );
    let files = setup.fake.files(OWNER);
    let notes = files.iter().find(|f| f["name"] == "notes.txt").unwrap();
    assert_eq!(notes["mimeType"], "text/plain");
    let outside = run(DriveUpload(g()), json!({"path": "../secret"}), &setup)
        .await
        .unwrap_err();
    assert!(!outside.is_empty());
    setup.assert_strict();
}

/// A one-page PDF saying `text` (Helvetica, offsets computed).
fn pdf(text: &str) -> Vec<u8> {
    let stream = format!("BT /F1 18 Tf 72 720 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_owned(),
        format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (n, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n{object}\nendobj\n", n + 1).bytes());
    }
    let xref = out.len();
    out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
    for offset in offsets {
        out.extend(format!("{offset:010} 00000 n \n").bytes());
    }
    out.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .bytes(),
    );
    out
}

#[tokio::test]
async fn a_pdf_in_drive_is_read_as_text() {
    assert!(
        flynn_tools::find_program(std::path::Path::new("pdftotext")).is_some(),
        "pdftotext is needed: run scripts/install-test-deps.sh (apt-get install poppler-utils)"
    );
    let setup = Setup::signed_in(&ALL);
    let id = setup.fake.add_file(
        OWNER,
        "invoice.pdf",
        "application/pdf",
        &pdf("Invoice total 42 EUR"),
    );
    let read = run(DriveRead(setup.google.clone()), json!({"id": id}), &setup)
        .await
        .unwrap();
    assert!(read.starts_with("invoice.pdf (PDF)"), "{read}");
    assert!(read.contains("Invoice total 42 EUR"), "{read}");
    setup.assert_strict();
}

#[tokio::test]
async fn docs_are_made_and_added_to() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    let made = run(
        DocsCreate(g()),
        json!({"title": "Minutes", "text": "Attendees: Ann, Bob.\n"}),
        &setup,
    )
    .await
    .unwrap();
    let id = made
        .split("(id ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_owned();
    run(
        DocsAppend(g()),
        json!({"id": id, "text": "Decision: go.\n"}),
        &setup,
    )
    .await
    .unwrap();
    let text = setup.fake.document_text(&id).unwrap();
    assert!(
        text.contains("Attendees: Ann, Bob.\nDecision: go."),
        "{text:?}"
    );
    setup.assert_strict();
}

#[tokio::test]
async fn tasks_are_listed_across_pages_added_and_completed() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    for n in 0..130 {
        setup
            .fake
            .add_task(OWNER, "@default", &format!("chore {n}"), None);
    }
    let listed = run(TasksList(g()), json!({}), &setup).await.unwrap();
    assert_eq!(
        listed.lines().filter(|l| l.starts_with("- [ ]")).count(),
        130
    );
    let added = run(
        TasksAdd(g()),
        json!({"title": "Renew passport", "due": "2026-12-15"}),
        &setup,
    )
    .await
    .unwrap();
    assert!(added.contains("Renew passport · due 2026-12-15"), "{added}");
    let id = added
        .split("[id ")
        .nth(1)
        .unwrap()
        .trim_end_matches(']')
        .to_owned();
    let done = run(TasksComplete(g()), json!({"id": id}), &setup)
        .await
        .unwrap();
    assert!(done.contains("- [x] Renew passport"), "{done}");
    setup.assert_strict();
}

#[tokio::test]
async fn a_missing_scope_names_the_command_that_grants_it() {
    let setup = Setup::signed_in(&["openid", "email", "gmail.modify"]);
    let error = run(CalendarList(setup.google.clone()), json!({}), &setup)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        "the Google account owner@example.com has not given Flynn access to calendar (scope calendar); run `flynn auth google login --account owner@example.com --services calendar` to grant it"
    );
    // Nothing was asked of Google.
    assert!(
        setup
            .fake
            .requests()
            .iter()
            .all(|r| !r.path.contains("calendar"))
    );

    let nobody = Setup::fresh();
    let error = run(GmailSearch(nobody.google.clone()), json!({}), &nobody)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        "no Google account is signed in; run `flynn auth google login`"
    );
}

#[tokio::test]
async fn an_expired_token_is_refreshed_and_kept_and_a_revoked_one_says_sign_in_again() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    setup.fake.add_mail(OWNER, ann("Hello", "Hi."));
    let before = setup.google.store().load().unwrap();
    setup.fake.expire_access_tokens();
    run(GmailSearch(g()), json!({}), &setup).await.unwrap();
    let after = setup.google.store().load().unwrap();
    let token =
        |f: &flynn_google::AuthFile| f.google.accounts[OWNER].grants[0].access_token.clone();
    assert_ne!(token(&before), token(&after), "the refreshed token is kept");

    // Revoked elsewhere (the owner removed Flynn in their Google account).
    let refresh = after.google.accounts[OWNER].grants[0]
        .refresh_token
        .clone()
        .unwrap();
    setup
        .google
        .oauth(crate::client())
        .revoke(&refresh)
        .await
        .unwrap();
    setup.fake.expire_access_tokens();
    let error = run(GmailSearch(g()), json!({}), &setup).await.unwrap_err();
    assert!(
        error.starts_with("Google no longer accepts Flynn's sign-in for owner@example.com"),
        "{error}"
    );
    assert!(
        error.ends_with("sign in again with `flynn auth google login --account owner@example.com`"),
        "{error}"
    );
    setup.assert_strict();
}

#[tokio::test]
async fn a_short_rate_limit_is_waited_out_and_a_long_one_is_said() {
    let setup = Setup::signed_in(&ALL);
    let g = || setup.google.clone();
    setup.fake.rate_limit(1, 1);
    let started = std::time::Instant::now();
    run(TasksList(g()), json!({}), &setup).await.unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));

    setup.fake.rate_limit(1, 120);
    let error = run(TasksList(g()), json!({}), &setup).await.unwrap_err();
    assert_eq!(
        error,
        "Google's rate limit for this account is reached; it asks to wait 120 s"
    );
    setup.assert_strict();
}
