//! Signing in (the browser's return to a loopback address, the device
//! flow), revoking, and taking in an older install's token files.

use std::os::unix::fs::PermissionsExt;

use flynn_google::oauth::{Loopback, code_from_redirect};
use flynn_google::scopes_for;
use flynn_protocol::config::GoogleService;
use flynn_testkit::google::{CLIENT_ID, OWNER};

use crate::{Setup, client};

/// What a browser does with the consent page: Google answers with a
/// redirect to the loopback address, which the browser then opens.
async fn browse(url: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let consent = http.get(url).send().await.unwrap();
    assert_eq!(consent.status(), 302, "{}", consent.text().await.unwrap());
    let back = consent.headers()["location"].to_str().unwrap().to_owned();
    let page = http.get(&back).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Flynn is signed in"));
    back
}

#[tokio::test]
async fn the_browser_comes_back_to_the_loopback_and_the_account_is_kept_privately() {
    let setup = Setup::fresh();
    let oauth = setup.google.oauth(client());
    let loopback = Loopback::bind().await.unwrap();
    let scopes = scopes_for(&[GoogleService::Gmail, GoogleService::Calendar]);
    let authorization = oauth
        .authorize(loopback.redirect(), &scopes, Some(OWNER))
        .unwrap();
    assert!(authorization.url.contains("code_challenge_method=S256"));
    assert!(authorization.url.contains("access_type=offline"));
    let url = authorization.url.clone();
    let (code, back) = tokio::join!(loopback.code(&authorization.state), browse(&url));
    let code = code.unwrap();
    // A pasted address gives the same code.
    assert_eq!(
        code_from_redirect(&back, &authorization.state).unwrap(),
        code
    );
    let tokens = oauth.exchange(authorization, &code).await.unwrap();
    assert!(tokens.refresh_token.is_some());
    let email = oauth.email(&tokens.access_token).await.unwrap();
    assert_eq!(email, OWNER);
    setup
        .google
        .keep_sign_in(&email, &client(), &tokens, &scopes)
        .unwrap();

    let store = setup.google.store();
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let file = store.load().unwrap();
    assert_eq!(file.google.default.as_deref(), Some(OWNER));
    let account = &file.google.accounts[OWNER];
    assert_eq!(account.client_id, CLIENT_ID);
    // Google lists `email` as userinfo.email; each service asked for is
    // granted.
    let granted = account.scopes();
    assert!(granted.contains(&"openid".to_owned()), "{granted:?}");
    for service in [GoogleService::Gmail, GoogleService::Calendar] {
        assert!(
            flynn_google::service_granted(service, &granted),
            "{granted:?}"
        );
    }
    assert!(!flynn_google::service_granted(
        GoogleService::Drive,
        &granted
    ));
    // The sign-in works for the tools.
    assert!(
        setup
            .google
            .access_token(OWNER, Some(GoogleService::Gmail), None)
            .await
            .is_ok()
    );
    setup.assert_strict();
}

#[tokio::test]
async fn a_refused_consent_is_an_error_the_owner_understands() {
    let setup = Setup::fresh();
    setup.fake.deny_consent();
    let oauth = setup.google.oauth(client());
    let loopback = Loopback::bind().await.unwrap();
    let authorization = oauth
        .authorize(
            loopback.redirect(),
            &scopes_for(&[GoogleService::Gmail]),
            None,
        )
        .unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = authorization.url.clone();
    let browser = async {
        let consent = http.get(&url).send().await.unwrap();
        let back = consent.headers()["location"].to_str().unwrap().to_owned();
        http.get(&back).send().await.unwrap().status()
    };
    let (code, status) = tokio::join!(loopback.code(&authorization.state), browser);
    assert_eq!(status, 400);
    assert_eq!(
        code.unwrap_err().to_string(),
        "Google answered 400 (access_denied): the sign-in was refused in the browser"
    );
}

