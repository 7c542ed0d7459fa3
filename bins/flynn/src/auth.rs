//! `flynn auth`: signing in to the owner's accounts (Google), what is
//! signed in, signing out and revoking.

use std::time::Duration;

use flynn_core::config::{self, Env};
use flynn_core::google::oauth::{Loopback, Redirect, code_from_redirect};
use flynn_core::google::{
    ClientCredentials, Google, GoogleError, scope_label, scopes_for, service_granted,
};
use flynn_core::protocol::config::GoogleService;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use crate::cli::{AuthArgs, AuthCommand, GoogleCommand};
use crate::env::CliEnv;
use crate::exit::Failure;

/// How long a sign-in waits for the browser or the pasted address.
const SIGN_IN_WAIT: Duration = Duration::from_secs(600);

pub async fn run(args: AuthArgs) -> Result<(), Failure> {
    let google = google(args.config.as_deref())?;
    match args.command {
        AuthCommand::Status { json } => status(&google, json).await,
        AuthCommand::Google { command } => match command {
            GoogleCommand::Status { json } => status(&google, json).await,
            GoogleCommand::Login(login) => sign_in(&google, login).await,
            GoogleCommand::Logout { account } => sign_out(&google, account, false).await,
            GoogleCommand::Revoke { account } => sign_out(&google, account, true).await,
        },
    }
}

fn google(config: Option<&std::path::Path>) -> Result<Google, Failure> {
    let loaded = config::load(config, &CliEnv)?;
    let block = loaded.config.google.clone().unwrap_or_default();
    Google::from_config(&block, |name| CliEnv.var(name)).map_err(failure)
}

fn failure(error: GoogleError) -> Failure {
    Failure::other(error.to_string())
}

fn say_migrated(lines: &[String]) {
    for line in lines {
        eprintln!("{line}");
    }
}

