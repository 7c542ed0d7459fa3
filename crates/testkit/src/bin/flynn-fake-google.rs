//! `FakeGoogle` as a program, for trying Flynn's Google tools by hand
//! without an account: prints the config block that points Flynn at it,
//! seeds a mailbox, a calendar and a task, and reads commands on stdin:
//!
//! - `mail <from> | <subject> | <text>`: a new inbox message;
//! - `sent`: the messages Flynn sent;
//! - `requests`: every request so far;
//! - `violations`: requests off Google's documented format.

use std::io::BufRead;

use flynn_testkit::google::{CLIENT_ID, CLIENT_SECRET, FakeGoogle, Mail, OWNER};

fn main() {
    let fake = FakeGoogle::start();
    fake.set_time_zone(OWNER, "Europe/Berlin");
    let tomorrow = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    fake.add_event(
        OWNER,
        "primary",
        serde_json::json!({
            "summary": "Dentist",
            "location": "Main St 5",
            "start": {"dateTime": format!("{tomorrow}T10:00:00"), "timeZone": "Europe/Berlin"},
            "end": {"dateTime": format!("{tomorrow}T11:00:00"), "timeZone": "Europe/Berlin"},
        }),
    );
    let ann = fake.add_mail(
        OWNER,
        Mail {
            from: "Ann Smith <ann@example.com>".into(),
            subject: "Dinner on Saturday?".into(),
            text: "Hi! Are you coming to dinner on Saturday at 7?\n\nAnn".into(),
            ..Mail::default()
        },
    );
    fake.add_task(OWNER, "@default", "Renew passport", None);
    println!(
        "google:\n  client_id: {CLIENT_ID}\n  client_secret: {CLIENT_SECRET}\n  api_url: {}\n",
        fake.base_url()
    );
    println!(
        "The account is {OWNER}; Ann's mail is {ann}. Commands: mail <from> | <subject> | <text>, sent, requests, violations."
    );
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        match line
            .split_once(' ')
            .map_or((line, ""), |(c, rest)| (c, rest))
        {
            ("mail", rest) => {
                let parts: Vec<&str> = rest.split('|').map(str::trim).collect();
                let [from, subject, text] = parts[..] else {
                    println!("write: mail <from> | <subject> | <text>");
                    continue;
                };
                let id = fake.add_mail(
                    OWNER,
                    Mail {
                        from: from.into(),
                        subject: subject.into(),
                        text: text.into(),
                        ..Mail::default()
                    },
                );
                println!("added {id}");
            }
            ("sent", _) => {
                for mail in fake.sent(OWNER) {
                    println!(
                        "to {} · {} · thread {}\n{}\n",
                        mail.to, mail.subject, mail.thread_id, mail.text
                    );
                }
            }
            ("requests", _) => {
                for request in fake.requests() {
                    println!("{} {} {:?}", request.method, request.path, request.account);
                }
            }
            ("violations", _) => println!("{:#?}", fake.violations()),
            ("", _) => {}
            (other, _) => println!("unknown command {other}"),
        }
    }
}