#[tokio::test]
async fn the_device_flow_signs_in_where_google_allows_it_and_says_why_not_elsewhere() {
    let setup = Setup::fresh();
    setup.fake.set_device_interval(0);
    let oauth = setup.google.oauth(client());
    let refused = oauth
        .device_start(&scopes_for(&[GoogleService::Gmail]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.starts_with("Google does not allow the device flow for gmail.modify"),
        "{refused}"
    );
    assert!(
        refused.contains("flynn auth google login --no-browser"),
        "{refused}"
    );

    let scopes: Vec<String> = [
        "openid",
        "email",
        "https://www.googleapis.com/auth/drive.file",
    ]
    .map(str::to_owned)
    .to_vec();
    let details = oauth.device_start(&scopes).await.unwrap();
    assert_eq!(
        details.verification_uri().as_str(),
        "https://www.google.com/device"
    );
    let code = details.user_code().secret().clone();
    let fake = &setup.fake;
    let approve = async {
        // The owner types the code on their phone a little later.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        fake.approve_device(&code);
    };
    let (tokens, ()) = tokio::join!(oauth.device_finish(&details), approve);
    let tokens = tokens.unwrap();
    assert_eq!(oauth.email(&tokens.access_token).await.unwrap(), OWNER);
    assert!(tokens.refresh_token.is_some());
    setup.assert_strict();
}

#[tokio::test]
async fn revoke_tells_google_and_forgets_the_account() {
    let setup = Setup::signed_in(&crate::ALL);
    setup.sign_in("second@example.com", &["openid", "email", "tasks"]);
    let refresh = setup.google.store().load().unwrap().google.accounts[OWNER].grants[0]
        .refresh_token
        .clone()
        .unwrap();
    let said = setup.google.sign_out(OWNER, true).await.unwrap();
    assert!(
        said.starts_with("revoked its access at Google; removed owner@example.com"),
        "{said}"
    );
    assert_eq!(setup.fake.revoked(), vec![refresh]);
    let file = setup.google.store().load().unwrap();
    assert!(!file.google.accounts.contains_key(OWNER));
    // The other account becomes the default.
    assert_eq!(file.google.default.as_deref(), Some("second@example.com"));
    // Logging out only forgets.
    let said = setup
        .google
        .sign_out("second@example.com", false)
        .await
        .unwrap();
    assert!(said.starts_with("removed second@example.com"), "{said}");
    assert_eq!(setup.fake.revoked().len(), 1);
    setup.assert_strict();
}

#[tokio::test]
async fn older_token_files_are_taken_in_once_and_left_in_place() {
    let setup = Setup::fresh();
    let issued = setup
        .fake
        .issue_tokens(OWNER, &["openid", "email", "gmail.modify"]);
    let dir = setup.google.store().dir().to_owned();
    std::fs::create_dir_all(&dir).unwrap();
    let legacy = dir.join("gmail-token.json");
    std::fs::write(
        &legacy,
        serde_json::json!({
            "access_token": "expired-long-ago",
            "refresh_token": issued.refresh_token,
            "scope": "openid email https://www.googleapis.com/auth/gmail.modify",
            "token_type": "Bearer",
            "expiry_date": 1_600_000_000_000_i64,
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("calendar-token.json"), "{not json").unwrap();

    let said = setup.google.migrate_legacy().await.unwrap();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].contains("could not take in") && said[0].contains("calendar-token.json"),
        "{said:?}"
    );
    assert!(
        said[1].contains(
            "gmail-token.json as a grant of owner@example.com; the file is left in place"
        ),
        "{said:?}"
    );
    assert!(legacy.exists());
    let file = setup.google.store().load().unwrap();
    let grant = &file.google.accounts[OWNER].grants[0];
    assert_eq!(grant.from.as_deref(), Some(legacy.as_path()));
    assert!(
        setup
            .google
            .access_token(OWNER, Some(GoogleService::Gmail), None)
            .await
            .is_ok()
    );
    // Once only.
    assert_eq!(
        setup.google.migrate_legacy().await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        setup.google.store().load().unwrap().google.accounts[OWNER]
            .grants
            .len(),
        1
    );
    setup.assert_strict();
}