async fn sign_in(google: &Google, login: crate::cli::GoogleLogin) -> Result<(), Failure> {
    say_migrated(&google.migrate_legacy().await.map_err(failure)?);
    let client = match (login.client_id, google.client()) {
        (Some(id), _) => ClientCredentials {
            id,
            secret: login.client_secret,
        },
        (None, Some(client)) => client.clone(),
        (None, None) => return Err(failure(GoogleError::NoClient)),
    };
    let services: Vec<GoogleService> = if login.services.is_empty() {
        google.services().to_vec()
    } else {
        login
            .services
            .iter()
            .flat_map(|s| s.split(','))
            .map(|s| s.parse::<GoogleService>().map_err(Failure::usage))
            .collect::<Result<_, _>>()?
    };
    let scopes = scopes_for(&services);
    let oauth = google.oauth(client.clone());
    let tokens = if login.device {
        let details = oauth.device_start(&scopes).await.map_err(failure)?;
        println!(
            "On any device, open {} and enter the code {}",
            details.verification_uri().as_str(),
            details.user_code().secret()
        );
        oauth.device_finish(&details).await.map_err(failure)?
    } else {
        let loopback = Loopback::bind().await.map_err(failure)?;
        let authorization = oauth
            .authorize(loopback.redirect(), &scopes, login.account.as_deref())
            .map_err(failure)?;
        println!(
            "Open this address in a browser and allow Flynn access:\n\n{}\n",
            authorization.url
        );
        println!(
            "If the browser is on another machine, it ends on a page that does not load (an address starting {}): paste that whole address here and press Enter.",
            loopback.redirect()
        );
        if !login.no_browser {
            open_browser(&authorization.url);
        }
        let state = authorization.state.clone();
        let code = tokio::time::timeout(SIGN_IN_WAIT, async {
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let mut stdin_open = true;
            loop {
                tokio::select! {
                    code = loopback.code(&state) => return code,
                    line = lines.next_line(), if stdin_open => match line {
                        Ok(Some(line)) if line.trim().is_empty() => {}
                        Ok(Some(line)) => match code_from_redirect(&line, &state) {
                            Ok(code) => return Ok(code),
                            Err(Redirect::Failed(e)) => return Err(e),
                            Err(Redirect::Unrelated) => eprintln!(
                                "that address has no sign-in code; paste the whole address the browser ended on"
                            ),
                        },
                        Ok(None) | Err(_) => stdin_open = false,
                    },
                }
            }
        })
        .await
        .map_err(|_| Failure::other("no answer from the browser within 10 minutes; run the command again"))?
        .map_err(failure)?;
        oauth
            .exchange(authorization, &code)
            .await
            .map_err(failure)?
    };
    let email = oauth.email(&tokens.access_token).await.map_err(failure)?;
    if let Some(wanted) = &login.account
        && !wanted.eq_ignore_ascii_case(&email)
    {
        return Err(Failure::other(format!(
            "the browser signed in as {email}, not {wanted}; nothing was kept (sign in again and pick {wanted})"
        )));
    }
    google
        .keep_sign_in(&email, &client, &tokens, &scopes)
        .map_err(failure)?;
    let granted = tokens.scopes.clone().unwrap_or_else(|| scopes.clone());
    let missing: Vec<&str> = services
        .iter()
        .filter(|s| !service_granted(**s, &granted))
        .map(|s| s.as_str())
        .collect();
    println!(
        "Signed in as {email}; kept in {}",
        google.store().path().display()
    );
    let allowed: Vec<&str> = services
        .iter()
        .filter(|s| service_granted(**s, &granted))
        .map(|s| s.as_str())
        .collect();
    println!(
        "Flynn may use: {}",
        if allowed.is_empty() {
            "nothing yet".to_owned()
        } else {
            allowed.join(", ")
        }
    );
    if !missing.is_empty() {
        println!(
            "Not granted: {} (the boxes were left unticked); run this again and tick them to use those tools",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Opens `url` in the desktop's browser, when there is a desktop.
fn open_browser(url: &str) {
    let desktop = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
    if !desktop {
        return;
    }
    let _ = std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

async fn status(google: &Google, as_json: bool) -> Result<(), Failure> {
    say_migrated(&google.migrate_legacy().await.map_err(failure)?);
    let file = google.store().load().map_err(failure)?;
    let now = chrono::Utc::now().timestamp();
    let accounts: Vec<serde_json::Value> = file
        .google
        .accounts
        .iter()
        .map(|(email, account)| {
            let scopes = account.scopes();
            let services: Vec<&str> = GoogleService::ALL
                .iter()
                .filter(|s| service_granted(**s, &scopes))
                .map(|s| s.as_str())
                .collect();
            let expires = account.grants.iter().filter_map(|g| g.expires_at).max();
            json!({
                "account": email,
                "default": file.google.default.as_deref() == Some(email.as_str()),
                "services": services,
                "scopes": scopes.iter().map(|s| scope_label(s)).collect::<Vec<_>>(),
                "can_refresh": account.grants.iter().any(|g| g.refresh_token.is_some()),
                "access_expires_in_secs": expires.map(|e| e - now),
                "client_id": account.client_id,
                "signed_in_at": account.signed_in_at,
                "from_files": account.grants.iter().filter_map(|g| g.from.as_ref()).collect::<Vec<_>>(),
            })
        })
        .collect();
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "store": google.store().path(),
                "google": accounts,
            }))
            .unwrap_or_default()
        );
        return Ok(());
    }
    println!("Auth store: {}", google.store().path().display());
    if accounts.is_empty() {
        println!("Google: no account signed in (flynn auth google login)");
        return Ok(());
    }
    for account in &accounts {
        let services = account["services"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        println!(
            "Google: {}{} · may use: {} · {}",
            account["account"].as_str().unwrap_or_default(),
            if account["default"] == true {
                " (default)"
            } else {
                ""
            },
            if services.is_empty() {
                "nothing"
            } else {
                &services
            },
            if account["can_refresh"] == true {
                "stays signed in"
            } else {
                "signs out when its token expires (no refresh token)"
            }
        );
    }
    Ok(())
}

async fn sign_out(google: &Google, account: Option<String>, revoke: bool) -> Result<(), Failure> {
    let account = google.resolve(account.as_deref()).map_err(failure)?;
    let said = google.sign_out(&account, revoke).await.map_err(failure)?;
    println!("{account}: {said}");
    Ok(())
}
