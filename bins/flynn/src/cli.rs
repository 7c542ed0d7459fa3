use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use flynn_core::Tier;
use flynn_core::protocol::config::ModelRef;

/// Flynn: a personal AI agent you host yourself.
#[derive(Debug, Parser)]
#[command(name = "flynn", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Merge `profiles/<NAME>.overlay.yaml` (next to the config file) over
    /// the config; default FLYNN_PROFILE.
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Config file (default: FLYNN_CONFIG or ~/.config/flynn/config.yaml);
    /// before or after the command.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Work through the daemon at this address (`http://127.0.0.1:18800`)
    /// instead of this machine's files, for the commands that can (send,
    /// sessions, usage, pairing, doctor, mcp list|serve); default
    /// FLYNN_GATEWAY_URL.
    #[arg(long, global = true, value_name = "URL")]
    pub gateway: Option<String>,
}

impl Cli {
    /// The command, with the global `--config` and `--gateway` handed to
    /// it. `--gateway` on a command that only works on this machine's
    /// files is an error that says so.
    pub fn into_command(self) -> Result<Command, String> {
        let Cli {
            mut command,
            config,
            gateway,
            ..
        } = self;
        let mut gateway_taken = false;
        {
            let mut take = |slot: &mut Option<String>| {
                *slot = gateway.clone();
                gateway_taken = true;
            };
            match &mut command {
                Command::Send(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Sessions(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Pairing(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Usage(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Doctor(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Mcp(args) => {
                    args.config = config;
                    match &mut args.command {
                        McpCommand::List { gateway, .. } | McpCommand::Serve { gateway } => {
                            take(gateway);
                        }
                        McpCommand::Tools { .. } | McpCommand::Test { .. } => {}
                    }
                }
                Command::Start(args) => args.config = config,
                Command::Skills(args) => args.config = config,
                Command::Token(args) => args.config = config,
                Command::Auth(args) => args.config = config,
                Command::Agent(args) => args.config = config,
                Command::Tui(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Gateway(args) => {
                    args.config = config;
                    take(&mut args.gateway);
                }
                Command::Sandbox(args) => args.config = config,
                Command::Memory(args) => args.config = config,
                Command::Backup(args) | Command::Restore(args) => args.config = config,
                Command::Onboard(args) => args.config = config,
                Command::Config(args) => match &mut args.command {
                    ConfigCommand::Validate { file } => {
                        if file.is_none() {
                            *file = config;
                        }
                    }
                    ConfigCommand::Get { config: slot, .. }
                    | ConfigCommand::Migrate { config: slot, .. }
                    | ConfigCommand::Set { config: slot, .. } => *slot = config,
                    ConfigCommand::Schema => {}
                },
                // FLYNN_HOME/models does not depend on the config file,
                // nor do the stores `flynn store` names.
                Command::Models(_) | Command::Store(_) | Command::Completion { .. } => {}
            }
        }
        if gateway.is_some() && !gateway_taken {
            return Err(
                "--gateway: this command works on this machine's files, not through a daemon (--gateway is for send, sessions, usage, pairing, doctor, mcp list and mcp serve)"
                    .to_owned(),
            );
        }
        Ok(command)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send a message and stream the answer to stdout.
    Send(SendArgs),
    /// Run the daemon in the foreground (same as `flynn-daemon`).
    Start(StartArgs),
    /// List, show or reset conversations.
    Sessions(SessionsArgs),
    /// The skills agents can use: list, show, install, remove.
    Skills(SkillsArgs),
    /// Who may talk to Flynn on the chat channels: pairing codes from
    /// unknown senders, and the senders approved.
    Pairing(PairingArgs),
    /// Check the config file or print its JSON Schema.
    Config(ConfigArgs),
    /// Gateway tokens with fewer rights than the owner's (for an IDE, a
    /// script, an OpenAI or MCP client): create, list, revoke.
    Token(TokenArgs),
    /// Chat in the terminal: the full-screen client (flynn-tui, through
    /// the daemon), or `--minimal`, a plain line-by-line conversation for
    /// dumb terminals, screen readers and pipes.
    Tui(TuiArgs),
    /// The agents the config defines: list, show.
    Agent(AgentArgs),
    /// The running daemon: `flynn gateway status`.
    Gateway(GatewayArgs),
    /// The owner's accounts Flynn acts in (Google: Gmail, Calendar, Drive,
    /// Docs, Tasks): sign in, see what is signed in, sign out, revoke.
    Auth(AuthArgs),
    /// Tokens and cost per model tier, over every session or one.
    Usage(UsageArgs),
    /// Which OS sandbox shell and process tools run in, and why.
    Sandbox(SandboxArgs),
    /// Memory files and their search index.
    Memory(MemoryArgs),
    /// GGUF models run in process (`kind: local`): pull from the Hugging
    /// Face hub, list, remove.
    Models(crate::models::ModelsArgs),
    /// MCP: the servers whose tools Flynn uses (list, tools, test), and
    /// Flynn as an MCP server for other agents (serve).
    Mcp(McpArgs),
    /// Check the set-up: config, keys, providers, database, sandbox,
    /// daemon, chat channels, MCP servers; each line OK, WARN or FAIL with
    /// the fix.
    Doctor(DoctorArgs),
    /// Write one archive (.tar.gz, 0600) with a consistent copy of the
    /// session database (safe while the daemon runs), the memory files,
    /// the config file, the gateway tokens and installed skills.
    Backup(BackupArgs),
    /// Put a `flynn backup` archive back in place (the daemon must be
    /// stopped); what it replaces is moved to FLYNN_HOME/before-restore-*.
    Restore(BackupArgs),
    /// The session store itself: copy it whole into another, empty one
    /// (from SQLite to PostgreSQL, or back).
    Store(StoreArgs),
    /// Guided set-up: asks a few questions and writes a valid config file
    /// (--non-interactive: from flags and the environment).
    Onboard(OnboardArgs),
    /// Print a shell completion script: `flynn completion bash >
    /// ~/.local/share/bash-completion/completions/flynn`.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct TuiArgs {
    /// One line in, the answer out, no screen drawing or colours; runs
    /// embedded unless --gateway names a daemon.
    #[arg(long)]
    pub minimal: bool,
    /// Conversation to continue: a name (`work` is the CLI's `cli:work`)
    /// or `channel:peer`.
    #[arg(long, default_value = "tui:default")]
    pub session: String,
    /// Approve tool calls that need confirmation (`--minimal` only;
    /// without it, Flynn asks on the terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub command: AgentCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Every agent: what it runs on, its tools and autonomy.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One agent in full: model, tools, workspace, prompt, delegation,
    /// the routes that lead to it.
    Show {
        /// The agent's name.
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct GatewayArgs {
    #[command(subcommand)]
    pub command: GatewayCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Whether the daemon answers (at `--gateway`, FLYNN_GATEWAY_URL or
    /// `gateway.bind`), its version and uptime, turns running and
    /// waiting, each chat channel's state, the cluster's nodes.
    Status {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub command: AuthCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Every account signed in, what Flynn may use in it, whether it stays
    /// signed in.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Google: sign in (login), status, logout, revoke.
    Google {
        #[command(subcommand)]
        command: GoogleCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum GoogleCommand {
    /// Sign in to a Google account in a browser (this machine's, or any
    /// other: paste the address it ends on), or with --device.
    Login(GoogleLogin),
    /// The Google accounts signed in and what each grants.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Forget an account's tokens here (the default account when none is
    /// named); Google still lists Flynn as allowed.
    Logout {
        /// The account's address.
        account: Option<String>,
    },
    /// Revoke an account's tokens at Google, then forget them here.
    Revoke {
        /// The account's address.
        account: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct GoogleLogin {
    /// The account to sign in (suggested to Google; the sign-in is refused
    /// if another one is picked).
    #[arg(long)]
    pub account: Option<String>,
    /// The services to allow: gmail, calendar, drive, docs, tasks
    /// (comma-separated or repeated); `google.services` by default.
    #[arg(long = "services")]
    pub services: Vec<String>,
    /// Sign in with a code on another device (Google allows this only for
    /// sign-in and Flynn's own Drive files; see docs/google.md).
    #[arg(long, conflicts_with = "no_browser")]
    pub device: bool,
    /// Do not open a browser here: print the address, and wait for the
    /// browser's return or the address pasted back.
    #[arg(long)]
    pub no_browser: bool,
    /// The OAuth client's id (else `google.client_id`, GOOGLE_CLIENT_ID).
    #[arg(long)]
    pub client_id: Option<String>,
    /// The OAuth client's secret (else `google.client_secret`,
    /// GOOGLE_CLIENT_SECRET).
    #[arg(long, requires = "client_id")]
    pub client_secret: Option<String>,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a random token (replacing the named one's, if any): its secret
    /// goes to FLYNN_HOME/tokens/<name>.token (0600) and is printed once;
    /// gateway.tokens names the file and the scopes.
    Create {
        /// Letters, digits, `-`, `_`; shown in logs and the audit log.
        #[arg(long)]
        name: String,
        /// chat (send, its own sessions, /v1 and /mcp), read (every
        /// session, usage, logs), approve (confirmations, pairing), admin
        /// (everything). Repeat for several.
        #[arg(long = "scope", value_name = "SCOPE", required = true)]
        scopes: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Every token's name, scopes and where it is kept (never its value).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a token from gateway.tokens and delete its file.
    Revoke {
        #[arg(long)]
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(subcommand)]
    pub command: MemoryCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Where memory lives, what the index holds, and how search ranks.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Search every memory file: file, line and a snippet per hit.
    Search {
        /// What to look for.
        query: String,
        /// Hits shown at most.
        #[arg(long, default_value_t = 8)]
        limit: usize,
        /// Keywords (BM25) only, even with an embedder.
        #[arg(long)]
        keywords: bool,
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the search index from the memory files.
    Reindex {
        #[arg(long)]
        json: bool,
    },
    /// Print one memory file: user, global, daily, sessions/<id>, or a path.
    Show {
        namespace: String,
        /// The conversation `session` stands for.
        #[arg(long)]
        session: Option<String>,
    },
    /// Edit one memory file in $VISUAL or $EDITOR (else vi). Saved when
    /// changed, unless someone changed the file meanwhile: then nothing is
    /// saved and your text stays in the file the message names.
    Edit {
        namespace: String,
        /// The conversation `session` stands for.
        #[arg(long)]
        session: Option<String>,
    },
    /// Write every memory file under DIR as markdown, as the memory
    /// directory lays them out (`user.md`, `daily/2026-11-28.md`...).
    Export {
        dir: PathBuf,
        /// Write into a directory that already has files (same names are
        /// overwritten).
        #[arg(long)]
        force: bool,
    },
    /// Read every markdown file under DIR into memory (a memory directory,
    /// or an export). Files memory already has with other content are
    /// refused, nothing written, unless --replace.
    Import {
        dir: PathBuf,
        /// Overwrite memory files whose content differs.
        #[arg(long)]
        replace: bool,
    },
}

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// The servers of mcp.servers: transport, command line or URL, whether
    /// enabled, when started; with a daemon (--gateway, FLYNN_GATEWAY_URL),
    /// how each is doing there.
    List {
        /// Set from the global `--gateway`.
        #[arg(skip)]
        gateway: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Start one server here, print its tools (name, effect, description),
    /// and stop it.
    Tools {
        /// Its name under mcp.servers.
        server: String,
        #[arg(long)]
        json: bool,
    },
    /// Start one server here and report the handshake; with --call, call
    /// one of its tools (directly: no policy or confirmation) and print
    /// the result.
    Test {
        /// Its name under mcp.servers.
        server: String,
        /// A tool to call, with or without the `<server>.` prefix.
        #[arg(long, value_name = "TOOL")]
        call: Option<String>,
        /// The call's arguments as a JSON object.
        #[arg(long, value_name = "JSON", requires = "call")]
        args: Option<String>,
    },
    /// Serve Flynn to another agent (Claude Desktop, an IDE, another
    /// Flynn) as an MCP server on stdin and stdout: tools send_message,
    /// list_sessions, read_history, search_memory, list_agents. Runs a
    /// Flynn of its own from the config, unless --gateway (or
    /// FLYNN_GATEWAY_URL) names a daemon whose sessions it then serves.
    Serve {
        /// Set from the global `--gateway`.
        #[arg(skip)]
        gateway: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct OnboardArgs {
    /// The file to write: the global `--config` (default: FLYNN_CONFIG or
    /// ~/.config/flynn/config.yaml).
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Replace an existing file (kept as <file>.bak).
    #[arg(long)]
    pub force: bool,
    /// Ask nothing: take the answers from the flags below and the
    /// environment (the provider from ANTHROPIC_API_KEY, OPENAI_API_KEY,
    /// GEMINI_API_KEY or OLLAMA_HOST when --provider is not given).
    #[arg(long)]
    pub non_interactive: bool,
    /// Provider kind: anthropic, openai, gemini, ollama, openrouter, groq,
    /// llamacpp, lmstudio, vllm, openai-compatible, github-models, bedrock.
    #[arg(long)]
    pub provider: Option<String>,
    /// Model for the default tier (default: a suggestion per provider).
    #[arg(long)]
    pub model: Option<String>,
    /// Model for the fast tier (background work).
    #[arg(long)]
    pub fast_model: Option<String>,
    /// The provider's URL (local servers, proxies).
    #[arg(long)]
    pub base_url: Option<String>,
    /// The variable holding the key (default: the provider's usual one).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Address the daemon listens on (default 127.0.0.1:18800).
    #[arg(long)]
    pub bind: Option<String>,
    /// Do not ask the provider whether it answers.
    #[arg(long)]
    pub no_check: bool,
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The archive: a new file for `backup`, an existing one for `restore`.
    pub file: PathBuf,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every session, turn, usage record, pairing and job from one
    /// store into another that holds nothing yet; stop the daemon first.
    /// Each side is a `sqlite://` or `postgres://` URL, or a SQLite file's
    /// path. A password is better kept in PGPASSWORD or ~/.pgpass than in
    /// the URL, which other users see in the process list.
    Copy {
        /// The store to copy from.
        from: String,
        /// The store to copy into: created if needed, and empty.
        to: String,
    },
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
    /// One JSON array of checks instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only this conversation.
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub json: bool,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The message, or `-` to read it from stdin.
    pub message: String,
    /// Conversation to continue: a name (`work` is the CLI's `cli:work`)
    /// or `channel:peer` (`telegram:12345`).
    #[arg(long, default_value = "cli:default")]
    pub session: String,
    /// Model tier: fast, default, complex or local.
    #[arg(long)]
    pub tier: Option<Tier>,
    /// One model as provider/model, with no fallback.
    #[arg(long)]
    pub model: Option<ModelRef>,
    /// Answer with this agent (from agents.list) instead of the routed one.
    #[arg(long)]
    pub agent: Option<String>,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Approve tool calls that need confirmation (without it, Flynn asks
    /// on the terminal, or denies them when there is none).
    #[arg(long)]
    pub yes: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on, over gateway.bind.
    #[arg(long)]
    pub bind: Option<String>,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub command: SessionsCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Every conversation, most recent first.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One conversation's messages.
    Show {
        key: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete one conversation's history.
    Reset {
        key: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct SkillsArgs {
    #[command(subcommand)]
    pub command: SkillsCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Every skill (bundled, installed, in the workspace), whether it can
    /// run here and why not.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One skill: where it is, what it may do, its instructions.
    Show { name: String },
    /// Copy a skill (a directory with SKILL.md and manifest.json, or a
    /// .tar.gz of one) into FLYNN_HOME/skills. Nothing in it is run.
    Install {
        from: PathBuf,
        /// Replace an installed skill of the same name.
        #[arg(long)]
        force: bool,
    },
    /// Delete an installed skill (bundled and workspace skills stay).
    Remove { name: String },
}

#[derive(Debug, Args)]
pub struct PairingArgs {
    #[command(subcommand)]
    pub command: PairingCommand,
    /// Set from the global `--config`.
    #[arg(skip)]
    pub config: Option<PathBuf>,
    /// Set from the global `--gateway`.
    #[arg(skip)]
    pub gateway: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Codes waiting for approval, and the senders approved by pairing.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Let the sender who was given this code talk to Flynn.
    Approve {
        /// telegram, discord, slack or whatsapp.
        channel: String,
        /// The code the sender was given.
        code: String,
        /// Make the sender an owner (the owner's rights, memory and
        /// sessions), not a guest.
        #[arg(long)]
        owner: bool,
        #[arg(long)]
        json: bool,
    },
    /// Take back a sender's approval.
    Revoke {
        channel: String,
        /// The sender's id on the platform (see `flynn pairing list`).
        sender: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a config file (default: the one Flynn would load).
    Validate { file: Option<PathBuf> },
    /// Print the config file's JSON Schema.
    Schema,
    /// Print one value of the config Flynn would run with (defaults and
    /// `${VAR}`s filled in, secrets masked), by dotted path:
    /// `models.tiers.default`, `providers.openai.base_url`, `memory`.
    Get {
        /// Dotted keys; list items by number (`models.tiers.default.0`).
        /// Empty: the whole config.
        #[arg(default_value = "")]
        path: String,
        /// Print JSON even for a single value.
        #[arg(long)]
        json: bool,
        /// Say where each value came from: `file:line` (the config file or
        /// the profile overlay), `environment: VAR`, or `default`; one line
        /// per value (`path: value  (origin)`).
        #[arg(long)]
        origin: bool,
        /// Set from the global `--config`.
        #[arg(skip)]
        config: Option<PathBuf>,
    },
    /// Update the config file to this Flynn's `version:`, keeping its
    /// comments; the old file is kept as `<file>.v<N>.bak`.
    Migrate {
        /// Show what would change without writing.
        #[arg(long)]
        dry_run: bool,
        /// Set from the global `--config`.
        #[arg(skip)]
        config: Option<PathBuf>,
    },
    /// Set one value in the config file by dotted path, keeping its
    /// comments; the result is validated before it is written.
    Set {
        /// Dotted keys: `models.tiers.default`, `gateway.bind`.
        path: String,
        /// JSON when it parses as JSON (`30`, `true`, `["a/b"]`), else text.
        value: String,
        /// Set from the global `--config`.
        #[arg(skip)]
        config: Option<PathBuf>,
    },
}
