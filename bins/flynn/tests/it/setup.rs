//! The config file a test daemon runs with, and waiting for what it does.

use std::fmt::Display;
use std::time::{Duration, Instant};

use flynn_testkit::FakeOpenAi;

use crate::Env;
use crate::daemon::Daemon;

/// A config file: the fake OpenAI-compatible model as the default tier,
/// then what a test adds. A section is YAML at the top level; a channel's
/// settings are the lines of its map, written without indentation.
pub struct TestConfig {
    model: String,
    provider: Vec<String>,
    others: Vec<(String, String)>,
    sections: Vec<String>,
    channels: Vec<(&'static str, String)>,
}

impl TestConfig {
    pub fn new(model: &FakeOpenAi) -> Self {
        TestConfig {
            model: model.base_url(),
            provider: Vec::new(),
            others: Vec::new(),
            sections: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// One more setting of the model's provider (`read_timeout_secs: 2`).
    pub fn provider(mut self, setting: &str) -> Self {
        self.provider.push(setting.to_owned());
        self
    }

    /// Another OpenAI-compatible provider, `name`, on its own fake (its
    /// models are `name/<model>`).
    #[cfg_attr(
        not(all(
            feature = "telegram",
            feature = "discord",
            feature = "slack",
            feature = "whatsapp"
        )),
        allow(dead_code)
    )]
    pub fn other_provider(mut self, name: &str, model: &FakeOpenAi) -> Self {
        self.others.push((name.to_owned(), model.base_url()));
        self
    }

    /// Top-level YAML: one or more sections (not `channels` or `providers`).
    pub fn section(mut self, yaml: &str) -> Self {
        self.sections.push(yaml.trim_end().to_owned());
        self
    }

    /// Telegram against its fake, with `settings` after the token and URL.
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    pub fn telegram(self, fake: &flynn_testkit::telegram::FakeTelegram, settings: &str) -> Self {
        let head = format!(
            "bot_token: \"{}\"\napi_url: {}\n",
            flynn_testkit::telegram::TOKEN,
            fake.api_url()
        );
        self.channel("telegram", head, settings)
    }

    /// WhatsApp (Cloud API) against its fake, with `settings` after the
    /// credentials and URL.
    #[cfg_attr(not(feature = "whatsapp"), allow(dead_code))]
    pub fn whatsapp(self, fake: &flynn_testkit::whatsapp::FakeWhatsApp, settings: &str) -> Self {
        use flynn_testkit::whatsapp as wa;
        let head = format!(
            "access_token: {}\nphone_number_id: \"{}\"\napp_secret: {}\nverify_token: {}\napi_url: {}\n",
            wa::ACCESS_TOKEN,
            wa::PHONE_NUMBER_ID,
            wa::APP_SECRET,
            wa::VERIFY_TOKEN,
            fake.base_url()
        );
        self.channel("whatsapp", head, settings)
    }

    /// Slack (Socket Mode) against its fake, with `settings` after the
    /// tokens and URL.
    #[cfg_attr(not(feature = "slack"), allow(dead_code))]
    pub fn slack(self, fake: &flynn_testkit::slack::FakeSlack, settings: &str) -> Self {
        use flynn_testkit::slack as sl;
        let head = format!(
            "bot_token: {}\napp_token: {}\napi_url: {}\n",
            sl::BOT_TOKEN,
            sl::APP_TOKEN,
            fake.api_url()
        );
        self.channel("slack", head, settings)
    }

    /// Discord against its fake (REST and gateway), with `settings` after
    /// the token and URLs.
    #[cfg_attr(not(feature = "discord"), allow(dead_code))]
    pub fn discord(self, fake: &flynn_testkit::discord::FakeDiscord, settings: &str) -> Self {
        let head = format!(
            "bot_token: \"{}\"\napi_url: {}\ngateway_url: {}\n",
            flynn_testkit::discord::TOKEN,
            fake.api_url(),
            fake.gateway_url()
        );
        self.channel("discord", head, settings)
    }

    fn channel(mut self, name: &'static str, head: String, settings: &str) -> Self {
        self.channels
            .push((name, format!("{head}{}", settings.trim_end())));
        self
    }

    /// The file's text.
    pub fn yaml(&self) -> String {
        let mut provider = format!("{{kind: openai, base_url: {}, api_key: sk-x", self.model);
        for setting in &self.provider {
            provider.push_str(", ");
            provider.push_str(setting);
        }
        provider.push('}');
        let mut yaml = format!("version: 1\nproviders:\n  openai: {provider}\n");
        for (name, url) in &self.others {
            yaml.push_str(&format!(
                "  {name}: {{kind: openai, base_url: {url}, api_key: sk-x}}\n"
            ));
        }
        yaml.push_str("models:\n  tiers:\n    default: [openai/gpt-4o-mini]\n");
        for section in &self.sections {
            yaml.push_str(section);
            yaml.push('\n');
        }
        if !self.channels.is_empty() {
            yaml.push_str("channels:\n");
            for (name, settings) in &self.channels {
                yaml.push_str(&format!("  {name}:\n"));
                for line in settings.lines() {
                    yaml.push_str(&format!("    {line}\n"));
                }
            }
        }
        yaml
    }
}

impl Env {
    /// Writes `config` to `config.yaml` in the scratch directory (outside
    /// `FLYNN_HOME`) and points `FLYNN_CONFIG` at it.
    pub fn with_config(self, config: &TestConfig) -> Env {
        let file = self.path().join("config.yaml");
        std::fs::write(&file, config.yaml()).unwrap();
        self.var("FLYNN_CONFIG", file.to_string_lossy())
    }
}

/// A channel's `owners:` setting, each id quoted.
#[cfg_attr(
    not(any(feature = "telegram", feature = "whatsapp", feature = "discord")),
    allow(dead_code)
)]
pub fn owners<T: Display>(ids: impl IntoIterator<Item = T>) -> String {
    let quoted: Vec<String> = ids.into_iter().map(|id| format!("\"{id}\"")).collect();
    format!("owners: [{}]", quoted.join(", "))
}

/// Waits until `done` holds, at most `limit`; fails with the daemon's log.
pub fn wait_until(what: &str, limit: Duration, daemon: &Daemon, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} never happened:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_config_puts_each_part_where_it_belongs() {
    let yaml = TestConfig {
        model: "http://127.0.0.1:1/v1".to_owned(),
        provider: Vec::new(),
        others: vec![("ticks".to_owned(), "http://127.0.0.1:2/v1".to_owned())],
        sections: Vec::new(),
        channels: Vec::new(),
    }
    .provider("read_timeout_secs: 2")
    .section("sessions:\n  queue_limit: 1000\n")
    .channel(
        "telegram",
        "bot_token: \"t\"\n".to_owned(),
        "owners: [\"1\"]\n",
    )
    .yaml();
    assert_eq!(
        yaml,
        "version: 1
providers:
  openai: {kind: openai, base_url: http://127.0.0.1:1/v1, api_key: sk-x, read_timeout_secs: 2}
  ticks: {kind: openai, base_url: http://127.0.0.1:2/v1, api_key: sk-x}
models:
  tiers:
    default: [openai/gpt-4o-mini]
sessions:
  queue_limit: 1000
channels:
  telegram:
    bot_token: \"t\"
    owners: [\"1\"]
"
    );
}
