//! A database of a test's own on the test PostgreSQL server.
//!
//! The server is the one `FLYNN_TEST_POSTGRES_URL` names
//! (`scripts/postgres.sh` starts one and prints its URL; `scripts/test.sh`
//! sets the variable). Without it a test fails, saying how to run it: it
//! never passes without having run.

use sqlx::{Connection, Executor};

/// A fresh, empty database; dropped with this value, also when the test
/// fails.
#[derive(Debug)]
pub struct TestDatabase {
    admin: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates a database with a random name on the test server.
    ///
    /// # Panics
    /// When `FLYNN_TEST_POSTGRES_URL` is not set or its server cannot be
    /// reached, with the command that starts one.
    pub async fn create() -> TestDatabase {
        let admin = std::env::var("FLYNN_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "FLYNN_TEST_POSTGRES_URL is not set: this test needs a PostgreSQL server; run \
                 `export FLYNN_TEST_POSTGRES_URL=$(scripts/postgres.sh)` (or scripts/test.sh)"
            )
        });
        let mut random = [0_u8; 8];
        getrandom::fill(&mut random).unwrap_or_else(|e| panic!("no random bytes: {e}"));
        let name = format!(
            "flynn_k_{}",
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| {
                panic!("cannot reach FLYNN_TEST_POSTGRES_URL's server: {e}; is scripts/postgres.sh running?")
            });
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let _ = conn.close().await;
        let url = with_database(&admin, &name);
        TestDatabase { admin, name, url }
    }

    /// The database's URL, password included.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // On a thread of its own: `Drop` cannot wait on the test's runtime.
        let dropped = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let _ = conn.execute(sqlx::AssertSqlSafe(drop)).await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// `url` naming the database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{name}{query}")
}
