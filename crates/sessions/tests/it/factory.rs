//! Where the store lives: `flynn_sessions::location` and `open`.

use std::path::{Path, PathBuf};

use flynn_protocol::Message;
use flynn_protocol::config::SessionsConfig;
use flynn_sessions::{Conversations, Error, SqliteStore, StoreLocation, location};

use crate::{key, numbered};

fn with_url(url: &str) -> SessionsConfig {
    SessionsConfig {
        url: Some(url.to_owned()),
        ..SessionsConfig::default()
    }
}

fn with_database(path: &str) -> SessionsConfig {
    SessionsConfig {
        database: Some(PathBuf::from(path)),
        ..SessionsConfig::default()
    }
}

#[test]
fn the_url_wins_then_the_database_then_home() {
    let home = Path::new("/data/flynn");
    let sqlite = |p: &str| StoreLocation::Sqlite(PathBuf::from(p));
    assert_eq!(
        location(&SessionsConfig::default(), home).unwrap(),
        sqlite("/data/flynn/sessions.db")
    );
    assert_eq!(
        location(&with_database("/var/lib/flynn/s.db"), home).unwrap(),
        sqlite("/var/lib/flynn/s.db")
    );
    assert_eq!(
        location(&with_url("sqlite:///srv/flynn/s.db"), home).unwrap(),
        sqlite("/srv/flynn/s.db")
    );
    assert_eq!(
        location(&with_url("SQLite://state/s.db"), home).unwrap(),
        sqlite("state/s.db"),
        "relative to the current directory"
    );
    let both = SessionsConfig {
        url: Some("sqlite:///srv/flynn/s.db".into()),
        database: Some(PathBuf::from("/var/lib/flynn/s.db")),
        ..SessionsConfig::default()
    };
    assert_eq!(location(&both, home).unwrap(), sqlite("/srv/flynn/s.db"));
}

fn url_error(url: &str) -> Error {
    location(&with_url(url), Path::new("/home")).unwrap_err()
}

#[test]
fn postgres_urls_name_a_postgres_store_and_hide_their_password_when_shown() {
    let url = "postgres://flynn:hunter2@db.local:5432/flynn?sslmode=require";
    let found = location(&with_url(url), Path::new("/home")).unwrap();
    assert_eq!(found, StoreLocation::Postgres(url.to_owned()));
    assert_eq!(
        found.redacted(),
        "postgres://flynn:***@db.local:5432/flynn?sslmode=require"
    );
    assert_eq!(
        location(&with_url("PostgreSQL://db.local/flynn"), Path::new("/home")).unwrap(),
        StoreLocation::Postgres("PostgreSQL://db.local/flynn".to_owned())
    );
}

#[test]
fn other_urls_say_what_was_expected() {
    let cases = [
        (
            "ftp://host/sessions.db",
            "sessions.url 'ftp://host/sessions.db': 'ftp://' is not a session store this build knows; expected sqlite:///absolute/path.db, sqlite://relative/path.db or postgres://user:password@host:5432/database",
        ),
        (
            "/var/lib/flynn/sessions.db",
            "sessions.url '/var/lib/flynn/sessions.db': not a URL (no '://'); expected sqlite:///absolute/path.db, sqlite://relative/path.db or postgres://user:password@host:5432/database",
        ),
        (
            "sqlite://",
            "sessions.url 'sqlite://': the URL names no file; expected sqlite:///absolute/path.db, sqlite://relative/path.db or postgres://user:password@host:5432/database",
        ),
        (
            "sqlite:///s.db?mode=ro",
            "sessions.url 'sqlite:///s.db?mode=ro': options after '?' or '#' are not supported; name the file only; expected sqlite:///absolute/path.db, sqlite://relative/path.db or postgres://user:password@host:5432/database",
        ),
        (
            "sqlite::memory:",
            "sessions.url 'sqlite::memory:': in-memory stores would lose every session at exit, so they are not supported; expected sqlite:///absolute/path.db, sqlite://relative/path.db or postgres://user:password@host:5432/database",
        ),
    ];
    for (url, message) in cases {
        let error = url_error(url);
        assert!(matches!(error, Error::InvalidUrl { .. }), "{error:?}");
        assert_eq!(error.to_string(), message);
    }
}

#[tokio::test]
async fn open_creates_the_store_where_the_config_says() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let by_url = elsewhere.path().join("by-url/s.db");
    let configs = [
        (SessionsConfig::default(), home.path().join("sessions.db")),
        (
            with_database(&elsewhere.path().join("db/s.db").display().to_string()),
            elsewhere.path().join("db/s.db"),
        ),
        (with_url(&format!("sqlite://{}", by_url.display())), by_url),
    ];
    for (config, file) in configs {
        let store = flynn_sessions::open(&config, home.path()).await.unwrap();
        store
            .append(&key("cli:a"), &[Message::user("hi")])
            .await
            .unwrap();
        drop(store);
        assert!(file.is_file(), "{} was not created", file.display());
        let reopened = SqliteStore::open(&file).await.unwrap();
        assert_eq!(
            numbered(&reopened.history(&key("cli:a")).await.unwrap()),
            vec![(1, "hi".to_owned())]
        );
        reopened.close().await;
    }
}

#[tokio::test]
async fn a_file_where_the_directory_should_be_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let config = with_database(&blocker.join("sessions.db").display().to_string());

    let error = flynn_sessions::open(&config, dir.path())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(error, Error::CreateDir { ref path, .. } if path == &blocker),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "cannot create the directory {} for the session database: ",
            blocker.display()
        )) && message
            .ends_with("(create it, or point sessions.url or sessions.database elsewhere)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_directory_in_place_of_the_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = SqliteStore::open(dir.path()).await.unwrap_err();
    assert!(matches!(error, Error::Open { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "cannot open the session database {}: ",
            dir.path().display()
        )) && message.ends_with(
            "(check that it names a SQLite file, or a place to create one, that Flynn may write)"
        ),
        "{message}"
    );
    // Nothing is made beside it.
    for suffix in ["-wal", "-shm"] {
        let companion = PathBuf::from(format!("{}{suffix}", dir.path().display()));
        assert!(!companion.exists(), "{}", companion.display());
    }
}

/// Every conversation is in the database: other users of the machine
/// must not read it, its WAL or the directory it is created in.
#[cfg(unix)]
#[tokio::test]
async fn the_database_its_wal_and_a_home_it_creates_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let store = flynn_sessions::open(&SessionsConfig::default(), &home)
        .await
        .unwrap();
    store
        .append(&key("cli:default"), &[Message::user("secret")])
        .await
        .unwrap();
    let db = home.join("sessions.db");
    let files = ["sessions.db", "sessions.db-wal", "sessions.db-shm"].map(|f| mode(&home.join(f)));
    assert_eq!((mode(&home), files), (0o700, [0o600; 3]));

    // A database an older version left readable by everyone is narrowed
    // to its owner when opened.
    drop(store);
    let old = dir.path().join("old.db");
    SqliteStore::open(&old).await.unwrap().close().await;
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", old.display()));
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let reopened = SqliteStore::open(&old).await.unwrap();
    reopened
        .append(&key("cli:default"), &[Message::user("secret")])
        .await
        .unwrap();
    let files = ["old.db", "old.db-wal", "old.db-shm"].map(|f| mode(&dir.path().join(f)));
    assert_eq!(files, [0o600; 3]);
    assert!(db.exists());
}
